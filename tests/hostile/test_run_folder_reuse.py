"""A run folder is never reused by accident (issue 36, item 3): `--results` naming a folder that
holds a run needs `--resume` (else one line, exit 2, the folder untouched), and `--resume` with
other pins than the stored run's is one line naming both (it mixed two backends' results under
one verdict). validate, run and bisect, through the real CLI in real processes.
"""

from __future__ import annotations

import shutil
import sys
import venv
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from usercli import cli, own_cache

if TYPE_CHECKING:
    import subprocess

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "resources" / "scripts"
# --env current: the tool's own interpreter is the cell environment (no install; without the
# pinned backend every case is an `error`, a result all the same)
CELL = ["--frontend", "1.27.0", "--cuda", "13.0", "--driver", "580", "--arch", "sm90"]
CELL += ["--env", "current", "--frontend-source", "current"]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return cli(*args, cwd=cwd, env=own_cache(cwd), timeout=300)


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file of the folder and its bytes (the lock file aside: opening a run touches it)."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != ".run.lock"
    }


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("cudnn-matrix: error: "), proc.stderr
    return lines[0]


@pytest.fixture
def cases(tmp_path: Path) -> Path:
    folder = tmp_path / "cases"
    folder.mkdir()
    shutil.copy(SCRIPTS / "pass_script.py", folder)
    return folder


def test_validate_into_a_run_needs_resume(tmp_path: Path, cases: Path) -> None:
    common = ["--cudnn", "9.24.0.43", *CELL, "--cases", str(cases), "--results", "run"]
    first = _cli("validate", *common, cwd=tmp_path)
    assert first.returncode == 1, first.stderr  # an `error` (no backend here): not signed off
    before = _snapshot(tmp_path / "run")
    assert "run.json" in before
    line = _one_line(_cli("validate", *common, cwd=tmp_path))
    assert f"--results {tmp_path / 'run'}: holds run " in line, line
    assert "--resume" in line
    assert _snapshot(tmp_path / "run") == before  # run.json not overwritten, nothing appended
    # bisect takes validate's flags: a run's folder is no bisect folder either
    bisect = ["bisect", "--axis", "cudnn", "--good", "9.23.0", "--bad", "9.24.0.43"]
    line = _one_line(_cli(*bisect, "--case", "pass_script.py", *common, cwd=tmp_path))
    assert "holds run " in line
    assert _snapshot(tmp_path / "run") == before
    # with --resume and the same pins it completes the run (nothing left to run)
    again = _cli("validate", *common, "--resume", cwd=tmp_path)
    assert again.returncode == 1, again.stderr


def test_validate_resume_with_other_pins_names_both(tmp_path: Path, cases: Path) -> None:
    common = [*CELL, "--cases", str(cases), "--results", "run"]
    first = _cli("validate", "--cudnn", "9.24.0.43", *common, cwd=tmp_path)
    assert first.returncode == 1, first.stderr
    before = _snapshot(tmp_path / "run")
    line = _one_line(_cli("validate", "--cudnn", "9.13.0.50", *common, "--resume", cwd=tmp_path))
    assert "the stored run has cudnn 9.24.0.43, this command cudnn 9.13.0.50" in line, line
    assert _snapshot(tmp_path / "run") == before


def test_run_into_a_run_needs_resume(tmp_path: Path, cases: Path) -> None:
    first = _cli("run", str(cases), "--results", "run", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    before = _snapshot(tmp_path / "run")
    line = _one_line(_cli("run", str(cases), "--results", "run", cwd=tmp_path))
    assert f"--results {tmp_path / 'run'}: holds " in line, line
    assert _snapshot(tmp_path / "run") == before
    again = _cli("run", str(cases), "--results", "run", "--resume", cwd=tmp_path)
    assert again.returncode == 0, again.stderr


def test_run_resume_in_another_interpreter_names_both(tmp_path: Path, cases: Path) -> None:
    """`run`'s pins are the interpreter and the cell found in it (run.json): another one is
    another cell, named both ways."""
    venv.create(tmp_path / "other", with_pip=False)
    other = tmp_path / "other" / "bin" / "python"
    first = _cli("run", str(cases), "--results", "run", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    before = _snapshot(tmp_path / "run")
    line = _one_line(
        _cli(
            "run",
            str(cases),
            "--results",
            "run",
            "--resume",
            "--interpreter",
            str(other),
            cwd=tmp_path,
        )
    )
    assert f"the stored run has interpreter {sys.executable}" in line, line
    assert f"this command interpreter {other}" in line, line
    assert _snapshot(tmp_path / "run") == before
