"""A case's CPU demand: the time its process tree's threads ran or waited on a run queue, per
wall second (read at the usage sampler's polls, execute/usage.py; booked by execute/ledger.py).

Why demand and not CPU time: the ledger pins a case to ceil(its share) CPU ids, so its CPU time
can never exceed its pin; a case with 2 busy threads pinned to 1 CPU would read 1 and stay on 1
CPU for good. Its threads' run-queue wait is the demand beyond the pin, so it reads near 2.

What is counted, per process of the case's session (`read_tree`, `CpuDemand.add`):
- each thread's run + run-queue wait (`/proc/<pid>/task/<tid>/schedstat`, fields 1-2), its
  figure at the last poll that saw it;
- the process's CPU time (`/proc/<pid>/stat` utime + stime, every thread, ended ones too)
  beyond its polled threads' run time: threads that ended after their last poll or lived
  between two polls count their CPU time, without their wait;
- its reaped children's CPU time (cutime + cstime) beyond the figures of its children (and
  theirs) that a poll saw and that have ended since (credited to the nearest ancestor still
  alive): processes shorter than a poll count their CPU time, without their wait, and nothing
  is counted twice. A process reaped by one outside the case (re-parented to a subreaper of
  the tool) counts up to its last poll only.

Wait is demand only where the case caused it. With the CPU ledger on, whole shares get CPU ids
of their own, so a case waits behind its own threads (and briefly the tool's and the host's
other processes, or a fractional share packed on its id). With the ledger off
(CUDNN_MATRIX_CPU_LEDGER=0) cases share every CPU, and a thread also waits behind other cases:
a thread that is always runnable still reads 1 (its demand), but one that sleeps between bursts
reads higher than it would alone (its bursts stretched), at most 1 per thread; the next run
with the ledger on measures it again on its own CPUs. The share is capped at the CPUs this
process may run on. Without schedstat (a kernel without CONFIG_SCHED_INFO: no file, or zeros)
no thread's run time is known and a process counts its CPU time alone: the measure before
demand, which reads no more than a case's pin.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ["CpuDemand", "ProcSample", "read_tree"]

_CLK_TCK: Final = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE_MIB: Final = (os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096) / 2**20
_NS: Final = 1_000_000_000


@dataclass(frozen=True, kw_only=True, slots=True)
class ProcSample:
    """One process of a live case's session at one poll (times in ns; `born`: its start in
    ticks since boot; `threads`: tid -> (ran ns, waited ns), empty without schedstat)."""

    pid: int
    session: int
    ppid: int
    cpu_ns: int
    reaped_ns: int
    born: int
    rss_mib: float
    threads: dict[int, tuple[int, int]]


def read_tree(live: Mapping[int, int]) -> tuple[int, list[ProcSample]] | None:
    """(now in ticks since boot, the processes of the live sessions); None where /proc is not
    readable."""
    try:
        with open("/proc/uptime", encoding="ascii") as fh:  # noqa: PTH123 - hot path, no Path
            now = int(float(fh.read().split()[0]) * _CLK_TCK)
        entries = os.listdir("/proc")  # noqa: PTH208 - hot path (every poll), no Path
    except (OSError, ValueError, IndexError):
        return None
    found: list[ProcSample] = []
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:  # noqa: PTH123 - hot path, no Path
                data = fh.read()
            rest = data[data.rfind(b")") + 2 :].split()
            session = int(rest[3])  # fields 4 (ppid), 6 (session), 14-17 (utime, stime,
            if session not in live:  # cutime, cstime), 22 (starttime), 24 (rss, pages)
                continue
            sample = ProcSample(
                pid=int(name),
                session=session,
                ppid=int(rest[1]),
                cpu_ns=(int(rest[11]) + int(rest[12])) * _NS // _CLK_TCK,
                reaped_ns=(int(rest[13]) + int(rest[14])) * _NS // _CLK_TCK,
                born=int(rest[19]),
                rss_mib=int(rest[21]) * _PAGE_MIB,
                threads=_threads(name),
            )
        except (OSError, ValueError, IndexError):
            continue
        found.append(sample)
    return now, found


def _threads(pid: str) -> dict[int, tuple[int, int]]:
    """tid -> (ns on a CPU, ns waiting on a run queue) of the process's live threads."""
    out: dict[int, tuple[int, int]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")  # noqa: PTH208 - hot path, no Path
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as fh:  # noqa: PTH123
                ran, waited = (int(v) for v in fh.read().split()[:2])
        except (OSError, ValueError):
            continue  # ended since, or no schedstat: its CPU time counts through the process
        out[int(tid)] = (ran, waited)
    return out


@dataclass
class _Proc:
    ppid: int
    cpu_ns: int = 0
    reaped_ns: int = 0
    credited_ns: int = 0  # the last figures of its ended children, inside reaped_ns
    gone: bool = False


@dataclass
class CpuDemand:
    """One case's demand, folded poll by poll (`add`), read as a share (`share`)."""

    threads: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    procs: dict[int, _Proc] = field(default_factory=dict)
    born: int | None = None  # the earliest start of its processes (ticks since boot)
    seen_at: int | None = None  # the last poll that saw its processes (ticks since boot)

    def add(self, now: int, procs: Iterable[ProcSample]) -> None:
        """One poll's samples of this case's processes."""
        present: set[int] = set()
        for p in procs:
            present.add(p.pid)
            old = self.procs.get(p.pid)
            if old is not None and old.gone:  # the pid used again: the ended one stays counted
                self._retire(p.pid)
                old = None
            if old is None:
                old = self.procs[p.pid] = _Proc(ppid=p.ppid)
            old.ppid = p.ppid
            old.cpu_ns = max(old.cpu_ns, p.cpu_ns)
            old.reaped_ns = max(old.reaped_ns, p.reaped_ns)
            for tid, (ran, waited) in p.threads.items():
                was = self.threads.get((p.pid, tid), (0, 0))
                self.threads[p.pid, tid] = (max(was[0], ran), max(was[1], waited))
            self.born = p.born if self.born is None else min(self.born, p.born)
            self.seen_at = now
        for pid, proc in self.procs.items():
            if proc.gone or pid in present:
                continue
            proc.gone = True
            heir = self.procs.get(proc.ppid)
            while heir is not None and heir.gone:  # ended too: its reaper's figure holds both
                heir = self.procs.get(heir.ppid)
            if heir is not None:
                heir.credited_ns += proc.cpu_ns + proc.reaped_ns

    def _retire(self, pid: int) -> None:
        """Keep an ended process's figures under a key of their own (negative: no pid)."""
        key = -len(self.procs) - 1
        while key in self.procs:
            key -= 1
        self.procs[key] = self.procs.pop(pid)
        for tid in [t for p, t in self.threads if p == pid]:
            self.threads[key, tid] = self.threads.pop((pid, tid))

    def demand_ns(self, wall_ns: int) -> int:
        """Run + wait of every thread seen (at most `wall_ns` each: a thread never asks for more
        than one CPU; the polls' clock is read in ticks), plus the CPU time no polled thread
        accounts for."""
        ran: dict[int, int] = {}
        total = 0
        for (pid, _tid), (r, w) in self.threads.items():
            ran[pid] = ran.get(pid, 0) + r
            total += min(wall_ns, r + w)
        for pid, proc in self.procs.items():
            total += max(0, proc.cpu_ns - ran.get(pid, 0))
            total += max(0, proc.reaped_ns - proc.credited_ns)
        return total

    def share(self, cap: float) -> float | None:
        """Demand per wall second from its start to its last poll, at most `cap`; None: no
        wall time seen."""
        if self.born is None or self.seen_at is None or self.seen_at <= self.born:
            return None
        wall_ns = (self.seen_at - self.born) * _NS // _CLK_TCK
        return min(cap, self.demand_ns(wall_ns) / wall_ns)
