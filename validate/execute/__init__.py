"""Executors: where and how a step's cases run (this host's venvs, a cell's container, ...).

`validate` calls every executor the same way (workflow.run_cells): `check` refuses options it
cannot honour, the cells are grouped into steps by `env_key` (plan.steps), and one background
thread makes each step's environment ready with `prepare`, in plan order, while the cases of
earlier steps run: a build never holds a case slot. Then `run` hands over the step's work:
either it returns pool jobs (execute/pool.py), which go into the one pool of the run with every
other cell's (the local executor: one job per case; docker: one job per cell, holding as many
slots as its container runs cases at once), or it runs the work itself and returns None (an
executor that submits elsewhere, e.g. a batch system); it runs in the preparing thread then, so
it should return soon. Either way each case's result is appended to `RunContext.store` as it
lands (the store is thread-safe). Adding an executor (CI pipeline, Slurm, ...) is one module
here and one line in `EXECUTORS`; the CLI's `--executor` choices follow the registry.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

from validate.env.target import ExecTarget
from validate.errors import ConfigError
from validate.execute.classify import ExecResult

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from validate.config import ValidateConfig
    from validate.env.sources import Sources
    from validate.execute.cases import Case
    from validate.execute.history import History
    from validate.execute.pool import Job
    from validate.execute.slots import UsageSampler
    from validate.model.matrix import Cell
    from validate.model.results import ResultStore
    from validate.plan.host import HostFacts
    from validate.plan.steps import Step

__all__ = [
    "EXECUTORS",
    "ExecResult",
    "ExecTarget",
    "Executor",
    "RunContext",
    "docker_gpu_ready",
    "resolve_executor",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class RunContext:
    """What every step of one run shares: its config (built once), host, id, sources and store."""

    config: ValidateConfig
    host: HostFacts
    run_id: str
    sources: Sources  # --backend-source / --frontend-source, parsed once for the run
    store: ResultStore  # results go here as they land (known issues are judged at the run's end)
    slots: int = 1  # the run's pool size (execute/slots.py, or --jobs)
    history: History | None = None  # durations and GPU peaks by case name, shared by all cells
    sampler: UsageSampler | None = None  # what the live cases use (GPU via NVML, host CPU)

    @property
    def results_dir(self) -> Path:
        """The run folder (the store's folder): evidence goes below it."""
        return self.store.path.parent


@runtime_checkable
class Executor(Protocol):
    """Runs the steps of a `validate` run; a failing case is a result, never an exception."""

    name: str

    def available(self) -> bool:
        """Whether this executor can run here (e.g. a docker daemon answers)."""
        ...

    def check(self, config: ValidateConfig) -> None:
        """Refuse, with a ConfigError, options this executor cannot honour (before any work)."""
        ...

    def env_key(self, cell: Cell, run: RunContext) -> str:
        """The identity of the environment `cell` needs: cells with equal keys share a step."""
        ...

    def prepare(self, step: Step, run: RunContext) -> ExecTarget | str:
        """Build or reuse the step's environment; a string is why it could not be (then every
        case of every cell of the step is stored as `error` with that reason)."""
        ...

    def run(
        self, step: Step, target: ExecTarget, cases: Sequence[Case], run: RunContext
    ) -> Sequence[Job] | None:
        """`cases` for each cell of `step` in `target`: the pool jobs that run them (each job
        appends its results to `run.store`), or None when this call ran them itself."""
        ...

    def close(self) -> None:
        """Release what the executor holds (SDK clients); called once, after the last step."""
        ...


def _load(module: str, attr: str) -> Callable[[], Executor]:
    def factory() -> Executor:
        cls: Callable[[], Executor] = getattr(importlib.import_module(module), attr)
        return cls()

    return factory


#: Executor factories by name; the docker SDK is only imported when the docker one is built.
EXECUTORS: Final[dict[str, Callable[[], Executor]]] = {
    "local": _load("validate.execute.local", "LocalExecutor"),
    "docker": _load("validate.execute.docker", "DockerExecutor"),
}


def docker_gpu_ready() -> bool:
    """True when a docker daemon answers and offers an NVIDIA runtime (container toolkit)."""
    from validate.execute.docker import daemon_info

    info = daemon_info()
    return info is not None and info.nvidia


def resolve_executor(name: str, *, cpp: bool = False) -> str:
    """The one place `auto` is decided: docker when a daemon with an NVIDIA runtime answers,
    else local; local for a run with a C++ project (`cpp`), which docker cannot build (its
    `check`). Any other name must be in EXECUTORS."""
    if name == "auto":
        chosen = "docker" if not cpp and docker_gpu_ready() else "local"
        logger.info("executor auto -> %s%s", chosen, " (--cpp builds on the host)" if cpp else "")
        return chosen
    if name not in EXECUTORS:
        known = ", ".join(["auto", *EXECUTORS])
        msg = f"--executor: unknown executor {name!r}; expected one of {known}"
        raise ConfigError(msg)
    return name
