"""Fan-out: what runs whole `validate` runs elsewhere and brings their folders back as one run.

An executor (execute/) runs the cases of a step on this host or in its container; a dispatcher
runs whole `validate --shard` runs on other machines (a batch scheduler's array tasks) and merges
their run folders, so it sits above the workflow: it plans, groups the cells by runner pool
(`runners.py` `job_groups`), submits, waits and merges. The CI emitters (`ci.py`, `plan --emit`)
fan out the same groups, but the CI engine runs the jobs and `report` merges them.

  slurm.py    `validate --executor slurm`: array jobs, one task per shard, the merge
  sbatch.py   Slurm's command-line tools (submit, states, cancel), no run logic
  ci.py       GitLab child pipelines and GitHub Actions workflows, as data
  runners.py  runner pools per arch (matrix/runners.toml) and the cells grouped by them

`--executor NAME` takes an executor (execute.EXECUTORS) or a dispatcher (DISPATCHERS); adding a
scheduler is one module here and one line in DISPATCHERS.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from validate.config import ValidateConfig
    from validate.workflow import RunOutcome

__all__ = ["DISPATCHERS", "DispatchOptions", "Dispatcher"]


@dataclass(frozen=True, kw_only=True)
class DispatchOptions:
    """The flags of a dispatched run: tasks per group, how long a task may wait in the queue,
    the runner pools file (None: matrix/runners.toml); `resolve`, the version pins' check (as
    workflow.run's), run once the input files are read."""

    shards: int = 1
    queue_timeout: float | None = None
    runners: Path | None = None
    resolve: Callable[[ValidateConfig], ValidateConfig] | None = None


@runtime_checkable
class Dispatcher(Protocol):
    """Runs the planned cells as whole `validate` runs elsewhere, then merges them into one run
    folder; a task the scheduler ended is `error` for its cases, never a product failure."""

    name: str

    def available(self) -> bool:
        """Whether the scheduler's tools answer here."""
        ...

    def run(self, config: ValidateConfig, options: DispatchOptions) -> RunOutcome:
        """Submit (or reattach with `config.resume`), wait, merge: the merged run's outcome."""
        ...


def _load(module: str, attr: str) -> Callable[[], Dispatcher]:
    def factory() -> Dispatcher:
        cls: Callable[[], Dispatcher] = getattr(importlib.import_module(module), attr)
        return cls()

    return factory


#: Dispatcher factories by name (imported when built: the CLI lists the names at start-up).
DISPATCHERS: Final[dict[str, Callable[[], Dispatcher]]] = {
    "slurm": _load("validate.dispatch.slurm", "SlurmDispatcher"),
}
