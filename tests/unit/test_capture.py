"""In-process capture: what the bug report's System Environment is filled from."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from validate.execute.resources.capture import capture

if TYPE_CHECKING:
    import pytest


def test_case_capture_names_compiler_python_os_and_redacts_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CM_TEST_API_TOKEN", "s3cr3t")
    facts = capture(in_case=True)
    assert facts["captured_in"] == "case"
    assert facts["compiler"]  # a compiler line, or which compiler built Python
    assert facts["python"] == ".".join(map(str, sys.version_info[:3]))
    assert facts["os"]
    assert facts["env"]["CM_TEST_API_TOKEN"] != "s3cr3t"


def test_host_capture_skips_the_case_only_probes() -> None:
    facts = capture(in_case=False)
    assert facts["captured_in"] == "host"
    assert "compiler" not in facts


def test_the_script_bootstrap_writes_what_json_dumps_writes() -> None:
    """The script bootstrap (script_boot.py) writes its report without importing json: the same
    text, for every kind of value a report holds (a real capture included)."""
    import json
    from pathlib import Path

    from validate.execute.resources.script_boot import dumps

    report = {
        "runner": "script",
        "exception": {
            "ename": "ValueError",
            "evalue": 'quote " \\ tab\t nl\n \x00 é 漢 \U0001f600',
        },
        "exit_code": -11,
        "numbers": [0, 1.5, -2.25e-300, 1e300, float("inf"), float("-inf"), True, False, None],
        "nested": {"a": [], "b": {}, "c": ({"d": (1, 2)},)},
        "keys": {7: "int", 2.5: "float", None: "none", True: "bool", False: "no"},
        "other": Path("/tmp/x"),
        # each test of the bootstrap's fast path for plain ASCII, alone
        "edges": ['"', "\\", "\x7f", "\x1f", "é", "plain ~ ascii", ""],
        "env": capture(in_case=False),
    }
    assert dumps(report) == json.dumps(report, default=str)
    assert dumps({"x": float("nan")}) == json.dumps({"x": float("nan")})
