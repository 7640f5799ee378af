"""Reading results.jsonl back: decoded, type-checked and verified line by line."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from validate.errors import ResultsError
from validate.model.results.schema import SCHEMA_VERSION, CaseResult
from validate.model.results.signing import RunKey

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from pathlib import Path

__all__ = ["ReadResults", "load_results", "read_results"]


@dataclass(frozen=True, kw_only=True)
class ReadResults:
    """What one results.jsonl held: the results the tool wrote, and every line it skipped."""

    results: list[CaseResult]
    skipped: list[str]  # "file:line: why", one per line that is not counted


def _mistyped(data: Mapping[str, Any]) -> str | None:
    """Why a decoded line is not a result the tool wrote, or None."""
    for name, kind in (("case", str), ("outcome", str)):
        if not isinstance(data.get(name), kind) or not data.get(name):
            return f"field {name!r} missing or not a string"
    for name, kinds in (
        ("reason", (str,)),
        ("cell_id", (str,)),
        ("duration_s", (int, float)),
        ("cell", (dict,)),
        ("attempts", (list,)),
        ("env", (dict,)),
        ("api_logs", (dict,)),
    ):
        value = data.get(name)
        if name in data and (not isinstance(value, kinds) or isinstance(value, bool)):
            return f"field {name!r} has the wrong type ({type(data[name]).__name__})"
    return None


def read_results(file: Path, key: RunKey | None = None) -> ReadResults:
    """Read one results.jsonl; lines that do not decode, do not type-check or whose MAC does not
    verify are skipped and listed (never counted). A run written by a newer schema is refused.

    `key`: the run's key (default: found beside the file, or privately, as `RunKey.for_run`). A
    folder with no key at all is a run from before lines were signed (schema 1): its lines are
    read as they are; once a key exists, every line must carry a valid MAC.
    """
    if key is None:
        try:
            key = RunKey.for_run(file.parent)
        except KeyError:
            key = None
    results: list[CaseResult] = []
    skipped: list[str] = []
    try:
        raw_lines = file.read_bytes().split(b"\n")
    except FileNotFoundError:
        return ReadResults(results=[], skipped=[])
    for number, raw in enumerate(raw_lines, start=1):
        if not raw.strip():
            continue
        where = f"{file}:{number}"
        try:
            data = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            skipped.append(f"{where}: not valid UTF-8")
            continue
        except json.JSONDecodeError:
            skipped.append(f"{where}: not a JSON object (torn or foreign line)")
            continue
        if not isinstance(data, dict):
            skipped.append(f"{where}: a JSON {type(data).__name__}, not a result object")
            continue
        schema = data.get("schema", 1)
        if not isinstance(schema, int) or isinstance(schema, bool):
            skipped.append(f"{where}: field 'schema' is not an integer")
            continue
        if schema > SCHEMA_VERSION:
            msg = (
                f"{where}: written by a newer cudnn-matrix (results schema {schema}, this one "
                f"reads up to {SCHEMA_VERSION}); upgrade the tool to read this run"
            )
            raise ResultsError(msg)
        problem = _mistyped(data)
        if problem is None and (key is not None or "mac" in data):
            if key is None:
                problem = "signed, but the run's key is missing (results.key); cannot verify it"
            elif not key.verifies(data):
                problem = "MAC does not verify: a line the tool did not write"
        if problem is None:
            try:
                results.append(CaseResult.from_dict(data))
            except (KeyError, ValueError, TypeError) as exc:
                problem = f"not a result ({exc})"
        if problem is not None:
            skipped.append(f"{where}: {problem}")
    return ReadResults(results=results, skipped=skipped)


def load_results(paths: Iterable[Path], *, skipped: list[str] | None = None) -> list[CaseResult]:
    """Read results from JSONL files or run folders; unreadable or forged lines are left out
    (and listed in `skipped` when given), so `--resume` re-runs the cases they stood for."""
    out: list[CaseResult] = []
    for path in paths:
        file = path / "results.jsonl" if path.is_dir() else path
        read = read_results(file)
        out.extend(read.results)
        if skipped is not None:
            skipped.extend(read.skipped)
    return out
