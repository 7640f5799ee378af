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
  nvidia-smi. Each GPU's free memory is also its budget in the ledger (`plan_ledger`): each
  case holds its own recorded peak of its GPU's while it runs, so a few large cases never run
  together beyond what that GPU has free. `UsageSampler` (execute/usage.py, re-exported here) records the peaks: it
  polls NVML (else nvidia-smi) for the memory each case's processes hold (attributed by session:
  every case runs in its own).
- the ledger (execute/ledger.py, built here by `plan_ledger`): each GPU the run books (--gpus,
  else the caller's CUDA_VISIBLE_DEVICES, else all) on its own, with its free memory now and
  one GPU's busy share (GPU_CAPACITY), and the host's CPUs: each case holds its recorded peak
  and busy share on the one GPU it is placed on, and its recorded CPU share of the CPUs (the
  median on record when it has none), so heavy cases spread across the GPUs and the run, and
  CPU-bound cases never oversubscribe the CPUs, and its recorded resident peak of the host's
  memory available at start (the median on record when it has none); each case with a share on record runs pinned to
  ceil(its share) of the CPUs this process may run on (its placement's CPU ids). A case declared ``exclusive`` runs with nothing
  else beside it.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from validate.errors import ConfigError
from validate.execute.ledger import (
    CPU_LEDGER_ENV,
    GPU_CAPACITY,
    MEM_LEDGER_ENV,
    GpuBudget,
    Ledger,
    host_cpu_ids,
    host_cpus,
)
from validate.execute.usage import GPU_SATURATED, CaseUsage, UsageSampler, smi_csv
from validate.plan.host import declared_gpus

if TYPE_CHECKING:
    from collections.abc import Sequence

    from validate.execute.history import History
    from validate.plan.host import HostFacts

__all__ = [
    "DEFAULT_GPU_LOAD",
    "GPU_CAPACITY",
    "GPU_SATURATED",
    "CaseUsage",
    "Resources",
    "SlotBound",
    "UsageSampler",
    "choose_slots",
    "free_gpu_mib",
    "gpu_indices",
    "host_memory_mib",
    "plan_ledger",
]

log = logging.getLogger(__name__)

MEM_PER_CASE_MIB: Final = 2 * 1024
GPU_PER_CASE_MIB: Final = 4 * 1024  # default estimate when the history has no peak
#: The busy share a case adds when the history has none on record at all: twenty such cases share
#: a GPU at once. Once its kernels run, the pool counts what it is measured to use if that is
#: more (pool.watch), so a heavy case the history does not know still stops the next ones.
DEFAULT_GPU_LOAD: Final = 0.05
_GIB: Final = 1024


@dataclass(frozen=True, kw_only=True)
class SlotBound:
    """The number of slots and the why of it (one INFO line)."""

    slots: int
    why: str

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
    """Free memory of each GPU in MiB, in host order (NVML, else nvidia-smi; a test's declared
    topology, plan/host.py DECLARED_GPUS_ENV, before both); None when none answers."""
    declared = declared_gpus()
    if declared is not None:
        return [mib for _, mib in declared]
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
    lines = None if smi is None else smi_csv(smi, "--query-gpu=memory.free", timeout=30)
    if lines is None:
        return None
    try:
        return [int(line.split()[0]) for line in lines if line.strip()]
    except (ValueError, IndexError):
        return None


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
) -> SlotBound:
    """The slot count for a run on `host`: `jobs` (--jobs) when given, else the smallest of the
    cpu, mem and gpu bounds. `resources`: what the host offers (None: read it now). What each
    GPU and the CPUs hold is the ledger's (`plan_ledger`)."""
    if jobs:  # nothing to read
        return SlotBound(slots=jobs, why="--jobs")
    have = resources or Resources.read(host)
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
    return SlotBound(slots=slots, why=why)


def gpu_indices(host: HostFacts, wanted: Sequence[int] | None = None) -> tuple[int, ...]:
    """The GPUs (host numbering) a run books: `wanted` (--gpus), else those the caller's own
    ``CUDA_VISIBLE_DEVICES`` names (a Slurm task's, a CI job's), else every GPU on the host.
    A --gpus index the host does not have is bad input."""
    count = len(host.gpus)
    if wanted:
        missing = sorted(i for i in wanted if not 0 <= i < count)
        if missing:
            msg = (
                f"--gpus {','.join(map(str, wanted))}: no GPU {', '.join(map(str, missing))} "
                f"on this host (it has {count}: 0-{count - 1})"
                if count
                else f"--gpus {','.join(map(str, wanted))}: this host has no GPU"
            )
            raise ConfigError(msg)
        return tuple(dict.fromkeys(wanted))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        try:
            named = [int(part) for part in visible.split(",") if part.strip()]
        except ValueError:  # UUIDs or MIG names: leave the caller's choice alone, book all
            named = []
        if named and all(0 <= i < count for i in named):
            return tuple(dict.fromkeys(named))
    return tuple(range(count))


def plan_ledger(
    host: HostFacts,
    *,
    jobs: int | None = None,
    gpus: Sequence[int] | None = None,
    history: History | None = None,
    resources: Resources | None = None,
) -> tuple[SlotBound, Ledger]:
    """The slot count and the pool's ledger for a run on `host`: each chosen GPU (`gpu_indices`)
    with its free memory now and one GPU's busy share, and the host's CPUs (CPU shares booked
    unless CPU_LEDGER_ENV=0, and each case pinned to its share's CPU ids; a case the history
    does not know holds the median on record)."""
    have = resources or Resources.read(host)
    chosen = gpu_indices(host, gpus) if host.has_gpu or gpus else ()
    free = have.gpu_free_mib
    per_gpu: list[float | None] = [
        float(free[i]) if free is not None and i < len(free) else None for i in chosen
    ]
    mine = Resources(
        cores=have.cores,
        mem_mib=have.mem_mib,
        gpu_free_mib=tuple(int(f) for f in per_gpu if f is not None) or None,
    )
    peak = history.typical_gpu_mib() if history is not None else None
    bound = choose_slots(host, jobs=jobs, gpu_peak_mib=peak, resources=mine)
    cpus: float | None = float(host_cpus())
    ids = host_cpu_ids()  # each case pinned to its share's CPUs (execute/ledger.py)
    if os.environ.get(CPU_LEDGER_ENV, "1").strip() == "0":
        cpus, ids = None, ()
    share = history.typical_cpu_share() if history is not None else None
    mem: float | None = float(have.mem_mib) if have.mem_mib is not None else None
    if os.environ.get(MEM_LEDGER_ENV, "1").strip() == "0":
        mem = None
    ledger = Ledger(
        bound.slots,
        gpus=[
            GpuBudget(index=i, free_mib=f, load=GPU_CAPACITY)
            for i, f in zip(chosen, per_gpu, strict=True)
        ],
        cpus=cpus,
        default_cpu=share,
        cpu_ids=ids,
        mem_mib=mem,
        default_mem=history.typical_rss_mib() if history is not None else None,
    )
    return bound, ledger
