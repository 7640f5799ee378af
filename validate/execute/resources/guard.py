"""Die with the tool: a case must not outlive the cudnn-matrix process that started it.

Cases run in sessions of their own (so a timeout can kill the whole group), which also means a
`kill -9` of the tool would leave them running, holding a GPU. The bootstraps (run_script.py,
run_notebook.py) call `die_with_parent()` first: Linux then sends SIGUSR2 when the tool's thread
that started the case goes away, and the handler kills this case's process group and any other
group it names (a notebook's kernel runs in a session of its own too). Stdlib only.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

__all__ = ["PARENT_ENV", "die_with_parent"]

#: The tool puts its pid here; a case that finds another parent at start has lost it already.
PARENT_ENV = "CUDNN_MATRIX_PARENT_PID"
_PR_SET_PDEATHSIG = 1


def _kill_groups(groups: Iterable[int]) -> None:
    for pgid in groups:
        with contextlib.suppress(OSError):
            os.killpg(pgid, signal.SIGKILL)


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
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGUSR2, 0, 0, 0)
    except (OSError, AttributeError):
        return
    expected = os.environ.get(parent_env) if parent_env else None
    if expected and expected.isdigit() and os.getppid() != int(expected):
        _kill_groups([*also(), os.getpgrp()])  # the tool died before prctl took effect
