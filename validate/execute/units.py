"""The timed units of one finished case process, start-up excluded (issue 29: speed evidence).

A notebook's code cells as nbclient timed them in the kernel (resources/run_notebook.py), a
script's own `CUDNN_MATRIX_TIME` sections (execute/cases/script.py) else its whole run in the
bootstrap. The runner keeps them in `CaseResult.units`; judge/speed.py compares them across cells.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from validate.execute.cases.script import WHOLE_SCRIPT, time_lines

if TYPE_CHECKING:
    from validate.execute.classify import ExecResult

__all__ = ["units_of"]


def units_of(run: ExecResult) -> dict[str, float]:
    """{unit: seconds} of one attempt; {} where it timed nothing (a crash before its report)."""
    report = run.report or {}
    found: dict[str, float] = {}
    if run.kind == "notebook":
        raw = report.get("units")
        found = dict(raw) if isinstance(raw, dict) else {}
    elif run.kind == "script":
        found = time_lines(run.log_path) if run.log_path is not None else {}
        whole = report.get("run_s")
        if not found and whole is not None:
            found = {WHOLE_SCRIPT: whole}
    return {
        str(unit): float(value)
        for unit, value in found.items()
        if type(value) in (int, float) and math.isfinite(value) and value >= 0
    }
