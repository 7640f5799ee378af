"""Run cases, each in its own process group, classify them and append every result as it lands.

A case is a pool job (execute/pool.py): `CaseBatch` turns one cell's cases into jobs, a failing
case's re-runs become follow-up jobs, and `run_cases` runs one batch in a pool of its own (the
`run` command, the runner inside a container). `validate` puts the batches of every cell into
one pool (workflow.run_cells). On a GPU host the cases share the visible GPU(s): their kernels
compete for memory and SMs (no partitioning is done); execute/slots.py bounds how many at once.
"""

from __future__ import annotations

import datetime as dt
import functools
import heapq
import itertools
import json
import logging
import math
import os
import signal
import subprocess
import threading
import time
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

from validate.errors import ResultsLost
from validate.execute.cases.kinds import KINDS
from validate.execute.cases.script import RESULT_FILE_ENV
from validate.execute.classify import ExecResult, classify, signal_name
from validate.execute.forkserver import ForkServerLost, ForkServers
from validate.execute.history import History
from validate.execute.pool import Beside, Job, Pool, beside, watch, yield_nice
from validate.execute.resources.capture import verify_pins
from validate.execute.resources.guard import PARENT_ENV
from validate.execute.slots import DEFAULT_GPU_LOAD, GPU_CAPACITY, GPU_PER_CASE_MIB
from validate.model.outcome import POLICY, Outcome, policy
from validate.model.results import CaseResult, ResultStore
from validate.plan.requirements import check, missing_modules

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from validate.env.target import ExecTarget
    from validate.execute.cases import Case
    from validate.execute.slots import CaseUsage, UsageSampler

__all__ = [
    "FAILING",
    "TIMEOUT_FLOOR",
    "CaseBatch",
    "RunOptions",
    "pin_error",
    "run_case",
    "run_cases",
    "run_pool",
    "usage_sampler",
]

log = logging.getLogger(__name__)

#: Outcomes that make `run` exit 1 (the blocking ones, before any known-issue check).
FAILING: Final = frozenset(o for o, p in POLICY.items() if p.blocking)
_TAIL_BYTES: Final = 8192
_TERM_GRACE_S: Final = 5.0
#: A case with a recorded duration never gets a timeout below this multiple of it (`--timeout`).
TIMEOUT_FLOOR: Final = 3.0
#: Outcomes that contention can cause: an attempt with one of them that shared its GPU (or the
#: host's CPUs) beyond what it needs runs once more alone before it is judged.
_CONTENDABLE: Final = frozenset({Outcome.FAIL, Outcome.TIMEOUT})
#: The other cases' kernels kept the GPU at least this busy on average: the case shared it.
_GPU_OTHERS_BUSY: Final = 0.5
#: The host's CPUs were at least this busy on average while the case ran: it shared them.
_CPU_SATURATED: Final = 0.85


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

    def sessions(self) -> dict[int, int]:
        """Session id -> the case's group, for the running cases and their notebook kernels
        (each runs in a session of its own): who holds which GPU memory (slots.UsageSampler)."""
        with self._lock:
            groups = list(self._groups.items())
        out = {pgid: pgid for pgid, _ in groups}
        for pgid, kernel_file in groups:
            with suppress(OSError, ValueError):
                out[int(kernel_file.read_text(encoding="utf-8").strip())] = pgid
        return out

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
#: Script cases inside a pool are forked from a warm interpreter per environment.
_FORKS: Final = ForkServers()


class _Process(Protocol):
    """What the runner needs of a case's process: a subprocess.Popen or a ForkedProcess."""

    pid: int
    returncode: int | None

    def wait(self, timeout: float | None = None) -> int: ...


class _Watchdog:
    """One thread for the time limits of every running case: a `threading.Timer` per case cost
    a thread start (and its hand-shake) per case, 1-3 ms on a loaded host. An expired limit's
    action runs in a thread of its own (it waits out the TERM grace)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._cancelled: set[int] = set()
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, seconds: float, action: Callable[[], None]) -> int:
        """Run `action` in `seconds` unless cancelled; returns the token for `cancel`."""
        with self._cond:
            token = next(self._seq)
            heapq.heappush(self._heap, (time.monotonic() + seconds, token, action))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="watchdog", daemon=True)
                self._thread.start()
            self._cond.notify()
        return token

    def cancel(self, token: int) -> None:
        with self._cond:
            self._cancelled.add(token)
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    while self._heap and self._heap[0][1] in self._cancelled:
                        self._cancelled.discard(heapq.heappop(self._heap)[1])
                    if not self._heap:
                        self._cond.wait()
                        continue
                    delay = self._heap[0][0] - time.monotonic()
                    if delay <= 0:
                        action = heapq.heappop(self._heap)[2]
                        break
                    self._cond.wait(delay)
            threading.Thread(target=action, name="case-timeout", daemon=True).start()


_WATCHDOG: Final = _Watchdog()


def _wait_quietly(proc: _Process, seconds: float) -> bool:
    """Whether the process ended within `seconds` (used only on the timeout path)."""
    try:
        proc.wait(timeout=seconds)
    except (subprocess.TimeoutExpired, ForkServerLost):
        return False
    return True


def _lower_priority(group: int, nice: int) -> None:
    """Lower the CPU priority of the case's process group by `nice` (a case started beside a
    critical-path case, execute/pool.py), right after Popen: its later processes inherit it.
    Where the kernel groups CPU time by session (sched autogroup, Linux's default), the nice of
    single processes counts only within their session and the case has a session of its own, so
    the session's group is lowered too (run_notebook.py passes it on to the kernel's session)."""
    if nice <= 0:
        return
    value = min(19, os.getpriority(os.PRIO_PROCESS, 0) + nice)
    with suppress(OSError):  # the group already ended, or no permission: run as is
        os.setpriority(os.PRIO_PGRP, group, value)
    with suppress(OSError):  # no autogroup here (or not permitted): the nice above is all
        Path(f"/proc/{group}/autogroup").write_text(str(value), encoding="ascii")


def _spawn(
    argv: list[str],
    env: Mapping[str, str],
    log_path: Path,
    limit_s: float,
    kernel_file: Path,
    sampler: UsageSampler | None = None,
) -> tuple[int, bool, CaseUsage | None]:
    """Run argv in a new session, output to log_path; on timeout TERM then KILL the group.
    Returns the exit status, whether it timed out, and what it used if sampled."""
    log.debug("+ %s", " ".join(argv))
    if _LIVE.stopped.is_set():  # interrupted: a re-run must not start behind the user's back
        return -signal.SIGKILL, False, None
    try:
        return _run_process(argv, env, log_path, limit_s, kernel_file, sampler)
    except ForkServerLost as exc:  # its server died, not the case: it runs again, fresh
        if _LIVE.stopped.is_set():  # unless the run is being interrupted
            return -signal.SIGKILL, False, None
        log.debug("fork server lost (%s): %s runs as a fresh process", exc, argv[2:3])
        return _run_process(argv, env, log_path, limit_s, kernel_file, sampler, fresh=True)


def _start(argv: list[str], env: Mapping[str, str], log_path: Path, *, fresh: bool) -> _Process:
    """The case's process in a new session: forked by its environment's fork server where one
    runs (a script or a notebook's bootstrap inside a pool, execute/forkserver.py), else a
    fresh one."""
    if not fresh:
        # the log is made here, as for a fresh process: a folder that broke is an OSError of
        # the tool's (the store's check names it), never an exit status of the case
        log_path.open("wb").close()
        nice = yield_nice()  # the child takes it before it runs (fork_server._lower)
        value = min(19, os.getpriority(os.PRIO_PROCESS, 0) + nice) if nice > 0 else None
        forked = _FORKS.start(argv, log_path, env, value)
        if forked is not None:
            return cast("_Process", forked)
    with log_path.open("wb") as out:
        return subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(env),
            start_new_session=True,
        )


def _run_process(
    argv: list[str],
    env: Mapping[str, str],
    log_path: Path,
    limit_s: float,
    kernel_file: Path,
    sampler: UsageSampler | None,
    *,
    fresh: bool = False,
) -> tuple[int, bool, CaseUsage | None]:
    proc = _start(argv, env, log_path, fresh=fresh)
    if isinstance(proc, subprocess.Popen):  # a forked case took its nice itself (_start)
        _lower_priority(proc.pid, yield_nice())
    # The watchdog enforces the limit so this thread blocks in waitpid() and sees the exit
    # at once: Popen.wait(timeout=...) polls with sleeps of up to 50 ms, which was most of a
    # short script's overhead (bench/runner_bench.py).
    expired = threading.Event()

    def _expire() -> None:
        expired.set()
        _kill_group(proc.pid, signal.SIGTERM)
        if not _wait_quietly(proc, _TERM_GRACE_S):
            _kill_group(proc.pid, signal.SIGKILL)

    timer = _WATCHDOG.add(limit_s, _expire)
    _LIVE.add(proc.pid, kernel_file)
    if sampler is not None:
        watch(functools.partial(sampler.recent, proc.pid))  # the pool counts its real GPU load
    try:
        returncode = proc.wait()
    finally:
        _WATCHDOG.cancel(timer)
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
    usage = sampler.usage(proc.pid) if sampler is not None else None
    return returncode, timed_out, usage


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


def pin_error(target: ExecTarget, env: Mapping[str, Any]) -> str | None:
    """Why what a case process captured (resources/capture.py) is not the target's pins, or
    None: it is, nothing is pinned, or it captured nothing in the case."""
    if not env or env.get("captured_in") != "case":
        return None
    expected = {
        "backend": target.expected_backend,
        "backend_dir": str(target.backend_dir) if target.backend_dir else None,
        "frontend": target.expected_frontend,
    }
    return verify_pins(env, expected) if any(expected.values()) else None


def _attempt(
    case: Case,
    target: ExecTarget,
    options: RunOptions,
    folder: Path,
    n: int,
    *,
    api_logs: bool,
    sampler: UsageSampler | None = None,
) -> tuple[ExecResult, CaseUsage | None]:
    suffix = "" if n == 1 else f".{n}"
    log_path = folder / f"output{suffix}.log"
    report_path = folder / f"report{suffix}.json"
    result_file = folder / f"script-result{suffix}.json"
    for stale in (report_path, result_file):
        stale.unlink(missing_ok=True)
    kind = KINDS[case.kind]
    limit = options.timeout_s + kind.grace_s
    env = _case_env(target, result_file, folder if api_logs else None)
    start = time.monotonic()
    argv = case.command(target.python, report_path, options.timeout_s)
    kernel_file = report_path.with_suffix(".kernel")
    returncode, timed_out, usage = _spawn(argv, env, log_path, limit, kernel_file, sampler)
    duration = time.monotonic() - start
    tail = _tail(log_path)
    report: dict[str, Any] | None = None
    if report_path.exists():
        try:
            report = json.loads(report_path.read_text(encoding="utf-8", errors="replace"))
        except ValueError:
            report = None
    result = ExecResult(
        kind=case.kind,
        returncode=returncode,
        timed_out=timed_out,
        timeout_s=options.timeout_s,
        duration_s=duration,
        log_path=log_path,
        tail=tail,
        report=report,
    )
    return kind.gather(result, result_file), usage


def _captured(run: ExecResult) -> Mapping[str, Any]:
    """The environment the case process captured about itself (capture.py), if any."""
    return (run.report or {}).get("env") or {}


def _verdict(run: ExecResult, target: ExecTarget) -> tuple[Outcome, str]:
    return classify(run, pin_error=pin_error(target, _captured(run)))


def _exception(run: ExecResult) -> dict[str, Any] | None:
    source = KINDS[run.kind].exception(run.report or {})
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


def _requirement_skip(case: Case, target: ExecTarget) -> str | None:
    req = case.requirements
    missing = missing_modules(target.python, req.imports) if req.imports else frozenset()
    return check(
        req,
        has_gpu=target.has_gpu,
        host_arch=target.host_arch,
        backend_version=target.backend_version,
        missing=missing,
    )


class _CaseRun:
    """One case in the pool: the first attempt is a job, each re-run (the alone re-run, the
    API-log one, then --reruns) a follow-up job; the result is built and handed to `finish`
    when the last ends.

    No verdict from contention: a first attempt that failed or timed out while it shared its GPU
    (or the host's CPUs) beyond what it needs (`_contention`) runs once more alone (an exclusive
    pool job) before it is judged. Passing alone, it is a pass with a note that names the
    contention (not flaky); failing alone too, the alone attempt is the one judged (and re-run
    as any failure is). The contended attempt stays on disk (output.log, report.json).

    With `store`, no attempt starts once the results folder broke (disk full, deleted):
    `ResultsLost` ends the run like Ctrl-C; a case file another case deleted is this case's
    `error`; a bad outcome while the folder is in trouble is `error` (no product failure)."""

    def __init__(
        self,
        case: Case,
        target: ExecTarget,
        options: RunOptions,
        finish: Callable[[CaseResult, CaseUsage | None, bool], None],
        sampler: UsageSampler | None = None,
        store: ResultStore | None = None,
    ) -> None:
        self.case, self.target, self.options = case, target, options
        self._store = store
        self._finish = finish
        self._sampler = sampler
        self._lock = threading.Lock()
        self._outcomes: dict[int, str] = {}
        self._api_logs: dict[str, str] = {}
        self._left = 0
        self._peak: float | None = None
        self._usage: dict[int, CaseUsage | None] = {}
        self._gpu_mib = 0.0
        self._gpu_load = 0.0
        self._judged = 1  # the attempt judged first: 2 once a contended first one ran again alone
        self._note = ""  # the contention the first attempt met, when it ran again alone

    def job(self, estimate_s: float | None, gpu_mib: float = 0.0, gpu_load: float = 0.0) -> Job:
        self._gpu_mib, self._gpu_load = gpu_mib, gpu_load  # its re-runs hold as much
        return Job(
            name=self.case.name,
            run=self.first,
            estimate_s=estimate_s,
            gpu_mib=gpu_mib,
            gpu_load=gpu_load,
            exclusive=self.case.requirements.exclusive,
        )

    def _attempt(self, n: int, *, api_logs: bool) -> ExecResult:
        if self._store is not None and n > 1:
            self._store.check()  # ResultsLost: the run stops before this re-run (first: first())
        try:
            run, usage = _attempt(
                self.case,
                self.target,
                self.options,
                self.folder,
                n,
                api_logs=api_logs,
                sampler=self._sampler,
            )
        except OSError:
            if self._store is not None:
                self._store.check()  # the folder broke under the case: that is the cause
            raise
        with self._lock:
            self._usage[n] = usage
            if usage is not None and usage.peak_mib is not None:
                self._peak = max(self._peak or 0.0, usage.peak_mib)
        return run

    def first(self) -> Sequence[Job]:
        reason = _requirement_skip(self.case, self.target)
        if reason:
            self._finish(_skip_result(self.case, self.target, self.options, reason), None, False)
            return ()
        if self._store is not None:
            self._store.check()
            if not self.case.path.is_file():
                why = "case file vanished before it ran"
                vanished = _skip_result(self.case, self.target, self.options, why)
                self._finish(vanished.with_(outcome=Outcome.ERROR), None, False)
                return ()
        self.started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        self.folder = _case_dir(self.case, self.target, self.options)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            if self._store is not None:
                self._store.check()
            raise
        self.run1 = self._attempt(1, api_logs=False)
        self.outcome, self.reason = _verdict(self.run1, self.target)
        self._outcomes[1] = str(self.outcome)
        if self.outcome in _CONTENDABLE and not self.case.requirements.exclusive:
            timed_out = self.outcome is Outcome.TIMEOUT
            shared = _contention(beside(), self._usage.get(1), self._gpu_load, timed_out=timed_out)
            if shared is not None:
                took = "timed out" if self.outcome is Outcome.TIMEOUT else "failed"
                self._note = f"{took} at {self.run1.duration_s:.0f} s beside {shared}"
                return [
                    Job(
                        name=f"{self.case.name} alone",
                        run=self.alone,
                        estimate_s=self.run1.duration_s,
                        cases=0,
                        gpu_mib=self._gpu_mib,
                        gpu_load=self._gpu_load,
                        exclusive=True,
                    )
                ]
        return self._judge()

    def alone(self) -> Sequence[Job]:
        """The contended first attempt again, with nothing else on the GPU or the host's slots."""
        run = self._attempt(2, api_logs=False)
        outcome, reason = _verdict(run, self.target)
        self._judged = 2
        self._outcomes = {2: str(outcome)}
        self.run1, self.outcome, self.reason = run, outcome, reason
        if outcome is Outcome.PASS:
            self._note += f"; passed alone in {run.duration_s:.0f} s"
            self.reason = self._note
        else:
            self._note += f"; {outcome} alone too ({run.duration_s:.0f} s)"
        return self._judge(defer=True)

    def _judge(self, *, defer: bool = False) -> Sequence[Job]:
        """The judged first attempt's re-runs (the API-log one, then --reruns) as follow-up jobs,
        or the result now. `defer`: after the alone re-run, they queue after the other cases'
        alone re-runs (each exclusive one would otherwise wait for them to end)."""
        extra = 0
        if policy(self.outcome).rerun:
            extra = self.options.reruns + (1 if self.options.api_logs else 0)
        if not extra:
            self._done()
            return ()
        self._left = extra
        base = self._judged
        return [
            Job(
                name=f"{self.case.name} #{n}",
                run=functools.partial(self.again, n),
                estimate_s=self.run1.duration_s,
                cases=0,
                gpu_mib=self._gpu_mib,
                gpu_load=self._gpu_load,
                defer=defer,
            )
            for n in range(base + 1, base + 1 + extra)
        ]

    def again(self, n: int) -> Sequence[Job]:
        with_logs = self.options.api_logs and n == self._judged + 1
        run = self._attempt(n, api_logs=with_logs)
        outcome = str(_verdict(run, self.target)[0])
        with self._lock:
            self._outcomes[n] = outcome
            if with_logs:
                logs = {"frontend": self.folder / "fe.log", "backend": self.folder / "be.log"}
                self._api_logs = {k: str(v) for k, v in logs.items() if v.exists()}
            self._left -= 1
            last = self._left == 0
        if last:
            self._done()
        return ()

    def _done(self) -> None:
        first = self.run1
        outcomes = [self._outcomes[n] for n in sorted(self._outcomes)]
        kernel_sig = (first.report or {}).get("kernel_signal")
        kernel_code = (first.report or {}).get("kernel_exit_code")
        result = CaseResult(
            case=self.case.name,
            outcome=self.outcome,
            reason=self.reason,
            duration_s=round(first.duration_s, 3),
            cell_id=self.target.cell_id,
            cell=dict(self.target.cell),
            case_path=str(self.case.path),
            exit_code=kernel_code if kernel_code is not None else first.returncode,
            signal=kernel_sig or signal_name(first.returncode),
            exception=_exception(first),
            tail=first.tail,
            log_path=str(first.log_path),
            api_logs=self._api_logs,
            env=_captured(first),
            attempts=tuple(outcomes),
            flaky=len(set(outcomes)) > 1,
            started_at=self.started,
            run_id=self.options.run_id,
            content_key=self.case.content_key(self.target.cell),
            contention=self._note,
        )
        trouble = self._store.problem() if self._store is not None else None
        if trouble is not None and policy(result.outcome).bad:  # e.g. it died of a full disk
            reason = f"while it ran: {trouble}; it ended {result.outcome}: {result.reason}"
            result = result.with_(outcome=Outcome.ERROR, reason=reason)
        with suppress(OSError):  # a copy of the results line: a full disk must not lose the line
            (self.folder / "result.json").write_text(
                json.dumps(result.to_dict(), indent=2, default=str), encoding="utf-8"
            )
        judged = self._usage.get(self._judged)
        usage = judged if judged is None else replace(judged, peak_mib=self._peak)
        self._finish(result, usage, self._judged > 1 or self.case.requirements.exclusive)


def _contention(
    shared: Beside, usage: CaseUsage | None, own_load: float, *, timed_out: bool
) -> str | None:
    """What the attempt shared beyond its own need, as the note names it ("3 other cases (GPU
    97% busy, CPU 91% busy)"); None where it had what it needed: no other case ran beside it, or
    the resources it was sampled on had room. The GPU had room when the other cases' kernels
    kept it busy less than half the time, it was not saturated and the pool's book had the summed
    expected load within its capacity. The host's CPUs count for a timeout only (a slower case
    on busy cores is still right; a GPU shared with other kernels can give wrong numbers, e.g.
    NaNs from concurrent kernels on Blackwell): they had room when less than 85% busy. A case no
    poll saw (shorter than a poll) had no measured contention: it is judged as it ran."""
    if shared.others <= 0:
        return None
    found: list[str] = []
    if usage is not None:
        if usage.gpu_device is not None and (
            usage.saturated() or (usage.gpu_others or 0.0) >= _GPU_OTHERS_BUSY
        ):
            found.append(f"GPU {usage.gpu_device:.0%} busy")
        if timed_out and usage.cpu_host is not None and usage.cpu_host >= _CPU_SATURATED:
            found.append(f"CPU {usage.cpu_host:.0%} busy")
    over = shared.capacity is not None and shared.others_load + own_load > shared.capacity
    if over:
        found.append(
            f"expected GPU load {shared.others_load + own_load:.2f} of {shared.capacity:g}"
        )
    if not found:
        return None
    plural = "case" if shared.others == 1 else "cases"
    return f"{shared.others} other {plural} ({', '.join(found)})"


def run_case(case: Case, target: ExecTarget, options: RunOptions) -> CaseResult:
    """Check requirements, run the case, re-run failures (API logs, then --reruns), build a result:
    one case, its re-runs one after another, in this thread (no pool)."""
    got: list[CaseResult] = []
    case_run = _CaseRun(case, target, options, lambda result, _usage, _alone: got.append(result))
    for follow in case_run.first():
        follow.run()
    return got[0]


class CaseBatch:
    """The cases of one cell as pool jobs (resume applied); results go to `store` as they land."""

    def __init__(
        self,
        cases: Sequence[Case],
        target: ExecTarget,
        options: RunOptions,
        store: ResultStore,
        *,
        history: History | None = None,
        sampler: UsageSampler | None = None,
        on_result: Callable[[CaseResult, int, int], None] | None = None,
    ) -> None:
        self.cases, self.target, self.options, self.store = cases, target, options, store
        self.history = history if history is not None else History.load(options.history)
        self._sampler = sampler
        self._on_result = on_result
        self._lock = threading.Lock()
        self.results: list[CaseResult] = []
        previous: dict[str, CaseResult] = {}
        if options.resume:  # a stored result counts only for the same case content and pins
            stored = {r.key: r for r in store}
            for case in cases:
                old = stored.get(f"{target.cell_id}::{case.name}")
                if old is not None and old.content_key in ("", case.content_key(target.cell)):
                    previous[old.key] = old
        self.todo = [c for c in cases if f"{target.cell_id}::{c.name}" not in previous]
        self.kept = [previous[k] for c in cases if (k := f"{target.cell_id}::{c.name}") in previous]

    def jobs(self) -> list[Job]:
        """One job per case left to run, longest first by the history; on a GPU host each holds
        its recorded GPU peak (4 GiB unknown) of the pool's GPU budget and its recorded busy
        share of the pool's GPU load (`default_gpu_load` unknown). A case the history knows never
        gets a timeout below TIMEOUT_FLOOR times the duration of its last run that ended on its
        own (a timed-out run's is its limit, not its need)."""
        jobs = []
        for case in _longest_first(self.todo, self.history.durations):
            gpu = load = 0.0
            if self.target.has_gpu:
                gpu = self.history.gpu_estimate(case.name, GPU_PER_CASE_MIB)
                busy = self.history.busy_estimate(case.name)
                load = busy if busy is not None else default_gpu_load(self.history)
            estimate = self.history.estimate(case.name)
            options = self.options
            took = self.history.finished_estimate(case.name)  # a run that ended on its own
            if took is not None and took * TIMEOUT_FLOOR > options.timeout_s:
                options = replace(options, timeout_s=float(math.ceil(took * TIMEOUT_FLOOR)))
            run = _CaseRun(case, self.target, options, self._finish, self._sampler, self.store)
            jobs.append(run.job(estimate, gpu, load))
        return jobs

    def _finish(self, result: CaseResult, usage: CaseUsage | None, alone: bool) -> None:
        if _LIVE.stopped.is_set():  # interrupted: this case was killed by us, not by the product
            return
        self.store.append(result)
        if result.outcome is not Outcome.SKIP:
            self.history.record(
                result.case,
                result.duration_s,
                usage.peak_mib if usage is not None else None,
                gpu_busy=usage.gpu_busy if usage is not None else None,
                saturated=usage is not None and usage.saturated() and not alone,
                timed_out=result.outcome is Outcome.TIMEOUT,
            )
        with self._lock:
            self.results.append(result)
            if self._on_result is not None:
                self._on_result(result, len(self.results), len(self.todo))

    def ordered(self) -> list[CaseResult]:
        """Kept and new results in the given case order."""
        order = {c.name: i for i, c in enumerate(self.cases)}
        return sorted(self.kept + self.results, key=lambda r: order.get(r.case, len(order)))


def run_pool(pool: Pool) -> None:
    """Run `pool` to the end; on Ctrl-C, or a results folder that broke (`ResultsLost`), end
    every running case (finished results are stored, --resume redoes the rest) and re-raise."""
    _LIVE.stopped.clear()
    # the fork servers end last: on an interrupt the cases are ended (and no longer recorded)
    # first, so a case its server's end kills is never stored as a crash of its own
    with _FORKS.session():
        try:
            pool.run()
        except (KeyboardInterrupt, ResultsLost):
            # what is running is ended, not recorded (a half-run case killed by us is not a
            # crash of the product): no result is stored from here on, the progress counts
            # those cases as cut, then they are killed
            _LIVE.stopped.set()
            pool.stop()
            _LIVE.kill_all()
            raise


def usage_sampler(has_gpu: bool) -> UsageSampler:
    """A started sampler of what the live cases use: GPU memory and busy share where NVML or
    nvidia-smi answers (`has_gpu`), the host's CPUs everywhere."""
    from validate.execute.slots import UsageSampler

    return UsageSampler(_LIVE.sessions, gpu=has_gpu).start()


def default_gpu_load(history: History) -> float:
    """The GPU load a case the history does not know is expected to add: the median busy share
    on record, else DEFAULT_GPU_LOAD."""
    typical = history.typical_gpu_busy()
    return typical if typical is not None else DEFAULT_GPU_LOAD


def run_cases(
    cases: Sequence[Case],
    target: ExecTarget,
    options: RunOptions,
    store: ResultStore,
    *,
    on_result: Callable[[CaseResult, int, int], None] | None = None,
) -> list[CaseResult]:
    """Run every case in a pool of `options.jobs` slots (one process group each), storing each
    result as it finishes; returns them in the given order (with the kept ones on resume)."""
    sampler = usage_sampler(target.has_gpu)
    batch = CaseBatch(cases, target, options, store, sampler=sampler, on_result=on_result)
    pool = Pool(options.jobs, gpu_load=GPU_CAPACITY if target.has_gpu else None)
    pool.submit(batch.jobs())
    pool.close()
    try:
        run_pool(pool)
    finally:
        sampler.stop()
    batch.history.save()
    return batch.ordered()


def _longest_first(cases: Sequence[Case], history: Mapping[str, float]) -> list[Case]:
    """Cases with the longest known duration start first (a long case started last is the tail
    of the whole run); unknown cases count as longest, ties keep the given order."""
    return sorted(cases, key=lambda c: -history.get(c.name, float("inf")))
