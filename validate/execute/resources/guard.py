"""Die with the tool: a case must not outlive the cudnn-matrix process that started it.

Cases run in sessions of their own (so a timeout can kill the whole group), which also means a
`kill -9` of the tool would leave them running, holding a GPU. The bootstraps (run_script.py,
run_notebook.py) call `die_with_parent()` first: Linux then sends SIGUSR2 when the tool's thread
that started the case goes away, and the handler kills this case's process group and any other
group it names (a notebook's kernel runs in a session of its own too). Stdlib only.
"""

# ruff: noqa: SIM105 - try/except/pass rather than contextlib: no import on the case's start

from __future__ import annotations

import os
import sys
import time

# No contextlib, typing or ctypes at import: this runs first in every case process, and the tool
# imports it too (PARENT_ENV); prctl goes through the C module _ctypes, loaded by _prctl.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
    from collections.abc import Callable, Iterable
    from typing import Any
else:
    try:  # the C module: `signal` builds its IntEnums at import, most of a millisecond per case
        import _signal as signal
    except ImportError:  # pragma: no cover - not CPython
        import signal

__all__ = [
    "LEFTOVERS_ENV",
    "PARENT_ENV",
    "become_reaper",
    "clip_args",
    "die_with_parent",
    "resolve_prctl",
]

#: The tool puts its pid here; a case that finds another parent at start has lost it already.
PARENT_ENV = "CUDNN_MATRIX_PARENT_PID"
#: Where the case's supervisor names what it killed after the case (the tool reads it).
LEFTOVERS_ENV = "CUDNN_MATRIX_LEFTOVERS_FILE"
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_STOP_GRACE_S = 3.0  # after SIGTERM: how long the case may take to end before all is killed


_PRCTL: list[int] = []


def resolve_prctl() -> None:
    """Load `_ctypes` and find prctl once per process (a fork server does it before it forks:
    dlopen of `_ctypes` and libffi was a millisecond of every case). Raises ImportError or
    AttributeError where that is not possible."""
    if not _PRCTL:
        import _ctypes

        # None: the process itself (what CDLL(None) opens; typeshed says str only)
        _PRCTL.append(_ctypes.dlsym(_ctypes.dlopen(None), "prctl"))  # type: ignore[arg-type]


def _prctl(option: int, arg: int) -> int | None:
    """prctl(2) through libc; None where it is missing. Called through the C module `_ctypes`
    (its call_function): `import ctypes` builds its type classes at import, a millisecond of
    every case. ctypes is the fallback where `_ctypes` lacks call_function."""
    try:
        import _ctypes

        resolve_prctl()
        return int(_ctypes.call_function(_PRCTL[0], (option, arg, 0, 0, 0)))
    except (ImportError, AttributeError):
        pass
    except OSError:
        return None
    try:
        import ctypes

        return int(ctypes.CDLL(None).prctl(option, arg, 0, 0, 0))
    except (ImportError, OSError, AttributeError):
        return None


def _kill_groups(groups: Iterable[int]) -> None:
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass


def die_with_parent(
    also: Callable[[], Iterable[int]] = tuple, parent_env: str | None = PARENT_ENV
) -> None:
    """Arrange for this process's group (and the groups `also()` names) to die with its parent.

    `parent_env` names the variable holding the expected parent pid (the tool's), to catch a
    parent that died before this ran; None where the parent is not the tool (a notebook's kernel).
    """
    if not sys.platform.startswith("linux"):
        return

    def _on_parent_death(signum: int, frame: Any) -> None:  # noqa: ARG001 - signal handler
        _kill_groups([*also(), os.getpgrp()])

    signal.signal(signal.SIGUSR2, _on_parent_death)
    if _prctl(_PR_SET_PDEATHSIG, signal.SIGUSR2) is None:
        return
    expected = os.environ.get(parent_env) if parent_env else None
    if expected and expected.isdigit() and os.getppid() != int(expected):
        _kill_groups([*also(), os.getpgrp()])  # the tool died before prctl took effect


def clip_args(args: str, width: int = 200) -> str:
    """A command line for a note, at most `width` characters: its head and its tail, where the
    script a process runs is (an installed tool's interpreter and bootstrap paths are long, and a
    cut at the end once hid the script's name)."""
    if len(args) <= width:
        return args
    head = width // 4
    return f"{args[:head]}…{args[-(width - head - 1) :]}"


def _children(me: int) -> list[int]:
    """Live (non-zombie) processes whose parent is `me`."""
    found = []
    for entry in os.listdir("/proc"):  # noqa: PTH208 - only names, on the hot path
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:  # noqa: PTH123 - stdlib only, hot path
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != b"Z" and int(fields[1]) == me:
            found.append(int(entry))
    return found


def _reap() -> bool:
    """Collect exited children; False when this process has no child left at all."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def _kill_descendants() -> None:
    """Kill everything left below this process. As a child subreaper it inherits every orphan
    of the case (background children, double-forked daemons, children that called setsid), so
    killing its children round by round reaches them all. Each one killed is named (pid and
    command line) in the file $CUDNN_MATRIX_LEFTOVERS_FILE, for the case's note."""
    me = os.getpid()
    named: list[str] = []
    killed: set[int] = set()  # a killed child stays listed until it is torn down and reaped
    for _ in range(200):
        if not _reap():  # the common case: nothing left, and no /proc scan at all
            break
        kids = _children(me)
        if not kids:
            time.sleep(0.005)  # a killed child not yet reaped
            continue
        for kid in kids:
            try:
                with open(f"/proc/{kid}/cmdline", "rb") as fh:  # noqa: PTH123 - stdlib only
                    args = fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
                os.kill(kid, signal.SIGKILL)
                if kid not in killed:
                    killed.add(kid)
                    named.append(f"{kid} {clip_args(args)}")
            except OSError:
                pass
        time.sleep(0.005)
    path = os.environ.get(LEFTOVERS_ENV)
    if named and path:
        try:
            with open(path, "a", encoding="utf-8") as fh:  # noqa: PTH123
                fh.write("".join(f"{line}\n" for line in named))
        except OSError:
            pass


def _end_like(status: int) -> None:
    """Exit with the case's own status: its exit code, or death by the same signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            import resource

            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the case dumped core, not us
        except Exception:  # noqa: BLE001, S110 - best effort
            pass
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL has no handler to reset
            pass
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        time.sleep(1)  # pragma: no cover - the signal ends the process
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def become_reaper() -> None:
    """Fork: the child returns and runs the case; this process supervises it and never returns.

    This process is a child subreaper (PR_SET_CHILD_SUBREAPER): when the case ends, for any
    reason, whatever it started and left behind is killed before this process exits with the
    case's status. The tool is not the case's direct parent, so a case that kills its parent
    kills only this supervisor (the runner then ends the case's process group). Linux only;
    elsewhere, or when prctl is refused, the case runs in this process as before.
    """
    if not sys.platform.startswith("linux"):
        return
    if _prctl(_PR_SET_CHILD_SUBREAPER, 1) != 0:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    # SIGTERM (the runner's timeout) and SIGCHLD are taken synchronously with sigwaitinfo, so a
    # SIGTERM that lands while the case is ending can never interrupt the cleanup below.
    watched = {signal.SIGTERM, signal.SIGCHLD}
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so SIGCHLD is never discarded
    signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    import gc

    # the objects made so far are never collected in either process: no collection touches (and
    # so copies) their pages after the fork; 3-4 ms less per case (bench/runner_bench.py)
    gc.freeze()
    child = os.fork()
    if child == 0:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, watched)
        return
    status: int | None = None
    while status is None:
        done, got = os.waitpid(child, os.WNOHANG)
        if done:
            status = got
            break
        if signal.sigwaitinfo(watched).si_signo == signal.SIGTERM:
            # the case got the same SIGTERM (same process group): give it a moment to end
            status = _wait_for(child, _STOP_GRACE_S)
            if status is None:
                try:
                    os.kill(child, signal.SIGKILL)
                except OSError:
                    pass
                _, status = os.waitpid(child, 0)
    _kill_descendants()
    _end_like(status)


def _wait_for(pid: int, seconds: float) -> int | None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.02)
    return None
