"""Cases to pool jobs, once: the one step every executor takes from a cell's cases to the jobs the
run's pool runs, and the one place `RunOptions` are built from a config.

- a file kind's cases (a notebook, a script, a kind planted in a test): one job per case
  (`runner.CaseBatch`: resume, the history's estimate, GPU and CPU figures, the case's limit from
  execute/limits.py, its re-runs as follow-up jobs);
- a batched kind's case (a pytest suite, a C++ project): its kind's `suite(case)` run by
  `suite.SuiteRun`, one job per share of its tests (a C++ project: after one job that builds
  and lists it).

The local executor hands each cell's jobs to the run's pool; the runner inside a docker cell's
container runs the same jobs in a pool of its own (`run_jobs`), so a container runs suites as the
host does; the `run` command runs its cases and its `--tests` suite the same way (`run_jobs`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from validate.execute.attempt import RunOptions
from validate.execute.cases.kinds import KINDS, BatchedKind
from validate.execute.history import History
from validate.execute.pool import Pool
from validate.execute.runner import CaseBatch, run_pool, usage_sampler
from validate.execute.slots import GPU_CAPACITY
from validate.execute.suite import SuiteRun

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from validate.config import ValidateConfig
    from validate.env.target import ExecTarget
    from validate.execute.cases import Case
    from validate.execute.ledger import Ledger
    from validate.execute.pool import Job, PoolStats
    from validate.execute.slots import UsageSampler
    from validate.model.results import CaseResult, ResultStore

__all__ = ["CellJobs", "cell_jobs", "run_jobs", "run_options"]


def run_options(
    config: ValidateConfig,
    *,
    results_dir: Path,
    run_id: str,
    slots: int,
    history: Path | None = None,
    resume: bool | None = None,
) -> RunOptions:
    """How the cases of a run go, from its config (`resume` None: the config's)."""
    return RunOptions(
        timeout_s=config.timeout_s,
        capture_cap=config.capture_cap,
        cpp_build_timeout_s=config.cpp_build_timeout_s,
        tests_startup_timeout_s=config.tests_startup_timeout_s,
        jobs=slots,
        reruns=config.reruns,
        results_dir=results_dir,
        resume=config.resume if resume is None else resume,
        api_logs=config.api_logs,
        run_id=run_id,
        history=history,
    )


class CellJobs:
    """One cell's cases as pool jobs (`jobs`), and their results once they ran (`results`)."""

    def __init__(
        self,
        cases: Sequence[Case],
        target: ExecTarget,
        options: RunOptions,
        store: ResultStore,
        *,
        history: History,
        slots: int,
        sampler: UsageSampler | None = None,
        on_result: Callable[[CaseResult, int, int], None] | None = None,
    ) -> None:
        files = [c for c in cases if not KINDS[c.kind].batched]
        self.suites = [
            SuiteRun(
                _batched(case).suite(case),
                target,
                options,
                store,
                slots=slots,
                history=history,
            )
            for case in cases
            if KINDS[case.kind].batched
        ]
        self.batch = (
            CaseBatch(
                files,
                target,
                options,
                store,
                history=history,
                sampler=sampler,
                on_result=on_result,
            )
            if files
            else None
        )

    @property
    def queued(self) -> int:
        """File cases left to run (resume applied); a suite's tests are known once collected."""
        return len(self.batch.todo) if self.batch is not None else 0

    def jobs(self) -> list[Job]:
        jobs: list[Job] = []
        for suite in self.suites:
            jobs += suite.jobs()
        if self.batch is not None:
            jobs += self.batch.jobs()
        return jobs

    def results(self) -> list[CaseResult]:
        """Kept and new results: the file cases' in the given order, then each suite's."""
        out = self.batch.ordered() if self.batch is not None else []
        for suite in self.suites:
            out += suite.results
        return out


def _batched(case: Case) -> BatchedKind:
    kind = KINDS[case.kind]
    if not isinstance(kind, BatchedKind):
        msg = f"case kind {kind.name!r} is batched but gives no suite (cases/kinds.py BatchedKind)"
        raise TypeError(msg)
    return kind


def cell_jobs(
    cases: Sequence[Case],
    target: ExecTarget,
    options: RunOptions,
    store: ResultStore,
    *,
    history: History,
    slots: int,
    sampler: UsageSampler | None = None,
    on_result: Callable[[CaseResult, int, int], None] | None = None,
) -> CellJobs:
    """One cell's cases (`target` stamped with the cell) as pool jobs: see the module doc."""
    return CellJobs(
        cases,
        target,
        options,
        store,
        history=history,
        slots=slots,
        sampler=sampler,
        on_result=on_result,
    )


def run_jobs(
    cases: Sequence[Case],
    target: ExecTarget,
    options: RunOptions,
    store: ResultStore,
    *,
    ledger: Ledger | None = None,
    on_result: Callable[[CaseResult, int, int], None] | None = None,
    on_change: Callable[[PoolStats], None] | None = None,
) -> list[CaseResult]:
    """Every case of one environment (any kind) in a pool of its own, `options.jobs` slots:
    the runner inside a docker cell's container, and the `run` command. The history is
    `options.history`'s. `ledger`: the account of each GPU and the CPUs
    (execute/slots.plan_ledger); None: one unplaced GPU's busy share where the target has a
    GPU, no CPU booked. `on_result`: each file case's result as it lands (done, total);
    `on_change`: the pool's counts as they move (a suite's tests are known once collected)."""
    history = History.load(options.history)
    sampler = usage_sampler(target.has_gpu)
    work = cell_jobs(
        cases,
        target,
        options,
        store,
        history=history,
        slots=options.jobs,
        sampler=sampler,
        on_result=on_result,
    )
    pool = Pool(
        options.jobs,
        gpu_load=GPU_CAPACITY if target.has_gpu else None,
        ledger=ledger,
        on_change=on_change,
    )
    pool.submit(work.jobs())
    pool.close()
    try:
        run_pool(pool)
    finally:
        sampler.stop()
    history.save()
    return work.results()
