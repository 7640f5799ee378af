"""Run cases, each in its own process group, classify them and append every result as it lands.

`--jobs N` runs N case processes at once from a thread pool. On a GPU host they all share the
visible GPU(s): N kernels then compete for memory and SMs (no partitioning is done), so the
default there is 1; on a CPU-only host it is the number of cores.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from validate.errors import ResultsLost
from validate.execute.cases.script import RESULT_FILE_ENV, read_result_file, verdict_line
from validate.execute.classify import ExecResult, classify, signal_name
from validate.execute.resources.capture import verify_pins
from validate.execute.resources.guard import PARENT_ENV
from validate.model.outcome import POLICY, Outcome, policy
from validate.model.results import CaseResult, ResultStore
from validate.plan.requirements import check, missing_modules

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

    from validate.env.target import ExecTarget
    from validate.execute.cases import Case

__all__ = ["FAILING", "RunOptions", "run_case", "run_cases"]

log = logging.getLogger(__name__)

#: Outcomes that make `run` exit 1 (the blocking ones, before any known-issue check).
FAILING: Final = frozenset(o for o, p in POLICY.items() if p.blocking)
_TAIL_BYTES: Final = 8192
_TERM_GRACE_S: Final = 5.0
_NOTEBOOK_GRACE_S: Final = 30.0  # kernel start-up and env capture on top of the cell timeout


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How to run: limits, parallelism, reruns and where evidence goes."""

    timeout_s: float = 600
    jobs: int = 1
    reruns: int = 0
    results_dir: Path
    resume: bool = False
    api_logs: bool = True
    run_id: str = ""
    #: JSON file of case name -> last duration; cases start longest first (None: given order).
    history: Path | None = None


def _case_dir(case: Case, target: ExecTarget, options: RunOptions) -> Path:
    return options.results_dir / "cases" / (target.cell_id or "local") / case.slug


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - _TAIL_BYTES))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class _LiveGroups:
    """Process groups of the cases running now (and their kernels' groups). Cases run in sessions
    of their own, so a terminal's Ctrl-C never reaches them: an interrupt ends them here."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[int, Path] = {}  # case pgid -> the file its kernel's pid is written to
        self.stopped = threading.Event()  # set by kill_all: no new case process may start

    def add(self, pgid: int, kernel_file: Path) -> None:
        """Register a started case; one started after kill_all (a Popen racing the interrupt) is
        killed here, so no case outlives an interrupt whichever thread got there first."""
        with self._lock:
            self._groups[pgid] = kernel_file
            late = self.stopped.is_set()
        if late:
            _kill_group(pgid, signal.SIGKILL)

    def discard(self, pgid: int) -> None:
        with self._lock:
            self._groups.pop(pgid, None)

    def kill_all(self) -> None:
        with self._lock:  # under the lock: every add() sees `stopped` or is in this snapshot
            self.stopped.set()
            groups = list(self._groups.items())
        for pgid, kernel_file in groups:
            _kill_group(pgid, signal.SIGKILL)
            with suppress(OSError, ValueError):
                _kill_group(int(kernel_file.read_text(encoding="utf-8").strip()), signal.SIGKILL)


_LIVE: Final = _LiveGroups()


def _wait_quietly(proc: subprocess.Popen[bytes], seconds: float) -> bool:
    """Whether the process ended within `seconds` (used only on the timeout path)."""
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return False
    return True


def _spawn(
    argv: list[str], env: Mapping[str, str], log_path: Path, limit_s: float, kernel_file: Path
) -> tuple[int, bool]:
    """Run argv in a new session, output to log_path; on timeout TERM then KILL the group."""
    log.debug("+ %s", " ".join(argv))
    if _LIVE.stopped.is_set():  # interrupted: a re-run must not start behind the user's back
        return -signal.SIGKILL, False
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(env),
            start_new_session=True,
        )
        # A timer thread enforces the limit so this thread blocks in waitpid() and sees the exit
        # at once: Popen.wait(timeout=...) polls with sleeps of up to 50 ms, which was most of a
        # short script's overhead (bench/runner_bench.py).
        expired = threading.Event()

        def _expire() -> None:
            expired.set()
            _kill_group(proc.pid, signal.SIGTERM)
            if not _wait_quietly(proc, _TERM_GRACE_S):
                _kill_group(proc.pid, signal.SIGKILL)

        timer = threading.Timer(limit_s, _expire)
        timer.daemon = True
        timer.start()
        _LIVE.add(proc.pid, kernel_file)
        try:
            proc.wait()
        finally:
            timer.cancel()
            _LIVE.discard(proc.pid)
            # what is left of the case's group (a case that killed its supervising parent,
            # resources/guard.py become_reaper, is still running): it ends with the case
            _kill_group(proc.pid, signal.SIGKILL)
        timed_out = expired.is_set()
    if kernel_file.exists():  # the kernel runs in its own session: make sure it is gone too
        try:
            kernel_pid = int(kernel_file.read_text(encoding="utf-8").strip())
            _kill_group(kernel_pid, signal.SIGKILL)
        except ValueError:
            pass
        kernel_file.unlink(missing_ok=True)
    return proc.returncode, timed_out


def _case_env(target: ExecTarget, result_file: Path, api_dir: Path | None) -> dict[str, str]:
    # the overlay's library path and preload go in front of the host's (ExecTarget.process_env)
    env = {**target.process_env(), "PYTHONFAULTHANDLER": "1", RESULT_FILE_ENV: str(result_file)}
    env[PARENT_ENV] = str(os.getpid())  # resources/guard.py: the case dies with this process
    env.pop("CUDNN_FRONTEND_LOG_FILE", None)
    if target.expected_backend:
        env["CUDNN_MATRIX_EXPECT_BACKEND"] = target.expected_backend
    if api_dir is not None:  # DOMAIN.md §7: both must be set before the process starts
        env["CUDNN_FRONTEND_LOG_INFO"] = "1"
        env["CUDNN_FRONTEND_LOG_FILE"] = str(api_dir / "fe.log")
        env["CUDNN_LOGLEVEL_DBG"] = "3"
        env["CUDNN_LOGDEST_DBG"] = str(api_dir / "be.log")
    return env


def _pin_error(target: ExecTarget, env: Mapping[str, Any]) -> str | None:
    if not env or env.get("captured_in") != "case":
        return None
    expected = {
        "backend": target.expected_backend,
        "backend_dir": str(target.backend_dir) if target.backend_dir else None,
        "frontend": target.expected_frontend,
    }
    return verify_pins(env, expected) if any(expected.values()) else None


def _attempt(
    case: Case, target: ExecTarget, options: RunOptions, folder: Path, n: int, *, api_logs: bool
) -> ExecResult:
    suffix = "" if n == 1 else f".{n}"
    log_path = folder / f"output{suffix}.log"
    report_path = folder / f"report{suffix}.json"
    result_file = folder / f"script-result{suffix}.json"
    for stale in (report_path, result_file):
        stale.unlink(missing_ok=True)
    limit = options.timeout_s + (_NOTEBOOK_GRACE_S if case.kind == "notebook" else 0.0)
    env = _case_env(target, result_file, folder if api_logs else None)
    start = time.monotonic()
    argv = case.command(target.python, report_path, options.timeout_s)
    returncode, timed_out = _spawn(argv, env, log_path, limit, report_path.with_suffix(".kernel"))
    duration = time.monotonic() - start
    tail = _tail(log_path)
    report: dict[str, Any] | None = None
    if report_path.exists():
        try:
            report = json.loads(report_path.read_text(encoding="utf-8", errors="replace"))
        except ValueError:
            report = None
    return ExecResult(
        kind=case.kind,
        returncode=returncode,
        timed_out=timed_out,
        timeout_s=options.timeout_s,
        duration_s=duration,
        log_path=log_path,
        tail=tail,
        report=report,
        result_file=read_result_file(result_file) if case.kind == "script" else None,
        verdict=verdict_line(tail) if case.kind == "script" else None,
    )


def _captured(run: ExecResult) -> Mapping[str, Any]:
    """The environment the case process captured about itself (capture.py), if any."""
    return (run.report or {}).get("env") or {}


def _verdict(run: ExecResult, target: ExecTarget) -> tuple[Outcome, str]:
    return classify(run, pin_error=_pin_error(target, _captured(run)))


def _exception(run: ExecResult) -> dict[str, Any] | None:
    report = run.report or {}
    source: Mapping[str, Any] = report if run.kind == "notebook" else report.get("exception") or {}
    if not source.get("ename") and not source.get("traceback"):
        return None
    keys = ("ename", "evalue", "cell_index", "cell_source", "traceback")
    return {k: source[k] for k in keys if source.get(k) is not None}


def _skip_result(case: Case, target: ExecTarget, options: RunOptions, reason: str) -> CaseResult:
    return CaseResult(
        case=case.name,
        outcome=Outcome.SKIP,
        reason=reason,
        cell_id=target.cell_id,
        cell=dict(target.cell),
        case_path=str(case.path),
        run_id=options.run_id,
        started_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        content_key=case.content_key(target.cell),
    )


def run_case(case: Case, target: ExecTarget, options: RunOptions) -> CaseResult:
    """Check requirements, run the case, re-run failures (API logs, then --reruns), build a result."""
    req = case.requirements
    missing = missing_modules(target.python, req.imports) if req.imports else frozenset()
    reason = check(
        req,
        has_gpu=target.has_gpu,
        host_arch=target.host_arch,
        backend_version=target.backend_version,
        missing=missing,
    )
    if reason:
        return _skip_result(case, target, options, reason)
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    folder = _case_dir(case, target, options)
    folder.mkdir(parents=True, exist_ok=True)
    first = _attempt(case, target, options, folder, 1, api_logs=False)
    outcome, reason = _verdict(first, target)
    outcomes = [str(outcome)]
    api_logs: dict[str, str] = {}
    if policy(outcome).rerun:
        extra = options.reruns + (1 if options.api_logs else 0)
        for n in range(2, 2 + extra):
            with_logs = options.api_logs and n == 2
            again = _attempt(case, target, options, folder, n, api_logs=with_logs)
            outcomes.append(str(_verdict(again, target)[0]))
            if with_logs:
                logs = {"frontend": folder / "fe.log", "backend": folder / "be.log"}
                api_logs = {k: str(v) for k, v in logs.items() if v.exists()}
    kernel_sig = (first.report or {}).get("kernel_signal")
    kernel_code = (first.report or {}).get("kernel_exit_code")
    result = CaseResult(
        case=case.name,
        outcome=outcome,
        reason=reason,
        duration_s=round(first.duration_s, 3),
        cell_id=target.cell_id,
        cell=dict(target.cell),
        case_path=str(case.path),
        exit_code=kernel_code if kernel_code is not None else first.returncode,
        signal=kernel_sig or signal_name(first.returncode),
        exception=_exception(first),
        tail=first.tail,
        log_path=str(first.log_path),
        api_logs=api_logs,
        env=_captured(first),
        attempts=tuple(outcomes),
        flaky=len(set(outcomes)) > 1,
        started_at=started,
        run_id=options.run_id,
        content_key=case.content_key(target.cell),
    )
    with suppress(OSError):  # a copy of the results line: a full disk must not lose the line
        (folder / "result.json").write_text(
            json.dumps(result.to_dict(), indent=2, default=str), encoding="utf-8"
        )
    return result


def _start_case(
    case: Case, target: ExecTarget, options: RunOptions, store: ResultStore
) -> CaseResult:
    """Run one case unless the run must stop: a results folder that broke (disk full, deleted)
    raises `ResultsLost`, which ends the run like Ctrl-C. A case file that another case deleted
    is that case's own `error`, and the run goes on."""
    store.check()
    if not case.path.is_file():
        vanished = _skip_result(case, target, options, "case file vanished before it ran")
        return vanished.with_(outcome=Outcome.ERROR)
    try:
        result = run_case(case, target, options)
    except OSError:
        store.check()  # the folder broke under the case: that is the cause, in one line
        raise
    trouble = store.problem()  # a case that died of a full disk is no product failure
    if trouble is not None and policy(result.outcome).bad:
        reason = f"while it ran: {trouble}; it ended {result.outcome}: {result.reason}"
        return result.with_(outcome=Outcome.ERROR, reason=reason)
    return result


def run_cases(
    cases: Sequence[Case],
    target: ExecTarget,
    options: RunOptions,
    store: ResultStore,
    *,
    on_result: Callable[[CaseResult, int, int], None] | None = None,
) -> list[CaseResult]:
    """Run every case (threads, one process group each), storing each result as it finishes."""
    previous: dict[str, CaseResult] = {}
    if options.resume:  # a stored result counts only for the same case content and pins
        stored = {r.key: r for r in store}
        for case in cases:
            old = stored.get(f"{target.cell_id}::{case.name}")
            if old is not None and old.content_key in ("", case.content_key(target.cell)):
                previous[old.key] = old
    todo = [c for c in cases if f"{target.cell_id}::{c.name}" not in previous]
    kept = [previous[k] for c in cases if (k := f"{target.cell_id}::{c.name}") in previous]
    todo = _longest_first(todo, _read_history(options.history))
    results: list[CaseResult] = []
    lock = threading.Lock()
    _LIVE.stopped.clear()
    pool = ThreadPoolExecutor(max_workers=max(1, options.jobs))
    try:
        futures = [pool.submit(_start_case, case, target, options, store) for case in todo]
        for future in as_completed(futures):
            result = future.result()
            with lock:
                store.append(result)
                results.append(result)
                if on_result is not None:
                    on_result(result, len(results), len(todo))
    except (KeyboardInterrupt, ResultsLost):
        # Finished results are already stored; what is running is ended, not recorded (a
        # half-run case killed by us is not a crash of the product), and --resume redoes it.
        pool.shutdown(wait=False, cancel_futures=True)
        _LIVE.kill_all()
        raise
    pool.shutdown(wait=True)
    _write_history(options.history, results)
    order = {c.name: i for i, c in enumerate(cases)}
    return sorted(kept + results, key=lambda r: order.get(r.case, len(order)))


def _read_history(path: Path | None) -> dict[str, float]:
    if path is None or not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _longest_first(cases: Sequence[Case], history: Mapping[str, float]) -> list[Case]:
    """Cases with the longest known duration start first (a long case started last is the tail
    of the whole run); unknown cases count as longest, ties keep the given order."""
    return sorted(cases, key=lambda c: -history.get(c.name, float("inf")))


def _write_history(path: Path | None, results: Sequence[CaseResult]) -> None:
    ran = {r.case: round(r.duration_s, 2) for r in results if r.outcome is not Outcome.SKIP}
    if path is None or not ran:
        return
    merged = {**_read_history(path), **ran}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(merged, indent=0, sort_keys=True), encoding="utf-8")
    tmp.replace(path)
