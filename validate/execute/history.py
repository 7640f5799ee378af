"""The duration history: what each case took last time (and its peak GPU memory), by case name.

One JSON file (`<cache>/durations.json`) shared by every cell and run: the pool starts the longest
cases first, `--shard` balances by it (plan/shard.read_durations) and the slot bound reads the
peaks (execute/slots.py). Case name -> seconds, as before; the GPU peaks sit under one extra key
(`#gpu_peak_mib`: case name -> MiB), which a reader of the seconds skips (it is no number).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

__all__ = ["GPU_KEY", "History"]

GPU_KEY: Final = "#gpu_peak_mib"


@dataclass
class History:
    """Durations and GPU peaks read once at start; `record` collects, `save` merges and writes."""

    path: Path | None = None
    durations: dict[str, float] = field(default_factory=dict)
    gpu_mib: dict[str, float] = field(default_factory=dict)
    _new_s: dict[str, float] = field(default_factory=dict, repr=False)
    _new_mib: dict[str, float] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def load(cls, path: Path | None) -> History:
        """The history at `path`; empty when there is none or it is unreadable."""
        durations, gpu = _read(path)
        return cls(path=path, durations=durations, gpu_mib=gpu)

    def estimate(self, name: str) -> float | None:
        """Seconds the case took last time (None: never ran here)."""
        return self.durations.get(name)

    def peak_gpu_mib(self) -> float | None:
        """The largest GPU peak any case reached (None: no peak recorded)."""
        return max(self.gpu_mib.values(), default=None)

    def typical_gpu_mib(self) -> float | None:
        """The median of the cases' GPU peaks (None: no peak recorded): what the slot count is
        sized by; the pool's GPU budget holds each case to its own peak."""
        peaks = sorted(self.gpu_mib.values())
        if not peaks:
            return None
        mid = len(peaks) // 2
        return peaks[mid] if len(peaks) % 2 else (peaks[mid - 1] + peaks[mid]) / 2

    def gpu_estimate(self, name: str, default: float) -> float:
        """The GPU memory the case needs: its recorded peak, else `default`."""
        return self.gpu_mib.get(name, default)

    def record(self, name: str, duration_s: float, gpu_mib: float | None = None) -> None:
        """What one case took now (thread-safe; written by `save`)."""
        with self._lock:
            self._new_s[name] = round(duration_s, 2)
            if gpu_mib is not None:
                self._new_mib[name] = round(gpu_mib, 1)

    def save(self) -> None:
        """Merge what was recorded into the file (re-read first: another run may have written)."""
        with self._lock:
            new_s, new_mib = dict(self._new_s), dict(self._new_mib)
        if self.path is None or not new_s:
            return
        durations, gpu = _read(self.path)
        durations.update(new_s)
        gpu.update(new_mib)
        self.durations.update(new_s)
        self.gpu_mib.update(new_mib)
        data: dict[str, object] = dict(sorted(durations.items()))
        if gpu:
            data[GPU_KEY] = dict(sorted(gpu.items()))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(data, indent=0), encoding="utf-8")
        tmp.replace(self.path)


def _numbers(data: Mapping[object, object]) -> dict[str, float]:
    return {
        str(k): float(v)
        for k, v in data.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and v >= 0
    }


def _read(path: Path | None) -> tuple[dict[str, float], dict[str, float]]:
    if path is None or not path.is_file():
        return {}, {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}, {}
    if not isinstance(data, dict):
        return {}, {}
    gpu = data.get(GPU_KEY)
    return _numbers(data), _numbers(gpu) if isinstance(gpu, dict) else {}
