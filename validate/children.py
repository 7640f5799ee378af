"""Processes the tool starts for itself, not for a case, and ends on every way out.

An environment's installer (uv or pip) and a frontend wheel's build run through
env/streamed.py's `run_streamed`, in the tool's own process group: a terminal's Ctrl-C reaches
them as it reaches the tool. SIGTERM sent to the tool alone does not: `kill PID`, `docker stop`
of a container whose PID 1 is the tool, a scheduler that signals the main process. The tool then
exits with `os._exit` (cli.main), which runs no worker thread's `finally`. So a started helper is
registered here while it runs (`running`), and cli.main calls `end_all()` before it removes the
half-built folders (scratch.py) and exits. Without it the installer went on writing into a
folder the tool had just removed, after the tool had exited.

`halt_tree` is also what the supervisor's stop uses for each case and build group
(execute/supervise.py): ninja runs each build command in a process group of its own, so killing
a build's group alone left its commands running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["descendants", "end_all", "halt_tree", "read_small", "running"]

_LIVE: set[int] = set()
_GUARD = threading.Lock()


@contextlib.contextmanager
def running(pid: int) -> Iterator[None]:
    """`pid` is a helper of the tool's inside the block (until the caller has waited for it)."""
    with _GUARD:
        _LIVE.add(pid)
    try:
        yield
    finally:
        with _GUARD:
            _LIVE.discard(pid)


def end_all() -> None:
    """Kill every helper still running, with everything under it (the tool is about to exit)."""
    with _GUARD:
        pids = list(_LIVE)
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGSTOP)
        for each in [pid, *halt_tree(pid)]:
            with contextlib.suppress(OSError):
                os.kill(each, signal.SIGKILL)


def halt_tree(root: int) -> list[int]:
    """Stop (SIGSTOP) every descendant of `root` as the kernel's children lists are read, so that
    none starts another meanwhile; returns them for the caller to kill. Empty where the lists
    are missing (a kernel without CONFIG_PROC_CHILDREN)."""

    def stopped(pid: int) -> bool:
        try:
            os.kill(pid, signal.SIGSTOP)
        except OSError:
            return False
        return True

    return descendants(root, stopped) or []


def descendants(root: int, enter: Callable[[int], bool]) -> list[int] | None:
    """The descendants of `root` that `enter` accepts, from the kernel's children lists
    (``/proc/PID/task/TID/children``), read as the walk goes: `enter(pid)` runs before pid's own
    children are read, and one it refuses is left out with what it started. None where root's
    lists are missing (a kernel without CONFIG_PROC_CHILDREN)."""
    found: list[int] = []
    todo = [root]
    # a pid can be read twice: the children of a thread that ends while the lists are read move
    # to another thread of its process
    seen = {root}
    while todo:
        pid = todo.pop()
        if pid != root:
            if not enter(pid):
                continue
            found.append(pid)
        try:
            tasks = os.listdir(f"/proc/{pid}/task")  # noqa: PTH208 - names only
        except OSError:
            continue
        for tid in tasks:
            try:
                text = read_small(f"/proc/{pid}/task/{tid}/children")
            except FileNotFoundError:
                if pid == root:
                    return None
                continue
            except OSError:
                continue
            for child in map(int, text.split()):
                if child not in seen:
                    seen.add(child)
                    todo.append(child)
    return found


def read_small(path: str) -> bytes:
    """A small /proc file (os-level: the launcher reads these at every case's end)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
