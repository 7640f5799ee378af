"""CaseResult and the append-only JSON Lines store: every finished result is on disk at once."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from validate.model.matrix import AXES
from validate.model.outcome import BAD_OUTCOMES, Outcome

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping
    from pathlib import Path

__all__ = [
    "SCHEMA_VERSION",
    "CaseResult",
    "ResultStore",
    "axis_value",
    "cell_label",
    "is_bad",
    "is_good",
    "load_results",
    "result_key",
    "write_json",
]

#: Bump when a field changes meaning; readers accept any version <= this one.
SCHEMA_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class CaseResult:
    """One case run in one cell: verdict, reason and the evidence kept for it."""

    case: str  # case name, e.g. "26_layernorm....ipynb" or "repro_fusion_uid.py::pygraph"
    outcome: Outcome
    reason: str = ""
    duration_s: float = 0.0
    cell_id: str = ""  # "" when run outside a matrix (plain `run`)
    cell: Mapping[str, str] = field(default_factory=dict)  # the pins: cudnn, frontend, cuda, ...
    case_path: str = ""
    exit_code: int | None = None
    signal: str | None = None  # "SIGSEGV", "SIGABRT", ...
    exception: Mapping[str, Any] | None = None  # ename, evalue, cell_index, traceback tail
    tail: str = ""  # bounded stdout/stderr tail
    log_path: str = ""  # full output on disk
    api_logs: Mapping[str, str] = field(default_factory=dict)  # {"frontend": path, "backend": path}
    env: Mapping[str, Any] = field(default_factory=dict)  # captured inside the case process
    attempts: tuple[str, ...] = ()  # outcomes of reruns, first run first
    flaky: bool = False
    known_issue: str | None = None  # KI id matched by the known-issues check
    ki_note: str = ""  # e.g. "KI-1 reproduces outside its declared range"
    started_at: str = ""  # ISO 8601, UTC
    run_id: str = ""
    content_key: str = ""  # hash of case content + pins, for --resume / result cache

    @property
    def key(self) -> str:
        """Identity of a result inside a run: cell and case."""
        return f"{self.cell_id}::{self.case}"

    def with_(self, **changes: Any) -> CaseResult:
        """Copy with fields replaced."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["outcome"] = str(self.outcome)
        data["attempts"] = list(self.attempts)
        data["cell"] = dict(self.cell)
        data["schema"] = SCHEMA_VERSION
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CaseResult:
        known = set(cls.__dataclass_fields__)
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["outcome"] = Outcome(data["outcome"])
        kwargs["attempts"] = tuple(data.get("attempts", ()))
        return cls(**kwargs)


class ResultStore:
    """Append-only JSON Lines file; each append is flushed and fsynced so `kill -9` loses nothing."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, result: CaseResult) -> None:
        line = json.dumps(result.to_dict(), sort_keys=True, default=str)
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def __iter__(self) -> Iterator[CaseResult]:
        return iter(load_results([self.path]))

    def done_keys(self) -> set[str]:
        """Keys of results already recorded (for --resume)."""
        return {r.key for r in self}


def load_results(paths: Iterable[Path]) -> list[CaseResult]:
    """Read results from JSONL files or run folders; a torn last line (killed writer) is skipped."""
    out: list[CaseResult] = []
    for path in paths:
        file = path / "results.jsonl" if path.is_dir() else path
        if not file.exists():
            continue
        for raw in file.read_text(encoding="utf-8").splitlines():
            if not raw.strip():
                continue
            try:
                out.append(CaseResult.from_dict(json.loads(raw)))
            except (json.JSONDecodeError, KeyError, ValueError):
                continue  # a line torn by a kill mid-write; the case will be re-run by --resume
    return out


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Replace `path` atomically (temp file + rename): a reader never sees half a file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)


def axis_value(result: CaseResult, axis: str) -> str:
    """The value of a matrix axis (or the case name) for one result."""
    if axis == "case":
        return result.case
    return str(result.cell.get(axis, "?"))


def cell_label(result: CaseResult) -> str:
    """Human label of a result's cell, e.g. 'cudnn 9.24.0.43 / fe 1.27.0 / cuda 13.0 / ...'."""
    if not result.cell:
        return result.cell_id or "no cell"
    names = {"frontend": "fe", "driver": "drv"}
    return " / ".join(f"{names.get(a, a)} {result.cell[a]}" for a in AXES if a in result.cell)


def result_key(result: CaseResult) -> str:
    """Identity of a result across runs: cell (id, or pins when run outside a matrix) and case."""
    cell = result.cell_id or ";".join(f"{k}={v}" for k, v in sorted(result.cell.items()))
    return f"{cell}::{result.case}"


def is_bad(result: CaseResult) -> bool:
    """fail, crash or timeout: the outcomes that count against the product."""
    return result.outcome in BAD_OUTCOMES


def is_good(result: CaseResult) -> bool:
    return result.outcome in {Outcome.PASS, Outcome.XPASS}
