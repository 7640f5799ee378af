"""Run cases, each in its own process group, classify them and append every result as it lands.

A case is a pool job (execute/pool.py): `CaseBatch` turns one cell's cases into jobs, a failing
case's re-runs become follow-up jobs; `run_cases` hands cases to `execute/jobs.py` `run_jobs`,
the one step from cases to jobs (the `run` command, the runner inside a container). `validate`
puts the jobs of every cell into one pool (workflow.run_cells). On a GPU host the cases share
the visible GPU(s): their kernels compete for memory and SMs (no partitioning is done);
execute/slots.py bounds how many at once.

This module is the batching (a cell's cases as pool jobs, a pool run to the end) and the seam
the callers import (`RunOptions` and `run_case` are re-exported). The rest, by job:
execute/supervise.py (process groups, time limits, the fork servers, Ctrl-C: the one
`SUPERVISOR`), execute/attempt.py (one attempt and its verdict), execute/reruns.py (the re-run
policy: contention re-run alone, API-log re-run, --reruns and flaky).
"""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Final

from validate.errors import ResultsLost
from validate.execute.attempt import RunOptions
from validate.execute.history import History
from validate.execute.limits import case_timeout
from validate.execute.reruns import CaseRun, run_case
from validate.execute.slots import DEFAULT_GPU_LOAD, GPU_PER_CASE_MIB
from validate.execute.supervise import SUPERVISOR
from validate.model.outcome import POLICY, Outcome

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from validate.env.target import ExecTarget
    from validate.execute.cases import Case
    from validate.execute.ledger import Ledger
    from validate.execute.pool import Job, Pool
    from validate.execute.slots import CaseUsage, UsageSampler
    from validate.model.results import CaseResult, ResultStore

__all__ = [
    "FAILING",
    "CaseBatch",
    "RunOptions",
    "run_case",
    "run_cases",
    "run_pool",
    "usage_sampler",
]

log = logging.getLogger(__name__)

#: Outcomes that make `run` exit 1 (the blocking ones, before any known-issue check).
FAILING: Final = frozenset(o for o, p in POLICY.items() if p.blocking)


class CaseBatch:
    """The cases of one cell as pool jobs (resume applied); results go to `store` as they land."""

    def __init__(
        self,
        cases: Sequence[Case],
        target: ExecTarget,
        options: RunOptions,
        store: ResultStore,
        *,
        history: History | None = None,
        sampler: UsageSampler | None = None,
        on_result: Callable[[CaseResult, int, int], None] | None = None,
    ) -> None:
        self.cases, self.target, self.options, self.store = cases, target, options, store
        self.history = history if history is not None else History.load(options.history)
        self._sampler = sampler
        self._on_result = on_result
        self._lock = threading.Lock()
        self._stored: set[str] = set()  # the cases whose result this run stored
        self.results: list[CaseResult] = []
        previous: dict[str, CaseResult] = {}
        if options.resume:  # a stored result counts only for the same case content and pins
            stored = {r.key: r for r in store}
            for case in cases:
                old = stored.get(f"{target.cell_id}::{case.name}")
                if old is not None and old.content_key in ("", case.content_key(target.cell)):
                    previous[old.key] = old
        self.todo = [c for c in cases if f"{target.cell_id}::{c.name}" not in previous]
        self.kept = [previous[k] for c in cases if (k := f"{target.cell_id}::{c.name}") in previous]

    def jobs(self) -> list[Job]:
        """One job per case left to run, longest first by the history; on a GPU host each holds
        its recorded GPU peak (4 GiB unknown) of the pool's GPU budget and its recorded busy
        share of the pool's GPU load (`default_gpu_load` unknown). A case the history knows never
        gets a timeout below TIMEOUT_FLOOR times the duration of its last run that ended on its
        own (a timed-out run's is its limit, not its need)."""
        jobs = []
        for case in _longest_first(self.todo, self.history.durations):
            gpu = load = 0.0
            if self.target.has_gpu:
                gpu = self.history.gpu_estimate(case.name, GPU_PER_CASE_MIB)
                busy = self.history.busy_estimate(case.name)
                load = busy if busy is not None else default_gpu_load(self.history)
            estimate = self.history.estimate(case.name)
            cpu = self.history.cpu_estimate(case.name)  # None: the ledger's default (median)
            mem = self.history.rss_estimate(case.name)  # likewise
            took = self.history.finished_estimate(case.name)  # a run that ended on its own
            options = replace(self.options, timeout_s=case_timeout(self.options.timeout_s, took))
            run = CaseRun(case, self.target, options, self._finish, self._sampler, self.store)
            job = run.job(estimate, gpu, load, cpu, mem)
            job.stored = functools.partial(self._stored.__contains__, case.name)
            jobs.append(job)
        return jobs

    def _finish(self, result: CaseResult, usage: CaseUsage | None, alone: bool) -> None:
        with SUPERVISOR.recording() as live:
            if not live:  # interrupted: this case was killed by us, not by the product
                return
            self.store.append(result)
            self._stored.add(result.case)  # its job counts done if the stop comes now
        if result.outcome is not Outcome.SKIP:
            self.history.record(
                result.case,
                result.duration_s,
                usage.peak_mib if usage is not None else None,
                gpu_busy=usage.gpu_busy if usage is not None else None,
                saturated=usage is not None and usage.saturated() and not alone,
                timed_out=result.outcome is Outcome.TIMEOUT,
                cpu_share=usage.cpu_share if usage is not None else None,
                rss_mib=usage.rss_mib if usage is not None else None,
            )
        with self._lock:
            self.results.append(result)
            if self._on_result is not None:
                self._on_result(result, len(self.results), len(self.todo))

    def ordered(self) -> list[CaseResult]:
        """Kept and new results in the given case order."""
        order = {c.name: i for i, c in enumerate(self.cases)}
        return sorted(self.kept + self.results, key=lambda r: order.get(r.case, len(order)))


def run_pool(pool: Pool) -> None:
    """Run `pool` to the end; on Ctrl-C, or a results folder that broke (`ResultsLost`), end
    every running case (finished results are stored, --resume redoes the rest) and re-raise."""
    # the fork servers end last: on an interrupt the cases are ended (and no longer recorded)
    # first, so a case its server's end kills is never stored as a crash of its own
    with SUPERVISOR.session():
        try:
            pool.run()
        except (KeyboardInterrupt, ResultsLost):
            # what is running is ended, not recorded (a half-run case killed by us is not a
            # crash of the product): no result is stored from here on, the progress counts
            # those cases as cut, then they are killed
            SUPERVISOR.stop()
            pool.stop()
            SUPERVISOR.kill_all()
            raise


def usage_sampler(has_gpu: bool) -> UsageSampler:
    """A started sampler of what the live cases use: GPU memory and busy share where NVML or
    nvidia-smi answers (`has_gpu`), the host's CPUs everywhere."""
    from validate.execute.slots import UsageSampler

    return UsageSampler(SUPERVISOR.sessions, gpu=has_gpu).start()


def default_gpu_load(history: History) -> float:
    """The GPU load a case the history does not know is expected to add: the median busy share
    on record, else DEFAULT_GPU_LOAD."""
    typical = history.typical_gpu_busy()
    return typical if typical is not None else DEFAULT_GPU_LOAD


def run_cases(
    cases: Sequence[Case],
    target: ExecTarget,
    options: RunOptions,
    store: ResultStore,
    *,
    on_result: Callable[[CaseResult, int, int], None] | None = None,
    ledger: Ledger | None = None,
) -> list[CaseResult]:
    """Run every case in a pool of `options.jobs` slots (one process group each), storing each
    result as it finishes; returns them in the given order (with the kept ones on resume).
    The one step from cases to jobs, `execute/jobs.py` `run_jobs` (`ledger` as there)."""
    from validate.execute.jobs import run_jobs  # same stage; jobs.py builds on this module

    return run_jobs(cases, target, options, store, ledger=ledger, on_result=on_result)


def _longest_first(cases: Sequence[Case], history: Mapping[str, float]) -> list[Case]:
    """Cases with the longest known duration start first (a long case started last is the tail
    of the whole run); unknown cases count as longest, ties keep the given order."""
    return sorted(cases, key=lambda c: -history.get(c.name, float("inf")))
