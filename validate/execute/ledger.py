"""The pool's one account of resources: each GPU on its own, and the host on its own.

A job asks with a `Need` (slots, GPU memory, GPU busy share, CPU share, host memory, exclusive); `Ledger.book`
answers with a `Booking`, which carries the job's `Placement` (the GPU it runs on), or None:
wait. `release` gives the booking back when the job ends.

- Each GPU has its own budget: its free memory when the run started, and a busy-share capacity
  of GPU_CAPACITY (1.0: one GPU's time). A job is booked on one GPU, the one with the fewest
  jobs where it fits (then the most memory left, then the lowest index), so cases spread over
  the GPUs and no GPU is booked beyond its own memory. A job larger than every GPU's budget
  runs when the largest GPU is all its own.
- The host: slots (how many cases at once, execute/slots.py) and the CPU budget (the CPUs this
  process may run on). A job holds its CPU share (the CPU its process tree asks for per wall
  second: the time its threads ran or waited on a run queue, so demand beyond its pinned CPUs
  shows, execute/cpu_demand.py, kept in execute/history.py; a share at most CPU_NOISE above a
  whole number holds that number); the running jobs' shares stay within the CPUs. A share
  larger than every CPU runs when the CPUs are all its own. `default_cpu`: what a job without a
  figure holds (the median on record, at most the CPUs shared evenly among the slots, so that
  the slot count is what binds until the job has a figure of its own).
- The host's memory (`mem_mib`: what was available when the run started; None: not booked): a
  job holds its resident peak on record (its process tree's, execute/usage.py, kept in
  execute/history.py); the running jobs' peaks stay within it. `default_mem`: what a job
  without a figure holds (the median peak on record, else the memory shared evenly among the
  slots). A peak larger than the memory runs when the memory is all its own.
- A GPU-exclusive job (a case that must have its GPU to itself) holds one whole GPU, which no
  other job shares; the other GPUs and the CPUs stay booked as usual (without GPUs: as exclusive).
- An exclusive job (a contended case's alone re-run) holds everything: every slot, every CPU,
  every GPU (its placement names all).
- CPU ids (`cpu_ids`: the CPUs this process may run on, `os.sched_getaffinity(0)`; empty: not
  pinned): a booked job is also handed concrete CPUs, its placement's `cpus`, which the launcher
  pins every process of the job to, where its share is a figure on record (a job without one,
  a case's first run, runs unpinned on the default share, so that its first figure is its own
  demand and not its pin). It gets ceil(share) of them, at least 1; a share of every
  CPU, or an exclusive job, gets all. Each id carries the shares of the jobs on it (a job's
  share spread evenly over its ids), and a job takes the ids that carry the least (then hold
  the fewest jobs, then the lowest id), given back on release. The shares are what bind (they
  stay within the CPUs); the ids never make a job wait: where fractional shares leave no id
  free (three 0.6 shares on two CPUs), ids are shared by the least loaded rule, so whole shares
  that fit get disjoint ids (two 1.0 shares on two CPUs: one each) and fractional ones pack.

Without GPUs (`gpus=()`) placements leave ``CUDA_VISIBLE_DEVICES`` alone; a GPU budget without
an index (`GpuBudget(index=None)`, the pool's old single budget) books memory and load but
places nothing.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from validate.execute.placement import UNPLACED, Placement, cpu_list

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = [
    "CPU_LEDGER_ENV",
    "GPU_CAPACITY",
    "MEM_LEDGER_ENV",
    "Booking",
    "GpuBudget",
    "Ledger",
    "Need",
    "host_cpu_ids",
    "host_cpus",
]

log = logging.getLogger(__name__)

#: The busy share one GPU can hold: the summed shares of the cases running on it stay within it.
GPU_CAPACITY: Final = 1.0
#: Set to 0 to book no CPU (bench/cpu_ledger_bench.py compares a run with and without).
CPU_LEDGER_ENV: Final = "CUDNN_MATRIX_CPU_LEDGER"
#: Set to 0 to book no host memory per case (the slot count's 2 GiB a case still bounds).
MEM_LEDGER_ENV: Final = "CUDNN_MATRIX_MEM_LEDGER"
_SLACK: Final = 1e-9  # float sums
#: A CPU share at most this fraction above a whole number n >= 1 is read as n. A case pinned to
#: n CPUs measures a little above n (its helper threads' run-queue wait beside its busy ones), so
#: 1.008 on record, booked in full, kept a 2-CPU Slurm node from running it beside a case of 1.0
#: (the two ran one after the other: CI K of stop 52), and pinned it to 2 CPUs for 1 % more.
CPU_NOISE: Final = 0.05


def near_whole(share: float) -> float:
    """`share`, or the whole number n >= 1 it is at most CPU_NOISE of n above (1.008 -> 1.0,
    2.09 -> 2.0; 1.2, 0.98 and 0.3 stay)."""
    whole = math.floor(share)
    return float(whole) if whole >= 1 and share <= whole * (1 + CPU_NOISE) + _SLACK else share


def host_cpus() -> int:
    """The CPUs this process may run on (its affinity; a cgroup's quota is not read)."""
    return len(host_cpu_ids()) or os.cpu_count() or 1


def host_cpu_ids() -> tuple[int, ...]:
    """The ids of the CPUs this process may run on (its affinity; empty where unknown): what
    the ledger pins the cases to."""
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return ()


@dataclass(frozen=True, kw_only=True)
class Need:
    """What a job holds while it runs. `cpu` None: the ledger's default share per slot."""

    slots: int = 1
    gpu_mib: float = 0.0
    gpu_load: float = 0.0
    cpu: float | None = None
    exclusive: bool = False
    gpu_exclusive: bool = False
    #: host memory (MiB) it holds; None: the ledger's default per slot
    mem_mib: float | None = None


@dataclass(frozen=True, kw_only=True)
class GpuBudget:
    """One GPU's budget: its index (host numbering; None: not placed) and free memory (None: its
    memory is not accounted)."""

    index: int | None
    free_mib: float | None = None
    load: float = GPU_CAPACITY


@dataclass(frozen=True, kw_only=True)
class Booking:
    """What one job holds, and where it runs."""

    slots: int
    cpu: float
    gpu: int | None  # position in the ledger's GPUs (None: none; an exclusive job holds all)
    gpu_mib: float
    gpu_load: float
    exclusive: bool
    placement: Placement = UNPLACED
    gpu_exclusive: bool = False
    mem_mib: float = 0.0  # of the host's memory


def _held(total: float | None, figure: float | None, default: float | None, need: Need) -> float:
    """What `need` holds of a host resource of `total` (None: not booked, 0): its figure on
    record, else the default per slot; all of it when exclusive; never more than all."""
    if total is None:
        return 0.0
    if need.exclusive:
        return total
    held = figure if figure is not None else (default or 0.0) * need.slots
    return min(held, total)


def _place(gpus: tuple[int, ...] | None, cpus: frozenset[int] | None) -> Placement:
    return UNPLACED if gpus is None and cpus is None else Placement(gpus=gpus, cpus=cpus)


@dataclass
class _Gpu:
    budget: GpuBudget
    mib: float = 0.0
    load: float = 0.0
    jobs: int = 0
    alone: bool = False  # held by a GPU-exclusive job


@dataclass
class Ledger:
    """`slots` slots, `cpus` CPUs (None: not booked), and `gpus` each on its own; `cpu_ids`:
    the CPU ids a booking is pinned to (empty: none pinned; given without `cpus`, their count
    is the CPUs). Not locked: the pool books and releases under its own lock."""

    slots: int
    gpus: Sequence[GpuBudget] = ()
    cpus: float | None = None
    default_cpu: float | None = None  # None: cpus / slots
    cpu_ids: Sequence[int] = ()
    mem_mib: float | None = None  # the host memory booked (MiB); None: not booked
    default_mem: float | None = None  # None: mem_mib / slots
    _free: int = field(init=False)
    _cpu_used: float = field(init=False, default=0.0)
    _mem_used: float = field(init=False, default=0.0)
    _books: list[_Gpu] = field(init=False)
    _exclusive: bool = field(init=False, default=False)
    _id_load: dict[int, float] = field(init=False)  # CPU id -> the shares on it
    _id_jobs: dict[int, int] = field(init=False)  # CPU id -> the jobs pinned to it

    def __post_init__(self) -> None:
        self.slots = max(1, self.slots)
        self._free = self.slots
        self._books = [_Gpu(budget) for budget in self.gpus]
        self.cpu_ids = tuple(sorted(set(self.cpu_ids)))
        if self.cpu_ids and self.cpus is None:
            self.cpus = float(len(self.cpu_ids))
        self._id_load = dict.fromkeys(self.cpu_ids, 0.0)
        self._id_jobs = dict.fromkeys(self.cpu_ids, 0)
        if self.cpus is not None:
            # A job without a figure never holds more than its even share of the CPUs: the slot
            # count binds until the job has a figure of its own (a median of 1.01 on 2 CPUs and
            # 2 slots ran two unknown cases one after the other).
            even = self.cpus / self.slots
            median = 1.0 if self.default_cpu is None else near_whole(self.default_cpu)
            self.default_cpu = min(median, even)
        if self.default_mem is None and self.mem_mib is not None:
            self.default_mem = self.mem_mib / self.slots

    # --- asking -------------------------------------------------------------------------------

    def cpu_of(self, need: Need) -> float:
        """The CPU share `need` holds (0 where the CPUs are not booked)."""
        figure = near_whole(need.cpu) if need.cpu is not None else None
        return _held(self.cpus, figure, self.default_cpu, need)

    def mem_of(self, need: Need) -> float:
        """The host memory (MiB) `need` holds (0 where the memory is not booked)."""
        return _held(self.mem_mib, need.mem_mib, self.default_mem, need)

    def slots_of(self, need: Need) -> int:
        return self.slots if self._whole(need) else min(need.slots, self.slots)

    def _whole(self, need: Need) -> bool:
        """Whether `need` holds everything: exclusive, or GPU-exclusive where no GPU is booked."""
        return need.exclusive or (need.gpu_exclusive and not self._books)

    def book(self, need: Need, live: Mapping[int, float] | None = None) -> Booking | None:
        """A booking for `need` now, or None: it does not fit yet. `live`: GPU position -> the
        busy share the running jobs there are measured to use beyond what they booked."""
        if self._exclusive:
            return None
        if self._whole(need) and not need.exclusive:
            need = Need(slots=need.slots, cpu=need.cpu, exclusive=True)
        slots, cpu, mem = self.slots_of(need), self.cpu_of(need), self.mem_of(need)
        if slots > self._free or (
            self.cpus is not None and self._cpu_used + cpu > self.cpus + _SLACK
        ):
            return None
        if self.mem_mib is not None and self._mem_used + mem > self.mem_mib + _SLACK:
            return None
        if need.exclusive:
            if self._free < self.slots or any(book.jobs for book in self._books):
                return None
            self._take(slots, cpu, mem)
            self._exclusive = True
            indices = tuple(b.budget.index for b in self._books if b.budget.index is not None)
            placement = _place(indices or None, self._pin(cpu, whole=True))
            for book in self._books:
                book.jobs += 1
                book.mib = book.budget.free_mib or 0.0
                book.load = book.budget.load
            return Booking(
                slots=slots,
                cpu=cpu,
                gpu=None,
                gpu_mib=0.0,
                gpu_load=0.0,
                exclusive=True,
                placement=placement,
                mem_mib=mem,
            )
        if not self._books:
            self._take(slots, cpu, mem)
            return Booking(
                slots=slots,
                cpu=cpu,
                gpu=None,
                gpu_mib=0.0,
                gpu_load=0.0,
                exclusive=False,
                placement=_place(None, self._pin_known(need, cpu)),
                mem_mib=mem,
            )
        choice = self._choose(need, live or {})
        if choice is None:
            return None
        pos, mib, load = choice
        book = self._books[pos]
        if need.gpu_exclusive:  # the whole GPU: what is left of its memory and busy share
            mib = (book.budget.free_mib or 0.0) - book.mib
            load = book.budget.load - book.load if book.budget.load != float("inf") else load
            book.alone = True
        book.jobs += 1
        book.mib += mib
        book.load += load
        self._take(slots, cpu, mem)
        index = book.budget.index
        return Booking(
            slots=slots,
            cpu=cpu,
            gpu=pos,
            gpu_mib=mib,
            gpu_load=load,
            exclusive=False,
            placement=_place((index,) if index is not None else None, self._pin_known(need, cpu)),
            gpu_exclusive=need.gpu_exclusive,
            mem_mib=mem,
        )

    def _take(self, slots: int, cpu: float, mem: float) -> None:
        self._free -= slots
        self._cpu_used += cpu
        self._mem_used += mem

    def _pin_known(self, need: Need, cpu: float) -> frozenset[int] | None:
        """A job's CPU ids where its share is a figure on record; a job without one (a case's
        first run) runs unpinned, still holding the default share: pinned to the default's one
        CPU, a case whose libraries size their thread pools by its affinity (torch, OpenMP,
        BLAS) would start one thread, measure a demand of one, and stay on one CPU for good."""
        return self._pin(cpu) if need.cpu is not None else None

    def _pin(self, cpu: float, *, whole: bool = False) -> frozenset[int] | None:
        """The CPU ids a job of share `cpu` is pinned to, taken now (None: none pinned): all of
        them for a whole-host share, else ceil(share) (at least 1) of those that carry the least
        share, then hold the fewest jobs, then the lowest id. Never None for want of a free id:
        ids are shared where fractional shares leave none free."""
        if not self.cpu_ids:
            return None
        count = len(self.cpu_ids)
        if not whole and cpu < count - _SLACK:
            count = min(count, max(1, math.ceil(cpu - _SLACK)))
        order = sorted(self.cpu_ids, key=lambda i: (self._id_load[i], self._id_jobs[i], i))
        ids = frozenset(order[:count])
        for i in ids:
            self._id_load[i] += cpu / count
            self._id_jobs[i] += 1
        return ids

    def _unpin(self, cpu: float, ids: frozenset[int] | None) -> None:
        for i in ids or ():
            if i in self._id_load:
                self._id_load[i] = max(0.0, self._id_load[i] - cpu / len(ids or ()))
                self._id_jobs[i] = max(0, self._id_jobs[i] - 1)

    def _choose(self, need: Need, live: Mapping[int, float]) -> tuple[int, float, float] | None:
        """(position, memory, load) of the GPU `need` goes to: where it fits, the fewest jobs,
        then the most memory left, then the lowest position."""
        budgets = [b.budget.free_mib for b in self._books if b.budget.free_mib is not None]
        largest = max(budgets, default=None)
        best: tuple[tuple[int, float, int], int, float, float] | None = None
        for pos, book in enumerate(self._books):
            if book.alone or (need.gpu_exclusive and book.jobs):
                continue
            free = book.budget.free_mib
            mib = need.gpu_mib if free is None or largest is None else min(need.gpu_mib, largest)
            load = min(need.gpu_load, book.budget.load)
            if free is not None and book.mib + mib > free + _SLACK:
                continue
            if book.load + live.get(pos, 0.0) + load > book.budget.load + _SLACK:
                continue
            left = (free - book.mib - mib) if free is not None else 0.0
            rank = (book.jobs, -left, pos)
            if best is None or rank < best[0]:
                best = (rank, pos, mib, load)
        return None if best is None else best[1:]

    def release(self, booking: Booking) -> None:
        self._free += booking.slots
        self._cpu_used = max(0.0, self._cpu_used - booking.cpu)
        self._mem_used = max(0.0, self._mem_used - booking.mem_mib)
        self._unpin(booking.cpu, booking.placement.cpus)
        if booking.exclusive:
            self._exclusive = False
            for book in self._books:
                book.jobs -= 1
                book.mib = book.load = 0.0
            return
        if booking.gpu is not None:
            book = self._books[booking.gpu]
            book.alone = book.alone and not booking.gpu_exclusive
            book.jobs -= 1
            book.mib = max(0.0, book.mib - booking.gpu_mib)
            book.load = max(0.0, book.load - booking.gpu_load)

    # --- reading ------------------------------------------------------------------------------

    def capacity(self, booking: Booking) -> float | None:
        """The busy-share capacity of the GPU `booking` runs on (None: none booked)."""
        if booking.gpu is None:
            return self.gpus[0].load if booking.exclusive and self.gpus else None
        return self._books[booking.gpu].budget.load

    @property
    def cpu_used(self) -> float:
        return self._cpu_used

    @property
    def mem_used(self) -> float:
        return self._mem_used

    def pinned(self) -> dict[int, int]:
        """CPU id -> the jobs pinned to it now (empty: none pinned)."""
        return dict(self._id_jobs)

    def booked(self) -> list[tuple[int | None, float, float, int]]:
        """(index, memory, load, jobs) booked on each GPU now."""
        return [(b.budget.index, b.mib, b.load, b.jobs) for b in self._books]

    def lines(self) -> list[str]:
        """The budgets, one line each, for the run's start: each GPU's, then the CPUs'."""
        out = []
        for book in self._books:
            budget = book.budget
            name = "gpu" if budget.index is None else f"gpu {budget.index}"
            mem = (
                "memory not accounted"
                if budget.free_mib is None
                else f"{budget.free_mib / 1024:.1f} GiB free"
            )
            out.append(f"{name}: {mem}, busy share {budget.load:g}")
        if self.cpus is None:
            out.append("cpu: not booked")
        else:
            pinned = (
                f"; each case pinned to ceil(share) of CPUs {cpu_list(self.cpu_ids)}"
                " (one without a share on record: unpinned)"
                if self.cpu_ids
                else "; not pinned"
            )
            out.append(
                f"cpu: {self.cpus:g} CPUs; a case holds its CPU share on record, an unknown one"
                f" {self.default_cpu or 0.0:.2f}{pinned}"
            )
        if self.mem_mib is None:
            out.append("memory: not booked")
        else:
            out.append(
                f"memory: {self.mem_mib / 1024:.1f} GiB available; a case holds its resident"
                f" peak on record, an unknown one {(self.default_mem or 0.0) / 1024:.2f} GiB"
            )
        return out
