"""No verdict from contention, on the CPU: real case processes that are slow only under load.

A case here keeps a core busy for as long as another copy of it runs, so beside its copies it
never finishes (the pool's load is what stops it), and alone it passes at once. The host has no
GPU: the shared resource the sampler sees is the host's CPUs (/proc/stat)."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest

from validate.env.target import ExecTarget
from validate.execute.cases import discover_cases
from validate.execute.runner import RunOptions, run_cases
from validate.model.outcome import Outcome
from validate.model.results import CaseResult, ResultStore

# the sampler reads the host's CPU load (/proc/stat): run by itself (noxfile.py's ALONE step)
pytestmark = pytest.mark.alone

#: Spins until it is killed when another case of its folder is alive (peers/ holds their pids);
#: alone: a pass.
#: It first waits (up to 2 s) until PEERS copies have started once, so that none of them is done
#: before the others began.
SLOW_UNDER_LOAD = textwrap.dedent(
    """\
    import os
    import time
    from pathlib import Path

    peers = Path(__file__).parent / "peers"
    peers.mkdir(exist_ok=True)
    (peers / str(os.getpid())).touch()
    waited = time.time() + 2
    while len(list(peers.iterdir())) < PEERS and time.time() < waited:
        time.sleep(0.01)

    def others():
        n = 0
        for f in peers.iterdir():
            pid = int(f.name)
            if pid == os.getpid():
                continue
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    n += fh.read().split(") ")[-1][0] not in "ZX"  # a zombie is gone
            except OSError:
                pass
        return n

    if others():  # once it met a peer it never finishes (as a GPU case starved by its neighbours)
        while True:
            sum(range(20000))
    print("VERDICT pass")
    """
)
#: Keeps a core busy for 1.5 s, then fails: beside others and alone alike.
BURNS_THEN_FAILS = (
    "import time\nt = time.time() + 1.5\nwhile time.time() < t: pass\nraise SystemExit(1)\n"
)


#: Enough spinning cases to keep every core of this host busy (3 on CI's 2 cores).
CROWD = max(3, (os.cpu_count() or 1) + 1)


def _slow_copies(n: int) -> dict[str, str]:
    """`n` copies of SLOW_UNDER_LOAD that wait for each other to start."""
    return {f"slow_under_load_{i}.py": SLOW_UNDER_LOAD.replace("PEERS", str(n)) for i in range(n)}


def _run(folder: Path, scripts: dict[str, str], **options: object) -> dict[str, CaseResult]:
    folder.mkdir()
    for name, body in scripts.items():
        (folder / name).write_text(body)
    run_dir = folder / "run"
    opts = RunOptions(results_dir=run_dir, api_logs=False, **options)  # type: ignore[arg-type]
    store = ResultStore(run_dir / "results.jsonl")
    target = ExecTarget(python=Path(sys.executable), cell_id="c1")
    results = run_cases(discover_cases(sorted(folder.glob("*.py"))), target, opts, store)
    return {r.case: r for r in results}


def test_cases_slow_only_under_load_pass_alone_with_a_note_and_are_not_flaky(
    tmp_path: Path,
) -> None:
    scripts = _slow_copies(CROWD)
    by = _run(tmp_path / "suite", scripts, jobs=CROWD, timeout_s=3.0)
    for name in scripts:
        result = by[name]
        assert result.outcome is Outcome.PASS, (name, result.reason, result.tail)
        note = result.contention
        assert note.startswith(f"timed out at 3 s beside {CROWD - 1} other cases (CPU "), note
        assert "passed alone in" in note
        assert result.reason == note
        assert not result.flaky
        assert result.attempts == ("pass",)
        folder = Path(result.log_path).parent
        assert result.log_path.endswith("output.2.log")
        assert (folder / "output.log").is_file()  # the contended attempt stays as evidence
        stored = json.loads((folder / "result.json").read_text())
        assert stored["contention"] == note


def test_a_case_that_times_out_alone_too_keeps_its_verdict(tmp_path: Path) -> None:
    scripts = {
        "always_slow.py": "while True:\n    sum(range(20000))\n",
        **_slow_copies(CROWD - 1),
    }
    by = _run(tmp_path / "suite", scripts, jobs=CROWD, timeout_s=3.0)
    result = by["always_slow.py"]
    assert result.outcome is Outcome.TIMEOUT
    assert result.contention.startswith(f"timed out at 3 s beside {CROWD - 1} other cases (CPU")
    assert result.contention.endswith("timeout alone too (3 s)")
    assert result.attempts == ("timeout",)
    assert all(by[name].outcome is Outcome.PASS for name in _slow_copies(CROWD - 1))


def test_a_failure_beside_busy_cpus_is_judged_as_it_ran(tmp_path: Path) -> None:
    """Busy cores slow a case down but do not make it fail: a failure while the host's CPUs were
    saturated (no GPU here) gets no alone re-run; only a timeout does."""
    scripts = {
        "burns_then_fails.py": BURNS_THEN_FAILS,
        **_slow_copies(CROWD - 1),
    }
    by = _run(tmp_path / "suite", scripts, jobs=CROWD, timeout_s=4.0)
    result = by["burns_then_fails.py"]
    assert result.outcome is Outcome.FAIL
    assert result.contention == ""
    assert not (Path(result.log_path).parent / "output.2.log").exists()
    assert all(by[name].contention for name in _slow_copies(CROWD - 1))  # those timed out


def test_a_case_never_gets_a_timeout_below_three_times_its_recorded_duration(
    tmp_path: Path,
) -> None:
    """The floor is 3x the last run that ended on its own, as the tool recorded it; a run cut by
    its timeout is no duration to multiply (a case that always hangs kept its --timeout; before,
    its limit grew 3x with every run)."""
    history = tmp_path / "durations.json"
    sleeper = {"sleeps.py": "import time\ntime.sleep(1.5)\nprint('VERDICT pass')\n"}
    cold = _run(tmp_path / "cold", sleeper, jobs=1, timeout_s=0.5, history=history)
    assert cold["sleeps.py"].outcome is Outcome.TIMEOUT
    roomy = _run(tmp_path / "roomy", sleeper, jobs=1, timeout_s=30.0, history=history)
    assert roomy["sleeps.py"].outcome is Outcome.PASS  # now on record: about 1.5 s
    warm = _run(tmp_path / "warm", sleeper, jobs=1, timeout_s=0.5, history=history)
    assert warm["sleeps.py"].outcome is Outcome.PASS  # its limit: 3 x ~1.5 s, not 0.5 s
    hangs = {"hangs.py": "import time\ntime.sleep(60)\n"}
    for attempt in range(3):
        ran = _run(tmp_path / f"hang{attempt}", hangs, jobs=1, timeout_s=0.5, history=history)
        assert ran["hangs.py"].outcome is Outcome.TIMEOUT
        assert ran["hangs.py"].duration_s < 1.4, attempt  # 0.5 s each time, never 1.5, 4.5


def test_a_notebook_gets_the_timeout_floor_too(tmp_path: Path) -> None:
    """nbclient takes whole seconds: a fractional limit (a floor of 3 x 0.7 s, or --timeout 2.5)
    was refused at start, every such notebook an `error`; now its cells get the next second."""
    folder = tmp_path / "nb"
    folder.mkdir()
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": None,
                "id": "sleep",
                "metadata": {},
                "outputs": [],
                "source": ["import time\n", "time.sleep(1.5)"],
            }
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (folder / "sleeps.ipynb").write_text(json.dumps(nb))
    history = tmp_path / "durations.json"
    history.write_text(json.dumps({"sleeps.ipynb": 0.7, "#finished_s": {"sleeps.ipynb": 0.7}}))
    target = ExecTarget(python=Path(sys.executable), cell_id="c1")
    for name, options in {
        "floor": {"timeout_s": 1.0, "history": history},
        "fraction": {"timeout_s": 2.5},
    }.items():
        run_dir = tmp_path / name
        opts = RunOptions(results_dir=run_dir, api_logs=False, **options)  # type: ignore[arg-type]
        store = ResultStore(run_dir / "results.jsonl")
        [result] = run_cases(discover_cases([folder / "sleeps.ipynb"]), target, opts, store)
        assert result.outcome is Outcome.PASS, (name, result.reason, result.tail)
