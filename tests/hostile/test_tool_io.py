"""The tool's own I/O: an output path that is a file, under /proc or read-only is one line, exit 2,
before anything runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "resources" / "scripts"
EXAMPLE = Path(__file__).resolve().parents[1] / "resources" / "runs" / "example"


def _bad_places(tmp_path: Path) -> dict[str, Path]:
    a_file = tmp_path / "a_file"
    a_file.write_text("not a folder\n")
    places = {"file": a_file, "proc": Path("/proc/self/cudnn-matrix"), "sys": Path("/sys/kernel")}
    if os.geteuid() != 0:  # root writes through permission bits; /sys stands in for read-only
        read_only = tmp_path / "ro"
        read_only.mkdir(mode=0o555)
        places["read_only"] = read_only
    return places


COMMANDS = {
    "run --results": ("run", str(SCRIPTS / "pass_script.py"), "--results", "{}"),
    "validate --results": ("validate", "--cudnn", "9.24.0.43", "--results", "{}"),
    "report --out": ("report", "--results", str(EXAMPLE), "--out", "{}/compat.md"),
    "report --bug-reports": ("report", "--results", str(EXAMPLE), "--bug-reports", "{}"),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("place", ["file", "proc", "sys", "read_only"])
def test_unusable_output_path_is_one_line_before_anything_runs(
    tmp_path: Path, command: str, place: str
) -> None:
    places = _bad_places(tmp_path)
    if place not in places:
        pytest.skip("running as root: permission bits do not stop root (the /sys case covers it)")
    target = places[place]
    argv = [a.replace("{}", str(target)) for a in COMMANDS[command]]
    proc = subprocess.run(
        [sys.executable, "-m", "validate", *argv],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "CUDNN_MATRIX_CACHE": str(tmp_path / "cache")},
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    flag = command.split()[1]
    assert flag in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "reports").exists()  # no default run folder: nothing ran
    assert not (tmp_path / "cache").exists()  # no environment was built
