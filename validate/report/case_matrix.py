"""The case x cell matrix: one row per case, one column per cell, each entry that case's outcome
there. The view a docs page shows below the per-cell summary; every entry that did not pass points
at its evidence folder (the case's folder in the run: output.log, report.json, API logs).

Symbols: the outcome policy's (✓ pass, ✕ fail/crash/timeout, ! error, ⚠ xfail, ? xpass, skip)
followed by the outcome's name where it is not a pass, ≈ for a flaky result (a non-pass that passed
on a re-run, judge/signoff.py `passed_on_rerun`), — where the case did not run in the cell.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from validate.judge.signoff import passed_on_rerun
from validate.model.axes import AXES
from validate.model.outcome import Outcome, policy
from validate.report.model import axis_label, axis_value, natural_key, result_key, value_key

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from validate.report.model import StoredResult

__all__ = [
    "FLAKY_SYMBOL",
    "MATRIX_LEGEND",
    "CaseMatrix",
    "MatrixColumn",
    "MatrixEntry",
    "build_case_matrix",
]

#: A non-pass that passed on a re-run (also the compatibility table's flaky segment).
FLAKY_SYMBOL: Final = "≈"
#: What the symbols mean, in the order the legend lists them.
MATRIX_LEGEND: Final = (
    "✓ passed · ✕ fail/crash/timeout · ! error (environment or harness) · ⚠ xfail (known issue "
    f"reproduced) · ? xpass (known issue did not reproduce) · {FLAKY_SYMBOL} flaky (did not pass, "
    "then passed on a re-run) · skip: not supported or requirement not met · —: not run"
)


_UNSET: Final = (None, "", "?")  # an axis a cell has no value for (axis_value gives "?")
_MAX_REASON: Final = 100


@dataclass(frozen=True, kw_only=True)
class MatrixColumn:
    """One cell: its identity, its pins, and a header naming only the axes that differ."""

    ident: str  # the cell part of a result key (cell id, or pins outside a matrix)
    cell: Mapping[str, str]
    label: str


@dataclass(frozen=True, kw_only=True)
class MatrixEntry:
    """One case in one cell."""

    key: str  # result key
    outcome: str
    status: str  # policy status, or "flaky"
    flaky: bool
    reason: str
    evidence: Path | None  # the case's folder in its run, where it exists

    @property
    def passed(self) -> bool:
        return self.outcome == "pass" and not self.flaky

    @property
    def text(self) -> str:
        """`✓`, `✕ crash`, `≈ fail`, `skip`: what the entry shows."""
        if self.flaky:
            return f"{FLAKY_SYMBOL} {self.outcome}"
        symbol = policy(Outcome(self.outcome)).symbol
        if self.outcome == "pass":
            return symbol
        return f"{symbol} {self.outcome}" if symbol else self.outcome


@dataclass(frozen=True, kw_only=True)
class CaseMatrix:
    """Rows are cases (natural order), columns cells (packaging-Version order of their pins)."""

    columns: tuple[MatrixColumn, ...]
    cases: tuple[str, ...]
    entries: Mapping[tuple[str, str], MatrixEntry]  # (case, column ident) -> entry
    common: tuple[str, ...]  # axis labels every column shares (left out of the headers)

    def entry(self, case: str, column: MatrixColumn) -> MatrixEntry | None:
        return self.entries.get((case, column.ident))

    def headers(self) -> list[str]:
        return ["case", *(c.label for c in self.columns)]

    def unpassed(self) -> list[tuple[str, MatrixColumn, MatrixEntry]]:
        """Every entry that did not pass, row by row: what the md footnotes and html links cover."""
        return [
            (case, column, entry)
            for case in self.cases
            for column in self.columns
            if (entry := self.entry(case, column)) is not None and not entry.passed
        ]


def _ident(item: StoredResult) -> str:
    return result_key(item.result).split("::", 1)[0]


def _evidence(item: StoredResult) -> Path | None:
    """The case's folder: where its output log (or, failing that, an API log) lies."""
    r = item.result
    for recorded in (r.log_path, *r.api_logs.values()):
        found = item.resolve(recorded)
        if found is not None:
            return found.parent
    return None


def _columns(items: Sequence[StoredResult]) -> tuple[tuple[MatrixColumn, ...], tuple[str, ...]]:
    cells: dict[str, Mapping[str, str]] = {}
    for item in items:
        cells.setdefault(_ident(item), {a: axis_value(item.result, a) for a in AXES})
    varying = [a for a in AXES if len({c[a] for c in cells.values()}) > 1]
    first = next(iter(cells.values()), {})
    common = tuple(
        axis_label(a, first[a]) for a in AXES if a not in varying and first.get(a) not in _UNSET
    )
    shown = varying or ["cudnn"]
    columns = [
        MatrixColumn(
            ident=ident,
            cell=cell,
            label=" · ".join(axis_label(a, cell[a]) if a != "cudnn" else cell[a] for a in shown),
        )
        for ident, cell in cells.items()
    ]
    columns.sort(key=lambda c: ([value_key(c.cell[a]) for a in AXES], c.ident))
    return tuple(columns), common


def _short(reason: str) -> str:
    line = (reason.strip().splitlines() or [""])[0].strip()
    return line if len(line) <= _MAX_REASON else line[: _MAX_REASON - 1] + "…"


def build_case_matrix(items: Sequence[StoredResult]) -> CaseMatrix:
    """Pivot stored results into cases x cells."""
    columns, common = _columns(items)
    entries: dict[tuple[str, str], MatrixEntry] = {}
    for item in items:
        r = item.result
        flaky = passed_on_rerun(r)
        entries[(r.case, _ident(item))] = MatrixEntry(
            key=result_key(r),
            outcome=str(r.outcome),
            status="flaky" if flaky else policy(r.outcome).status,
            flaky=flaky,
            reason=_short(r.reason),
            evidence=_evidence(item),
        )
    cases = tuple(sorted({case for case, _ in entries}, key=natural_key))
    return CaseMatrix(columns=columns, cases=cases, entries=entries, common=common)
