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
