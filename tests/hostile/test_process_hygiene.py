"""Process hygiene: nothing a case starts outlives the case (pass, fail, crash, timeout), and a
case that kills its parent cannot end the run. Real processes, found by a tag in their
environment that only this test's run carries."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from proctags import kill_tagged, tagged, tagged_env
from usercli import cli

from validate.model.results import read_results

PROCS = Path(__file__).resolve().parents[1] / "resources" / "hostile" / "procs"


def test_nothing_a_case_starts_outlives_it(tmp_path: Path) -> None:
    cases = tmp_path / "cases"
    shutil.copytree(PROCS, cases)
    tag, env = tagged_env()
    run = tmp_path / "run"
    argv = ["run", "cases", "--jobs", "1", "--timeout", "3", "--results", "run", "--no-api-logs"]
    try:
        proc = cli(*argv, cwd=tmp_path, env=env, timeout=240)
        outcomes = {r.case: str(r.outcome) for r in read_results(run / "results.jsonl").results}
        assert outcomes == {
            "background_child.py": "pass",
            "double_fork.py": "pass",
            "setsid_child.py": "fail",
            "crash_with_daemon.py": "crash",
            "hang_with_daemon.py": "timeout",
            "kills_parent.py": outcomes.get("kills_parent.py"),
            "zz_after.py": "pass",  # the run went on after the case that killed its parent
        }, proc.stderr
        assert outcomes["kills_parent.py"] != "pass"  # its own "VERDICT pass" is not believed
        assert proc.returncode == 1
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and tagged(tag):
            time.sleep(0.1)
        assert tagged(tag) == [], proc.stderr  # no daemon, setsid child or orphan of a case is left
    finally:
        kill_tagged(tag)
