"""The duration history: what each case took last time, its peak GPU memory and its GPU busy
share, by case name.

One JSON file (`<cache>/durations.json`) shared by every cell and run: the pool starts the longest
cases first, `--shard` balances by it (plan/shard.read_durations), the slot bound reads the peaks
and the pool's GPU-load bound the busy shares (execute/slots.py, execute/pool.py). Case name ->
seconds, as before; the GPU peaks sit under one extra key (`#gpu_peak_mib`: case name -> MiB) and
the busy shares under another (`#gpu_busy`: case name -> the mean fraction of the GPU's time its
kernels ran, 0..1, from NVML) and the CPU shares under a third (`#cpu_share`: case name -> the CPU
its process tree asked for per wall second, the time it ran or was ready to run, what the ledger
books of the host's CPUs, execute/ledger.py) and the host memory peaks under a fourth
(`#rss_mib`: case name -> the largest resident memory of its process tree, MiB, what the ledger
books of the host's memory), which a reader of the seconds skips (they are no numbers).

A busy share measured while the GPU was saturated (the case got only its slice of a full GPU) is
a lower bound of what it needs: it never lowers the share on record. One measured alone (the
contention re-run, execute/reruns.py) is clean and replaces it.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from pathlib import Path

__all__ = ["BUSY_KEY", "CPU_KEY", "FINISHED_KEY", "GPU_KEY", "RSS_KEY", "History"]

GPU_KEY: Final = "#gpu_peak_mib"
BUSY_KEY: Final = "#gpu_busy"
CPU_KEY: Final = "#cpu_share"
RSS_KEY: Final = "#rss_mib"
#: The durations of runs that ended on their own (not cut by a timeout): what the timeout floor is
#: a multiple of. A timed-out run's duration is its limit, not its need: a floor of 3x that grew
#: 3x with every run of a case that always hangs.
FINISHED_KEY: Final = "#finished_s"


@dataclass
class History:
    """Durations and GPU peaks read once at start; `record` collects, `save` merges and writes."""

    path: Path | None = None
    durations: dict[str, float] = field(default_factory=dict)
    gpu_mib: dict[str, float] = field(default_factory=dict)
    gpu_busy: dict[str, float] = field(default_factory=dict)
    finished: dict[str, float] = field(default_factory=dict)
    cpu_share: dict[str, float] = field(default_factory=dict)
    rss_mib: dict[str, float] = field(default_factory=dict)
    _new_cpu: dict[str, float] = field(default_factory=dict, repr=False)
    _new_rss: dict[str, float] = field(default_factory=dict, repr=False)
    _new_s: dict[str, float] = field(default_factory=dict, repr=False)
    _new_finished: dict[str, float] = field(default_factory=dict, repr=False)
    _new_mib: dict[str, float] = field(default_factory=dict, repr=False)
    _new_busy: dict[str, tuple[float, bool]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def load(cls, path: Path | None) -> History:
        """The history at `path`; empty when there is none or it is unreadable."""
        durations, gpu, busy, finished, cpu, rss = _read(path)
        return cls(
            path=path,
            durations=durations,
            gpu_mib=gpu,
            gpu_busy=busy,
            finished=finished,
            cpu_share=cpu,
            rss_mib=rss,
        )

    def estimate(self, name: str) -> float | None:
        """Seconds the case took last time (None: never ran here)."""
        return self.durations.get(name)

    def typical_gpu_mib(self) -> float | None:
        """The median of the cases' GPU peaks (None: no peak recorded): what the slot count is
        sized by; the pool's GPU budget holds each case to its own peak."""
        return _median(self.gpu_mib.values())

    def typical_gpu_busy(self) -> float | None:
        """The median busy share of the cases on record (None: none recorded): what a case the
        history does not know is expected to load its GPU with."""
        return _median(self.gpu_busy.values())

    def typical_cpu_share(self) -> float | None:
        """The median CPU share of the cases on record (None: none recorded): what a case the
        history does not know holds of the host's CPUs."""
        return _median(self.cpu_share.values())

    def typical_rss_mib(self) -> float | None:
        """The median host memory peak of the cases on record (None: none recorded): what a
        case the history does not know holds of the host's memory."""
        return _median(self.rss_mib.values())

    def rss_estimate(self, name: str) -> float | None:
        """The case's host memory peak on record (MiB; None: never measured)."""
        return self.rss_mib.get(name)

    def cpu_estimate(self, name: str) -> float | None:
        """The case's CPU share on record (CPU seconds per wall second; None: never measured)."""
        return self.cpu_share.get(name)

    def finished_estimate(self, name: str) -> float | None:
        """Seconds the case took the last time it ended on its own (None: it never did here)."""
        return self.finished.get(name)

    def busy_estimate(self, name: str) -> float | None:
        """The case's GPU busy share on record (0..1; None: never measured)."""
        return self.gpu_busy.get(name)

    def gpu_estimate(self, name: str, default: float) -> float:
        """The GPU memory the case needs: its recorded peak, else `default`."""
        return self.gpu_mib.get(name, default)

    def record(
        self,
        name: str,
        duration_s: float,
        gpu_mib: float | None = None,
        *,
        gpu_busy: float | None = None,
        saturated: bool = False,
        timed_out: bool = False,
        cpu_share: float | None = None,
        rss_mib: float | None = None,
    ) -> None:
        """What one case took now (thread-safe; written by `save`). `gpu_busy`: its busy share;
        `saturated`: measured while its GPU was full (then it never lowers the share on
        record); `timed_out`: cut by its limit (not a duration the timeout floor may use);
        `cpu_share`: CPU seconds per wall second of its process tree; `rss_mib`: the largest
        resident memory of its process tree."""
        with self._lock:
            self._new_s[name] = round(duration_s, 2)
            if not timed_out:
                self._new_finished[name] = round(duration_s, 2)
            if gpu_mib is not None:
                self._new_mib[name] = round(gpu_mib, 1)
            if cpu_share is not None:
                self._new_cpu[name] = round(max(0.0, cpu_share), 3)
            if rss_mib is not None:
                self._new_rss[name] = round(max(0.0, rss_mib), 1)
            if gpu_busy is not None:
                self._new_busy[name] = (round(min(1.0, max(0.0, gpu_busy)), 3), saturated)

    def save(self) -> None:
        """Merge what was recorded into the file (re-read first: another run may have written)."""
        with self._lock:
            new_s, new_mib, new_busy = dict(self._new_s), dict(self._new_mib), dict(self._new_busy)
            new_finished, new_cpu = dict(self._new_finished), dict(self._new_cpu)
            new_rss = dict(self._new_rss)
        if self.path is None or not new_s:
            return
        durations, gpu, busy, finished, cpu, rss = _read(self.path)
        durations.update(new_s)
        cpu.update(new_cpu)
        self.cpu_share.update(cpu)
        rss.update(new_rss)
        self.rss_mib.update(rss)
        gpu.update(new_mib)
        finished.update(new_finished)
        self.finished.update(finished)
        for name, (share, saturated) in new_busy.items():
            old = busy.get(name)
            busy[name] = max(share, old) if saturated and old is not None else share
        self.durations.update(new_s)
        self.gpu_mib.update(new_mib)
        self.gpu_busy.update(busy)
        data: dict[str, object] = dict(sorted(durations.items()))
        if gpu:
            data[GPU_KEY] = dict(sorted(gpu.items()))
        if busy:
            data[BUSY_KEY] = dict(sorted(busy.items()))
        if cpu:
            data[CPU_KEY] = dict(sorted(cpu.items()))
        if rss:
            data[RSS_KEY] = dict(sorted(rss.items()))
        if finished:
            data[FINISHED_KEY] = dict(sorted(finished.items()))
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


def _median(values: Iterable[float]) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


_Read = tuple[
    dict[str, float],
    dict[str, float],
    dict[str, float],
    dict[str, float],
    dict[str, float],
    dict[str, float],
]


def _read(path: Path | None) -> _Read:
    if path is None or not path.is_file():
        return {}, {}, {}, {}, {}, {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}, {}, {}, {}, {}, {}
    if not isinstance(data, dict):
        return {}, {}, {}, {}, {}, {}
    gpu, busy, finished = data.get(GPU_KEY), data.get(BUSY_KEY), data.get(FINISHED_KEY)
    cpu, rss = data.get(CPU_KEY), data.get(RSS_KEY)
    return (
        _numbers(data),
        _numbers(gpu) if isinstance(gpu, dict) else {},
        {k: min(1.0, v) for k, v in _numbers(busy).items()} if isinstance(busy, dict) else {},
        _numbers(finished) if isinstance(finished, dict) else {},
        _numbers(cpu) if isinstance(cpu, dict) else {},
        _numbers(rss) if isinstance(rss, dict) else {},
    )
