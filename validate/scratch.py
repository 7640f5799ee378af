"""Folders under construction (an environment or an image context being built), removed on
every way out (issue 36, item 4).

A build runs in a worker thread; Ctrl-C and SIGTERM end the tool from the main thread with
`os._exit` (cli.main), which runs no `finally` of the worker. A builder registers its folder here
for as long as it is half-built, and cli.main calls `remove_all()` before it exits. A process
killed outright (SIGKILL, power loss) leaves its folder behind: the next build or `envs prune`
removes it once no builder holds its lock (env/venvs.py `remove_partial_builds`).
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

__all__ = ["building", "remove_all"]

_LIVE: set[Path] = set()
_GUARD = threading.Lock()


@contextlib.contextmanager
def building(folder: Path, *, keep: bool = False) -> Iterator[Path]:
    """`folder` is half-built inside the block: removed when the block raises (anything, Ctrl-C
    included) or the tool exits early; kept on success only with `keep`."""
    with _GUARD:
        _LIVE.add(folder)
    ok = False
    try:
        yield folder
        ok = True
    finally:
        # removed before it leaves the registry: a folder this thread is still removing when
        # the tool exits (`os._exit` stops this thread mid-way) is removed by `remove_all`
        if not (ok and keep):
            _remove(folder)
        with _GUARD:
            _LIVE.discard(folder)


def remove_all() -> None:
    """Remove every folder still under construction, or still being removed by its builder's
    thread (the tool is about to exit, and exits without waiting for that thread)."""
    with _GUARD:
        folders = list(_LIVE)
    for folder in folders:
        _remove(folder)


def _remove(folder: Path, *, settle_s: float = 5.0) -> None:
    """Remove `folder`, again while it reappears or a concurrent pass left entries (an installer
    signalled with the tool may still write for a moment; another thread may be removing the
    same tree), for at most `settle_s` seconds."""
    deadline = time.monotonic() + settle_s
    while True:
        shutil.rmtree(folder, ignore_errors=True)
        if not folder.exists() or time.monotonic() > deadline:
            return
        time.sleep(0.05)
