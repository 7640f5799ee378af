"""Stored runs as the report sees them: run folders, merged results, version-aware sort keys."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from validate.model.axes import AXES, REGISTRY
from validate.model.order import natural_key, parse_version, value_key
from validate.model.results import axis_value, cell_label, is_bad, is_good, result_key

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from validate.model.results import CaseResult

__all__ = [
    "AXIS_TITLES",
    "PSEUDO_AXES",
    "RunInfo",
    "RunSet",
    "StoredResult",
    "axis_label",
    "axis_value",
    "cell_label",
    "is_bad",
    "is_good",
    "merge_runs",
    "natural_key",
    "parse_version",
    "result_key",
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


@dataclass(frozen=True, kw_only=True)
class StoredResult:
    """A result together with the run folder it was read from (to resolve its log paths)."""

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

    @property
    def results(self) -> tuple[CaseResult, ...]:
        return tuple(item.result for item in self.items)


def axis_label(axis: str, value: str) -> str:
    return f"{_PREFIX.get(axis, '')}{value}"


def merge_runs(runs: Iterable[tuple[RunInfo, Sequence[CaseResult]]]) -> RunSet:
    """Merge runs in order; a later result for the same cell and case replaces the earlier one."""
    infos: list[RunInfo] = []
    merged: dict[str, StoredResult] = {}
    for info, results in runs:
        infos.append(info)
        for result in results:
            key = result_key(result)
            merged.pop(key, None)
            merged[key] = StoredResult(result=result, run=info)
    items = sorted(merged.values(), key=lambda s: _order(s.result))
    return RunSet(runs=tuple(infos), items=tuple(items))


def _order(result: CaseResult) -> tuple[Any, ...]:
    return (*(_SORT[a](axis_value(result, a)) for a in AXES), natural_key(result.case))
