"""One NVML session for the tool's process (pynvml, where it imports).

Host detection, the slot bound and the GPU-memory sampler all ask NVML. Each ran its own
nvmlInit/nvmlShutdown, and a first nvmlInit in a process is the handshake with the driver. The
session opened here on first use is kept until the process ends (NVML counts its initialisations),
so the later callers pay nothing. Case processes never use it: capture.py stays stdlib only.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

__all__ = ["nvml"]

log = logging.getLogger(__name__)

_LOCK = threading.Lock()
_SESSION: list[Any] = []  # [pynvml, or None where it failed] once tried


def nvml() -> Any:
    """pynvml with NVML initialised; None where pynvml does not import or NVML does not answer
    (no driver). Tried once per process."""
    with _LOCK:
        if not _SESSION:
            _SESSION.append(_open())
        return _SESSION[0]


def _open() -> Any:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        log.debug("NVML unavailable: %s", exc)
        return None
    return pynvml
