"""Results for cases a cell could not run (skipped or broken cell): one per case, stamped."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from validate.model.results import CaseResult

if TYPE_CHECKING:
    from collections.abc import Sequence

    from validate.execute.cases import Case
    from validate.model.matrix import Cell
    from validate.model.outcome import Outcome
    from validate.model.results import ResultStore

__all__ = ["not_run", "now_stamp", "record_all"]


def now_stamp() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def not_run(cell: Cell, case: Case, outcome: Outcome, reason: str, run_id: str) -> CaseResult:
    """The result of `case` in `cell` that never ran (skip or error), stamped now."""
    return CaseResult(
        case=case.name,
        outcome=outcome,
        reason=reason,
        cell_id=cell.id,
        cell=cell.pins(),
        case_path=str(case.path),
        started_at=now_stamp(),
        run_id=run_id,
    )


def record_all(
    store: ResultStore,
    cell: Cell,
    cases: Sequence[Case],
    outcome: Outcome,
    reason: str,
    run_id: str,
) -> None:
    """Store one result per case that the cell could not run (skip or error), unless recorded."""
    done = store.done_keys()
    for case in cases:
        result = not_run(cell, case, outcome, reason, run_id)
        if result.key not in done:
            store.append(result)
