"""Reading results.jsonl back: decoded, type-checked and verified line by line."""

from __future__ import annotations

import json
import re
from contextlib import closing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from validate.errors import ResultsError
from validate.model.outcome import Outcome
from validate.model.results.parallel import blocks
from validate.model.results.schema import _LINE_KEYS, SCHEMA_VERSION, CaseResult
from validate.model.results.signing import RunKey
from validate.textsafe import display

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping
    from pathlib import Path

__all__ = ["ReadResults", "iter_records", "iter_results", "load_results", "read_results"]


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
        ("units", (dict,)),
    ):
        value = data.get(name)
        if name in data and (not isinstance(value, kinds) or isinstance(value, bool)):
            return f"field {name!r} has the wrong type ({type(data[name]).__name__})"
    return None


def _key_for(file: Path) -> RunKey | None:
    try:
        return RunKey.for_run(file.parent)
    except KeyError:
        return None


#: A JSON escape that may stand for a character `display` rewrites (a control character, a lone
#: surrogate, a non-ASCII code point); a plain-ASCII line without one is shown as it is.
_ESCAPE: Final = re.compile(rb"\\[ubfr]")


def _records(
    file: Path, key: RunKey | None, skipped: list[str] | None
) -> Iterator[tuple[bytes, dict[str, Any]]]:
    """(raw line, decoded object) for each line that is a result the tool wrote, streamed a
    block at a time (a run of a million results is never read whole); every other line is named
    in `skipped` as `file:line: why`. A line the second core vouched for (parallel.py) is one
    whose MAC it checked; every other line's MAC is checked here."""
    try:
        stream = file.open("rb")
    except FileNotFoundError:
        return
    number = 0
    with stream, closing(blocks(stream, key)) as source:
        for lines, verdicts in source:
            for raw, vouched in zip(lines, verdicts, strict=True):
                number += 1
                # the common case, taken first: a line the tool signed, its MAC valid
                if vouched == 1 or (key is not None and key.verifies_line(raw)):
                    data = _signed_object(raw.decode("utf-8"))
                    schema = data.get("schema", 1) if type(data) is dict else None
                    if type(schema) is int and schema <= SCHEMA_VERSION:
                        yield raw, data
                        continue
                if not raw.strip():
                    continue
                problem, data = _decode(raw, key)
                if problem is None and data is not None:
                    yield raw, data
                elif skipped is not None:
                    skipped.append(f"{file}:{number}: {problem}")
                if problem is not None and problem.startswith(_NEWER):
                    msg = (
                        f"{file}:{number}: written by a newer cudnn-matrix ({problem}, this one "
                        f"reads up to {SCHEMA_VERSION}); upgrade the tool to read this run"
                    )
                    raise ResultsError(msg)


_NEWER: Final = "results schema "
#: Fields whose value repeats from line to line (a cell's lines lie together, a test file's
#: tests too): a result keeps the one string of the line before rather than a decoded copy,
#: which at a million results is a quarter less memory for a report to fault in (issue #27).
_REPEATED: Final = ("case_path", "cell_id", "run_id", "started_at", "reason")
_SCAN: Final = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[attr-defined]


def _signed_object(text: str) -> Any:
    """A line the tool signed, decoded: it is compact JSON as `RunKey.signed_line` wrote it, so
    the scanner reads it straight, without json.loads' whitespace passes (a million lines a
    report, issue #27); anything else goes through json.loads."""
    try:
        data, end = _SCAN(text, 0)
    except StopIteration:
        end = -1
    return data if end == len(text) else json.loads(text)


def _decode(raw: bytes, key: RunKey | None) -> tuple[str | None, dict[str, Any] | None]:
    """The decoded result object, or why the line is not one."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return "not valid UTF-8", None
    except json.JSONDecodeError:
        return "not a JSON object (torn or foreign line)", None
    if not isinstance(data, dict):
        return f"a JSON {type(data).__name__}, not a result object", None
    schema = data.get("schema", 1)
    if not isinstance(schema, int) or isinstance(schema, bool):
        return "field 'schema' is not an integer", None
    if schema > SCHEMA_VERSION:
        return f"{_NEWER}{schema}", None
    if key is not None and key.verifies_line(raw):
        return None, data  # the bytes the tool signed: a CaseResult it wrote, typed as one
    problem = _mistyped(data)
    if problem is None and (key is not None or "mac" in data):
        if key is None:
            problem = "signed, but the run's key is missing (results.key); cannot verify it"
        elif not key.verifies(data):  # the MAC in key order (older lines), or a forged one
            problem = "MAC does not verify: a line the tool did not write"
    if problem is None and data["outcome"] not in _OUTCOMES:
        problem = f"not a result ('{data['outcome']}' is not a valid Outcome)"
    return problem, data


_OUTCOMES: Final = frozenset(str(o) for o in Outcome)


def iter_records(
    file: Path, key: RunKey | None = None, *, skipped: list[str] | None = None
) -> Iterator[dict[str, Any]]:
    """The verified result objects of one results.jsonl, line by line (see `read_results`)."""
    for _, data in _records(file, key or _key_for(file), skipped):
        yield data


def iter_results(
    file: Path,
    key: RunKey | None = None,
    *,
    skipped: list[str] | None = None,
    for_display: bool = False,
) -> Iterator[CaseResult]:
    """The results of one results.jsonl, line by line (see `read_results`). `for_display`: every
    string as a report shows it (`textsafe.display`: control characters and undecodable bytes
    escaped); a plain-ASCII line without escapes has nothing to rewrite and is taken as it is."""
    cells: dict[tuple[tuple[str, Any], ...], dict[str, Any]] = {}
    last: tuple[tuple[tuple[str, Any], ...], dict[str, Any]] = ((), {})
    repeated: dict[str, str] = {}
    for raw, data in _records(file, key or _key_for(file), skipped):
        shown = _shown(data) if for_display and (not raw.isascii() or _ESCAPE.search(raw)) else data
        if type(cell := shown.get("cell")) is dict:  # one pins dict per cell, not per result
            pins = tuple(cell.items())  # in its order, as a results line has it
            if pins == last[0]:  # a cell's lines lie together: compared, not hashed, per line
                shown["cell"] = last[1]
            else:
                shown["cell"] = cells.setdefault(pins, cell)
                last = (pins, shown["cell"])
        for name in _REPEATED:  # the string the line before held, where this one is equal
            value = shown.get(name)
            if type(value) is str:
                if value == (held := repeated.get(name)):
                    shown[name] = held
                else:
                    repeated[name] = value
        try:  # a line's own decoded object, taken over: no copy of it per result
            yield (
                CaseResult.from_line(shown)
                if _LINE_KEYS.issuperset(shown)
                else CaseResult.from_dict(shown)
            )
        except (KeyError, ValueError, TypeError) as exc:
            if skipped is not None:
                skipped.append(f"{file}: not a result ({exc})")


def _shown(value: Any) -> Any:
    if isinstance(value, str):
        return display(value)
    if isinstance(value, dict):
        return {k: _shown(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shown(v) for v in value]
    return value


def read_results(file: Path, key: RunKey | None = None) -> ReadResults:
    """Read one results.jsonl; lines that do not decode, do not type-check or whose MAC does not
    verify are skipped and listed (never counted). A run written by a newer schema is refused.

    `key`: the run's key (default: found beside the file, or privately, as `RunKey.for_run`). A
    folder with no key at all is a run from before lines were signed (schema 1): its lines are
    read as they are; once a key exists, every line must carry a valid MAC.
    """
    skipped: list[str] = []
    results = list(iter_results(file, key, skipped=skipped))
    return ReadResults(results=results, skipped=skipped)


def load_results(
    paths: Iterable[Path], *, skipped: list[str] | None = None, for_display: bool = False
) -> list[CaseResult]:
    """Read results from JSONL files or run folders; unreadable or forged lines are left out
    (and listed in `skipped` when given), so `--resume` re-runs the cases they stood for."""
    out: list[CaseResult] = []
    for path in paths:
        file = path / "results.jsonl" if path.is_dir() else path
        out.extend(iter_results(file, skipped=skipped, for_display=for_display))
    return out
