"""Plan steps: the cells that share one environment (venv or image), built once and run in it.

Every executor goes through here: cells this host cannot run are set aside with their reason,
and the rest are grouped by the executor's environment key (an EnvSpec hash, an image's pins),
in plan order: a step is as early as its first cell, and its cells keep their order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from validate.plan.host import cell_skip_reason

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from validate.model.matrix import Cell
    from validate.plan.host import HostFacts

__all__ = ["Step", "StepPlan", "plan_steps"]


@dataclass(frozen=True, kw_only=True)
class Step:
    """Cells that share one environment: prepared once, then each cell's cases run in it."""

    key: str  # the environment's identity, as the executor computes it
    cells: tuple[Cell, ...]

    @property
    def first(self) -> Cell:
        """The cell that names the step (its environment is built for this cell's pins)."""
        return self.cells[0]


@dataclass(frozen=True, kw_only=True)
class StepPlan:
    """The steps to run, and the cells that host cannot run (with why)."""

    steps: tuple[Step, ...]
    skipped: tuple[tuple[Cell, str], ...] = ()


def plan_steps(cells: Iterable[Cell], host: HostFacts, key: Callable[[Cell], str]) -> StepPlan:
    """Set aside the cells `host` cannot run, group the rest by `key` (first appearance first)."""
    skipped: list[tuple[Cell, str]] = []
    groups: dict[str, list[Cell]] = {}
    for cell in cells:
        reason = cell_skip_reason(cell, host)
        if reason:
            skipped.append((cell, reason))
        else:
            groups.setdefault(key(cell), []).append(cell)
    steps = tuple(Step(key=k, cells=tuple(members)) for k, members in groups.items())
    return StepPlan(steps=steps, skipped=tuple(skipped))
