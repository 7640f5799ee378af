"""The run's one pool: longest first, follow-up jobs, slot limits, feeding while it runs."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from validate.env.target import ExecTarget
from validate.execute.cases import cases_for, discover_cases
from validate.execute.pool import YIELD_NICE, Job, Pool, PoolStats, yield_nice
from validate.execute.progress import pool_line, pool_progress
from validate.execute.runner import RunOptions, run_cases
from validate.model.results import ResultStore


def _recording(order: list[str], name: str, estimate: float | None, **kw: object) -> Job:
    def run() -> tuple[Job, ...]:
        order.append(name)
        return ()

    return Job(name=name, run=run, estimate_s=estimate, **kw)  # type: ignore[arg-type]


def _drain(pool: Pool) -> None:
    pool.close()
    pool.run()


def test_longest_first_unknown_first_ties_in_submission_order() -> None:
    order: list[str] = []
    pool = Pool(1)
    pool.submit(
        _recording(order, n, e)
        for n, e in [("a", 1.0), ("b", None), ("c", 5.0), ("d", 3.0), ("e", 5.0), ("f", None)]
    )
    _drain(pool)
    assert order == ["b", "f", "c", "e", "d", "a"]


def test_jobs_of_several_submissions_are_ordered_together() -> None:
    """The cells' jobs go into one queue: a long case of the second cell starts before the short
    ones of the first that are still queued."""
    order: list[str] = []
    pool = Pool(1)
    pool.submit([_recording(order, f"cell1/short{i}", 1.0) for i in range(3)])
    pool.submit([_recording(order, "cell2/long", 60.0)])
    _drain(pool)
    assert order == ["cell2/long", "cell1/short0", "cell1/short1", "cell1/short2"]


def test_follow_up_jobs_run_in_the_same_pool_before_it_ends() -> None:
    order: list[str] = []

    def first() -> list[Job]:
        order.append("first")
        return [_recording(order, f"rerun{n}", 2.0, cases=0) for n in (2, 3)]

    pool = Pool(2)
    pool.submit([Job(name="case", run=first, estimate_s=2.0), _recording(order, "other", 1.0)])
    _drain(pool)
    assert order[0] == "first"
    assert sorted(order) == ["first", "other", "rerun2", "rerun3"]
    assert pool.stats().done == 2  # re-runs are not cases of their own


def test_never_more_than_the_slots_and_a_wide_job_runs_alone() -> None:
    lock = threading.Lock()
    active = {"now": 0, "max": 0, "with_wide": 0}
    barrier = threading.Barrier(2, timeout=10)

    def narrow() -> tuple[Job, ...]:
        with lock:
            active["now"] += 1
            active["max"] = max(active["max"], active["now"])
        try:
            barrier.wait()  # two at once, or the test fails on the timeout
        finally:
            with lock:
                active["now"] -= 1
        return ()

    def wide() -> tuple[Job, ...]:
        with lock:
            active["with_wide"] = active["now"]
        return ()

    pool = Pool(2)
    pool.submit([Job(name=f"n{i}", run=narrow, estimate_s=1.0) for i in range(6)])
    pool.submit([Job(name="wide", run=wide, estimate_s=0.5, slots=5)])  # clamped to 2
    _drain(pool)
    assert active["max"] == 2
    assert active["with_wide"] == 0


def test_gpu_budget_holds_each_job_to_its_memory_in_queue_order() -> None:
    """Two jobs of 6 GiB never run together under a 10 GiB budget, though slots are free; one
    larger than the whole budget runs alone; the order of the queue is kept."""
    lock = threading.Lock()
    active: list[str] = []
    overlaps: list[tuple[str, ...]] = []
    order: list[str] = []

    def job(name: str, gpu: float, estimate: float) -> Job:
        def run() -> tuple[Job, ...]:
            with lock:
                order.append(name)
                active.append(name)
                overlaps.append(tuple(sorted(active)))
            threading.Event().wait(0.05)
            with lock:
                active.remove(name)
            return ()

        return Job(name=name, run=run, estimate_s=estimate, gpu_mib=gpu)

    pool = Pool(4, gpu_mib=10 * 1024)
    pool.submit(
        [
            job("big-a", 6 * 1024, 9.0),
            job("big-b", 6 * 1024, 8.0),
            job("huge", 50 * 1024, 7.0),
            job("small", 1024, 6.0),
        ]
    )
    _drain(pool)
    assert order == ["big-a", "big-b", "huge", "small"]
    assert not any({"big-a", "big-b"} <= set(o) for o in overlaps)
    assert all(o == ("huge",) for o in overlaps if "huge" in o)


def test_jobs_submitted_while_running_and_a_job_error_is_raised() -> None:
    order: list[str] = []
    pool = Pool(2)
    started = threading.Event()

    def feed() -> None:
        started.wait(10)
        pool.submit([_recording(order, "late", None)], announced=1)
        pool.close()

    pool.expect(1)

    def early() -> tuple[Job, ...]:
        started.set()
        return ()

    pool.submit([Job(name="early", run=early)])
    assert pool.stats().left == 2  # one queued, one announced
    thread = threading.Thread(target=feed)
    thread.start()
    pool.run()
    thread.join()
    assert order == ["late"]
    assert pool.stats().left == 0

    def boom() -> tuple[Job, ...]:
        msg = "bad job"
        raise RuntimeError(msg)

    failing = Pool(1)
    failing.submit([Job(name="boom", run=boom)])
    failing.close()
    with pytest.raises(RuntimeError, match="bad job"):
        failing.run()


def test_reruns_are_follow_up_jobs_and_all_attempts_are_kept(tmp_path: Path) -> None:
    script = tmp_path / "fails.py"
    script.write_text("raise SystemExit(1)\n")
    ok = tmp_path / "ok.py"
    ok.write_text("print('VERDICT pass')\n")
    options = RunOptions(results_dir=tmp_path / "run", reruns=2, api_logs=False, jobs=3)
    store = ResultStore(tmp_path / "run" / "results.jsonl")
    target = ExecTarget(python=Path(sys.executable), cell_id="c1")
    results = run_cases(discover_cases([script, ok]), target, options, store)
    by_case = {r.case: r for r in results}
    assert by_case["fails.py"].attempts == ("fail", "fail", "fail")
    assert by_case["ok.py"].attempts == ("pass",)
    folder = Path(by_case["fails.py"].log_path).parent
    assert {p.name for p in folder.glob("output*.log")} == {
        "output.log",
        "output.2.log",
        "output.3.log",
    }
    assert len(store.path.read_text().splitlines()) == 2  # one line per case, not per attempt


def test_a_share_counts_its_tests_as_they_are_stored() -> None:
    """A pytest share stands for no case until its end (its tests are known once its process has
    collected them): while it runs, the line shows what it stored, the one test it is running and
    the rest of the ids it took, not `0 done, 0 running` for the length of the suite."""
    seen: list[str] = []
    pool = Pool(1)
    progress = [0, 0]  # (stored, assigned) as the share's process reports them

    def share() -> tuple[Job, ...]:
        seen.append(pool_line(pool.stats()))  # not collected yet
        progress[:] = [40, 100]  # its process took 100 ids and stored 40 results
        seen.append(pool_line(pool.stats()))
        progress[0] = job.cases = 100
        return ()

    job = Job(name="share 1/1", run=share, cases=0)
    job.live = lambda: (progress[0], progress[1])
    pool.submit([job])
    _drain(pool)
    assert seen == [
        "cases: 0 done, 0 running, 0 left (1 slots)",
        "cases: 40 done, 1 running, 59 left (1 slots)",
    ]
    assert pool_line(pool.stats()).startswith("cases: 100 done, 0 running, 0 left")


def test_progress_line_and_plain_rate() -> None:
    pool = Pool(3)
    pool.expect(4, 120.0)  # 4 cases the history puts at 120 s of work
    assert pool_line(pool.stats()) == "cases: 0 done, 0 running, 4 left, ETA 0:40 (3 slots)"
    lines: list[str] = []

    class Out:
        def write(self, text: str) -> int:
            lines.append(text)
            return len(text)

        def flush(self) -> None:
            pass

    with pool_progress(tty=False, every_s=3600, stream=Out()) as show:  # type: ignore[arg-type]
        for _ in range(5):
            show(pool.stats())
    printed = [line for line in lines if line.strip()]
    assert len(printed) == 2  # the first one, then only the last one at the end


def test_no_eta_until_the_history_or_a_finished_case_gives_a_basis() -> None:
    """Issue #30 item 3: a cold start (no history) showed `ETA 57:30` for a 30 s run, N cases
    at a made-up 30 s each. Without a basis the line has no ETA; the first finished case is one."""
    seen: list[PoolStats] = []
    order: list[str] = []
    pool = Pool(1, on_change=seen.append)
    pool.expect(3)  # the cells announced while their environment is made: nothing known
    assert pool.stats().eta_s is None
    assert pool_line(pool.stats()) == "cases: 0 done, 0 running, 3 left (1 slots)"
    pool.submit([_recording(order, name, None) for name in "abc"], announced=3)
    _drain(pool)
    assert order == ["a", "b", "c"]
    before = [stats for stats in seen if stats.done == 0]
    assert before
    assert all(stats.eta_s is None for stats in before)
    after = [stats for stats in seen if stats.done and (stats.left or stats.running)]
    assert after
    assert all(stats.eta_s is not None for stats in after)
    assert ", ETA " in pool_line(after[0])
    # the history is a basis from the start: an estimate for a queued job, or for announced cells
    known = Pool(1)
    known.submit([_recording(order, "d", 20.0), _recording(order, "e", None)])
    assert known.stats().eta_s is not None
    announced = Pool(1)
    announced.expect(2, 50.0)
    assert announced.stats().eta_s == 50.0


def test_stop_counts_the_running_jobs_as_cut_not_done() -> None:
    """An interrupt (runner.run_pool stops the pool, then kills the cases): the cases running then
    are not stored, so the progress must not count them as done, even when their jobs return
    after the stop; nothing queued starts, and a cut job's follow-ups are dropped."""
    order: list[str] = []
    started, release = threading.Event(), threading.Event()

    def slow() -> list[Job]:
        started.set()
        release.wait(30)
        order.append("slow")
        return [_recording(order, "slow #2", 1.0, cases=0)]

    pool = Pool(1)
    pool.submit([_recording(order, "quick", 10.0), Job(name="slow", run=slow, estimate_s=9.0)])
    pool.submit([_recording(order, "later", 1.0)])
    dispatcher = threading.Thread(target=pool.run, daemon=True)
    dispatcher.start()
    assert started.wait(30)
    pool.stop()
    dispatcher.join(30)
    assert not dispatcher.is_alive()  # run() returns once stopped
    stopped = pool.stats()
    assert (stopped.done, stopped.running, stopped.cut, stopped.left) == (1, 0, 1, 1)
    release.set()
    for thread in threading.enumerate():
        if thread.name == "pool:slow":
            thread.join(30)
    assert order == ["quick", "slow"]  # neither the follow-up nor the queued job ran
    assert pool.stats() == stopped
    assert pool_line(stopped) == "cases stopped: 1 done, 1 cut, 1 not started (1 slots)"


def test_stop_counts_a_running_job_whose_result_is_stored_as_done() -> None:
    """A case's result stored, its job's thread not yet back in the pool, then the interrupt:
    the case counts done, not cut (CI saw `0 done, 2 cut` with the quick case's result stored)."""
    stored, hanging, release = threading.Event(), threading.Event(), threading.Event()

    def finished() -> list[Job]:
        stored.set()  # the runner stored the result; the thread is slow to come back
        release.wait(30)
        return []

    def hangs() -> list[Job]:
        hanging.set()
        release.wait(30)
        return []

    pool = Pool(2)
    pool.submit(
        [
            Job(name="quick", run=finished, stored=stored.is_set),
            Job(name="hang", run=hangs, stored=lambda: False),
        ]
    )
    dispatcher = threading.Thread(target=pool.run, daemon=True)
    dispatcher.start()
    # both running (on a loaded host the second can start after the first stored its result:
    # stopped before it started, it is "not started", not cut)
    assert stored.wait(30)
    assert hanging.wait(30)
    pool.stop()
    dispatcher.join(30)
    stopped = pool.stats()
    release.set()
    assert (stopped.done, stopped.cut) == (1, 1)
    assert pool_line(stopped) == "cases stopped: 1 done, 1 cut, 0 not started (2 slots)"


def test_the_next_environment_is_built_while_the_first_cells_cases_run(tmp_path: Path) -> None:
    """run_cells prepares step 2 in the background: its build sees step 1's case running (the
    case waits for the build to finish, so cell by cell this would only end on the timeouts)."""
    from validate.config import ValidateConfig
    from validate.execute.local import LocalExecutor
    from validate.model.matrix import Cell
    from validate.model.results import load_results
    from validate.plan.host import HostFacts
    from validate.plan.rules import Plan
    from validate.workflow import run_cells

    started, ended = tmp_path / "case-started", tmp_path / "case-ended"
    built = tmp_path / "second-env-built"
    case = tmp_path / "cases" / "waits.py"
    case.parent.mkdir()
    case.write_text(
        "import pathlib, time, sys\n"
        f"pathlib.Path({str(started)!r}).touch()\n"
        "for _ in range(100):\n"
        f"    if pathlib.Path({str(built)!r}).exists(): break\n"
        "    time.sleep(0.05)\n"
        f"pathlib.Path({str(ended)!r}).touch()\n"
    )
    seen: list[bool] = []

    def ensure(spec: object) -> ExecTarget:  # noqa: ARG001 - one interpreter for every cell
        if seen == []:
            seen.append(False)  # the first environment: nothing runs yet
        else:
            for _ in range(100):  # the second: wait for the first cell's case to be running
                if started.exists():
                    break
                threading.Event().wait(0.05)
            seen.append(started.exists() and not ended.exists())
            built.touch()
        return ExecTarget(python=Path(sys.executable))

    cells = [
        Cell(cudnn=v, frontend="1.27.0", cuda="13.0", driver="580", arch="sm90")
        for v in ("9.12.0.46", "9.13.0.50")
    ]
    config = ValidateConfig(
        cases=(case.parent,), jobs=2, timeout_s=60, api_logs=False, cache_dir=tmp_path / "cache"
    )
    store = ResultStore(tmp_path / "run" / "results.jsonl")
    executor = LocalExecutor(ensure=ensure)
    run_cells(
        config,
        Plan(planned=cells, pruned=[]),
        cases_for(config),
        HostFacts(),
        store,
        "R",
        executor=executor,
    )
    assert seen == [False, True]
    assert {r.cell_id for r in load_results([tmp_path / "run"])} == {c.id for c in cells}
    assert (tmp_path / "cache" / "durations.json").is_file()  # the shared history was saved


def test_terminal_progress_is_a_row_of_the_one_display() -> None:
    """On a terminal the pool's line is an activity of env.progress (rich allows one live display
    at a time: the environments built meanwhile show theirs in the same one); it is closed after."""
    from validate.env import progress as env_progress

    pool = Pool(2)
    pool.expect(3, 90.0)
    with pool_progress(tty=True) as show:
        show(pool.stats())
        (act,) = env_progress._DISPLAY.open
        assert act.title == "cases"
        assert act.state() == "0 done, 0 running, 3 left, ETA 0:45 (2 slots): 0 of 3"
        with env_progress.activity("environment for a cell") as build:  # a build meanwhile
            build.update("installing", done=1, total=4)
            assert len(env_progress._DISPLAY.open) == 2
    assert env_progress._DISPLAY.open == []


def test_the_display_draws_on_the_terminal_and_log_lines_stay_safe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under the CLI stderr is a SafeStream: rich must draw on the stream beneath it (else its
    cursor codes print as text), while log lines routed above the display stay redacted."""
    import io
    import logging

    from validate.env import progress as env_progress
    from validate.textsafe import SafeStream

    raw = io.StringIO()
    monkeypatch.setattr(sys, "stderr", SafeStream(raw))
    assert env_progress._terminal() is raw
    assert sys.__stderr__ is not None
    handler = logging.StreamHandler(SafeStream(sys.__stderr__))
    logger = logging.getLogger("validate")
    logger.addHandler(handler)
    try:
        before = handler.stream
        env_progress._DISPLAY._route_logs(to_display=True)
        assert isinstance(handler.stream, SafeStream)
        assert handler.stream is not before
        env_progress._DISPLAY._route_logs(to_display=False)
        assert handler.stream is before
    finally:
        logger.removeHandler(handler)


def _nice_of_jobs(pool: Pool, estimates: dict[str, float | None], first: str) -> dict[str, int]:
    """Run one job per estimate; `first` (if it is the longest) stays running until every other
    job has run, so they all start beside it. Returns each job's `yield_nice()`."""
    seen: dict[str, int] = {}
    others_done = threading.Event()
    lock = threading.Lock()

    def job(name: str) -> Job:
        def run() -> tuple[Job, ...]:
            with lock:
                seen[name] = yield_nice()
                if len(seen) == len(estimates):
                    others_done.set()
            if name == first:
                assert others_done.wait(10), "the others never ran beside the first job"
            return ()

        return Job(name=name, run=run, estimate_s=estimates[name])

    pool.submit(job(name) for name in estimates)
    _drain(pool)
    return seen


def test_jobs_started_beside_a_critical_path_job_yield(caplog: pytest.LogCaptureFixture) -> None:
    """A job longer than the work per slot runs at the normal priority and the short ones started
    beside it are marked to lower theirs; the log names it."""
    shorts: dict[str, float | None] = {f"short{i}": 1.0 for i in range(4)}
    with caplog.at_level("INFO", logger="validate.execute.pool"):
        seen = _nice_of_jobs(Pool(2), {"long": 10.0, **shorts}, "long")
    assert seen == {"long": 0, **dict.fromkeys(shorts, YIELD_NICE)}
    assert "critical path: long (10s by the history)" in caplog.text


def test_no_job_yields_without_a_critical_path() -> None:
    """Equal jobs (each below the work per slot), jobs without a history, and a pool told not to
    yield: nobody lowers its priority."""
    equal: dict[str, float | None] = {f"j{i}": 1.0 for i in range(6)}
    assert set(_nice_of_jobs(Pool(2), equal, "none").values()) == {0}
    unknown: dict[str, float | None] = {"long": None, "a": None, "b": None}
    assert set(_nice_of_jobs(Pool(2), unknown, "long").values()) == {0}
    told: dict[str, float | None] = {"long": 10.0, "a": 1.0, "b": 1.0}
    assert set(_nice_of_jobs(Pool(2, yield_nice=0), told, "long").values()) == {0}


def test_a_case_beside_a_critical_one_runs_at_lower_priority(tmp_path: Path) -> None:
    """Real case processes: with a history that makes `long.py` the critical path, a case that
    starts beside it (and the child it forks) runs at nice +YIELD_NICE, and so does its session
    where CPU time is grouped by session; `long.py` at the pool's own. Every case prints its
    niceness; long.py stays until the short ones have ended."""
    mark = tmp_path / "shorts-done"
    long = tmp_path / "long.py"
    long.write_text(
        "import os, pathlib, time\n"
        f"mark = pathlib.Path({str(mark)!r})\n"
        "deadline = time.monotonic() + 20\n"
        "while not mark.exists() and time.monotonic() < deadline:\n"
        "    time.sleep(0.02)\n"
        "print('nice', os.nice(0))\n"
    )
    for name in ("short_a.py", "short_b.py"):
        (tmp_path / name).write_text(
            "import os, subprocess, sys\n"
            "child = subprocess.run([sys.executable, '-c', 'import os; print(os.nice(0))'],"
            " capture_output=True, text=True, check=True).stdout.strip()\n"
            "try:\n"
            "    group = (open('/proc/self/autogroup').read().split() or ['none'])[-1]\n"
            "except OSError:\n"
            "    group = 'none'\n"
            "print('nice', os.nice(0), 'child', child, 'group', group)\n"
            f"open({str(mark)!r} + '.' + {name!r}, 'w').close()\n"
            f"import glob; n = len(glob.glob({str(mark)!r} + '.*'))\n"
            f"open({str(mark)!r}, 'w').close() if n == 2 else None\n"
        )
    history = tmp_path / "durations.json"
    history.write_text('{"long.py": 30, "short_a.py": 1, "short_b.py": 1}')
    options = RunOptions(results_dir=tmp_path / "run", api_logs=False, jobs=2, history=history)
    store = ResultStore(tmp_path / "run" / "results.jsonl")
    target = ExecTarget(python=Path(sys.executable), cell_id="c1")
    scripts = [tmp_path / n for n in ("short_a.py", "long.py", "short_b.py")]
    results = run_cases(discover_cases(scripts), target, options, store)
    own = os.nice(0)
    printed = {r.case: Path(r.log_path).read_text().split() for r in results}
    assert printed["long.py"][:2] == ["nice", str(own)], printed
    want = str(min(19, own + YIELD_NICE))
    for name in ("short_a.py", "short_b.py"):
        assert printed[name][:4] == ["nice", want, "child", want], printed
        if printed[name][5] != "none":  # CPU time grouped by session: the session is lowered too
            assert printed[name][5] == want, printed
