"""`run` says what it ran and where (issue 36, item 5): an interpreter without pytest is one line
before the run, naming it and the fix; the summary names the failing ids (ten, then how many
more); the run folder records the cell found, so `report` on it shows no `?` for a pin.

Through the real CLI in real processes, with a real venv that lacks pytest and real suites.
"""

from __future__ import annotations

import json
import shutil
import sys
import venv
from pathlib import Path
from typing import TYPE_CHECKING

from usercli import cli, own_cache

if TYPE_CHECKING:
    import subprocess

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "tests" / "resources" / "pytest_suite"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return cli(*args, cwd=cwd, env=own_cache(cwd), timeout=300)


def test_interpreter_without_pytest_is_one_line_before_the_run(tmp_path: Path) -> None:
    venv.create(tmp_path / "bare", with_pip=False)  # a real interpreter with no pytest
    python = tmp_path / "bare" / "bin" / "python"
    proc = _cli(
        "run", "--tests", str(SUITE), "--interpreter", str(python), "--results", "res",
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert f"{python} has no pytest" in proc.stderr
    assert f"{python} -m pip install pytest" in proc.stderr
    assert not (tmp_path / "res").exists()  # nothing ran, nothing was written
    assert not (tmp_path / "reports").exists()


def test_summary_names_the_failing_ids(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_many_fail.py").write_text(
        "import pytest\n\n\n"
        "@pytest.mark.parametrize('i', range(12))\n"
        "def test_f(i):\n"
        "    assert i < 0, f'case {i} fails'\n\n\n"
        "def test_ok():\n"
        "    pass\n",
        encoding="utf-8",
    )
    res = str(tmp_path / "res")  # absolute paths: this test is about the summary alone
    proc = _cli("run", "--tests", str(suite), "--no-api-logs", "--results", res, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert f"13 tests, 12 failing; results in {tmp_path / 'res' / 'results.jsonl'}" in proc.stderr
    named = [line for line in proc.stderr.splitlines() if "test_many_fail.py::test_f[" in line]
    assert len(named) == 10, proc.stderr
    assert all(line.split()[0] == "fail" for line in named), named
    assert any("case " in line and "fails" in line for line in named), named
    assert "... and 2 more" in proc.stderr
    assert "test_ok" not in proc.stderr


def test_run_records_its_cell_and_report_shows_no_question_mark(tmp_path: Path) -> None:
    shutil.copytree(SUITE, tmp_path / "suite")
    run = tmp_path / "run"
    argv = ["--tests", str(tmp_path / "suite"), "--tests-select", "test_marks.py"]
    proc = _cli("run", *argv, "--results", str(run), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    meta = json.loads((run / "run.json").read_text())
    cell = meta["cell"]
    assert set(cell) == {"cudnn", "frontend", "cuda", "driver", "arch"}, cell
    assert all(cell.values()), cell  # every pin found or said unknown / none, never left out
    for axis, value in cell.items():
        if value == "unknown":
            assert meta["cell_unknown"][axis], meta  # and why
    # the tool's own interpreter: its script's shebang may name bin/python3 where pytest runs
    # bin/python (a plain `python -m venv`); both are this venv's one interpreter
    recorded = Path(meta["interpreter"])
    assert recorded.parent == Path(sys.executable).parent, meta["interpreter"]
    assert recorded.samefile(sys.executable), meta["interpreter"]
    results = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert all(r["cell"] == cell for r in results), results[0]
    report = _cli("report", "--results", str(run), "--format", "md", cwd=tmp_path)
    assert report.returncode in (0, 1), report.stderr
    assert "cuDNN ?" not in report.stdout
    assert "fe ? / ?" not in report.stdout
    assert f"| cuDNN   | fe {cell['frontend']} / {cell['arch']}" in report.stdout, report.stdout
