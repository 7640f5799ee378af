"""Stored runs as the report sees them: run folders, merged results, version-aware sort keys."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from itertools import groupby
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple

from validate.errors import ConfigError
from validate.model.axes import AXES, REGISTRY
from validate.model.order import natural_key, parse_version, value_key
from validate.model.results import axis_value, cell_label, is_bad, is_good, result_key

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence

    from validate.model.results import CaseResult

__all__ = [
    "AXIS_TITLES",
    "PREFER",
    "PSEUDO_AXES",
    "Prefer",
    "RunInfo",
    "RunSet",
    "StoredResult",
    "axis_label",
    "axis_value",
    "case_names",
    "cell_label",
    "cell_spans",
    "is_bad",
    "is_good",
    "merge_runs",
    "natural_key",
    "parse_version",
    "result_key",
    "sharing",
    "value_key",
]

#: Axes a pivot may use: the matrix axes plus the case name.
PSEUDO_AXES = (*AXES, "case")
AXIS_TITLES: Mapping[str, str] = {**{a.name: a.title for a in REGISTRY}, "case": "case"}
_PREFIX: Mapping[str, str] = {a.name: a.prefix for a in REGISTRY}
_SORT = {a.name: a.sort_key for a in REGISTRY}


@dataclass(frozen=True, kw_only=True)
class RunInfo:
    """One run folder: its id, location and the provenance in run.json (may be empty)."""

    run_id: str
    path: Path
    meta: Mapping[str, Any] = field(default_factory=dict)


class StoredResult(NamedTuple):
    """A result together with the run folder it was read from (to resolve its log paths). A
    named tuple, not a dataclass: a report makes one per stored result, a million for a pytest
    suite (issue #27), and a tuple is built in a fraction of a frozen dataclass's time."""

    result: CaseResult
    run: RunInfo

    def resolve(self, recorded: str) -> Path | None:
        """Find a recorded log path: as written, relative to the run folder, or re-rooted at cases/."""
        if not recorded:
            return None
        path = Path(recorded)
        candidates = [path] if path.is_absolute() else [self.run.path / path]
        parts = path.parts
        if "cases" in parts:
            candidates.append(self.run.path.joinpath(*parts[parts.index("cases") :]))
        return next((c for c in candidates if c.is_file()), None)


@dataclass(frozen=True, kw_only=True)
class RunSet:
    """Several run folders merged: for the same cell and case the later run wins."""

    runs: tuple[RunInfo, ...]
    items: tuple[StoredResult, ...]

    @cached_property
    def results(self) -> tuple[CaseResult, ...]:
        """The results alone (gathered in C, once: the known-issue check, the speed section and
        a selection each ask, over a million items)."""
        return tuple(map(_RESULT, self.items))


def axis_label(axis: str, value: str) -> str:
    return f"{_PREFIX.get(axis, '')}{value}"


#: How a merge settles two inputs holding one cell x case with different outcomes: `refuse` (a
#: ConfigError naming both run folders), `newest` (the result that started last wins) or `last`
#: (the later input wins, e.g. a rerun of failures passed after the run it repeats).
Prefer = Literal["refuse", "newest", "last"]
PREFER: Final = ("refuse", "newest", "last")


def merge_runs(
    runs: Iterable[tuple[RunInfo, Sequence[CaseResult]]], *, prefer: Prefer = "last"
) -> RunSet:
    """Merge runs in order. Within one run the later line wins (a rerun, a resume); across runs a
    result with the same outcome replaces the earlier one, and a different outcome is settled by
    `prefer`: shards of one matrix never overlap, so an overlap that disagrees is refused.

    Results are kept per cell (`_ident`), then per case: the identity `result_key` spells, asked
    once per run of a cell's results rather than formatted once per result (issue #27)."""
    infos: list[RunInfo] = []
    merged: dict[object, dict[str, StoredResult]] = {}
    conflicts: list[tuple[StoredResult, StoredResult]] = []
    for info, results in runs:
        infos.append(info)
        pins: object = None
        cell: dict[str, StoredResult] = {}
        for result in results:
            if result.cell_id:
                if result.cell_id != pins:  # a results file holds one cell's lines together
                    pins = result.cell_id
                    cell = merged.setdefault(pins, {})
            else:
                pins = None
                cell = merged.setdefault(_ident(result), {})
            new = StoredResult(result, info)
            old = cell.get(result.case)
            if old is not None and old.run is not info and old.result.outcome != result.outcome:
                if prefer == "refuse":
                    conflicts.append((old, new))
                elif prefer == "newest" and _started(old) > _started(new):
                    new = old
            cell[result.case] = new
    if conflicts:
        raise ConfigError(_conflict_message(conflicts))
    return RunSet(runs=tuple(infos), items=tuple(_sorted(merged)))


def _ident(result: CaseResult) -> object:
    """What tells a result's cell apart: its id, or its pins outside a matrix."""
    return result.cell_id or tuple(sorted(result.cell.items()))


def _sorted(cells: Mapping[object, Mapping[str, StoredResult]]) -> list[StoredResult]:
    """By the cell's axes (version order), then the case (natural order). The keys are ranked
    once per cell and once per case name; a cell's results sort on their case's rank. Cells
    whose axes are all alike (e.g. pins that differ outside the axes) keep the order they were
    first seen in, and their results interleave by case."""
    keyed: dict[tuple[Any, ...], list[Mapping[str, StoredResult]]] = {}
    names: set[str] = set()
    for results in cells.values():
        r = next(iter(results.values())).result
        keyed.setdefault(tuple(_SORT[a](axis_value(r, a)) for a in AXES), []).append(results)
        names.update(results)
    case_keys = {k: i for i, k in enumerate(sorted({natural_key(c) for c in names}))}
    rank = {case: case_keys[natural_key(case)] for case in names}.__getitem__
    out: list[StoredResult] = []
    for key in sorted(keyed):
        alike = keyed[key]
        if len(alike) == 1:
            results = alike[0]
            out.extend([results[case] for case in sorted(results, key=rank)])
        else:
            both = [item for results in alike for item in results.values()]
            out.extend(sorted(both, key=lambda s: rank(s.result.case)))
    return out


def cell_spans(items: Sequence[StoredResult]) -> list[tuple[CaseResult, Sequence[StoredResult]]]:
    """`items` cut where the cell changes (its id or its pins), each piece with its first result:
    what a result's cell decides (a table row and column, a matrix column) is worked out once per
    piece rather than once per result. Merged items lie cell by cell (`merge_runs`), so a run of
    25 cells gives 25 pieces; any order is still cut correctly, into more pieces. Pins compare
    by identity first, and the reader shares one pins dict per cell. Once within `sharing`."""
    shared = _SHARED.get(id(items))
    if shared is not None and shared[0] is items and shared[1] is not None:  # in `sharing`
        cut: list[tuple[CaseResult, Sequence[StoredResult]]] = shared[1]
        return cut
    spans: list[tuple[CaseResult, Sequence[StoredResult]]] = []
    start = 0
    # grouped in C (groupby, attrgetter): a Python loop over a million items was a second
    for _, group in groupby(map(_RESULT, items), _CELL):
        end = start + len(list(group))
        spans.append((items[start].result, items[start:end]))
        start = end
    if shared is not None and shared[0] is items:
        shared[1] = spans
    return spans


@contextmanager
def sharing(items: Sequence[StoredResult]) -> Iterator[None]:
    """Within the block, `cell_spans(items)` and `case_names(items)` are worked out once for all
    the stages that ask (the table, the case matrix, the KI table, not_run), and forgotten at
    its end: results held past the report would keep a million objects for the exit's
    collector. `items` must not change meanwhile (a tuple cannot)."""
    _SHARED[id(items)] = [items, None, None]
    try:
        yield
    finally:
        _SHARED.pop(id(items), None)


#: id -> [items, its cell_spans, its case_names] while `sharing` it (the list holds the items,
#: so the id is not reused meanwhile)
_SHARED: dict[int, list[Any]] = {}


def case_names(items: Sequence[StoredResult]) -> set[str]:
    """The distinct case names of `items` (gathered in C: a run holds a million results; once
    within `sharing`)."""
    shared = _SHARED.get(id(items))
    if shared is not None and shared[0] is items and shared[2] is not None:
        names: set[str] = shared[2]
        return names
    names = set(map(_CASE, map(_RESULT, items)))
    if shared is not None and shared[0] is items:
        shared[2] = names
    return names


_RESULT: Final = itemgetter(0)  # StoredResult.result
_CASE: Final = attrgetter("case")
_CELL: Final = attrgetter("cell_id", "cell")


def _started(item: StoredResult) -> str:
    """When a result started (ISO stamps compare as text), else when its run did."""
    return item.result.started_at or str(item.run.meta.get("started_at") or "")


def _conflict_message(conflicts: Sequence[tuple[StoredResult, StoredResult]]) -> str:
    old, new = conflicts[0]
    result = new.result
    more = f" (and {len(conflicts) - 1} more)" if len(conflicts) > 1 else ""
    return (
        f"--results: cell {result.cell_id or cell_label(result)} x case {result.case} is "
        f"{old.result.outcome} in {old.run.path} but {result.outcome} in {new.run.path}{more}; "
        "pass each run once (shards of one run never overlap), or --prefer newest to keep the "
        "result that started last"
    )
