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
    for dockerfile in ("Dockerfile", "Dockerfile.backend"):  # `images build` from the wheel
        assert f"validate/_images/{dockerfile}" in names
    assert not any(name.startswith(("tests/", "matrix/", "images/")) for name in names)
    # installed (unpacked, as pip does), the tool finds its Dockerfiles there
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    found = subprocess.run(
        [
            sys.executable,
            "-c",
            "from validate.env.images import dockerfile_path as d; print(d('Dockerfile.backend'))",
        ],
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert found.stdout.strip() == str(site / "validate" / "_images" / "Dockerfile.backend")
