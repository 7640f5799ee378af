"""The timed units of one finished case process, start-up excluded (issue 29: speed evidence).

Each kind says what its process timed (`CaseKindSpec.units`: a notebook's code cells, a script's
`CUDNN_MATRIX_TIME` sections else its whole run); a kind added later gets its units the same way. The runner keeps them in `CaseResult.units`; judge/speed.py compares them across cells.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from validate.execute.cases.kinds import KINDS

if TYPE_CHECKING:
    from validate.execute.classify import ExecResult

__all__ = ["units_of"]


def units_of(run: ExecResult) -> dict[str, float]:
    """{unit: seconds} of one attempt, as its kind timed them (`CaseKindSpec.units`); {} where
    it timed nothing (a crash before its report)."""
    found = KINDS[run.kind].units(run) if run.kind in KINDS else {}
    return {
        str(unit): float(value)
        for unit, value in found.items()
        if type(value) in (int, float) and math.isfinite(value) and value >= 0
    }
