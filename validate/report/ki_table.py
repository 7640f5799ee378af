"""The known-issues table: one row per known issue, one column per backend (split by frontend and
arch where those differ), each cell one state. Every renderer reads this model.

A cell's state, from the results of the cases the issue names in that column (judge/suggest.py
`evidence_kind` says which results count):
affected        reproduced inside the declared range (an xfail, or a fail/crash/timeout)
outside_range   reproduced with the issue's symptom where its range, frontends or archs say it does not
fixed           passed, at or after `fixed_in` (frontend and arch inside the declared ones)
not_reproduced  passed (anywhere else)
not_covered     no case the issue names ran to an outcome there (absent, skipped, harness error)
not_run         no case ran there because the tier that ran left the cells out (run.json
                tier.left_out): never "not reproduced", and no evidence for a range
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import compress
from typing import TYPE_CHECKING, Final

from validate._compat import StrEnum
from validate.judge.known_issues import named_cases, result_pins
from validate.judge.suggest import evidence_kind, normal_arch, spec_text
from validate.model.order import natural_key, parse_version, value_key
from validate.report.model import case_names, cell_spans, result_key

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Mapping, Sequence

    from validate.judge.known_issues import KnownIssue
    from validate.model.results import CaseResult
    from validate.report.model import StoredResult

__all__ = [
    "KI_LEGEND",
    "KI_SYMBOLS",
    "NOT_RUN_LEGEND",
    "KIBand",
    "KIColumn",
    "KIState",
    "KITable",
    "KITableCell",
    "KITableRow",
    "build_ki_table",
    "ki_bands",
]


class KIState(StrEnum):
    """What the results of one column say about one known issue."""

    AFFECTED = "affected"
    OUTSIDE = "outside_range"
    FIXED = "fixed"
    NOT_REPRODUCED = "not_reproduced"
    NOT_COVERED = "not_covered"
    NOT_RUN = "not_run"


KI_SYMBOLS: Final[Mapping[KIState, str]] = {
    KIState.AFFECTED: "⚠",
    KIState.OUTSIDE: "✕",
    KIState.FIXED: "✓",
    KIState.NOT_REPRODUCED: "○",
    KIState.NOT_COVERED: "—",
    KIState.NOT_RUN: "·",
}
_WORDS: Final[Mapping[KIState, str]] = {
    KIState.AFFECTED: "affected",
    KIState.OUTSIDE: "outside range",
    KIState.FIXED: "fixed",
    KIState.NOT_REPRODUCED: "not reproduced",
    KIState.NOT_COVERED: "",
    KIState.NOT_RUN: "not run",
}
#: (state, what it means) in legend order.
KI_LEGEND: Final[tuple[tuple[KIState, str], ...]] = (
    (KIState.AFFECTED, "affected: reproduced inside the declared range"),
    (
        KIState.OUTSIDE,
        (
            "outside range: reproduced outside the declared range, frontends or archs "
            "(the database is wrong there: `cudnn-matrix known-issues suggest`)"
        ),
    ),
    (KIState.FIXED, "fixed: passed at or after fixed_in"),
    (KIState.NOT_REPRODUCED, "not reproduced: a case the issue names ran and passed"),
    (KIState.NOT_COVERED, "not covered: no case the issue names ran there"),
)
#: Shown in the legend only where a tier left cells out (older tables keep their legend).
NOT_RUN_LEGEND: Final = (KIState.NOT_RUN, "not run: the tier that ran left these cells out")


@dataclass(frozen=True, kw_only=True)
class KIColumn:
    """One backend x frontend x arch seen in the results, and its header."""

    cudnn: str
    frontend: str
    arch: str
    label: str

    @property
    def junit(self) -> str:
        """`9_24_0_43.fe-1_27_0.sm90`: the column part of a JUnit property name."""
        return ".".join(
            (
                self.cudnn.replace(".", "_"),
                f"fe-{self.frontend.replace('.', '_')}",
                self.arch.replace(".", "_"),
            )
        )


@dataclass(frozen=True, kw_only=True)
class KITableCell:
    column: KIColumn
    state: KIState
    evidence: tuple[str, ...]  # result keys behind the state
    in_declared_range: bool
    note: str = ""  # why the column lies outside the declared range (outside_range cells)

    @property
    def text(self) -> str:
        word = _WORDS[self.state]
        return f"{KI_SYMBOLS[self.state]} {word}" if word else KI_SYMBOLS[self.state]


@dataclass(frozen=True, kw_only=True)
class KITableRow:
    issue: KnownIssue
    cells: tuple[KITableCell, ...]

    @property
    def declared(self) -> str:
        ki = self.issue
        parts = [f"cuDNN {spec_text(ki.backend) or 'any'}"]
        parts += [f"fe {spec_text(ki.frontend)}"] if str(ki.frontend) else []
        parts += [", ".join(sorted(ki.archs, key=natural_key))] if ki.archs else []
        parts += [f"fixed in {ki.fixed_in}"] if ki.fixed_in else []
        return " · ".join(parts)


@dataclass(frozen=True, kw_only=True)
class KITable:
    """Rows in database order, columns in version order (packaging Version, never string)."""

    columns: tuple[KIColumn, ...]
    rows: tuple[KITableRow, ...]
    common: tuple[str, ...]  # axis labels shared by every column and so left out of the headers

    def headers(self) -> list[str]:
        return ["known issue", "declared", *(c.label for c in self.columns)]

    def body(self) -> list[list[str]]:
        return [[r.issue.id, r.declared, *(c.text for c in r.cells)] for r in self.rows]

    def title_lines(self) -> list[str]:
        return [f"{r.issue.id}: {r.issue.title}" for r in self.rows]

    def outside_lines(self) -> list[str]:
        """One line per outside-range cell: where, why, and which cases."""
        return [
            f"{r.issue.id} at {c.column.label}: {c.note} ({', '.join(_cases(c.evidence))})"
            for r in self.rows
            for c in r.cells
            if c.state is KIState.OUTSIDE
        ]

    def legend_items(self) -> tuple[tuple[KIState, str], ...]:
        """KI_LEGEND, and the not-run entry where some cell was not run."""
        if any(c.state is KIState.NOT_RUN for r in self.rows for c in r.cells):
            return (*KI_LEGEND, NOT_RUN_LEGEND)
        return KI_LEGEND

    def legend(self) -> str:
        return " · ".join(f"{KI_SYMBOLS[s]} {text}" for s, text in self.legend_items())


#: States that say the issue reproduced in a column, and those that say its cases ran and passed.
_REPRODUCED: Final = frozenset({KIState.AFFECTED, KIState.OUTSIDE})
_PASSED: Final = frozenset({KIState.FIXED, KIState.NOT_REPRODUCED})


@dataclass(frozen=True, kw_only=True)
class KIBand:
    """One known issue in one line of words, from the evidence of its row (the HTML page's band
    under the verdict, the terminal report): where it reproduced, and from which backend on its
    cases passed. `state` is the row's headline: outside_range or affected where it reproduced
    (outside wins), else fixed / not_reproduced where its cases passed, else not_run / not_covered."""

    issue: KnownIssue
    state: KIState
    words: str  # what the evidence says, after the issue's id
    declared: str  # the database's own range (KITableRow.declared), to set beside the evidence

    @property
    def text(self) -> str:
        return f"{self.issue.id}: {self.words}"


def _span(values: Sequence[str], seen: Sequence[str]) -> str:
    """`first EN DASH last` (9.22.0.52 to 9.24.0.43) when `values` are a run of consecutive `seen`
    values, else a list."""
    if len(values) == 1:
        return values[0]
    first, last = seen.index(values[0]), seen.index(values[-1])
    if list(seen[first : last + 1]) == list(values):
        return f"{values[0]}\N{EN DASH}{values[-1]}"
    return ", ".join(values)


def _ordered(values: Iterable[str]) -> list[str]:
    return sorted(set(values), key=value_key)


def _band(row: KITableRow) -> KIBand:
    ki, cells = row.issue, row.cells
    hit = [c for c in cells if c.state in _REPRODUCED]
    ran = [c for c in cells if c.state in _REPRODUCED | _PASSED]
    if not hit:
        passed = [c for c in cells if c.state in _PASSED]
        fixed = _ordered(c.column.cudnn for c in passed if c.state is KIState.FIXED)
        if fixed:
            text = f"not reproduced; its cases passed from {fixed[0]} on (fixed in {ki.fixed_in})"
            state = KIState.FIXED
        elif passed:
            text = f"not reproduced: its cases passed in {len(passed)} of {len(cells)} columns"
            state = KIState.NOT_REPRODUCED
        elif any(c.state is KIState.NOT_RUN for c in cells):
            text, state = "not run: the tier that ran left its cells out", KIState.NOT_RUN
        else:
            text, state = "not covered: no case it names ran here", KIState.NOT_COVERED
        return KIBand(issue=ki, state=state, words=text, declared=row.declared)
    backends = _ordered(c.column.cudnn for c in hit)
    fes = _ordered(c.column.frontend for c in hit)
    archs = sorted({c.column.arch for c in hit}, key=natural_key)
    all_fes = _ordered(c.column.frontend for c in cells)
    parts = [f"affected {_span(backends, _ordered(c.column.cudnn for c in ran))}"]
    if len(all_fes) > 1 and fes == all_fes:
        parts.append("with every frontend")
    elif fes == [f for f in all_fes if value_key(f) >= value_key(fes[0])] and len(fes) > 1:
        parts.append(f"with frontend ≥ {fes[0]}")
    else:
        parts.append(f"with frontend {', '.join(fes)}")
    parts.append(f"on {', '.join(archs)}")
    text = " ".join(parts)
    # the words claim every backend x frontend x arch they name: say so where one of them passed
    inside = [
        c
        for c in cells
        if c.column.frontend in fes
        and c.column.arch in archs
        and value_key(backends[0]) <= value_key(c.column.cudnn) <= value_key(backends[-1])
    ]
    if any(c.state in _PASSED for c in inside):
        text += " (not in every combination: see the table)"
    later = [
        c
        for c in cells
        if c.column.frontend in fes
        and c.column.arch in archs
        and value_key(c.column.cudnn) > value_key(backends[-1])
    ]
    passed_later = _ordered(c.column.cudnn for c in later if c.state in _PASSED)
    if passed_later:
        text += f"; fixed in {passed_later[0]}"
        # say where no newer result backs the fix: a combination that reproduced, never passed later
        done = {(c.column.frontend, c.column.arch) for c in later if c.state in _PASSED}
        open_ = sorted(
            {(c.column.frontend, c.column.arch) for c in hit} - done,
            key=lambda k: (value_key(k[0]), natural_key(k[1])),
        )
        if open_:
            text += f" (no newer result for {', '.join(f'fe {f} on {a}' for f, a in open_)})"
    elif later:
        text += f"; no backend after {backends[-1]} ran its cases"
    else:
        text += f"; not fixed in any backend run ({backends[-1]} is the newest)"
    outside = any(c.state is KIState.OUTSIDE for c in hit)
    if outside:
        text += f"; outside the declared range ({row.declared})"
    state = KIState.OUTSIDE if outside else KIState.AFFECTED
    return KIBand(issue=ki, state=state, words=text, declared=row.declared)


def ki_bands(ki: KITable) -> list[KIBand]:
    """One KIBand per row, in database order."""
    return [_band(row) for row in ki.rows]


def _cases(keys: Sequence[str]) -> list[str]:
    return sorted({k.split("::", 1)[-1] for k in keys}, key=natural_key)


def _column_key(result: CaseResult) -> tuple[str, str, str]:
    """backend x frontend x arch of a result's cell (the first result's, for a matrix cell: a
    run holds a million results of 25 cells)."""
    p = result_pins(result)
    return (p["backend"] or "?", p["frontend"] or "?", normal_arch(p["arch"]) or "?")


def _columns(
    keyed: Sequence[tuple[str, str, str]], not_run: Collection[tuple[str, str, str]] = ()
) -> tuple[tuple[KIColumn, ...], tuple[str, ...]]:
    seen = set(keyed) | set(not_run)
    keys = sorted(seen, key=lambda k: [value_key(v) for v in k])
    show_fe = len({k[1] for k in keys}) > 1
    show_arch = len({k[2] for k in keys}) > 1
    common = []
    if keys and not show_fe:
        common.append(f"fe {keys[0][1]}")
    if keys and not show_arch:
        common.append(keys[0][2])
    columns = []
    for cudnn, fe, arch in keys:
        parts = [cudnn, *([f"fe {fe}"] if show_fe else []), *([arch] if show_arch else [])]
        columns.append(KIColumn(cudnn=cudnn, frontend=fe, arch=arch, label=" · ".join(parts)))
    return tuple(columns), tuple(common)


def _cell(
    ki: KnownIssue, column: KIColumn, items: Sequence[StoredResult], *, left_out: bool = False
) -> KITableCell:
    pins = {"backend": column.cudnn, "frontend": column.frontend, "arch": column.arch}
    why = ki.out_of_range(pins)
    bad, good = [], []
    for item in items:
        kind = evidence_kind(ki, item.result)
        if kind == "bad":
            bad.append(result_key(item.result))
        elif kind == "good":
            good.append(result_key(item.result))
    inside = why is None
    if bad:
        state = KIState.AFFECTED if inside else KIState.OUTSIDE
        return KITableCell(
            column=column,
            state=state,
            evidence=tuple(bad),
            in_declared_range=inside,
            note=why or "",
        )
    if not good:
        state = KIState.NOT_RUN if left_out else KIState.NOT_COVERED
        return KITableCell(column=column, state=state, evidence=(), in_declared_range=inside)
    fixed_in = parse_version(ki.fixed_in or "")
    version = parse_version(column.cudnn)
    fixed = (
        fixed_in is not None
        and version is not None
        and version >= fixed_in
        and ki.out_of_range(pins, check_backend=False) is None
    )
    state = KIState.FIXED if fixed else KIState.NOT_REPRODUCED
    return KITableCell(column=column, state=state, evidence=tuple(good), in_declared_range=inside)


def build_ki_table(
    items: Sequence[StoredResult],
    known_issues: Sequence[KnownIssue],
    not_run: Sequence[Mapping[str, str]] = (),
) -> KITable:
    """One row per known issue over the backend x frontend x arch columns the results hold, and
    those of `not_run`: the pins of planned cells a tier left out (no result). A column where no
    case the issue names ran to an outcome and some cell was left out is "not run"."""
    skipped = {(p["cudnn"], p["frontend"], normal_arch(p["arch"])) for p in not_run}
    by_column: dict[tuple[str, str, str], list[StoredResult]] = {}
    for head, span in cell_spans(items):  # a column is worked out once per cell (issue #27)
        if head.cell_id:
            by_column.setdefault(_column_key(head), []).extend(span)
        else:  # outside a matrix: what the case saw (its env) may tell the column
            for item in span:
                by_column.setdefault(_column_key(item.result), []).append(item)
    columns, common = _columns(list(by_column), skipped)
    named_by = named_cases(known_issues, case_names(items))
    column_cases: dict[tuple[str, str, str], list[str]] = {}  # each column's case names, once
    rows = []
    for ki in known_issues:
        # a cell reads only the results of the cases the issue names (a suite's column holds
        # 40,000 results, issue #27)
        named = named_by[ki.id]
        cells = []
        for c in columns:
            key = (c.cudnn, c.frontend, c.arch)
            column = by_column.get(key, [])
            mine: list[StoredResult] = []
            if named:
                if key not in column_cases:
                    column_cases[key] = [item.result.case for item in column]
                mine = list(compress(column, map(named.__contains__, column_cases[key])))
            cells.append(_cell(ki, c, mine, left_out=key in skipped))
        rows.append(KITableRow(issue=ki, cells=tuple(cells)))
    return KITable(columns=columns, rows=tuple(rows), common=common)
