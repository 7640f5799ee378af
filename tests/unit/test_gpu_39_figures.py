"""bench/gpu_39_figures.py over the committed L0 reports (issue #39 item 2): the figures committed
beside each report are what the script prints from that report's own files; a pytest side with its
JUnit gives the agreement and the ratio, and one stopped before its report gives neither, only
its progress and a bound."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_39_figures.py"


def _figures(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(folder)], capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize(
    "name",
    [
        "2026-12-05-h100-bisect-l0",
        "2026-12-07-h100-l0-9.25",
        "2026-12-07-h200-l0-9.24",
        "2026-12-07-h100-l0-9.24-b",
    ],
)
def test_the_committed_figures_are_the_scripts_output(name: str) -> None:
    folder = ROOT / "reports" / "gpu" / name
    proc = _figures(folder)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (folder / "figures.txt").read_text(encoding="utf-8")


def test_a_pytest_side_with_its_junit_gives_the_agreement_and_the_ratio() -> None:
    out = _figures(ROOT / "reports" / "gpu" / "2026-12-05-h100-bisect-l0").stdout
    assert "4998 ids agree, 2 differ, 0 tool only, 0 pytest only" in out
    assert "ratio tool / pytest 1.247 (goal <= 1.0)" in out


def test_the_whole_l0_of_9_25_has_one_result_per_id_and_its_stopped_pytest_side_no_ratio() -> None:
    """2026-12-07: the tool ran every L0 id of 9.25.1.1; `pytest -n 16` was stopped by the end of
    the lease before it wrote its JUnit, so there is no agreement and no ratio, only a bound."""
    out = _figures(ROOT / "reports" / "gpu" / "2026-12-07-h100-l0-9.25").stdout
    assert "backend 9.25.1.1, 41613 results, 41613 ids, 0 duplicates, 744.7 s" in out
    assert "STOPPED before its report: 39780 progress marks (95.6 % of the tool's 41613 ids)" in out
    assert "no agreement id by id" in out
    assert "ratio tool / pytest not measured, at most 1.184" in out
    assert "ids agree" not in out


def test_the_whole_l0_of_9_24_agrees_over_the_ids_its_interrupted_pytest_side_finished() -> None:
    """2026-12-07: the tool ran every L0 id of 9.24.0.43; `pytest -n 16` was interrupted (SIGINT)
    and wrote the JUnit of 19,009 ids: the agreement is over those, the ratio only bounded."""
    out = _figures(ROOT / "reports" / "gpu" / "2026-12-07-h200-l0-9.24").stdout
    assert "backend 9.24.0.43, 41613 results, 41613 ids, 0 duplicates, 681.3 s" in out
    assert "INTERRUPTED, its JUnit holds the ids it finished: 18703 ids agree, 306 differ" in out
    assert "22604 tool only, 0 pytest only" in out
    # the 304 that flip between pass and skip are one test's, each skip "not supported"
    assert "differ, by test: 165 test_mhas.py::test_sdpa: tool skip, pytest pass" in out
    assert "differ, by test: 139 test_mhas.py::test_sdpa: tool pass, pytest skip" in out
    assert "its reason: 227 cudnnGraphNotSupportedError('When alibi mask is used" in out
    assert "ratio tool / pytest not measured, at most 3.0" in out


def _results_line(case: str, outcome: str) -> str:
    return json.dumps({"case": case, "outcome": outcome, "cell": {"cudnn": "9.24.0.43"}})


def _results_file(side: Path) -> Path:
    """The tool run's results.jsonl beside a pytest side made by _l0_pair."""
    return side.parent / "l0-9.24.0.43" / "validate" / "results.jsonl"


def _l0_pair(tmp_path: Path) -> Path:
    """A tool run folder of 5 passing ids in 150 s under tmp_path/l0, and its pytest side's
    empty folder (returned)."""
    run = tmp_path / "l0" / "l0-9.24.0.43"
    (run / "validate").mkdir(parents=True)
    (run / "validate" / "results.jsonl").write_text(
        "\n".join(_results_line(f"test_a.py::test_{i}", "pass") for i in range(5)) + "\n"
    )
    (run / "wall_s").write_text("150.0\n")
    side = tmp_path / "l0" / "pytest-9.24.0.43"
    side.mkdir()
    return side


def test_a_stopped_pytest_side_counts_its_marks_and_bounds_by_the_files_times(
    tmp_path: Path,
) -> None:
    """A run folder and a pytest folder whose pytest.txt was last written 101 s after its
    provenance.txt: the bound is the tool's wall over 100 s (a tar's whole seconds), the marks
    are counted by kind, and any line that is not progress is not counted."""
    side = _l0_pair(tmp_path)
    (side / "provenance.txt").write_text("pytest: ...\n")
    (side / "pytest.txt").write_text(
        "bringing up nodes...\nsss.. [ 60%]\n.F\nwarning: 3 tests ... [ 99%]\n"
    )
    os.utime(side / "provenance.txt", (1_000_000, 1_000_000))
    os.utime(side / "pytest.txt", (1_000_101, 1_000_101))
    report = tmp_path / "report"
    report.mkdir()
    with tarfile.open(report / "l0.tgz", "w:gz") as tar:
        tar.add(tmp_path / "l0", arcname="l0")
    out = _figures(report).stdout
    assert "STOPPED before its report: 7 progress marks (140.0 % of the tool's 5 ids)" in out
    assert "{'skip': 3, 'pass': 3, 'fail': 1} after 100.0 s" in out
    assert "ratio tool / pytest not measured, at most 1.5 (goal <= 1.0)" in out


def test_an_interrupted_pytest_side_agrees_over_what_it_finished_and_only_bounds_the_ratio(
    tmp_path: Path,
) -> None:
    """gpu_39.sh stop interrupts pytest (SIGINT): its JUnit holds the ids it finished and its
    wall time is a lower bound. The agreement counts those ids; the ratio is 'at most'."""
    side = _l0_pair(tmp_path)
    cases = "".join(f'<testcase classname="test_a" name="test_{i}" time="1"/>' for i in range(3))
    cases += '<testcase time="0.001"/>' * 2  # the workers' tests in flight: nameless, no outcome
    (side / "junit.xml").write_text(
        f'<testsuites><testsuite name="pytest" tests="3">{cases}</testsuite></testsuites>'
    )
    (side / "wall_s").write_text("100.0\n")
    (side / "pytest.txt").write_text("...\n!!!!! KeyboardInterrupt !!!!!\n3 passed in 99s\nrc=2\n")
    out = _figures(tmp_path).stdout
    assert "INTERRUPTED, its JUnit holds the ids it finished: 3 ids agree, 0 differ" in out
    assert "2 tool only, 0 pytest only" in out
    assert "pytest more than 100.0 s; ratio tool / pytest not measured, at most 1.5" in out
    assert "estimate" not in out  # no worker count: no estimate
    # with pytest's `-n 2` on record and the tool's durations (10 s each), the 2 ids it did not
    # finish are 20 s of test time, 10 s over its 2 workers: pytest about 110 s
    (side / "provenance.txt").write_text(
        "pytest: cd x && python3 -m pytest -n 2 -q --timeout 300\n"
    )
    rows = [
        json.loads(ln) | {"duration_s": 10.0} for ln in _results_file(side).read_text().splitlines()
    ]
    _results_file(side).write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = _figures(tmp_path).stdout
    assert "the 2 ids pytest did not finish took 20.0 s of test time in the tool" in out
    assert "over its 2 workers, pytest about 110.0 s, tool / pytest about 1.364" in out
    (side / "pytest.txt").write_text("...\n3 passed in 99s\nrc=0\n")  # the same, run to its end
    out = _figures(tmp_path).stdout
    assert "INTERRUPTED" not in out
    assert "ratio tool / pytest 1.5 (goal <= 1.0)" in out
