"""`cudnn-matrix bisect` end to end: real validate probes over the real frontend wheels 1.26.0 and
1.27.0 (backend 9.13.0.50), offline from the shared wheelhouse, with a case of our own whose
outcome depends on the installed frontend. No GPU needed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CASE = ROOT / "tests" / "resources" / "bisect" / "frontend_before_1_27.py"
PIN_CHECK = ROOT / "validate" / "execute" / "resources" / "cases" / "pin_check.py"
CELL = ["--cudnn", "9.13.0.50", "--cuda", "13.0", "--driver", "580", "--arch", "sm90"]


def _bisect(wheelhouse: Path, envs: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *(sys.executable, "-m", "validate", "bisect", "--axis", "frontend", *CELL, *args),
            *("--wheelhouse", str(wheelhouse), "--no-backend-deps", "--cache-dir", str(envs)),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def test_bisect_finds_the_first_bad_frontend_and_resumes(wheelhouse: Path, tmp_path: Path) -> None:
    folder, envs = tmp_path / "bisect", tmp_path / "envs"
    args = ["--good", "1.26.0", "--bad", "1.27.0", "--cases", str(CASE)]
    args += ["--case", CASE.name, "--results", str(folder)]
    proc = _bisect(wheelhouse, envs, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "first bad: 1.27.0" in proc.stdout
    assert "last good: 1.26.0" in proc.stdout
    assert "bad = fail (the outcome at --bad)" in proc.stdout
    assert 'frontend = ">=1.27.0"' in proc.stdout
    assert "1.27.0: frontend 1.27.0 is >= 1.27" in proc.stdout  # the probe's evidence
    state = json.loads((folder / "bisect.json").read_text())
    assert state["candidates"] == ["1.26.0", "1.27.0"]
    assert state["result"]["first_bad"] == "1.27.0"
    assert state["result"]["found"] is True
    for version, outcome in (("1.26.0", "pass"), ("1.27.0", "fail")):
        lines = (folder / "probes" / version / "r1" / "results.jsonl").read_text().splitlines()
        (line,) = (json.loads(text) for text in lines)
        assert line["cell"]["frontend"] == version
        assert line["case"] == CASE.name
        assert line["outcome"] == outcome
        assert line["env"]["frontend_version"] == version  # seen inside the case process

    # run again with the same folder: the probes are read back, none re-run
    again = _bisect(wheelhouse, envs, *args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "2 probes read back" in again.stdout
    assert "+ validate" not in again.stderr
    assert not list(folder.glob("probes/*/r2"))
    report = proc.stdout[proc.stdout.index("bad = ") :]
    assert again.stdout[again.stdout.index("bad = ") :] == report  # the same table and boundary


def test_bisect_refuses_ends_with_the_same_outcome(wheelhouse: Path, tmp_path: Path) -> None:
    folder = tmp_path / "bisect"
    proc = _bisect(
        wheelhouse,
        tmp_path / "envs",
        *["--good", "1.26.0", "--bad", "1.27.0", "--cases", str(PIN_CHECK)],
        *["--case", PIN_CHECK.name, "--results", str(folder)],
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "cudnn-matrix: error: bisect: --good 1.26.0 and --bad 1.27.0 both give pass; nothing to "
        "bisect (pick ends with different outcomes)"
    )
    assert "Traceback" not in proc.stderr
