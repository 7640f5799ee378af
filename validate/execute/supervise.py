"""Process supervision: each case's process in a session of its own, its time limit, and the
groups alive now, so that an interrupt ends every one of them.

Cases run in sessions of their own, so a terminal's Ctrl-C never reaches them: the tool ends
them itself, whichever pool or batch started them. That makes the supervisor one per tool
process, `SUPERVISOR`, the runner's only module-level instance: it holds the live groups, the
one watchdog thread for every case's time limit and the fork servers (execute/forkserver.py).
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import os
import signal
import subprocess
import threading
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Final, NamedTuple, Protocol, cast

from validate.children import halt_tree
from validate.execute import launch
from validate.execute.forkserver import ForkServerLost, ForkServers
from validate.execute.pool import watch, yield_nice

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from validate.execute.placement import Placement
    from validate.execute.slots import CaseUsage, UsageSampler

__all__ = ["SUPERVISOR", "Spawned", "Supervisor"]

log = logging.getLogger(__name__)

_TERM_GRACE_S: Final = 5.0


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
            # the group stopped first, then what its leader started in groups of its own (a
            # build's commands under ninja): all of it killed, none left re-parented and running
            _kill_group(pgid, signal.SIGSTOP)
            below = halt_tree(pgid)
            _kill_group(pgid, signal.SIGKILL)
            for pid in below:
                with suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            with suppress(OSError, ValueError):
                _kill_group(int(kernel_file.read_text(encoding="utf-8").strip()), signal.SIGKILL)


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


def _kernel_pids(kernel_file: Path) -> set[int]:
    """The notebook kernel's pid, if it wrote one: ended with its case, not a leftover."""
    try:
        return {int(kernel_file.read_text(encoding="utf-8").strip())}
    except (OSError, ValueError):
        return set()


class Supervisor:
    """The case processes of this tool process: started, limited, recorded while they run, and
    ended together on an interrupt (`stop`, `kill_all`)."""

    def __init__(self) -> None:
        self.live = _LiveGroups()
        #: Cases inside a pool are forked from a warm interpreter per environment and kind.
        self.forks = ForkServers()
        self._watchdog = _Watchdog()
        self._lock = threading.Lock()
        self._recording = threading.Lock()  # a result stored, or the stop: one or the other first
        self._after_kill: dict[int, Callable[[], object]] = {}

    @property
    def stopped(self) -> bool:
        """Interrupted: no case may start, and what ends now was killed by the tool."""
        return self.live.stopped.is_set()

    @contextmanager
    def session(self) -> Iterator[None]:
        """A pool's run: cases may start again (an earlier run was interrupted), and the fork
        servers started inside end with the outermost session."""
        self.live.stopped.clear()
        with self.forks.session():
            yield

    def stop(self) -> None:
        """No case starts from now on, and the ones ending now are not recorded; waits for a
        result being stored (`recording`) to be stored."""
        with self._recording:
            self.live.stopped.set()

    @contextmanager
    def recording(self) -> Iterator[bool]:
        """Whether a case's result may be stored (not stopped), held against `stop` until the
        block ends: a result stored in the block was stored before the stop (the progress counts
        it done), and none is stored after it."""
        with self._recording:
            yield not self.stopped

    def stopping(self, within_s: float) -> bool:
        """Whether the run is being stopped, waiting up to `within_s` for it: a process the
        stop's signal reached at once (an installer in the tool's group) can end before the
        main thread has taken that signal and stopped the run."""
        return self.live.stopped.wait(timeout=within_s)

    def kill_all(self) -> None:
        """Kill every running case's group and its kernel's (after `stop`), then run what each
        asked to run after an interrupt (`after_kill`): in this thread, since the tool may exit
        before the threads that started them see their ends."""
        self.live.kill_all()
        with self._lock:
            actions, self._after_kill = list(self._after_kill.values()), {}
        for action in actions:
            with suppress(OSError):
                action()

    def after_kill(self, key: int, action: Callable[[], object] | None) -> None:
        """Run `action` if the run is interrupted while `key` (a process group) lives; None:
        forget it (the group ended)."""
        with self._lock:
            if action is None:
                self._after_kill.pop(key, None)
            else:
                self._after_kill[key] = action

    def sessions(self) -> dict[int, int]:
        """Session id -> case group, for the sampler (slots.UsageSampler)."""
        return self.live.sessions()

    def spawn(
        self,
        argv: list[str],
        env: Mapping[str, str],
        log_path: Path,
        limit_s: float,
        kernel_file: Path,
        sampler: UsageSampler | None = None,
        *,
        placement: Placement | None = None,
        capture_cap: int = launch.DEFAULT_CAPTURE_CAP,
    ) -> Spawned:
        """Run argv through the launcher (execute/launch.py: its placement, token, session,
        capped output in log_path); on timeout TERM then KILL the group; then every process
        that carries its token is ended. Returns how it ended (`Spawned`)."""
        log.debug("+ %s", " ".join(argv))
        if (
            self.live.stopped.is_set()
        ):  # interrupted: a re-run must not start behind the user's back
            return Spawned(-signal.SIGKILL, False, None)
        where = launch.placement_now(placement)  # None: the pool job's (Job.placement)
        run = functools.partial(
            self._run_process, argv, env, log_path, limit_s, kernel_file, sampler, where
        )
        try:
            return run(capture_cap)
        except ForkServerLost as exc:  # its server died, not the case: it runs again, fresh
            if self.live.stopped.is_set():  # unless the run is being interrupted
                return Spawned(-signal.SIGKILL, False, None)
            log.debug("fork server lost (%s): %s runs as a fresh process", exc, argv[2:3])
            return run(capture_cap, fresh=True)

    def _start(
        self,
        argv: list[str],
        env: Mapping[str, str],
        log_path: Path,
        token: str,
        placement: Placement,
        *,
        fresh: bool,
    ) -> _Process:
        """The case's process in a new session: forked by its environment's fork server where one
        runs (a script or a notebook's bootstrap inside a pool, execute/forkserver.py), else a
        fresh one; either way with the launcher's token and placement."""
        if not fresh:
            # the log is made here, as for a fresh process: a folder that broke is an OSError of
            # the tool's (the store's check names it), never an exit status of the case
            log_path.open("wb").close()
            nice = yield_nice()  # the child takes it before it runs (fork_server._lower)
            value = min(19, os.getpriority(os.PRIO_PROCESS, 0) + nice) if nice > 0 else None
            launch.become_subreaper()
            forked = self.forks.start(argv, log_path, launch.case_env(env, token, placement), value)
            if forked is not None:
                return cast("_Process", forked)
        return launch.start(argv, env=env, log_path=log_path, token=token, placement=placement)

    def _run_process(
        self,
        argv: list[str],
        env: Mapping[str, str],
        log_path: Path,
        limit_s: float,
        kernel_file: Path,
        sampler: UsageSampler | None,
        placement: Placement,
        capture_cap: int,
        *,
        fresh: bool = False,
    ) -> Spawned:
        token = launch.new_token()
        proc = self._start(argv, env, log_path, token, placement, fresh=fresh)
        launch.CAPTURE.add(log_path, capture_cap)
        if isinstance(proc, subprocess.Popen):  # a forked case took its nice itself (self._start)
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

        timer = self._watchdog.add(limit_s, _expire)
        self.live.add(proc.pid, kernel_file)
        if sampler is not None:
            watch(functools.partial(sampler.recent, proc.pid))  # the pool counts its real GPU load
        try:
            returncode = proc.wait()
        finally:
            self._watchdog.cancel(timer)
            self.live.discard(proc.pid)
            # what is left of the case (a case that killed its supervising parent,
            # resources/guard.py become_reaper, is still running; a daemon that left its
            # group): it ends with the case, and is named in its note
            leftovers = launch.reap(token, unnamed=_kernel_pids(kernel_file))
            _kill_group(proc.pid, signal.SIGKILL)
            full = launch.CAPTURE.end(log_path)
        timed_out = expired.is_set()
        if kernel_file.exists():  # the kernel runs in its own session: make sure it is gone too
            try:
                kernel_pid = int(kernel_file.read_text(encoding="utf-8").strip())
                _kill_group(kernel_pid, signal.SIGKILL)
            except ValueError:
                pass
            kernel_file.unlink(missing_ok=True)
        usage = sampler.usage(proc.pid) if sampler is not None else None
        notes = [n for n in (launch.leftover_note(leftovers), launch.capture_note(full)) if n]
        return Spawned(returncode, timed_out, usage, "; ".join(notes))


class Spawned(NamedTuple):
    """How a case's process ended: its status, whether its limit ended it, what it used (where
    sampled) and the launcher's note (processes it outlived, output cut to the cap)."""

    returncode: int
    timed_out: bool
    usage: CaseUsage | None
    note: str = ""


#: The one supervisor of this process (see the module docstring).
SUPERVISOR: Final = Supervisor()
