"""The case x cell matrix: one row per case, one column per cell, each entry that case's outcome
there. The view a docs page shows below the per-cell summary; every entry that did not pass points
at its evidence folder (the case's folder in the run: output.log, report.json, API logs).

A pytest suite gives 40,000 test ids a cell (issue #27): a case id holding "::" is a pytest node
id, and those are summarised per test file instead, one row per file, each entry its counts in
that cell (`✓ 118 · ✕ 2 · skip 80`). Only the test ids that neither passed nor skipped are listed,
each with its evidence; a skip is counted in its file's entry (and its reason in the table's
footnotes). Notebooks and scripts keep one row per case.

Symbols: the outcome policy's (✓ pass, ✕ fail/crash/timeout, ! error, ⚠ xfail, ? xpass, skip)
followed by the outcome's name where it is not a pass, ≈ for a flaky result (a non-pass that passed
on a re-run, judge/signoff.py `passed_on_rerun`), — where the case did not run in the cell.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from validate.judge.signoff import passed_on_rerun
from validate.model.axes import AXES
from validate.model.outcome import POLICY, Outcome, policy
from validate.report.model import (
    axis_label,
    axis_value,
    cell_spans,
    natural_key,
    result_key,
    value_key,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from validate.model.results import CaseResult
    from validate.report.model import StoredResult

__all__ = [
    "FLAKY_SYMBOL",
    "MATRIX_LEGEND",
    "CaseMatrix",
    "FileEntry",
    "MatrixColumn",
    "MatrixEntry",
    "build_case_matrix",
    "test_file",
]

#: A non-pass that passed on a re-run (also the compatibility table's flaky segment).
FLAKY_SYMBOL: Final = "≈"
#: What the symbols mean, in the order the legend lists them.
MATRIX_LEGEND: Final = (
    "✓ passed · ✕ fail/crash/timeout · ! error (environment or harness) · ⚠ xfail (known issue "
    f"reproduced) · ? xpass (known issue did not reproduce) · {FLAKY_SYMBOL} flaky (did not pass, "
    "then passed on a re-run) · skip: not supported or requirement not met · —: not run"
)


#: The order of a file entry's counts, worst first ("flaky": not a pass, then a pass on a re-run).
_FILE_SEGMENTS: Final = ("regression", "error", "flaky", "known", "xpass", "pass", "skip")
_SEGMENT_SYMBOLS: Final[dict[str, str]] = {
    **{p.status: p.symbol for p in POLICY.values()},
    "flaky": FLAKY_SYMBOL,
}
#: What a file entry lists by test id: everything but a pass or a skip.
_COUNTED_ONLY: Final = frozenset({"pass", "skip"})


def test_file(case: str) -> str | None:
    """The file of a pytest node id (the part before the first "::"), or None for any other case."""
    file, sep, _ = case.partition("::")
    return file if sep else None


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
class FileEntry:
    """The tests of one file in one cell: how many ended in each status (or flaky)."""

    counts: Mapping[str, int]  # status (or "flaky") -> tests

    @property
    def status(self) -> str:
        """The worst status any of its tests has (a colour for html)."""
        return next(s for s in _FILE_SEGMENTS if self.counts.get(s))

    @property
    def passed(self) -> bool:
        return set(self.counts) <= _COUNTED_ONLY

    @property
    def text(self) -> str:
        """`✓ 118 · ✕ 2 · ≈ 1 · skip 80`: the count of each status, worst first."""
        return " · ".join(
            f"{_SEGMENT_SYMBOLS[s] or s} {n}" if s != "skip" else f"skip {n}"
            for s in _FILE_SEGMENTS
            if (n := self.counts.get(s))
        )


@dataclass(frozen=True, kw_only=True)
class CaseMatrix:
    """Rows are cases (natural order), columns cells (packaging-Version order of their pins).

    Pytest node ids are not rows: `files` (natural order) are, with one `FileEntry` per file and
    cell, and `tests` lists the node ids with an entry that neither passed nor skipped."""

    columns: tuple[MatrixColumn, ...]
    cases: tuple[str, ...]
    entries: Mapping[tuple[str, str], MatrixEntry]  # (case, column ident) -> entry
    common: tuple[str, ...]  # axis labels every column shares (left out of the headers)
    files: tuple[str, ...] = ()
    file_entries: Mapping[tuple[str, str], FileEntry] = field(default_factory=dict)
    tests: tuple[str, ...] = ()  # node ids listed in `entries` (not passed, not skipped)

    @property
    def empty(self) -> bool:
        return not self.cases and not self.files

    def file_entry(self, file: str, column: MatrixColumn) -> FileEntry | None:
        return self.file_entries.get((file, column.ident))

    def file_headers(self) -> list[str]:
        return [self.file_kinds()[1], *(c.label for c in self.columns)]

    def file_kinds(self) -> tuple[str, str]:
        """What the per-file rows summarise, and what a row is: ("Pytest tests", "test file"),
        ("C++ test cases", "source file") where every file is a C++ source (a TEST_CASE's,
        execute/cases/catch2.py), or both kinds named, per "file"."""
        from validate.execute.cases.catch2 import CPP_SUFFIXES  # the C++ kind's sources

        cpp = sum(1 for f in self.files if f.endswith(CPP_SUFFIXES))
        if cpp == 0:
            return "Pytest tests", "test file"
        if cpp == len(self.files):
            return "C++ test cases", "source file"
        return "Pytest tests and C++ test cases", "file"

    def entry(self, case: str, column: MatrixColumn) -> MatrixEntry | None:
        return self.entries.get((case, column.ident))

    def headers(self) -> list[str]:
        return ["case", *(c.label for c in self.columns)]

    def unpassed(self) -> list[tuple[str, MatrixColumn, MatrixEntry]]:
        """Every entry that did not pass, row by row: what the md footnotes and html links cover
        (of the pytest tests: those `tests` lists)."""
        return [
            (case, column, entry)
            for case in self.cases
            for column in self.columns
            if (entry := self.entry(case, column)) is not None and not entry.passed
        ]

    def listed_tests(self) -> list[tuple[str, MatrixColumn, MatrixEntry]]:
        """The pytest test ids that neither passed nor skipped, by test id, then by cell."""
        return [
            (case, column, entry)
            for case in self.tests
            for column in self.columns
            if (entry := self.entry(case, column)) is not None
        ]


_STATUS: Final[Mapping[str, str]] = {o: p.status for o, p in POLICY.items()}


def _ident(item: StoredResult) -> str:
    """The cell part of a result key (its cell id, or its pins outside a matrix)."""
    return item.result.cell_id or result_key(item.result).split("::", 1)[0]


def _evidence(item: StoredResult) -> Path | None:
    """The case's folder: where its output log (or, failing that, an API log) lies."""
    r = item.result
    for recorded in (r.log_path, *r.api_logs.values()):
        found = item.resolve(recorded)
        if found is not None:
            return found.parent
    return None


def _columns(
    spans: Sequence[tuple[CaseResult, Sequence[StoredResult]]],
) -> tuple[tuple[MatrixColumn, ...], tuple[str, ...]]:
    cells: dict[str, Mapping[str, str]] = {}
    for head, span in spans:
        if (ident := _ident(span[0])) not in cells:
            cells[ident] = {a: axis_value(head, a) for a in AXES}
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
    """Pivot stored results into cases x cells, and pytest node ids into test files x cells."""
    spans = cell_spans(items)
    columns, common = _columns(spans)
    entries: dict[tuple[str, str], MatrixEntry] = {}
    counts: dict[tuple[str, str], Counter[str]] = {}
    tests: set[str] = set()
    files: dict[str, str | None] = {}  # test_file per case name, asked once per name
    for _, span in spans:  # one cell's results: its ident once (issue #27)
        ident = _ident(span[0])
        tally: Counter[tuple[str, str]] = Counter()  # (file, status): the cell's tests counted
        for item in span:  # each result touched once: a cell of a suite holds 40,000
            r = item.result
            case = r.case
            flaky = bool(r.attempts) and passed_on_rerun(r)
            status = "flaky" if flaky else _STATUS[r.outcome]
            file = files[case] if case in files else files.setdefault(case, test_file(case))
            if file is not None:
                tally[(file, status)] += 1
                if status in _COUNTED_ONLY:
                    continue  # a pass or a skip of a test id is counted, not listed
                tests.add(case)
            entries[(case, ident)] = MatrixEntry(
                key=result_key(r),
                outcome=str(r.outcome),
                status=status,
                flaky=flaky,
                reason=_short(r.reason),
                evidence=_evidence(item),
            )
        for (file, status), n in tally.items():  # in order of first appearance, as one by one
            counts.setdefault((file, ident), Counter())[status] += n
    cases = tuple(sorted({case for case, _ in entries if case not in tests}, key=natural_key))
    return CaseMatrix(
        columns=columns,
        cases=cases,
        entries=entries,
        common=common,
        files=tuple(sorted({file for file, _ in counts}, key=natural_key)),
        file_entries={key: FileEntry(counts=dict(c)) for key, c in counts.items()},
        tests=tuple(sorted(tests, key=natural_key)),
    )
