"""The launcher: the one place that starts a process for a case, and ends what it left behind.

Every process the tool starts for a case goes through here: a script or a notebook's bootstrap
(execute/supervise.py, also when a fork server forks it: the server gets the same environment),
a pytest share or batch and a suite's collection (execute/batches.py, execute/collection.py), an
API-log re-run (a second attempt through the supervisor). For each it applies:

- **placement** (execute/placement.py): ``CUDA_VISIBLE_DEVICES`` in its environment and its CPU
  affinity (``sched_setaffinity`` in the child before it runs; a forked case applies
  ``CUDNN_MATRIX_CPUS`` itself, resources/fork_server.py);
- **its token**: ``CUDNN_MATRIX_CASE_TOKEN`` in its environment, which every descendant inherits;
- **a session of its own** (a new process group), its output in one file;
- **reaping** (`reap`): where the host delegates a cgroup v2 (execute/cgroups.py), the process
  runs in a cgroup of its own, ``cm-<token>-<tool pid>``, and when it ends, what is left in it
  is named and killed at once (``cgroup.kill``), a daemon that scrubbed its token too. Then, and
  everywhere else, every live process that carries its token is killed and
  named, wherever it went (a ``setsid`` daemon left the group). The tool is a child subreaper
  (``PR_SET_CHILD_SUBREAPER``, set on first use), so an orphan of a case is re-parented to the
  tool, never to init: the search walks only the tool's own tree of processes
  (``/proc/PID/task/TID/children``); where the subreaper or that file is missing, all of /proc.
  Without a cgroup, a process that scrubbed its environment of the token is not found (most CI
  containers delegate none). Each is a `Leftover` (pid, command line, start)
  for the case's note; `owner` says which id of a batch started it; `reap_everywhere` ends what
  a run of the tool that was killed left (its tokens are in its marker files);
- **bounded capture** (`CaptureWatch`, `cap_output`): a log longer than the cap keeps its first
  and last half of the cap; while the process runs, the middle is punched out of the file every
  `_WATCH_S` (``fallocate(PUNCH_HOLE)``: the offsets the pytest plugin records stay valid, the
  disk holds at most the cap plus what was written since the last look), and when it ends the
  file is rewritten as head, one line saying how many bytes were left out of how many, and tail.

The time limits stay with the callers (the supervisor's watchdog for a case and its re-run, the
batch's per-test and start-up limits, the collection's), each derived from ``--timeout``.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import threading
import time
import uuid
from typing import TYPE_CHECKING, Final, NamedTuple

from validate.children import descendants
from validate.children import read_small as _read
from validate.execute import cgroups
from validate.execute.placement import UNPLACED
from validate.execute.resources.guard import clip_args

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
    from pathlib import Path

    from validate.execute.placement import Placement

__all__ = [
    "CPUS_ENV",
    "DEFAULT_CAPTURE_CAP",
    "TOKEN_ENV",
    "CaptureWatch",
    "Leftover",
    "Window",
    "cap_output",
    "case_env",
    "new_token",
    "owner",
    "placed",
    "placement_now",
    "reap",
    "reap_everywhere",
    "start",
]

log = logging.getLogger(__name__)

#: Carried by every process of a case (and whatever it starts): how `reap` finds them.
TOKEN_ENV: Final = "CUDNN_MATRIX_CASE_TOKEN"
#: The CPU ids a forked case applies to itself (a fresh process gets them before it runs).
CPUS_ENV: Final = "CUDNN_MATRIX_CPUS"
#: Bytes of output kept per process: the first half and the last half (see cli `--capture-cap`).
DEFAULT_CAPTURE_CAP: Final = 2 * 1024 * 1024
_WATCH_S: Final = 0.25
_PR_SET_CHILD_SUBREAPER: Final = 36
_FALLOC_FL_KEEP_SIZE: Final = 0x01
_FALLOC_FL_PUNCH_HOLE: Final = 0x02
_BLOCK: Final = 4096


def new_token() -> str:
    """A token no other case of any run on this host carries."""
    return uuid.uuid4().hex


_THREAD = threading.local()


@contextlib.contextmanager
def placed(placement: Placement) -> Iterator[None]:
    """Processes this thread starts meanwhile run on `placement` unless given one (the pool
    runs each job inside its own: the ledger's choice reaches every process the job starts)."""
    before = getattr(_THREAD, "placement", UNPLACED)
    _THREAD.placement = placement
    try:
        yield
    finally:
        _THREAD.placement = before


def placement_now(placement: Placement | None = None) -> Placement:
    """`placement`, or where None, this thread's (`placed`), else UNPLACED."""
    return placement if placement is not None else getattr(_THREAD, "placement", UNPLACED)


def case_env(
    env: Mapping[str, str], token: str, placement: Placement | None = None
) -> dict[str, str]:
    """`env` with the case's token, its placement (GPUs; CPUs for a forked child) and, where
    the host allows one, the ``cgroup.procs`` of the case's own cgroup (made here)."""
    placement = placement_now(placement)
    out = dict(env)
    out.update(placement.env())
    out[TOKEN_ENV] = token
    procs = cgroups.create(token)
    if procs is not None:
        out[cgroups.PROCS_ENV] = str(procs)
    else:
        out.pop(cgroups.PROCS_ENV, None)
    if placement.cpus is not None:
        out[CPUS_ENV] = ",".join(str(c) for c in sorted(placement.cpus))
    else:
        out.pop(CPUS_ENV, None)
    return out


def start(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    log_path: Path,
    token: str,
    placement: Placement | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start argv for a case: a new session, stdin from /dev/null, stdout and stderr into
    `log_path` (made anew), its token and placement applied (see the module doc; None: the
    placement of the pool job this thread runs)."""
    become_subreaper()
    placement = placement_now(placement)
    cpus = placement.cpus
    full = case_env(env, token, placement)
    procs = full.get(cgroups.PROCS_ENV, "").encode() or None
    pin: Callable[[], None] | None = None
    if cpus is not None or procs is not None:

        def pin() -> None:  # in the child, before exec: everything it starts inherits both
            if procs is not None:
                cgroups.join(procs)
            if cpus is not None:
                os.sched_setaffinity(0, cpus)

    with log_path.open("wb") as out:
        return subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=pin,  # noqa: PLW1509 - os-level calls only: its cgroup and CPUs
        )


# --- reaping -----------------------------------------------------------------------------------

_SUBREAPER: list[bool] = []  # set once: whether this process is a child subreaper


def become_subreaper() -> bool:
    """Make the tool a child subreaper once (orphans of its cases come back to it)."""
    if not _SUBREAPER:
        ok = False
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            ok = libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        _SUBREAPER.append(ok)
    return _SUBREAPER[0]


def _tree(root: int, needle: bytes) -> list[int] | None:
    """The descendants of `root` that may carry `needle`, from the kernel's children lists: a
    subtree whose top carries another case's token is another case's, and is not entered. None
    where the lists are missing (a kernel without CONFIG_PROC_CHILDREN)."""
    other = TOKEN_ENV.encode() + b"="

    def ours(pid: int) -> bool:
        try:
            environ = _read(f"/proc/{pid}/environ")
        except OSError:
            return False
        # not another live case's process (nor what it started)
        return needle in environ.split(b"\0") or other not in environ

    return descendants(root, ours)


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]  # noqa: PTH208


class Leftover(NamedTuple):
    """A process the launcher ended after its case: named in the case's note."""

    pid: int
    args: str
    started: float  # when it was started (wall clock, to the kernel's tick)

    def __str__(self) -> str:
        return f"{self.pid} {self.args}"


_TICKS: Final = os.sysconf("SC_CLK_TCK")
_TICKS_S: Final = 1 / _TICKS


def _carries(pid: int, needle: bytes) -> tuple[Leftover, int] | None:
    """The process and its parent where `pid` is alive and carries `needle`; else None."""
    try:
        environ = _read(f"/proc/{pid}/environ")
    except OSError:
        return None
    if needle not in environ.split(b"\0"):
        return None
    return _describe(pid)


def _describe(pid: int) -> tuple[Leftover, int] | None:
    """The process and its parent where `pid` is alive; else None."""
    try:
        stat = _read(f"/proc/{pid}/stat").rsplit(b")", 1)[1].split()
        if stat[0] in (b"Z", b"X"):  # ended already (a zombie waits only for its parent)
            return None
        args = _read(f"/proc/{pid}/cmdline").replace(b"\0", b" ")
        # field 22: its start in ticks since boot (/proc/stat's btime is whole seconds)
        since_boot = time.clock_gettime(time.CLOCK_BOOTTIME) - int(stat[19]) / _TICKS
        started = time.time() - since_boot
    except (OSError, IndexError, ValueError):
        return None
    text = clip_args(args.decode("utf-8", "replace").strip())
    return Leftover(pid, text, started), int(stat[1])


def reap(token: str, *, unnamed: Collection[int] = ()) -> list[Leftover]:
    """Kill every live process that carries `token` and collect the ones that were re-parented
    to the tool; returns each but `unnamed` (a notebook's kernel: expected to end with its
    case), for the case's note."""
    needle = f"{TOKEN_ENV}={token}".encode()
    named = _kill_cgroup(token, unnamed)
    candidates = _tree(os.getpid(), needle) if become_subreaper() else None
    found = _kill(candidates if candidates is not None else _all_pids(), [needle], unnamed)
    return _merged(named, found)


def reap_everywhere(tokens: Collection[str]) -> list[Leftover]:
    """Kill every live process on the host that carries one of `tokens` (a run of the tool that
    was killed: what its cases left is no longer in this tool's tree); returns them."""
    if not tokens:
        return []
    named = [p for t in tokens for p in _kill_cgroup(t, ())]
    return _merged(named, _kill(_all_pids(), [f"{TOKEN_ENV}={t}".encode() for t in tokens], ()))


def _merged(first: list[Leftover], then: list[Leftover]) -> list[Leftover]:
    seen = {p.pid for p in first}
    return first + [p for p in then if p.pid not in seen]


def _kill_cgroup(token: str, unnamed: Collection[int]) -> list[Leftover]:
    """Name what is left in the case's cgroup, kill it all at once and remove the cgroup;
    nothing where the case has none (execute/cgroups.py)."""
    if cgroups.available() is None:
        return []
    me = os.getpid()
    found = [(pid, _describe(pid)) for pid in cgroups.members(token) if pid != me]
    if not cgroups.kill(token):
        return []
    named = [f[0] for pid, f in found if f is not None and pid not in unnamed]
    _collect([pid for pid, f in found if f is not None and f[1] == me])
    cgroups.remove(token)
    return named


def _kill(candidates: list[int], needles: list[bytes], unnamed: Collection[int]) -> list[Leftover]:
    me = os.getpid()
    named: list[Leftover] = []
    ours: list[int] = []
    for pid in candidates:
        if pid == me:
            continue
        found = next((f for n in needles if (f := _carries(pid, n)) is not None), None)
        if found is None:
            continue
        process, parent = found
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
            if pid not in unnamed:
                named.append(process)
            if parent == me:
                ours.append(pid)
    _collect(ours)
    return named


def _collect(pids: list[int]) -> None:
    """waitpid the killed orphans re-parented to the tool (each by its pid: a wait for any child
    would take the exit status of a case another thread is waiting for)."""
    deadline = time.monotonic() + 2.0
    for pid in pids:
        while True:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                break
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.005)


class Window(NamedTuple):
    """When one id of a batch ran: its wall-clock start and end, and the kernel's last pid at
    each (resources/run_pytest.py; None where it could not be read)."""

    id: str
    t0: float
    t1: float
    pid0: int | None = None
    pid1: int | None = None


def owner(process: Leftover, windows: Sequence[Window]) -> str | None:
    """The id that started `process`: the one whose pid readings enclose its pid (pids are
    handed out in order), else the latest one that started by its start time (kernel ticks)."""
    for w in windows:
        if w.pid0 is not None and w.pid1 is not None and w.pid0 < process.pid <= w.pid1:
            return w.id
    late = _TICKS_S + 0.04  # a start time is cut down to the tick, and read later
    near = [w for w in windows if w.t0 - late <= process.started <= w.t1 + late]
    return max(near, key=lambda w: w.t0).id if near else None


def leftover_note(named: Sequence[Leftover | str]) -> str:
    """The note a result gets for the processes that outlived its case (pid and command line)."""
    if not named:
        return ""
    shown = "; ".join(str(n) for n in named[:5]) + (
        f"; and {len(named) - 5} more" if len(named) > 5 else ""
    )
    return f"{len(named)} process(es) outlived the case and were killed: {shown}"


# --- bounded capture ---------------------------------------------------------------------------


def _punch(path: Path, cap: int) -> None:
    """Free the middle of a log that grew past the cap (its size and offsets stay)."""
    try:
        size = path.stat().st_size
    except OSError:
        return
    half = cap // 2
    begin = -(-half // _BLOCK) * _BLOCK
    end = ((size - half) // _BLOCK) * _BLOCK
    if end - begin < _BLOCK:
        return
    with contextlib.suppress(OSError, AttributeError):
        fd = os.open(path, os.O_WRONLY)
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            flags = _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE
            libc.fallocate(
                fd, flags, ctypes.c_longlong(begin), ctypes.c_longlong(end - begin)
            )  # a file system without holes: the file is cut when the process ends
        finally:
            os.close(fd)


def cap_output(path: Path, cap: int) -> int | None:
    """Cut `path` to its first and last `cap // 2` bytes with one line between them naming what
    was left out; returns the full size where it was cut, else None (cap 0: never)."""
    try:
        size = path.stat().st_size
    except OSError:
        return None
    if cap <= 0 or size <= cap:
        return None
    half = cap // 2
    with path.open("rb") as fh:
        head = fh.read(half)
        fh.seek(size - half)
        tail = fh.read(half)
    left = size - len(head) - len(tail)
    line = (
        f"\n[cudnn-matrix: {left:,} bytes left out here; the process wrote {size:,} bytes; "
        f"the first and last {half:,} are kept (--capture-cap)]\n"
    ).encode()
    cut = path.with_name(path.name + ".cut")
    with cut.open("wb") as out:
        out.write(head + line + tail)
    cut.replace(path)
    return size


def capture_note(size: int | None) -> str:
    """The note a result gets for output that was cut (its full size)."""
    return "" if size is None else f"output capped: the process wrote {size:,} bytes"


class CaptureWatch:
    """The logs of the running processes, each kept near its cap while it grows (one thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._paths: dict[Path, int] = {}
        self._thread: threading.Thread | None = None

    def add(self, path: Path, cap: int) -> None:
        if cap <= 0:
            return
        with self._lock:
            self._paths[path] = cap
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="capture", daemon=True)
                self._thread.start()

    def end(self, path: Path) -> int | None:
        """The process of `path` ended: cut it to its cap; its full size where it was cut."""
        with self._lock:
            cap = self._paths.pop(path, 0)
        return cap_output(path, cap) if cap else None

    def _loop(self) -> None:
        while True:
            time.sleep(_WATCH_S)
            with self._lock:
                paths = list(self._paths.items())
            for path, cap in paths:
                _punch(path, cap)


#: The one watch of this tool process.
CAPTURE: Final = CaptureWatch()
