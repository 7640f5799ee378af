"""The compatibility table: results pivoted into rows x columns of symbol-and-count cells."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Final, Literal, get_args

from validate._compat import assert_never
from validate.errors import ConfigError
from validate.judge.known_issues import named_cases
from validate.judge.signoff import passed_on_rerun
from validate.model.outcome import POLICY, Outcome, Status, policy
from validate.plan.requirements import SkipKind, skip_kind
from validate.report.case_matrix import FLAKY_SYMBOL
from validate.report.model import (
    AXIS_TITLES,
    PSEUDO_AXES,
    StoredResult,
    axis_label,
    axis_value,
    case_names,
    cell_spans,
    is_bad,
    is_good,
    natural_key,
    parse_version,
    result_key,
    value_key,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from validate.judge.known_issues import KnownIssue
    from validate.model.results import CaseResult

__all__ = ["CellStatus", "CompatTable", "Footnote", "Pivot", "TableCell", "build_table"]

CellStatus = Literal[
    "regression", "error", "flaky", "known", "xpass", "pass", "unproven", "skip", "empty"
]
#: A result's segment: its outcome's status, or "flaky" for a non-pass that passed on a re-run.
Segment = Literal[Status, "flaky"]
_MAX_REASON = 110
#: The order of a cell's segments, e.g. "✕ 1/4 · ! 1 error [2] · ≈ 1/4 flaky · 2 skip [1]".
_SEGMENTS: Final[tuple[Segment, ...]] = (
    "regression",
    "error",
    "flaky",
    "known",
    "pass",
    "xpass",
    "skip",
)
#: A cell takes the first status any of its results has (worst first; flaky after error).
_PRECEDENCE: Final[tuple[Segment, ...]] = (
    "regression",
    "error",
    "flaky",
    *(s for s in get_args(Status) if s not in ("regression", "error")),
)
#: One symbol per status (check_policy keeps the outcomes of a status on one symbol).
_SYMBOLS: Final[Mapping[Segment, str]] = {
    **{p.status: p.symbol for p in POLICY.values()},
    "flaky": FLAKY_SYMBOL,
}


@dataclass(frozen=True, kw_only=True)
class Pivot:
    """Which axes make the rows and which the columns, e.g. ``cudnn:frontend,arch``."""

    rows: tuple[str, ...] = ("cudnn",)
    cols: tuple[str, ...] = ("frontend", "arch")

    @classmethod
    def parse(cls, text: str) -> Pivot:
        """Parse ``ROWS:COLS`` (comma lists of axes); bad input raises ConfigError naming --pivot."""
        rows_text, sep, cols_text = text.partition(":")
        rows = tuple(a.strip() for a in rows_text.split(",") if a.strip())
        cols = tuple(a.strip() for a in cols_text.split(",") if a.strip())
        unknown = [a for a in (*rows, *cols) if a not in PSEUDO_AXES]
        if not sep or not rows or not cols or unknown or len(set(rows + cols)) != len(rows + cols):
            msg = (
                f"--pivot {text!r}: expected ROWS:COLS with distinct axes from "
                f"{', '.join(PSEUDO_AXES)} (e.g. cudnn:frontend,arch)"
            )
            raise ConfigError(msg)
        return cls(rows=rows, cols=cols)

    def __str__(self) -> str:
        return f"{','.join(self.rows)}:{','.join(self.cols)}"


@dataclass(frozen=True, kw_only=True)
class Footnote:
    """A skip or error reason shared by some results, numbered in order of first appearance."""

    index: int
    kind: Literal["skip", "error"]
    reason: str  # the first line, cut at _MAX_REASON (the key results share)
    count: int
    full: str = ""  # the first result's whole reason (the HTML page shows it uncut)


@dataclass(frozen=True, kw_only=True)
class TableCell:
    """One table cell: outcome counts, known-issue flags, footnote marks and its display text."""

    counts: Mapping[str, int]
    status: CellStatus
    affected: tuple[str, ...]
    fixed: tuple[tuple[str, str], ...]  # (fixed_in, KI id)
    notes: tuple[int, ...]
    keys: tuple[str, ...]  # result keys, for drill-down
    text: str


@dataclass(frozen=True, kw_only=True)
class CompatTable:
    """Rows and columns sorted by packaging Version (naturally for non-versions), plus footnotes."""

    pivot: Pivot
    row_keys: tuple[tuple[str, ...], ...]
    col_keys: tuple[tuple[str, ...], ...]
    cells: Mapping[tuple[tuple[str, ...], tuple[str, ...]], TableCell]
    footnotes: tuple[Footnote, ...]
    #: footnotes of other sections' marks in the cells, as shown (report/speed.py: [sN] slower)
    extra_notes: tuple[str, ...] = ()

    def headers(self) -> list[str]:
        cols = [
            " / ".join(axis_label(a, v) for a, v in zip(self.pivot.cols, c, strict=True))
            for c in self.col_keys
        ]
        return [*(AXIS_TITLES[a] for a in self.pivot.rows), *cols]

    def body(self) -> list[list[str]]:
        return [
            [*row, *(self.cell(row, col).text for col in self.col_keys)] for row in self.row_keys
        ]

    def cell(self, row: tuple[str, ...], col: tuple[str, ...]) -> TableCell:
        return self.cells.get((row, col), _EMPTY)

    def footnote_lines(self) -> list[str]:
        plural = {True: "results", False: "result"}
        return [
            *(
                f"[{n.index}] {n.kind}: {n.reason} ({n.count} {plural[n.count != 1]})"
                for n in self.footnotes
            ),
            *self.extra_notes,
        ]


#: The outcomes whose results get a reason footnote: those of the skip and error statuses.
_NOTED: Final = frozenset(o for o, p in POLICY.items() if p.status in ("skip", "error"))
#: The outcomes whose known-issue id flags a cell affected: a known status, or a bad one.
_KNOWN_OR_BAD: Final = frozenset(o for o, p in POLICY.items() if p.status == "known" or p.bad)

_EMPTY = TableCell(counts={}, status="empty", affected=(), fixed=(), notes=(), keys=(), text="—")


@lru_cache(maxsize=4096)  # the same few skip reasons, once per result of a suite
def _short(reason: str) -> str:
    line = (reason.strip().splitlines() or ["(no reason recorded)"])[0].strip()
    return line if len(line) <= _MAX_REASON else line[: _MAX_REASON - 1] + "…"


def build_table(
    items: Sequence[StoredResult],
    pivot: Pivot | None = None,
    known_issues: Sequence[KnownIssue] = (),
) -> CompatTable:
    """Pivot stored results into a CompatTable with known-issue flags and reason footnotes."""
    pivot = pivot or Pivot()
    groups: dict[tuple[tuple[str, ...], tuple[str, ...]], list[StoredResult]] = {}
    # a row and a column are the cell's pins, asked once per cell (issue #27), unless the case
    # is a pivot axis
    by_case = "case" in pivot.rows or "case" in pivot.cols
    for first, span in [(item.result, (item,)) for item in items] if by_case else cell_spans(items):
        row = tuple(axis_value(first, a) for a in pivot.rows)
        col = tuple(axis_value(first, a) for a in pivot.cols)
        groups.setdefault((row, col), []).extend(span)
    row_keys = sorted({r for r, _ in groups}, key=lambda k: [value_key(v) for v in k])
    col_keys = sorted({c for _, c in groups}, key=lambda k: [value_key(v) for v in k])
    notes: dict[tuple[str, str], int] = {}
    note_counts: Counter[tuple[str, str]] = Counter()
    note_full: dict[tuple[str, str], str] = {}
    cells: dict[tuple[tuple[str, ...], tuple[str, ...]], TableCell] = {}
    named = named_cases(known_issues, case_names(items))
    for row in row_keys:
        for col in col_keys:
            group = groups.get((row, col))
            if group:
                cells[(row, col)] = _cell(
                    [g.result for g in group], known_issues, named, notes, note_counts, note_full
                )
    footnotes = tuple(
        Footnote(
            index=i,
            kind="skip" if kind == "skip" else "error",
            reason=reason,
            count=note_counts[(kind, reason)],
            full=note_full[(kind, reason)],
        )
        for (kind, reason), i in notes.items()
    )
    return CompatTable(
        pivot=pivot,
        row_keys=tuple(row_keys),
        col_keys=tuple(col_keys),
        cells=cells,
        footnotes=footnotes,
    )


def _cell(
    results: Sequence[CaseResult],
    known_issues: Sequence[KnownIssue],
    named: Mapping[str, frozenset[str]],
    notes: dict[tuple[str, str], int],
    note_counts: Counter[tuple[str, str]],
    note_full: dict[tuple[str, str], str],
) -> TableCell:
    # one pass over the cell's results, each touched once: a cell of a pytest suite holds
    # 40,000 of them (issue #27); statuses follow from the outcomes' counts, less the flaky ones
    counts: Counter[Outcome] = Counter()
    flaky: list[CaseResult] = []
    reasons: Counter[tuple[Outcome, str]] = Counter()  # (outcome, reason) of skips and errors
    affected: set[str] = set()  # KIs the results' verdicts name
    any_named = frozenset().union(*named.values()) if known_issues else frozenset()
    asked: list[CaseResult] = []  # the results of cases some issue names
    keys: list[str] = []
    for r in results:
        outcome = r.outcome
        counts[outcome] += 1
        if r.attempts and passed_on_rerun(r):  # rare: only a re-run result is asked
            flaky.append(r)
        elif outcome in _NOTED:
            reasons[(outcome, r.reason)] += 1
        if r.known_issue and outcome in _KNOWN_OR_BAD:
            affected.add(r.known_issue)
        case = r.case
        if case in any_named:
            asked.append(r)
        keys.append(f"{r.cell_id}::{case}" if r.cell_id else result_key(r))
    statuses: Counter[Segment] = Counter()
    for counted, n in counts.items():
        statuses[policy(counted).status] += n
    for r in flaky:
        statuses[policy(r.outcome).status] -= 1
        statuses["flaky"] += 1
    statuses = +statuses  # no status left at 0
    marks: dict[str, list[int]] = {"skip": [], "error": []}
    # each distinct (outcome, reason) in order of first appearance, as a result-by-result pass
    # would number the footnotes
    for (noted, reason), n in reasons.items():
        key = (policy(noted).status, _short(reason))
        index = notes.setdefault(key, len(notes) + 1)
        note_counts[key] += n
        note_full.setdefault(key, reason.strip() or key[1])
        if index not in marks[key[0]]:
            marks[key[0]].append(index)
    affected_ids, fixed = _known_issue_flags(asked, affected, known_issues, named)
    segments = [
        " ".join(part for part in (_SYMBOLS[status], text) if part)
        for status in _SEGMENTS
        if (text := _segment(status, statuses, len(results), marks, affected_ids))
    ]
    segments.extend(f"fixed in {version} ({ki})" for version, ki in fixed)
    present = {*statuses, *(("known",) if affected_ids else ())}
    status: CellStatus = next(s for s in _PRECEDENCE if s in present)
    if status == "pass" and any(
        policy(o).status == "skip" and skip_kind(reason) is SkipKind.NO_GPU for o, reason in reasons
    ):  # passes beside cases skipped for want of a GPU: not proven, so not green
        status = "unproven"
    return TableCell(
        counts=dict(sorted((str(k), n) for k, n in counts.items())),
        status=status,
        affected=affected_ids,
        fixed=fixed,
        notes=tuple(marks["error"] + marks["skip"]),
        keys=tuple(keys),
        text=" · ".join(segments),
    )


def _segment(
    status: Segment,
    statuses: Counter[Segment],
    total: int,
    marks: Mapping[str, Sequence[int]],
    affected: Sequence[str],
) -> str:
    """The text after the status's symbol, or "" to leave the status out of the cell."""
    n = statuses[status]
    match status:
        case "regression":
            text = f"{n}/{total}" if n else ""
        case "flaky":
            text = f"{n}/{total} flaky" if n else ""
        case "error" | "skip":
            text = f"{n} {status} {_marks(marks[status])}" if n else ""
        case "known":
            text = f"affected ({', '.join(affected)})" if affected else ""
        case "pass":  # the count of passes says nothing next to a k/n of regressions or flakes;
            # beside `! k error`, which has no total, it says how much did run (the whole L0 on
            # the H200 read "! 3 error · 30584 skip", its 9,055 passes left out)
            hidden = statuses["regression"] or statuses["flaky"]
            text = str(n) if n and not hidden else ""
        case "xpass":
            text = f"{n} xpass" if n else ""
        case _:
            assert_never(status)
    return text


def _marks(indices: Sequence[int]) -> str:
    return "[" + ",".join(str(i) for i in indices) + "]"


def _known_issue_flags(
    asked: Sequence[CaseResult],
    affected: set[str],
    known_issues: Sequence[KnownIssue],
    named: Mapping[str, frozenset[str]],
) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """KIs that affect a cell (`affected`: those the results' verdicts name; and from the DB)
    and KIs shown fixed in it. `asked`: the cell's results of the cases some issue names;
    `named`: per issue, the cases it names (`named_cases`)."""
    fixed: set[tuple[str, str]] = set()
    for ki in known_issues:
        cases = named.get(ki.id, frozenset())
        mine = [r for r in asked if r.case in cases] if cases else []
        hits = [r for r in mine if ki.matches(r)]
        if any(policy(r.outcome).status == "known" or is_bad(r) for r in hits):
            affected.add(ki.id)
        fixed_in = parse_version(ki.fixed_in or "")
        if fixed_in is None or ki.id in affected:
            continue
        after = [
            r
            for r in mine
            if ki.matches(r, check_backend=False)
            and (v := parse_version(axis_value(r, "cudnn"))) is not None
            and v >= fixed_in
        ]
        if after and all(is_good(r) for r in after):
            fixed.add((str(ki.fixed_in), ki.id))
    return (
        tuple(sorted(affected, key=natural_key)),
        tuple(sorted(fixed, key=lambda f: natural_key(f[1]))),
    )
