"""How many cases run at once: bounded by CPU cores, host memory and free GPU memory per case.

`--jobs N` overrides. The chosen bound and every part of it are logged once at start, e.g.
``slots: 32 (cpu 16x2=32, mem 250GiB/2GiB=125, gpu 139GiB/4GiB=34)``.

- cpu: one case per core on a CPU-only host; two per core on a GPU host, where each case spends
  much of its time starting a kernel and importing torch (an H200 host with 16 cores ran 24
  notebooks at once in 17.4 s against 23.3 s at 16, reports/gpu/2026-12-02-h200/speed.json).
- mem: the host memory available now, 2 GiB per case.
- gpu: the free memory of each GPU now, divided by the typical (median) peak of the cases in the
  duration history (execute/history.py; 4 GiB when none is recorded: a CUDA context plus a
  sample's tensors), summed over the GPUs. Read with NVML (pynvml) where it imports, else with
  nvidia-smi. The free memory is also the pool's GPU budget (`SlotBound.gpu_free_mib`): each
  case holds its own recorded peak of it while it runs, so a few large cases never run together
  beyond what is free. `GpuSampler` records the peaks: it polls NVML (else nvidia-smi) for the
  memory each case's processes hold (attributed by session: every case runs in its own).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from validate.plan.host import HostFacts

__all__ = [
    "GpuSampler",
    "Resources",
    "SlotBound",
    "choose_slots",
    "free_gpu_mib",
    "host_memory_mib",
]

log = logging.getLogger(__name__)

MEM_PER_CASE_MIB: Final = 2 * 1024
GPU_PER_CASE_MIB: Final = 4 * 1024  # default estimate when the history has no peak
_GIB: Final = 1024


@dataclass(frozen=True, kw_only=True)
class SlotBound:
    """The number of slots and the why of it (one INFO line)."""

    slots: int
    why: str
    gpu_free_mib: float | None = None  # the GPUs' free memory in all: the pool's GPU budget

    def line(self) -> str:
        return f"slots: {self.slots} ({self.why})"


def host_memory_mib() -> int | None:
    """MemAvailable from /proc/meminfo (Linux), else None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:  # noqa: PTH123 - hot path, no Path
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _nvml() -> Any:
    from validate.nvml import nvml  # the process's one NVML session

    return nvml()


def free_gpu_mib() -> list[int] | None:
    """Free memory of each visible GPU in MiB (NVML, else nvidia-smi); None when neither answers."""
    nvml = _nvml()
    if nvml is not None:
        try:
            return [
                int(nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(i)).free)
                // (1024 * 1024)
                for i in range(nvml.nvmlDeviceGetCount())
            ]
        except nvml.NVMLError:
            pass
    smi = shutil.which("nvidia-smi")
    lines = None if smi is None else _smi_csv(smi, "--query-gpu=memory.free", timeout=30)
    if lines is None:
        return None
    try:
        return [int(line.split()[0]) for line in lines if line.strip()]
    except (ValueError, IndexError):
        return None


def _smi_csv(smi: str, query: str, *, timeout: float) -> list[str] | None:
    """The lines of `nvidia-smi QUERY --format=csv,noheader,nounits`; None when it fails."""
    try:
        proc = subprocess.run(
            [smi, query, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.splitlines() if proc.returncode == 0 else None


@dataclass(frozen=True, kw_only=True)
class Resources:
    """What the host offers now: cores, available memory (MiB), free memory of each GPU (MiB);
    None where unknown."""

    cores: int
    mem_mib: int | None
    gpu_free_mib: tuple[int, ...] | None

    @classmethod
    def read(cls, host: HostFacts) -> Resources:
        free = free_gpu_mib() if host.gpus else None
        return cls(
            cores=os.cpu_count() or 1,
            mem_mib=host_memory_mib(),
            gpu_free_mib=tuple(free) if free is not None else None,
        )


def choose_slots(
    host: HostFacts,
    *,
    jobs: int | None = None,
    gpu_peak_mib: float | None = None,
    resources: Resources | None = None,
    budget: bool = False,
) -> SlotBound:
    """The slot count for a run on `host`: `jobs` (--jobs) when given, else the smallest of the
    cpu, mem and gpu bounds. `resources`: what the host offers (None: read it now). `budget`:
    also the GPUs' free memory for the pool's GPU budget (read even with `jobs`)."""
    if jobs and not budget:  # nothing to read (no nvidia-smi call on the start-up path)
        return SlotBound(slots=jobs, why="--jobs")
    have = resources or Resources.read(host)
    gpu_budget = float(sum(have.gpu_free_mib)) if host.gpus and have.gpu_free_mib else None
    if jobs:
        return SlotBound(slots=jobs, why="--jobs", gpu_free_mib=gpu_budget)
    cores = have.cores
    parts: list[tuple[str, int]] = []
    per_core = 2 if host.gpus else 1
    parts.append((f"cpu {cores}x{per_core}={cores * per_core}", cores * per_core))
    mem = have.mem_mib
    if mem is not None:
        n = max(1, mem // MEM_PER_CASE_MIB)
        parts.append((f"mem {mem / _GIB:.0f}GiB/{MEM_PER_CASE_MIB // _GIB}GiB={n}", n))
    if host.gpus:
        free = have.gpu_free_mib
        per_case = max(256.0, gpu_peak_mib) if gpu_peak_mib else float(GPU_PER_CASE_MIB)
        source = "median peak" if gpu_peak_mib else "default"
        if free:
            n = max(1, sum(int(f // per_case) for f in free))
            total = sum(free) / _GIB
            parts.append((f"gpu {total:.0f}GiB/{per_case / _GIB:.1f}GiB {source}={n}", n))
        else:  # no free figure: the total memory HostFacts read
            n = max(1, sum(int(g.memory_mib // per_case) for g in host.gpus))
            total = sum(g.memory_mib for g in host.gpus) / _GIB
            parts.append((f"gpu {total:.0f}GiB total/{per_case / _GIB:.1f}GiB {source}={n}", n))
    slots = max(1, min(n for _, n in parts))
    why = ", ".join(text for text, _ in parts)
    return SlotBound(slots=slots, why=why, gpu_free_mib=gpu_budget)


class GpuSampler:
    """Polls the GPU memory each live case holds; `peak(case)` after it ended.

    NVML (pynvml) where it imports, else `nvidia-smi --query-compute-apps` (one call a poll, so
    at most one a second). `sessions()` maps the sessions of the cases running now to the case
    they belong to (the runner's live process groups, which are sessions of their own, and their
    notebook kernels' sessions). A no-op where neither answers. A case shorter than a poll may
    leave no peak; its GPU estimate then stays the default."""

    def __init__(self, sessions: Callable[[], Mapping[int, int]], interval_s: float = 0.5) -> None:
        self._sessions = sessions
        self._interval = interval_s
        self._peaks: dict[int, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Any = None
        self._smi: str | None = None

    def start(self) -> GpuSampler:
        self._nvml = _nvml()
        if self._nvml is None:
            self._smi = shutil.which("nvidia-smi")
            if self._smi is None:
                return self
            self._interval = max(self._interval, 1.0)
        self._thread = threading.Thread(target=self._loop, name="gpu-sampler", daemon=True)
        self._thread.start()
        return self

    @property
    def active(self) -> bool:
        return self._thread is not None

    def _loop(self) -> None:
        handles: list[Any] = []
        if self._nvml is not None:
            try:
                count = self._nvml.nvmlDeviceGetCount()
                handles = [self._nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            except self._nvml.NVMLError:
                return
        while not self._stop.wait(self._interval):
            if self._sessions():
                self.record(self._processes(handles))

    def _processes(self, handles: list[Any]) -> list[tuple[int, float]]:
        """(pid, MiB) of every process holding GPU memory now."""
        found: list[tuple[int, float]] = []
        if self._nvml is not None:
            for handle in handles:
                try:
                    procs = self._nvml.nvmlDeviceGetComputeRunningProcesses(handle)
                except self._nvml.NVMLError:
                    continue
                found += [(p.pid, (p.usedGpuMemory or 0) / (1024 * 1024)) for p in procs]
            return found
        assert self._smi is not None
        for line in _smi_csv(self._smi, "--query-compute-apps=pid,used_memory", timeout=10) or ():
            pid, _, mib = line.partition(",")
            try:
                found.append((int(pid), float(mib)))
            except ValueError:
                continue
        return found

    def record(self, processes: Iterable[tuple[int, float]]) -> None:
        """One poll's (pid, MiB): summed per case (by the process's session), peaks kept."""
        live = self._sessions()
        used: dict[int, float] = {}
        for pid, mib in processes:
            try:
                case = live.get(os.getsid(pid))
            except OSError:
                continue
            if case is not None and mib:
                used[case] = used.get(case, 0.0) + mib
        with self._lock:
            for case, mib in used.items():
                self._peaks[case] = max(self._peaks.get(case, 0.0), mib)

    def peak(self, case: int) -> float | None:
        """The largest memory seen for the case `case` (its process group; forgotten then);
        None when never seen."""
        with self._lock:
            return self._peaks.pop(case, None)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
            self._thread = None
        self._nvml = None  # the process's NVML session stays open (validate/nvml.py)
