"""Case bootstraps forked from a warm interpreter instead of started fresh (fork_server.py).

A case of a forkable kind (cases/kinds.py: a script case, or a notebook's bootstrap, whose kernel
is still started fresh) still runs in a
process and a session of its own (the runner's process-group kill, its
time limit, the GPU sampler's session accounting and Ctrl-C work on it unchanged); only the
interpreter start and the bootstrap's imports are paid once per server instead of once per case.
One server per interpreter and environment (less the variables the server sends per case, LATE):
a cell's cases share one, a cell with another backend on its library path gets its own.

A server that cannot start, or dies, is never a case's verdict: the case runs as a fresh process
instead (`ForkServerLost`), and later cases of that environment start fresh too.
`CUDNN_MATRIX_FORK_SERVER=0` starts every case fresh (as before the servers).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

from validate.execute.cases.kinds import forked_bootstraps
from validate.execute.resources.fork_server import LATE, TITLE_ROOM

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

__all__ = ["FORK_SERVER", "OFF_ENV", "ForkServerLost", "ForkServers", "ForkedProcess"]

log = logging.getLogger(__name__)

FORK_SERVER: Final = Path(__file__).resolve().parent / "resources" / "fork_server.py"
#: `CUDNN_MATRIX_FORK_SERVER=0` in the tool's environment: every case starts fresh.
OFF_ENV: Final = "CUDNN_MATRIX_FORK_SERVER"
_ENDED: Final = "the fork server ended"
_READY_S: Final = 30.0  # a server's interpreter start, on a loaded host


class ForkServerLost(RuntimeError):
    """The server ended before it said how a case ended: run the case as a fresh process."""


class ForkedProcess:
    """A case forked by a server, waited for like a `subprocess.Popen` (pid, wait, returncode)."""

    def __init__(self, server: _Server, ident: int) -> None:
        self._server, self._ident = server, ident
        self.pid = 0
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        """The exit status as Popen gives it (negative: the signal); raises TimeoutExpired, or
        ForkServerLost when the server died first."""
        answer = self._server.answer(self._ident, "status", timeout)
        if answer is None:
            raise subprocess.TimeoutExpired(str(FORK_SERVER), timeout or 0.0)
        self.returncode = os.waitstatus_to_exitcode(int(answer))
        return self.returncode


class _Server:
    """One running fork server and the thread that reads its answers."""

    def __init__(self, python: Path, env: Mapping[str, str], boot: str, kind: str) -> None:
        self._cond = threading.Condition()
        self._writing = threading.Lock()  # one request at a time on the pipe
        self._answers: dict[tuple[int, str], Any] = {}
        self._next = 0
        self._ended = False  # the server's stdout closed: no answer comes any more
        self._ready = False
        self.python = str(python)
        self._proc = subprocess.Popen(
            # room for a case's title, the bootstrap it forks, and its kind (for `ps`)
            [str(python), str(FORK_SERVER), " " * TITLE_ROOM, boot, kind],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=dict(env),
            start_new_session=True,  # a terminal's Ctrl-C reaches the tool, which ends the cases
        )
        self._stdin: IO[bytes] = self._proc.stdin  # type: ignore[assignment]
        self._reader = threading.Thread(target=self._read, name="fork-server", daemon=True)
        self._reader.start()
        try:
            ready = self.answer(-1, "ready", _READY_S)
        except ForkServerLost:  # it ended at start (an interpreter that cannot run it)
            ready = None
        self._ready = ready is not None

    @property
    def alive(self) -> bool:
        """Ready, and its output not closed since."""
        return self._ready and not self._ended

    def _read(self) -> None:
        stdout: IO[bytes] = self._proc.stdout  # type: ignore[assignment]
        for line in stdout:  # `ready PID`, `pid ID PID`, `status ID STATUS`, `error ID TEXT`
            key, _, rest = line.decode(errors="replace").rstrip("\n").partition(" ")
            ident, value = ("-1", rest) if key == "ready" else rest.partition(" ")[::2]
            with self._cond:
                self._answers[(int(ident), key)] = value
                self._cond.notify_all()
        with self._cond:
            self._ended = True
            self._cond.notify_all()

    def answer(self, ident: int, key: str, timeout: float | None) -> Any:
        """The server's `key` answer for request `ident`; None on timeout. Raises ForkServerLost
        when the server ended without it."""
        with self._cond:
            got = self._cond.wait_for(
                lambda: (
                    (ident, key) in self._answers
                    or (ident, "error") in self._answers
                    or self._ended
                ),
                timeout,
            )
            if (ident, key) in self._answers:  # kept: a timeout's thread may ask for it too
                return self._answers[(ident, key)]
            if (ident, "error") in self._answers:
                raise ForkServerLost(self._answers.pop((ident, "error")))
            if not got:
                return None
            raise ForkServerLost(_ENDED)

    def start(
        self, argv: list[str], log_path: Path, env: Mapping[str, str], nice: int | None = None
    ) -> ForkedProcess:
        """Fork a case running `argv` (SCRIPT REPORT ARGS...), its output to `log_path`, at nice
        value `nice` (None: as the server); returns once its session exists. Raises
        ForkServerLost."""
        with self._cond:
            if not self.alive:
                raise ForkServerLost(_ENDED)
            ident = self._next
            self._next += 1
        late = [f"{k}={env[k]}" for k in LATE if k in env]
        level = "" if nice is None else str(nice)
        fields = [str(ident), self.python, str(log_path), level, str(len(argv))]
        fields += [*argv, *late]
        payload = b"\0".join(os.fsencode(f) for f in fields)  # resources/fork_server.py
        try:
            with self._writing:  # requests must not interleave
                self._stdin.write(b"%d\n%s" % (len(payload), payload))
                self._stdin.flush()
        except (OSError, ValueError) as exc:
            raise ForkServerLost(_ENDED) from exc
        proc = ForkedProcess(self, ident)
        proc.pid = int(self.answer(ident, "pid", None))
        return proc

    def shutdown(self) -> None:
        """Tell the server to end (end of its stdin): it kills what is left of its cases' groups
        and exits; `close` waits for that."""
        with suppress(OSError, ValueError):
            self._stdin.close()

    def close(self) -> None:
        """End the server and wait for it."""
        self.shutdown()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
        self._reader.join(timeout=5)
        if self._proc.stdout is not None:
            self._proc.stdout.close()


class _Slot:
    """One environment's server: being started (`ready` not set yet), started, or None (it could
    not start, or was lost): then that environment's cases start fresh."""

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.server: _Server | None = None


def _new_server(python: Path, env: Mapping[str, str], boot: str, kind: str) -> _Server | None:
    try:
        server = _Server(python, env, boot, kind)
    except OSError as exc:
        log.debug("fork server for %s did not start: %s", python, exc)
        return None
    if not server.alive:
        log.debug("fork server for %s did not answer: cases start fresh", python)
        server.close()
        return None
    return server


class ForkServers:
    """The servers of one run, by interpreter and environment; none outside `session()`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: dict[tuple[str, str, tuple[tuple[str, str], ...]], _Slot] = {}
        self._retired: list[_Server] = []  # lost for new cases, still ended with the session
        self._depth = 0

    @contextmanager
    def session(self) -> Iterator[None]:
        """Servers may start inside; all of them end when the outermost session ends."""
        with self._lock:
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                ending: list[_Server | None] = []
                if self._depth == 0:
                    ending = [*(slot.server for slot in self._slots.values()), *self._retired]
                    self._slots.clear()
                    self._retired.clear()
            servers = [server for server in ending if server is not None]
            for server in servers:  # all told first: they end side by side, not one by one
                server.shutdown()
            for server in servers:
                server.close()

    def start(
        self,
        argv: list[str],
        log_path: Path,
        env: Mapping[str, str],
        nice: int | None = None,
    ) -> Any:
        """The case `argv` (PYTHON BOOTSTRAP ARGS..., as a fresh start would run it) forked, or
        None where no server runs for it (another bootstrap, outside a session, disabled, or its
        server failed): then the caller starts the case fresh. Raises ForkServerLost when the
        server died under this request. A server starts outside the lock (a notebook server
        imports nbclient, about half a second): other environments start theirs meanwhile, and
        only this environment's cases wait for it."""
        kind = forked_bootstraps().get(argv[1]) if len(argv) > 2 else None  # (cases/kinds.py)
        if kind is None:
            return None
        python = Path(argv[0])
        key = (str(python), kind, tuple(sorted((k, v) for k, v in env.items() if k not in LATE)))
        with self._lock:
            if self._depth == 0 or os.environ.get(OFF_ENV) == "0":
                return None
            slot = self._slots.get(key)
            mine = slot is None
            if slot is None:
                slot = self._slots[key] = _Slot()
        if mine:
            try:
                slot.server = _new_server(python, dict(key[2]), argv[1], kind)
            finally:
                slot.ready.set()
            with self._lock:
                ended = self._slots.get(key) is not slot  # the session ended meanwhile
            if ended and slot.server is not None:
                slot.server.close()
                return None
        else:
            slot.ready.wait()
        server = slot.server
        if server is None:
            return None
        try:
            return server.start(argv[2:], log_path, env, nice)
        except ForkServerLost:
            with self._lock:
                if slot.server is server:
                    slot.server = None  # later cases of this environment start fresh
                    self._retired.append(server)
            raise
