"""One pool of case slots for a whole run: every slot busy from the first case to the last.

Jobs come from every cell (`Pool.submit`, from any thread, while the pool runs: the workflow
submits a cell's jobs as soon as its environment is ready) and start longest first by their
estimate (the duration history across cells; a job without one counts as longest, ties keep
submission order). A job may return follow-up jobs (a failing case's API-log re-run and its
`--reruns`); they go into the same queue. What a job holds while it runs is the ledger's
(execute/ledger.py, the pool's one account of resources): `slots` slots (a case one, a docker
cell's container as many as it runs at once), its `cpu` share of the host's CPUs, its `mem_mib`
of the host's memory, and on one GPU
its `gpu_mib` of that GPU's free memory and its `gpu_load` (its recorded GPU busy share) of that
GPU's capacity; the booking's placement (applied in the job's thread by `launch.placed`) is the
GPU and the CPU ids its processes are pinned to. A `gpu_exclusive` job (a case that must have its GPU to itself) holds
one whole GPU while the others run other jobs. An `exclusive` job (a contended case's alone
re-run) holds everything: it runs with nothing beside it. Both queue after all other jobs (and
`defer` jobs after them, so that the exclusive jobs run back to back).
`beside()` tells a job's thread how many jobs ran beside it so far and the summed load of those
on its GPU (the runner's contention rule). The queue's order is kept: a job that does not fit
yet waits, and those behind it wait too (no job starves). Nothing here knows about results: jobs
store their own (the store is thread-safe).
`stop()` (an interrupt) freezes the count: the jobs running then are cut, not done, but for those
whose result is stored already (`Job.stored`: stored before the stop, the thread not yet back).

Critical path: a job whose estimate is at least the work left per slot (the estimates of the
queued, running and announced jobs over the slots) bounds the run's wall time however the rest is
packed. It
runs at the normal CPU priority; a job started while such a job runs is marked to yield
(`yield_nice()` in its thread: the runner lowers its processes' priority by that much), so the
long case is not slowed by the short ones beside it where the cores are shared (the default
slots are two per CPU). Without a history no job is critical and nothing changes.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from validate.execute.launch import placed
from validate.execute.ledger import GpuBudget, Ledger, Need
from validate.execute.placement import UNPLACED, Placement

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from validate.execute.ledger import Booking

__all__ = ["YIELD_NICE", "Beside", "Job", "Pool", "PoolStats", "beside", "watch", "yield_nice"]

log = logging.getLogger(__name__)

_DEFAULT_ESTIMATE_S = 30.0  # for the ETA, before any job with no history has finished
#: How much a job started beside a critical-path job lowers its CPU priority (nice increment).
YIELD_NICE: Final = 10

_THREAD = threading.local()  # the running job's nice increment, in the thread that runs it


def yield_nice() -> int:
    """The nice increment for processes the calling thread starts: the pool's job thread of a
    job that yields to a critical-path job, else 0."""
    return int(getattr(_THREAD, "nice", 0))


@dataclass(frozen=True, kw_only=True)
class Beside:
    """What ran beside a job so far: the most other jobs at once, the largest summed GPU load of
    those, and the pool's GPU load bound (None: not accounted)."""

    others: int = 0
    others_load: float = 0.0
    capacity: float | None = None


def watch(live: Callable[[], float | None]) -> None:
    """Tell the pool how to read the calling thread's job's GPU load now (the runner, once its
    case process runs); the pool counts the larger of that and the job's expected load."""
    running = getattr(_THREAD, "running", None)
    if running is not None:
        running.live = live


def beside() -> Beside:
    """What ran beside the calling thread's job so far (a thread that is no pool job: nothing)."""
    running = getattr(_THREAD, "running", None)
    if running is None:
        return Beside()
    return Beside(others=running.beside, others_load=running.beside_load, capacity=running.capacity)


@dataclass(eq=False, kw_only=True)
class Job:
    """One unit of work in the pool; `run` returns the follow-up jobs (none: `()`)."""

    name: str
    run: Callable[[], Sequence[Job]]
    estimate_s: float | None = None  # seconds from the history; None: unknown (starts first)
    slots: int = 1
    cases: int = 1  # cases it stands for in the progress (a re-run 0, a docker cell its cases)
    gpu_mib: float = 0.0  # GPU memory it holds while it runs (its recorded peak, or an estimate)
    gpu_load: float = 0.0  # GPU busy share it holds while it runs (recorded, or an estimate)
    #: CPU share it holds while it runs (CPU seconds per wall second, recorded); None: the
    #: ledger's default (the median on record)
    cpu: float | None = None
    #: host memory (MiB) it holds while it runs (its resident peak on record); None: the
    #: ledger's default (the median on record)
    mem_mib: float | None = None
    exclusive: bool = False  # runs with no other job beside it (holds every slot and all load)
    #: has its GPU to itself (a case declared exclusive); the other GPUs run other jobs
    gpu_exclusive: bool = False
    #: queued after the exclusive jobs too (the re-runs of a case judged by its alone re-run: run
    #: between two exclusive jobs, each would hold the next one back)
    defer: bool = False
    #: a job of many cases that counts them as it goes (a pytest share: `cases` is 0 until its
    #: end): (stored, expected) while it runs, so the progress line moves with its results
    live: Callable[[], tuple[int, int]] | None = None
    #: whether its case's result is stored already (a case: its runner says so): an interrupt
    #: while its job is still running counts it done, not cut (the result was stored before the
    #: stop, the job's thread had not yet come back to the pool)
    stored: Callable[[], bool] | None = None
    #: set by the pool it is queued in: a `live` job calls it when its count moved, so the
    #: progress line (plain: at most every 30 s) moves while no job starts or ends
    moved: Callable[[], None] | None = None
    #: where its processes run, if the job names it itself (a test's CPU pin); what it leaves
    #: None (UNPLACED: all) is where the ledger booked it (execute/ledger.py: its GPU and its
    #: CPU ids). The launcher applies it to every process the job starts (`launch.placed`)
    placement: Placement = UNPLACED


def _merged(named: Placement, booked: Placement) -> Placement:
    """The job's own placement where it names one, the ledger's booking for the rest."""
    if named == UNPLACED:
        return booked
    gpus = named.gpus if named.gpus is not None else booked.gpus
    cpus = named.cpus if named.cpus is not None else booked.cpus
    return Placement(gpus=gpus, cpus=cpus)


@dataclass(frozen=True, kw_only=True)
class PoolStats:
    """Where the pool stands: for the progress line."""

    done: int
    running: int
    left: int
    eta_s: float | None  # None: no basis for one yet (no history, nothing finished), or stopped
    slots: int
    cut: int = 0  # cases that were running when the pool was stopped (an interrupt)
    stopped: bool = False


@dataclass
class _Running:
    job: Job
    started: float
    booking: Booking
    critical: bool = False
    nice: int = 0
    capacity: float | None = None
    beside: int = 0  # the most other jobs that ran at once beside it
    beside_load: float = 0.0  # the largest summed GPU load of those
    live: Callable[[], float | None] | None = None  # its GPU load measured now (`watch`)


@dataclass
class _State:
    queue: list[tuple[int, float, int, Job]] = field(default_factory=list)
    running: dict[int, _Running] = field(default_factory=dict)
    done: int = 0
    durations: list[float] = field(default_factory=list)
    error: BaseException | None = None
    open: bool = True
    pending: int = 0  # cases announced (`expect`) whose jobs have not come yet
    pending_s: float | None = None  # their estimated seconds in all (None: unknown)
    stopped: bool = False
    cut: int = 0


class Pool:
    """`slots` slots; `run()` dispatches until `close()` was called and every job has ended."""

    def __init__(
        self,
        slots: int,
        *,
        gpu_mib: float | None = None,
        gpu_load: float | None = None,
        ledger: Ledger | None = None,
        on_change: Callable[[PoolStats], None] | None = None,
        yield_nice: int | None = None,
    ) -> None:
        """`ledger`: the account of each GPU and of the host (execute/ledger.py); without one,
        `gpu_mib` and `gpu_load` are one unplaced GPU's budget (None: not accounted) and the
        CPUs are not booked."""
        if ledger is None:
            budget = GpuBudget(
                index=None,
                free_mib=gpu_mib,
                load=gpu_load if gpu_load is not None else float("inf"),
            )
            gpus = [budget] if gpu_mib is not None or gpu_load is not None else []
            ledger = Ledger(slots, gpus=gpus)
        self.ledger = ledger
        self.slots = ledger.slots
        self.yield_nice = YIELD_NICE if yield_nice is None else yield_nice  # 0: never yield
        self._on_change = on_change
        self._cond = threading.Condition()
        self._state = _State()
        self._seq = itertools.count()

    # --- feeding ------------------------------------------------------------------------------

    def submit(self, jobs: Iterable[Job], *, announced: int = 0) -> None:
        """Queue jobs (any thread, also while running); longest estimate first. `announced`:
        the cases `expect` announced for them, withdrawn now that they are here."""
        with self._cond:
            for job in jobs:
                self._push(job)
            state = self._state
            before = state.pending
            state.pending = max(0, before - announced)
            if state.pending_s is not None and before:
                state.pending_s *= state.pending / before
            self._cond.notify_all()
        self._changed()

    def expect(self, cases: int, seconds: float | None = None) -> None:
        """Announce `cases` jobs that will come (a cell whose environment is being prepared), so
        the progress counts them as left (and `seconds` of work, if known, in the ETA); a
        negative number withdraws (the cell never ran)."""
        with self._cond:
            state = self._state
            before = state.pending
            state.pending = max(0, before + cases)
            if seconds is not None and cases > 0:
                state.pending_s = (state.pending_s or 0.0) + seconds
            elif state.pending_s is not None and before:  # withdrawn: its share of the estimate
                state.pending_s *= state.pending / before
        self._changed()

    def _push(self, job: Job) -> None:
        """Queue `job`: longest estimate first (unknown first), exclusive jobs after all others,
        deferred ones after those."""
        key = -(job.estimate_s if job.estimate_s is not None else float("inf"))
        tier = 2 if job.defer else int(job.exclusive or job.gpu_exclusive)
        job.moved = self._changed
        heapq.heappush(self._state.queue, (tier, key, next(self._seq), job))

    @staticmethod
    def _need(job: Job) -> Need:
        """What `job` asks the ledger for while it runs."""
        return Need(
            slots=job.slots,
            gpu_mib=job.gpu_mib,
            gpu_load=job.gpu_load,
            cpu=job.cpu,
            mem_mib=job.mem_mib,
            exclusive=job.exclusive,
            gpu_exclusive=job.gpu_exclusive,
        )

    def close(self) -> None:
        """No job will be submitted from outside any more (follow-ups still are)."""
        with self._cond:
            self._state.open = False
            self._cond.notify_all()

    def stop(self) -> None:
        """Start nothing more, and count what is running now as cut, not done (an interrupt:
        those cases are being killed and their results are not stored)."""
        with self._cond:
            state = self._state
            if not state.stopped:
                state.stopped = True
                for item in state.running.values():
                    if item.job.stored is not None and item.job.stored():
                        state.done += item.job.cases
                    else:
                        state.cut += item.job.cases
            self._cond.notify_all()
        self._changed()

    def fail(self, exc: BaseException) -> None:
        """Stop dispatching; `run` raises `exc` (a feeder thread's error)."""
        with self._cond:
            if self._state.error is None:
                self._state.error = exc
            self._cond.notify_all()

    # --- running ------------------------------------------------------------------------------

    def run(self) -> None:
        """Dispatch in this thread until closed and drained; a job's exception is raised here
        (after no new job starts; running ones are left to the caller's interrupt handling)."""
        state = self._state
        while True:
            with self._cond:
                while True:
                    if state.error is not None:
                        raise state.error
                    if state.stopped:
                        return
                    if state.queue:
                        job = state.queue[0][3]
                        booking = self.ledger.book(self._need(job), self._live())
                        if booking is not None:
                            heapq.heappop(state.queue)
                            break
                    elif not state.open and not state.running:
                        return
                    self._cond.wait()
                ident = next(self._seq)
                now = time.monotonic()
                critical = self._critical(job, now)
                yields = any(item.critical for item in state.running.values())
                nice = self.yield_nice if yields and not critical else 0
                capacity = self.ledger.capacity(booking)
                if capacity == float("inf"):
                    capacity = None
                state.running[ident] = _Running(job, now, booking, critical, nice, capacity)
                self._count_beside()
                told = critical and bool(state.queue or state.pending)  # others will run beside
            if told:
                log.info(
                    "critical path: %s (%.0fs by the history); cases started beside it run at"
                    " nice +%d",
                    job.name,
                    job.estimate_s,
                    self.yield_nice,
                )
            thread = threading.Thread(
                target=self._work, args=(ident,), name=f"pool:{job.name}", daemon=True
            )
            thread.start()
            self._changed()

    def _live(self) -> dict[int, float]:
        """GPU position -> the busy share its running jobs are measured to use now beyond what
        they booked (`watch`: a job the history did not know shows its real weight once its
        kernels run); the ledger counts the larger of the two."""
        extra: dict[int, float] = {}
        for item in self._state.running.values():
            gpu = item.booking.gpu
            if item.live is None or gpu is None:
                continue
            more = (item.live() or 0.0) - item.booking.gpu_load
            if more > 0:
                extra[gpu] = extra.get(gpu, 0.0) + more
        return extra

    def _count_beside(self) -> None:
        """Every running job has now had the others beside it (for `beside()`): all of them,
        and the summed GPU load of those on its own GPU."""
        running = list(self._state.running.values())
        per_gpu: dict[int | None, float] = {}
        for item in running:
            gpu = item.booking.gpu
            per_gpu[gpu] = per_gpu.get(gpu, 0.0) + item.booking.gpu_load
        others = len(running) - 1
        for item in running:
            item.beside = max(item.beside, others)
            if item.booking.exclusive:
                continue
            mine = per_gpu.get(item.booking.gpu, 0.0) - item.booking.gpu_load
            item.beside_load = max(item.beside_load, mine)

    def _critical(self, job: Job, now: float) -> bool:
        """Whether `job` (just taken off the queue) is on the critical path: its estimate is at
        least the work left per slot (queued, running, announced, itself included; a job alone
        always is). A job without an estimate counts as the mean so far, as in the ETA."""
        if job.estimate_s is None or self.yield_nice <= 0:
            return False
        default = self._default_s()
        work = job.estimate_s * self.ledger.slots_of(self._need(job))
        for *_, other in self._state.queue:
            seconds = other.estimate_s if other.estimate_s is not None else default
            work += seconds * self.ledger.slots_of(self._need(other))
        work += self._left_outside_queue(now, default)[0]
        return job.estimate_s >= work / self.slots

    def _default_s(self) -> float:
        """What a job without an estimate counts as: the mean of the jobs finished so far."""
        known = self._state.durations
        return sum(known) / len(known) if known else _DEFAULT_ESTIMATE_S

    def _left_outside_queue(self, now: float, default: float) -> tuple[float, float]:
        """The slot-seconds the running jobs still hold plus the announced cells' work, and the
        longest rest of a running job (for the ETA and the critical-path test)."""
        state = self._state
        work = longest = 0.0
        for item in state.running.values():
            estimate = item.job.estimate_s if item.job.estimate_s is not None else default
            rest = max(0.0, estimate - (now - item.started))
            work += rest * item.booking.slots
            longest = max(longest, rest)
        if state.pending:  # cells still preparing their environment
            work += state.pending_s if state.pending_s is not None else default * state.pending
        return work, longest

    def _work(self, ident: int) -> None:
        running = self._state.running[ident]
        job = running.job
        _THREAD.nice = running.nice  # a thread per job: read by the runner when it spawns
        _THREAD.running = running  # what ran beside it: `beside()`
        follow: Sequence[Job] = ()
        error: BaseException | None = None
        try:
            where = _merged(job.placement, running.booking.placement)
            with placed(where):  # every process the job starts runs there (launch.py)
                follow = job.run()
        except BaseException as exc:  # noqa: BLE001 - raised again in the dispatching thread
            error = exc
        with self._cond:
            state = self._state
            del state.running[ident]
            self.ledger.release(running.booking)
            if state.stopped:  # cut: counted by stop(), and nothing follows
                follow = ()
            else:
                state.done += job.cases
                if job.cases == 1:
                    state.durations.append(time.monotonic() - running.started)
            if error is not None and state.error is None:
                state.error = error
            for extra in follow:
                self._push(extra)
            self._cond.notify_all()
        self._changed()

    # --- progress -----------------------------------------------------------------------------

    def stats(self) -> PoolStats:
        with self._cond:
            state = self._state
            default = self._default_s()
            queued = [job for *_, job in state.queue]
            work = [j.estimate_s if j.estimate_s is not None else default for j in queued]
            rest, longest = self._left_outside_queue(time.monotonic(), default)
            longest = max(max(work, default=0.0), longest)
            busy = work or state.running or state.pending
            eta = max((sum(work) + rest) / self.slots, longest) if busy else 0.0
            # No ETA without a basis: a case finished in this run, or an estimate from the
            # history. A cold start would show N x the 30 s default (57:30 for a 30 s run).
            jobs = [*queued, *(r.job for r in state.running.values())]
            based = (
                not busy
                or bool(state.durations)
                or state.pending_s is not None
                or any(j.estimate_s is not None for j in jobs)
            )
            done, running, left = state.done, 0, sum(j.cases for j in queued) + state.pending
            for item in state.running.values():
                if item.job.live is None:
                    running += item.job.cases
                    continue
                stored, expected = item.job.live()  # a share: one test at a time, the rest left
                done += stored
                running += 1 if expected > stored else 0
                left += max(0, expected - stored - 1)
            return PoolStats(
                done=done,
                running=0 if state.stopped else running,
                left=left,
                eta_s=None if state.stopped or not based else eta,
                slots=self.slots,
                cut=state.cut,
                stopped=state.stopped,
            )

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self.stats())
