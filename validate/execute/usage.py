"""What the live cases use, polled while they run: GPU memory, GPU busy share, GPU and host CPU
utilization per case (`UsageSampler`, read back as one `CaseUsage` per case).

The pool (execute/pool.py) counts a running case's GPU memory and busy share against its budget;
the history (execute/history.py) keeps the peaks and shares for the next run's slot count and
load bound (execute/slots.py, which re-exports these names, where they were first). Each case
runs in a session of its own, so a process's figures are attributed to its case by session id.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from validate.execute.cpu_demand import CpuDemand, read_tree

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from validate.execute.cpu_demand import ProcSample

__all__ = ["GPU_SATURATED", "CaseUsage", "UsageSampler", "smi_csv"]


def smi_csv(smi: str, query: str, *, timeout: float) -> list[str] | None:
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
class CaseUsage:
    """What one case used while it ran, from the sampler's polls (None where not measured).

    `gpu_busy`: the mean fraction of the GPU's time its own kernels ran (NVML's per-process SM
    utilization; where the driver does not give it per process, the device's utilization split
    evenly among the cases holding GPU memory). `gpu_device`: the mean utilization of the GPU
    by everyone while it ran; `cpu_host`: the mean fraction of the host's CPU time busy while it
    ran (/proc/stat). Together they say whether the case shared a saturated resource.
    `cpu_share`: the CPU its own process tree asks for, per wall second (its session's
    processes, up to its last poll: the time every thread ran or waited on a run queue, so a
    case with 2 busy threads pinned to 1 CPU reads near 2; at most the CPUs this process may
    run on; execute/cpu_demand.py says what is counted, and that without schedstat it is the
    CPU time alone): what the ledger books of the host's CPUs.
    `rss_mib`: the largest resident memory of its process tree at one poll (summed over its
    session's processes): what the ledger books of the host's memory."""

    peak_mib: float | None = None
    gpu_busy: float | None = None
    gpu_device: float | None = None
    cpu_host: float | None = None
    cpu_share: float | None = None
    rss_mib: float | None = None
    polls: int = 0

    @property
    def gpu_others(self) -> float | None:
        """How busy the GPU was with the other cases' kernels (device minus its own share)."""
        if self.gpu_device is None:
            return None
        return max(0.0, self.gpu_device - (self.gpu_busy or 0.0))

    def saturated(self) -> bool:
        """Whether the GPU it ran on was near full while it ran (its busy share then is only the
        slice it got: a lower bound of what it needs)."""
        return self.gpu_device is not None and self.gpu_device >= GPU_SATURATED


#: A GPU at least this busy on average while a case ran counts as saturated.
GPU_SATURATED: Final = 0.9


#: The weight of the newest poll in a case's recent busy share (about the last 2 s at 0.5 s polls).
_RECENT_WEIGHT: Final = 0.3


@dataclass
class _Acc:
    recent: float | None = None
    polls: int = 0
    peak_mib: float | None = None
    busy: float = 0.0
    busy_polls: int = 0
    device: float = 0.0
    device_polls: int = 0
    cpu: float = 0.0
    cpu_polls: int = 0
    demand: CpuDemand = field(default_factory=CpuDemand)  # its tree's run + wait (cpu_demand.py)
    rss_mib: float | None = None  # the largest resident memory of its tree at one poll


class UsageSampler:
    """Polls what each live case uses: its GPU memory and GPU busy share, the GPU's and the
    host CPU's utilization while it runs; `usage(case)` after it ended.

    NVML (pynvml) where it imports, else `nvidia-smi` (memory per process and the device's
    utilization, one call a poll each, so at most one poll a second); on a host without either
    only the CPU is sampled (/proc/stat). `sessions()` maps the sessions of the cases running now
    to the case they belong to (the runner's live process groups, which are sessions of their
    own, and their notebook kernels' sessions). A case shorter than a poll may leave no figure;
    its estimates then stay the defaults. `figures()`: the GPU utilization over the polls while
    any case ran (what the pool reached)."""

    def __init__(
        self,
        sessions: Callable[[], Mapping[int, int]],
        interval_s: float = 0.5,
        *,
        gpu: bool = True,
    ) -> None:
        self._sessions = sessions
        self._interval = interval_s
        self._gpu = gpu
        self._acc: dict[int, _Acc] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Any = None
        self._smi: str | None = None
        self._last_ts: dict[int, int] = {}
        self._per_process = True  # NVML gives per-process utilization (until it says it does not)
        self._cpu_last: tuple[int, int] | None = None
        self._device_series: list[float] = []

    def start(self) -> UsageSampler:
        if self._gpu:
            from validate.nvml import nvml  # the process's one NVML session

            self._nvml = nvml()
            if self._nvml is None:
                self._smi = shutil.which("nvidia-smi")
                if self._smi is not None:
                    self._interval = max(self._interval, 1.0)
        self._cpu_last = _cpu_times()
        self._thread = threading.Thread(target=self._loop, name="usage-sampler", daemon=True)
        self._thread.start()
        return self

    @property
    def active(self) -> bool:
        return self._thread is not None

    @property
    def measures_gpu(self) -> bool:
        return self._nvml is not None or self._smi is not None

    def _loop(self) -> None:
        handles: list[Any] = []
        if self._nvml is not None:
            try:
                count = self._nvml.nvmlDeviceGetCount()
                handles = [self._nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            except self._nvml.NVMLError:
                self._nvml = None
        while not self._stop.wait(self._interval):
            cpu = self._cpu_busy()
            live = self._sessions()
            if not live:
                continue
            devices = self._devices_busy(handles) if self.measures_gpu else []
            known = [d for d in devices if d is not None]
            device = sum(known) / len(known) if known else None
            busy = self._process_busy(handles) if self._nvml is not None else None
            where: dict[int, int] = {}
            processes = self._processes(handles, where) if self.measures_gpu else ()
            self.record(
                processes,
                busy,
                device,
                cpu,
                live,
                trees=read_tree(live),
                devices=devices,
                where=where,
            )

    def _cpu_busy(self) -> float | None:
        now = _cpu_times()
        last, self._cpu_last = self._cpu_last, now
        if now is None or last is None or now[1] <= last[1]:
            return None
        return max(0.0, min(1.0, (now[0] - last[0]) / (now[1] - last[1])))

    def _devices_busy(self, handles: list[Any]) -> list[float | None]:
        """The utilization of each GPU now (0..1; None where it did not answer), host order."""
        values: list[float | None] = []
        if self._nvml is not None:
            for handle in handles:
                try:
                    values.append(self._nvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0)
                except self._nvml.NVMLError:
                    values.append(None)
        elif self._smi is not None:
            for line in smi_csv(self._smi, "--query-gpu=utilization.gpu", timeout=10) or ():
                try:
                    values.append(float(line.split()[0]) / 100.0)
                except (ValueError, IndexError):
                    values.append(None)
        return values

    def _process_busy(self, handles: list[Any]) -> list[tuple[int, float]] | None:
        """(pid, SM busy 0..1) of the processes that ran kernels since the last poll; None where
        the driver does not give it per process."""
        if not self._per_process:
            return None
        found: dict[int, float] = {}
        for i, handle in enumerate(handles):
            try:
                samples = self._nvml.nvmlDeviceGetProcessUtilization(
                    handle, self._last_ts.get(i, 0)
                )
            except self._nvml.NVMLError as exc:
                if "Not Supported" in str(exc) or "Function Not Found" in str(exc):
                    self._per_process = False
                    return None
                continue  # NotFound: no process ran a kernel since the last poll
            for sample in samples:
                self._last_ts[i] = max(self._last_ts.get(i, 0), int(sample.timeStamp))
                found[sample.pid] = max(found.get(sample.pid, 0.0), sample.smUtil / 100.0)
        return list(found.items())

    def _processes(self, handles: list[Any], where: dict[int, int]) -> list[tuple[int, float]]:
        """(pid, MiB) of every process holding GPU memory now; `where` gets pid -> the GPU it
        holds it on (NVML only)."""
        found: list[tuple[int, float]] = []
        if self._nvml is not None:
            for index, handle in enumerate(handles):
                try:
                    procs = self._nvml.nvmlDeviceGetComputeRunningProcesses(handle)
                except self._nvml.NVMLError:
                    continue
                found += [(p.pid, (p.usedGpuMemory or 0) / (1024 * 1024)) for p in procs]
                where.update((p.pid, index) for p in procs)
            return found
        assert self._smi is not None
        for line in smi_csv(self._smi, "--query-compute-apps=pid,used_memory", timeout=10) or ():
            pid, _, mib = line.partition(",")
            try:
                found.append((int(pid), float(mib)))
            except ValueError:
                continue
        return found

    def record(
        self,
        processes: Iterable[tuple[int, float]],
        busy: Iterable[tuple[int, float]] | None = None,
        device: float | None = None,
        cpu: float | None = None,
        live: Mapping[int, int] | None = None,
        *,
        trees: tuple[int, list[ProcSample]] | None = None,
        devices: Sequence[float | None] | None = None,
        where: Mapping[int, int] | None = None,
    ) -> None:
        """One poll: `processes` (pid, MiB held) summed per case (by the process's session),
        peaks kept; `busy` (pid, SM busy 0..1) summed per case (None: not given per process,
        then `device` is split among the cases holding memory); `device` the GPU's and `cpu` the
        host's utilization now, counted for every live case. `live`: the sessions the poll
        already read (None: read them now). `trees`: (now in ticks since boot, the live sessions'
        processes) (`cpu_demand.read_tree`). `devices`: each
        GPU's utilization now, and `where`: pid -> the GPU it holds memory on; a case placed on
        a GPU (execute/ledger.py) counts that GPU's utilization, not the mean of all, and
        without per-process figures it gets its share of that GPU's."""
        live = self._sessions() if live is None else live
        cases = set(live.values())
        used = _per_case(processes, live)
        gpus = _gpus_of(where or {}, live)
        per_gpu = list(devices or [])

        def util(gpu: int) -> float | None:
            return per_gpu[gpu] if gpu < len(per_gpu) else None

        own: dict[int, float] = {}  # case -> the utilization of the GPUs it is on
        for case, held in gpus.items():
            known = [u for g in held if (u := util(g)) is not None]
            if known:
                own[case] = sum(known) / len(known)
        shares = _per_case(busy, live) if busy is not None else None
        if shares is None and own:  # each GPU's utilization split among the cases on it
            on = Counter(g for held in gpus.values() for g in held)
            shares = {
                case: sum((util(g) or 0.0) / on[g] for g in held) for case, held in gpus.items()
            }
        if shares is None and device is not None:
            holders = [case for case, mib in used.items() if mib]
            shares = {case: device / len(holders) for case in holders}
        with self._lock:
            if device is not None and cases:
                self._device_series.append(device)
            for case in cases:
                acc = self._acc.setdefault(case, _Acc())
                acc.polls += 1
                if used.get(case):
                    acc.peak_mib = max(acc.peak_mib or 0.0, used[case])
                if shares is not None:
                    share = min(1.0, shares.get(case, 0.0))
                    acc.busy += share
                    acc.busy_polls += 1
                    old = acc.recent
                    acc.recent = share if old is None else old + _RECENT_WEIGHT * (share - old)
                mine = own.get(case, device)
                if mine is not None:
                    acc.device += mine
                    acc.device_polls += 1
                if cpu is not None:
                    acc.cpu += cpu
                    acc.cpu_polls += 1
            if trees is not None:
                now, procs = trees
                by_case: dict[int, list[ProcSample]] = {}
                for proc in procs:
                    tree = live.get(proc.session)
                    if tree is not None and tree in self._acc:
                        by_case.setdefault(tree, []).append(proc)
                for tree, samples in by_case.items():
                    acc = self._acc[tree]
                    acc.demand.add(now, samples)
                    mib = sum(proc.rss_mib for proc in samples)
                    acc.rss_mib = max(acc.rss_mib or 0.0, mib)

    def recent(self, case: int) -> float | None:
        """The case's GPU busy share over its last few polls (None: none measured yet): what the
        pool counts for a running case whose recorded share is lower (execute/pool.watch)."""
        with self._lock:
            acc = self._acc.get(case)
            return acc.recent if acc is not None else None

    def usage(self, case: int) -> CaseUsage | None:
        """What the case `case` (its process group) used (forgotten then); None when no poll saw
        it."""
        with self._lock:
            acc = self._acc.pop(case, None)
        if acc is None:
            return None
        return CaseUsage(
            peak_mib=acc.peak_mib,
            gpu_busy=acc.busy / acc.busy_polls if acc.busy_polls else None,
            gpu_device=acc.device / acc.device_polls if acc.device_polls else None,
            cpu_host=acc.cpu / acc.cpu_polls if acc.cpu_polls else None,
            cpu_share=acc.demand.share(_cpus()),
            rss_mib=acc.rss_mib,
            polls=acc.polls,
        )

    def peak(self, case: int) -> float | None:
        """The largest GPU memory seen for the case `case` (forgotten then); None when never
        seen."""
        usage = self.usage(case)
        return usage.peak_mib if usage is not None else None

    def figures(self) -> dict[str, float] | None:
        """The GPU utilization over the polls while cases ran: mean, p50, p95, max (0..1) and the
        number of polls; None where the GPU was not sampled."""
        with self._lock:
            series = sorted(self._device_series)
        if not series:
            return None

        def at(q: float) -> float:
            return series[min(len(series) - 1, int(q * len(series)))]

        return {
            "mean": round(sum(series) / len(series), 3),
            "p50": round(at(0.5), 3),
            "p95": round(at(0.95), 3),
            "max": round(series[-1], 3),
            "polls": float(len(series)),
        }

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
            self._thread = None
        self._nvml = None  # the process's NVML session stays open (validate/nvml.py)


def _per_case(samples: Iterable[tuple[int, float]], live: Mapping[int, int]) -> dict[int, float]:
    """(pid, value) summed per case, by the process's session; processes of no live case are
    left out."""
    out: dict[int, float] = {}
    for pid, value in samples:
        try:
            case = live.get(os.getsid(pid))
        except OSError:
            continue
        if case is not None and value:
            out[case] = out.get(case, 0.0) + value
    return out


def _gpus_of(where: Mapping[int, int], live: Mapping[int, int]) -> dict[int, set[int]]:
    """Case -> the GPUs its processes hold memory on (pid -> GPU, by the process's session)."""
    out: dict[int, set[int]] = {}
    for pid, gpu in where.items():
        try:
            case = live.get(os.getsid(pid))
        except OSError:
            continue
        if case is not None:
            out.setdefault(case, set()).add(gpu)
    return out


def _cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies of the host from /proc/stat; None where unreadable."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:  # noqa: PTH123 - hot path, no Path
            fields = fh.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    try:
        values = [int(v) for v in fields[1:9]]
    except ValueError:
        return None
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values)
    return total - idle, total


def _cpus() -> float:
    """The CPUs this process may run on: no case's CPU share is recorded above them."""
    return float(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)
