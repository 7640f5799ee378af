"""LocalExecutor: each step's pinned venv built (or reused) on this host, its cases run there.

Orchestration stays in this process (validate.execute.runner); each case runs in the step's
interpreter (`ExecTarget.python`) with the environment's overlay added, so a cell environment
needs only the case's own packages. `run` returns one pool job per case (the run's one pool).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Final

from validate.env.sources import BackendSource, FrontendSource, short_version
from validate.env.venvs import EnvSpec, cache_root, ensure_env
from validate.errors import EnvBuildError
from validate.execute.history import History
from validate.execute.jobs import cell_jobs, run_options
from validate.execute.records import record_all
from validate.execute.suite import pytest_requirement
from validate.execute.supervise import SUPERVISOR
from validate.log import step as log_step
from validate.model.matrix import env_pins
from validate.model.outcome import Outcome
from validate.plan.host import gpu_skip_reason

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from validate.config import ValidateConfig
    from validate.env.sources import Sources
    from validate.env.target import ExecTarget
    from validate.execute import RunContext
    from validate.execute.cases import Case
    from validate.execute.pool import Job
    from validate.model.matrix import Cell
    from validate.model.results import CaseResult
    from validate.plan.steps import Step

__all__ = ["LocalExecutor", "env_spec_for"]

log = logging.getLogger(__name__)

_REASON_TAIL: Final = 12  # lines of an install log kept in an `error` result's reason
#: How long a build that a signal ended waits for the tool's stop before it is called failed.
_STOP_GRACE_S: Final = 5.0


def env_spec_for(cell: Cell, config: ValidateConfig, sources: Sources) -> EnvSpec:
    """The environment a cell needs: its env pins (`model.matrix.env_pins`: cudnn, frontend,
    cuda, python) decide it; driver and arch do not change what is installed."""
    pins = env_pins(cell)
    cudnn, cuda = pins.pop("cudnn"), pins.pop("cuda")
    frontend_version, python_version = pins.pop("frontend"), pins.pop("python", None)
    if pins:  # an axis marked `env` that no EnvSpec field installs: cells would share a venv
        msg = f"env_spec_for: env axes {', '.join(pins)} do not reach the EnvSpec"
        raise NotImplementedError(msg)
    current = config.env_mode == "current"
    backend: BackendSource
    if parsed := sources.backend(cudnn, cuda):
        backend = parsed
    elif current:
        backend = BackendSource(kind="current", version=cudnn)
    else:
        backend = BackendSource(kind="pypi", version=cudnn)
    frontend = sources.frontend() or FrontendSource(kind="pypi", version=frontend_version)
    base = {"current": config.base_python, "isolated": "isolated"}.get(
        config.env_mode, "system-site-packages"
    )
    extras = config.extras
    if config.tests is not None and not (backend.kind == "current" and frontend.kind == "current"):
        # the suite runs in the cell's environment: pytest goes in (the tool's version in an
        # isolated one; none where a base interpreter under it has pytest, `pytest_requirement`);
        # an environment taken as it is, --env current with the frontend current, has its own
        wanted = pytest_requirement(isolated=base == "isolated", base=config.base_python)
        extras = extras if wanted is None else (*extras, wanted)
    return EnvSpec(
        backend=backend,
        frontend=frontend,
        cuda_major=int(cuda.split(".")[0]),
        python=config.base_python,
        python_version=python_version,
        extras=extras,
        base=base,
        backend_deps=config.backend_deps and not current,
    )


class LocalExecutor:
    """One venv per distinct EnvSpec (cached across runs by its hash); cases run on this host."""

    name = "local"

    def __init__(self, *, ensure: Callable[[EnvSpec], ExecTarget] | None = None) -> None:
        self._ensure = ensure  # None: ensure_env with the run's cache, wheelhouse and installer

    def available(self) -> bool:
        return True

    def close(self) -> None:
        """Nothing is held between steps."""

    def check(self, config: ValidateConfig) -> None:
        """Every option applies here."""

    def env_key(self, cell: Cell, run: RunContext) -> str:
        if run.sources.unavailable(cell.cudnn, cell.cuda):  # prepare reports why
            return f"unavailable:{cell.cudnn}:{cell.cuda}"
        return env_spec_for(cell, run.config, run.sources).hash

    def prepare(self, step: Step, run: RunContext) -> ExecTarget | str:
        config = run.config
        if why := run.sources.unavailable(step.first.cudnn, step.first.cuda):
            log.error("%s", why)
            return why  # every case of the step's cells: `error` with this reason
        spec = env_spec_for(step.first, config, run.sources)
        try:
            with log_step(f"environment for {step.first.label}"):
                target = (
                    self._ensure(spec)
                    if self._ensure is not None
                    else ensure_env(
                        spec,
                        config.cache_dir,
                        config.wheelhouse,
                        installer=config.installer,  # type: ignore[arg-type]
                    )
                )
        except EnvBuildError as exc:  # the step's cases become `error`; the run goes on
            if exc.signalled and SUPERVISOR.stopping(within_s=_STOP_GRACE_S):
                raise KeyboardInterrupt from None  # the tool's stop ended the build: no verdict
            lines = str(exc).strip().splitlines() or ["?"]
            reason = "\n".join(
                [f"environment build failed: {lines[0]}", *lines[1:][-_REASON_TAIL:]]
            )
            log.error("%s", reason)
            return reason
        # every case process must load the cell's backend (the step's cells share it)
        return replace(
            target, expected_backend=target.expected_backend or short_version(step.first.cudnn)
        )

    def run(
        self, step: Step, target: ExecTarget, cases: Sequence[Case], run: RunContext
    ) -> list[Job]:
        """One pool job per case of each cell, in the step's environment. Without a GPU the pins
        are all a cell checks, and they are the same for every cell of the step: only the first
        one runs."""
        config = run.config
        history_path = cache_root(config.cache_dir) / "durations.json"
        # resume on: the store may already hold this run's results (resume or skip records)
        options = run_options(
            config,
            results_dir=run.results_dir,
            run_id=run.run_id,
            slots=run.slots,
            history=history_path,
            resume=True,
        )
        history = run.history if run.history is not None else History.load(history_path)
        no_gpu = gpu_skip_reason(run.host)
        jobs: list[Job] = []
        for cell in step.cells:
            if no_gpu and cell is not step.first:
                reason = f"{no_gpu}: pins checked in cell {step.first.id} (same environment)"
                record_all(run.store, cell, cases, Outcome.SKIP, reason, run.run_id)
                continue
            work = cell_jobs(
                cases,
                target.for_cell(cell, run.host),
                options,
                run.store,
                history=history,
                slots=run.slots,
                sampler=run.sampler,
                on_result=_cell_done(cell),
            )
            if work.batch is not None:
                log.info("cell %s: %s (%d cases queued)", cell.id, cell.label, work.queued)
            jobs += work.jobs()
        return jobs


def _cell_done(cell: Cell) -> Callable[[CaseResult, int, int], None]:
    """Logs one line when the cell's last case has ended."""

    def seen(result: CaseResult, done: int, total: int) -> None:  # noqa: ARG001 - on_result's
        if done == total:
            log.info("cell %s: its %d cases ended", cell.id, total)

    return seen
