"""LocalExecutor: what `EXECUTORS["local"]` builds, running real script cases here."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from validate.config import ValidateConfig
from validate.env.progress import Activity
from validate.env.sources import Sources
from validate.env.streamed import run_streamed
from validate.errors import EnvBuildError
from validate.execute import EXECUTORS, ExecTarget, Executor, RunContext, local
from validate.execute.cases import cases_for
from validate.execute.local import LocalExecutor
from validate.execute.pool import Pool
from validate.execute.runner import run_pool
from validate.execute.supervise import SUPERVISOR
from validate.model.matrix import Cell
from validate.model.results import ResultStore, load_results
from validate.plan.host import HostFacts
from validate.plan.steps import Step

SCRIPTS = Path(__file__).resolve().parents[1] / "resources" / "scripts"
CELL = Cell(cudnn="9.12.0.46", frontend="1.27.0", cuda="13.0", driver="580", arch="sm90")


def _context(config: ValidateConfig, out: Path) -> RunContext:
    return RunContext(
        config=config,
        host=HostFacts(),
        run_id="RUN1",
        sources=Sources(),
        store=ResultStore(out / "results.jsonl"),
    )


def _run(cells: tuple[Cell, ...], config: ValidateConfig, run: RunContext) -> int:
    """What the workflow does with the executor's jobs: one pool runs them; returns how many."""
    target = ExecTarget(python=Path(sys.executable))
    jobs = LocalExecutor().run(Step(key="env", cells=cells), target, cases_for(config), run)
    pool = Pool(2)
    pool.submit(jobs)
    pool.close()
    run_pool(pool)
    return len(jobs)


def test_local_gives_a_local_executor() -> None:
    executor = EXECUTORS["local"]()
    assert isinstance(executor, LocalExecutor)
    assert isinstance(executor, Executor)
    assert executor.name == "local"
    assert executor.available()


def test_runs_cases_and_writes_results(tmp_path: Path) -> None:
    config = ValidateConfig(
        cases=(SCRIPTS / "pass_script.py", SCRIPTS / "fail_exit1.py"),
        jobs=2,
        timeout_s=60,
        api_logs=False,
        cache_dir=tmp_path / "cache",
    )
    run = _context(config, tmp_path / "out")
    assert _run((CELL,), config, run) == 2  # one job per case
    by_case = {r.case: r for r in load_results([tmp_path / "out"])}
    assert len(by_case) == 2  # one case failed
    assert by_case["pass_script.py"].outcome == "pass"
    assert by_case["fail_exit1.py"].outcome == "fail"
    assert {r.cell_id for r in by_case.values()} == {CELL.id}
    assert {r.run_id for r in by_case.values()} == {"RUN1"}


def test_options_come_from_the_config(tmp_path: Path) -> None:
    """The case limit is the config's (no argv round trip): a hanging script times out at 1s."""
    config = ValidateConfig(
        cases=(SCRIPTS / "hang.py",), timeout_s=1, api_logs=False, cache_dir=tmp_path / "cache"
    )
    run = _context(config, tmp_path / "out")
    _run((CELL,), config, run)
    (result,) = load_results([tmp_path / "out"])
    assert result.outcome == "timeout"
    assert result.reason == "timed out after 1s; process group killed"


def test_no_gpu_host_runs_one_cell_per_environment(tmp_path: Path) -> None:
    """Without a GPU every cell of a step checks the same pins: only the first runs."""
    config = ValidateConfig(
        cases=(SCRIPTS / "pass_script.py",), api_logs=False, cache_dir=tmp_path / "cache"
    )
    other = Cell(cudnn=CELL.cudnn, frontend=CELL.frontend, cuda="13.0", driver="575", arch="sm90")
    run = _context(config, tmp_path / "out")
    assert _run((CELL, other), config, run) == 1  # the other cell's skip is stored at once
    by_cell = {r.cell_id: r for r in load_results([tmp_path / "out"])}
    assert by_cell[CELL.id].outcome == "pass"
    assert by_cell[other.id].outcome == "skip"
    assert by_cell[other.id].reason == (
        f"no NVIDIA driver: pins checked in cell {CELL.id} (same environment)"
    )


def _installer(pid_file: Path) -> ExecTarget:
    """What an environment's installer does when a signal ends it: a real process, run and read
    through `run_streamed` as the installer is, whose death by a signal is `signalled`."""
    act = Activity("installing")
    argv = [
        sys.executable,
        "-c",
        f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(60)",
    ]
    proc = run_streamed(argv, act)
    msg = f"installing x failed (exit {proc.returncode})"
    raise EnvBuildError(msg, signalled=proc.returncode < 0)


def _signal_the_installer(pid_file: Path, *, then_stop: bool) -> threading.Thread:
    def go() -> None:
        deadline = time.monotonic() + 30
        while not pid_file.exists() or not pid_file.read_text():
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)
        os.kill(int(pid_file.read_text()), signal.SIGTERM)  # the signal reaches it first ...
        if then_stop:
            time.sleep(0.5)  # ... and the main thread stops the run a moment later
            SUPERVISOR.stop()

    thread = threading.Thread(target=go)
    thread.start()
    return thread


def test_a_build_the_stops_signal_ended_is_no_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C or SIGTERM to the tool's group reaches the installer as it reaches the tool, and
    the installer can die before the main thread has stopped the run: the build waits for the
    stop, and unwinds as the interrupt, with no `environment build failed` for the cell (a
    `--resume` builds it again). Without a stop, a signalled installer is the build's failure."""
    monkeypatch.setattr(local, "_STOP_GRACE_S", 2.0)
    config = ValidateConfig(cases=(SCRIPTS / "pass_script.py",), cache_dir=tmp_path / "cache")
    run = _context(config, tmp_path / "out")
    step = Step(key="env", cells=(CELL,))
    pid_file = tmp_path / "pid"
    executor = LocalExecutor(ensure=lambda _spec: _installer(pid_file))
    with SUPERVISOR.session():
        try:
            thread = _signal_the_installer(pid_file, then_stop=True)
            with pytest.raises(KeyboardInterrupt):
                executor.prepare(step, run)
            thread.join()
        finally:
            SUPERVISOR.live.stopped.clear()
    pid_file.unlink()
    with SUPERVISOR.session():
        thread = _signal_the_installer(pid_file, then_stop=False)
        reason = executor.prepare(step, run)
        thread.join()
    assert isinstance(reason, str)
    assert reason.startswith("environment build failed: installing x failed (exit -15)")
