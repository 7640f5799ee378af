"""bench/history_from_run.py: the durations.json it writes from a run's results is one the tool
reads as its history (validate/execute/history.py), with the seconds of the ids that ended on
their own only."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

from validate.execute.history import History

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "history_from_run.py"


def _row(case: str, outcome: str, seconds: float) -> str:
    return json.dumps({"case": case, "outcome": outcome, "duration_s": seconds})


def test_the_history_holds_the_seconds_of_ids_that_ended_on_their_own(tmp_path: Path) -> None:
    run = tmp_path / "l0" / "validate"
    run.mkdir(parents=True)
    rows = [
        _row("a.py::test_pass", "pass", 1.25),
        _row("a.py::test_skip", "skip", 0.01),
        _row("a.py::test_fail", "fail", 2.0),
        _row("a.py::test_hang", "timeout", 300.0),  # its limit, not its need
        _row("a.py::test_died", "error", 0.5),
    ]
    (run / "results.jsonl").write_text("\n".join(rows) + "\n\n")
    with tarfile.open(tmp_path / "l0.tgz", "w:gz") as tar:
        tar.add(tmp_path / "l0", arcname="l0")
    out = tmp_path / "durations.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "l0.tgz"), str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "3 ids, 3 s of test time" in proc.stdout
    history = History.load(out)
    assert history.durations == {
        "a.py::test_pass": 1.25,
        "a.py::test_skip": 0.01,
        "a.py::test_fail": 2.0,
    }
    assert history.cpu_share == {}  # the machine's own, not written
    assert history.finished == {}
