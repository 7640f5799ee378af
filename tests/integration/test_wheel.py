"""The built wheel carries the embedded data, so `cudnn-matrix plan` works outside a checkout."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def test_wheel_holds_matrix_data_and_shipped_cases(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(tmp_path),
            str(REPO),
        ],
        check=True,
    )
    [wheel] = tmp_path.glob("cudnn_matrix-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for data in ("default.toml", "rules.toml", "known_issues.toml", "cases.toml"):
        assert f"validate/_matrix/{data}" in names
    for case in ("cases.toml", "repro_fusion_uid.py", "pin_check.py"):
        assert f"validate/execute/resources/cases/{case}" in names
    assert "validate/execute/resources/run_notebook.py" in names
    assert not any(name.startswith(("tests/", "matrix/")) for name in names)
