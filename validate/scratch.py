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
        with _GUARD:
            _LIVE.discard(folder)
        if not (ok and keep):
            shutil.rmtree(folder, ignore_errors=True)


def remove_all() -> None:
    """Remove every folder still under construction (the tool is about to exit)."""
    with _GUARD:
        folders = list(_LIVE)
        _LIVE.clear()
    for folder in folders:
        # twice: an installer still writing may have added files while the first pass ran
        for _ in range(2):
            shutil.rmtree(folder, ignore_errors=True)
