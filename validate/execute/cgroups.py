"""A cgroup v2 per case process, where the host delegates one: the launcher's first way to reap.

Where the tool's own cgroup (``/proc/self/cgroup``'s ``0::`` line, under the cgroup2 mount that
``/proc/self/mountinfo`` names) lets it make a child cgroup with a ``cgroup.kill`` file (a
kernel from 5.14, root or a delegated subtree), every process the launcher starts for a case
joins a cgroup of its own, ``cm-<token>-<pid>`` (the pid: the tool that made it, its owner),
before it runs (the child writes itself into its
``cgroup.procs``; a forked case does it itself, resources/fork_server.py). Whatever it starts
stays in that cgroup: a daemon that scrubbed its environment of the case's token, left its
session and its parent, is still found. When the case ends, `kill` reads what is left, writes
``cgroup.kill`` and removes the cgroup. Where none is allowed (most CI containers, an
unprivileged user without systemd's delegation), nothing changes: the launcher's subreaper and
its scan for the token do the reaping alone (execute/launch.py). ``CUDNN_MATRIX_CGROUP=0`` turns
this off.

A tool killed outright (SIGKILL) removes none of its cases' cgroups; the next tool to start
removes each empty ``cm-*`` whose owner is dead (no such process, or a zombie) at once, and
leaves those whose owner lives (another run's, on this host). One without an owner in its name
(made by a tool from before the owner was named) is removed once empty for a minute (`_STALE_S`:
a new one is empty only until its process joins it). A cgroup something still runs in is never
removed (rmdir refuses it); the `--resume` of the killed run ends that (execute/deaths.py).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import threading
import time
from pathlib import Path
from typing import Final

__all__ = ["CGROUP_ENV", "PROCS_ENV", "available", "create", "join", "kill", "members", "remove"]

#: "0": use no cgroup (the subreaper and the token scan only).
CGROUP_ENV: Final = "CUDNN_MATRIX_CGROUP"
#: The case's ``cgroup.procs`` file: a forked case writes itself into it (fork_server.py).
PROCS_ENV: Final = "CUDNN_MATRIX_CGROUP_PROCS"
_PREFIX: Final = "cm-"
_EMPTY_S: Final = 2.0
_STALE_S: Final = 60.0
#: ``cm-<anything>-<owner pid>``: the tool process that made it (the probe's too)
_OWNED: Final = re.compile(r"cm-.+-([0-9]+)")

_LOCK = threading.Lock()
_BASE: list[Path | None] = []  # found once: the folder the cases' cgroups are made in
_MADE: set[Path] = set()  # made and not removed yet: removed at exit where empty


def _own_folder() -> Path | None:
    """The tool's own cgroup v2 folder, from /proc; None where there is no cgroup2 mount that
    holds it."""
    try:
        own = next(
            line[3:]
            for line in Path("/proc/self/cgroup").read_text().splitlines()
            if line.startswith("0::")
        )
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except (OSError, StopIteration):
        return None
    for line in mounts:
        fields = line.split()
        if "-" not in fields:
            continue
        dash = fields.index("-")
        if fields[dash + 1 : dash + 2] != ["cgroup2"]:
            continue
        root, point = fields[3], fields[4]
        if own == root or own.startswith(root.rstrip("/") + "/"):
            return Path(point) / own[len(root.rstrip("/")) :].lstrip("/")
    return None


def _probe() -> Path | None:
    """The tool's cgroup where it may make a child with ``cgroup.kill`` and move processes
    into it; else None."""
    folder = _own_folder()
    if folder is None or not os.access(folder / "cgroup.procs", os.W_OK):
        return None
    probe = folder / f"{_PREFIX}probe-{os.getpid()}"
    try:
        probe.mkdir()
    except OSError:
        return None
    try:
        ok = (probe / "cgroup.kill").is_file() and os.access(probe / "cgroup.procs", os.W_OK)
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()
    if ok:
        _sweep(folder)
    return folder if ok else None


def _sweep(folder: Path) -> None:
    """Remove the empty case cgroups a run of the tool that was killed left: at once where the
    tool named in it is dead, after `_STALE_S` where none is named (a new one is empty only
    until its process joins it, and a case whose process ended is reaped by the token scan
    too); never one whose owner lives."""
    now = time.time()
    for each in folder.glob(f"{_PREFIX}*"):
        owned = _OWNED.fullmatch(each.name)
        with contextlib.suppress(OSError):
            if owned is not None:
                if _alive(int(owned.group(1))):
                    continue
            elif now - each.stat().st_mtime <= _STALE_S:
                continue
            for inner in _tree(each):
                inner.rmdir()  # a cgroup with a process in it stays (EBUSY)


def _alive(pid: int) -> bool:
    """Whether `pid` is a live process other than this one (at the sweep this process owns no
    cgroup yet: one named with its pid is a dead tool's whose pid came round again)."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]  # a zombie is dead, not yet waited for


def available() -> Path | None:
    """The folder the cases' cgroups are made in, or None where the host allows none (or
    ``CUDNN_MATRIX_CGROUP=0``)."""
    if os.environ.get(CGROUP_ENV, "").strip() == "0":
        return None
    with _LOCK:
        if not _BASE:
            _BASE.append(_probe())
        return _BASE[0]


def _folder(token: str) -> Path | None:
    """The cgroup of the case of `token`: this tool's (``cm-<token>-<pid>``), else one another
    tool made for it (a killed run's, on `--resume`; an old one without an owner)."""
    base = available()
    if base is None:
        return None
    own = base / f"{_PREFIX}{token}-{os.getpid()}"
    if own.is_dir():
        return own
    other = next(iter(base.glob(f"{_PREFIX}{token}-*")), None)
    if other is None and (base / f"{_PREFIX}{token}").is_dir():
        other = base / f"{_PREFIX}{token}"
    return other or own


def create(token: str) -> Path | None:
    """A cgroup for the case of `token`: its ``cgroup.procs`` file; None where none can be made
    (the token scan still reaps)."""
    base = available()
    if base is None:
        return None
    folder = base / f"{_PREFIX}{token}-{os.getpid()}"  # its owner: this tool
    try:
        folder.mkdir(exist_ok=True)
    except OSError:
        return None
    with _LOCK:
        _MADE.add(folder)
    return folder / "cgroup.procs"


def join(procs: bytes) -> None:
    """Move the calling process into the cgroup of `procs` (a ``cgroup.procs`` path): in the
    child before it runs, so os-level calls only; a refusal leaves it where it was."""
    try:
        fd = os.open(procs, os.O_WRONLY)
    except OSError:
        return
    try:
        os.write(fd, b"0")
    except OSError:
        pass
    finally:
        os.close(fd)


def _tree(folder: Path) -> list[Path]:
    """`folder` and the cgroups under it (a case that runs the tool makes its own), deepest
    first."""
    return [Path(top) for top, _, _ in os.walk(folder, topdown=False)]


def members(token: str) -> list[int]:
    """The pids in the case's cgroup and the cgroups under it (none where it has none)."""
    folder = _folder(token)
    if folder is None:
        return []
    pids: list[int] = []
    for each in reversed(_tree(folder)):
        with contextlib.suppress(OSError, ValueError):
            pids += [int(p) for p in (each / "cgroup.procs").read_text().split()]
    return pids


def kill(token: str) -> bool:
    """SIGKILL every process in the case's cgroup at once (``cgroup.kill``: what it forks
    meanwhile too); whether it has one."""
    folder = _folder(token)
    if folder is None or not folder.is_dir():
        return False
    with contextlib.suppress(OSError):
        (folder / "cgroup.kill").write_bytes(b"1")
    return True


def remove(token: str) -> None:
    """Remove the case's cgroup once its processes have exited (at most 2 s; a zombie does not
    count)."""
    folder = _folder(token)
    if folder is None:
        return
    _rmdir_all([folder], time.monotonic() + _EMPTY_S)
    if not folder.exists():
        with _LOCK:
            _MADE.discard(folder)


def _rmdir_all(folders: list[Path], deadline: float) -> None:
    """Remove each of `folders` (and the cgroups under it) once it is empty, until `deadline`."""
    for folder in folders:
        while True:
            try:
                for each in _tree(folder):
                    each.rmdir()
            except FileNotFoundError:
                pass  # removed meanwhile: look again
            except OSError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.005)
            else:
                break
            if time.monotonic() > deadline:
                break


@atexit.register
def _tidy() -> None:
    """At the tool's exit, the cgroups of cases that were not reaped (an interrupt, an error
    between start and end): what is still in them is killed (a case does not outlive the
    tool, resources/guard.py) and they are removed, within a second altogether. A tool killed
    outright leaves them: the next one removes them (`_sweep`)."""
    with _LOCK:
        left = list(_MADE)
    for folder in left:
        with contextlib.suppress(OSError):
            (folder / "cgroup.kill").write_bytes(b"1")
    _rmdir_all(left, time.monotonic() + 1.0)
