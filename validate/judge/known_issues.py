"""Known-issue database (matrix/known_issues.toml) and the pure check that turns results into xfail/xpass."""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Final

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from validate._compat import tomllib
from validate.errors import MatrixError
from validate.model.matrix import MATRIX_DIR
from validate.model.outcome import BAD_OUTCOMES, Outcome

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from pathlib import Path

    from validate.model.results import CaseResult

__all__ = [
    "DEFAULT_KNOWN_ISSUES",
    "KnownIssue",
    "Symptom",
    "apply_known_issues",
    "case_matches",
    "load_known_issues",
]

#: The embedded database: matrix/known_issues.toml (see validate.model.matrix.MATRIX_DIR).
DEFAULT_KNOWN_ISSUES: Final = MATRIX_DIR / "known_issues.toml"

_ARCH = re.compile(r"sm\d{2,3}")
_KEYS: Final = frozenset(
    {"id", "title", "backend", "frontend", "archs", "cases", "symptom", "fixed_in", "refs", "note"}
)
_REQUIRED: Final = ("id", "title", "backend", "cases", "symptom")
_SYMPTOM_KEYS: Final = frozenset({"outcomes", "match"})


@dataclass(frozen=True, kw_only=True)
class Symptom:
    """How the issue shows: one of `outcomes`, and `match` (regex) found in reason/exception/signal."""

    outcomes: frozenset[Outcome]
    match: re.Pattern[str] | None = None

    def seen_in(self, result: CaseResult) -> bool:
        if result.outcome not in self.outcomes:
            return False
        return self.match is None or self.match.search(_evidence(result)) is not None

    def describe(self) -> str:
        names = "|".join(sorted(str(o) for o in self.outcomes))
        return names if self.match is None else f"{names} /{self.match.pattern}/"


@dataclass(frozen=True, kw_only=True)
class KnownIssue:
    """One declared issue: where it applies (backend, frontend, archs, cases) and what it looks like."""

    id: str
    title: str
    backend: SpecifierSet
    frontend: SpecifierSet
    archs: frozenset[str]  # empty: any arch
    cases: tuple[str, ...]  # fnmatch globs on the case name (see case_matches)
    symptom: Symptom
    fixed_in: str | None = None
    refs: tuple[str, ...] = ()
    note: str = ""

    def covers_case(self, case: str) -> bool:
        return any(case_matches(case, pattern) for pattern in self.cases)

    def out_of_range(self, pins: Mapping[str, str]) -> str | None:
        """None when the cell lies in the declared range; else why not, e.g. "backend 9.23.2.1 not in ..."."""
        for axis, spec in (("backend", self.backend), ("frontend", self.frontend)):
            raw = pins.get(axis, "")
            if not str(spec):
                continue
            try:
                version = Version(raw)
            except InvalidVersion:
                return f"{axis} {raw or 'unknown'} cannot be compared with {spec}"
            if not spec.contains(version, prereleases=True):
                return f"{axis} {raw} not in {spec}"
        arch = pins.get("arch", "")
        if self.archs and arch not in self.archs:
            return f"arch {arch or 'unknown'} not in {', '.join(sorted(self.archs))}"
        return None


def case_matches(case: str, pattern: str) -> bool:
    """Glob match on the case name or its file name; `[`/`]` also match literally ("repro[*]")."""
    names = {case, case.rsplit("/", 1)[-1]}
    literal = re.sub(r"([\[\]])", r"[\1]", pattern)
    return any(fnmatchcase(n, p) for n in names for p in (pattern, literal))


def _evidence(result: CaseResult) -> str:
    parts = [result.reason, result.signal or ""]
    if result.exception:
        parts += [str(result.exception.get("ename", "")), str(result.exception.get("evalue", ""))]
    return "\n".join(p for p in parts if p)


def _pins(result: CaseResult) -> dict[str, str]:
    """backend/frontend/arch of the cell a result ran in (the cell's pins, else what the case saw)."""
    cell, env = result.cell, result.env
    return {
        "backend": str(cell.get("cudnn") or env.get("cudnn") or env.get("backend") or ""),
        "frontend": str(cell.get("frontend") or env.get("frontend") or ""),
        "arch": str(cell.get("arch") or env.get("arch") or ""),
    }


def apply_known_issues(
    results: Iterable[CaseResult], issues: Sequence[KnownIssue]
) -> list[CaseResult]:
    """Judge each result against the issues: xfail, xpass, a flagged failure, or unchanged."""
    return [_judge(result, issues) for result in results]


def _judge(result: CaseResult, issues: Sequence[KnownIssue]) -> CaseResult:
    if result.outcome not in BAD_OUTCOMES | {Outcome.PASS}:
        return result  # skip/error/xfail/xpass: nothing to say (and applying twice changes nothing)
    pins = _pins(result)
    mine = [ki for ki in issues if ki.covers_case(result.case)]
    in_range = [ki for ki in mine if ki.out_of_range(pins) is None]
    if result.outcome is Outcome.PASS:
        if not in_range:
            return result
        ids = ", ".join(ki.id for ki in in_range)
        reason = f"{ids} did not reproduce: fixed?"
        return result.with_(outcome=Outcome.XPASS, known_issue=in_range[0].id, reason=reason)
    for ki in in_range:
        if ki.symptom.seen_in(result):
            reason = f"{ki.id} ({ki.title}): {result.reason}".rstrip(": ")
            return result.with_(outcome=Outcome.XFAIL, known_issue=ki.id, reason=reason)
    notes = []
    for ki in mine:
        why = ki.out_of_range(pins)
        if why is not None and ki.symptom.seen_in(result):
            notes.append(f"{ki.id} reproduces outside its declared range ({why})")
    if not notes:
        notes = [
            f"{ki.id} is declared here but the symptom differs (expected {ki.symptom.describe()})"
            for ki in in_range
        ]
    return result.with_(ki_note="; ".join(notes)) if notes else result


# --------------------------------------------------------------------------- loading


class _Errors:
    """Every problem in one file, each with its key path and (where found) line."""

    def __init__(self, path: Path, text: str) -> None:
        self.path, self.lines = path, text.splitlines()
        self.messages: list[str] = []
        self._from = 0  # search for lines after the current [[issue]] header

    def at_issue(self, index: int) -> None:
        headers = [n for n, line in enumerate(self.lines) if line.strip() == "[[issue]]"]
        self._from = headers[index] if index < len(headers) else 0

    def add(self, key: str, message: str, needle: str | None = None) -> None:
        line = None
        if needle:
            line = next(
                (n + 1 for n in range(self._from, len(self.lines)) if needle in self.lines[n]), None
            )
        where = f"{self.path}:{line}" if line else str(self.path)
        self.messages.append(f"{where}: {key}: {message}")


def load_known_issues(path: Path | None = None) -> list[KnownIssue]:
    """Read and check the database; every bad entry is reported at once in one MatrixError line."""
    file = DEFAULT_KNOWN_ISSUES if path is None else path
    try:
        text = file.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except (OSError, UnicodeDecodeError) as exc:
        msg = f"{file}: cannot read known-issues file ({type(exc).__name__}: {exc})"
        raise MatrixError(msg) from exc
    except tomllib.TOMLDecodeError as exc:
        msg = f"{file}: malformed TOML in known-issues file: {exc}"
        raise MatrixError(msg) from exc
    errors = _Errors(file, text)
    extra = sorted(set(data) - {"issue"})
    if extra:
        errors.add(
            ", ".join(extra), "unknown top-level key (expected only [[issue]] tables)", extra[0]
        )
    raw = data.get("issue", [])
    if not isinstance(raw, list):
        errors.add("issue", "expected [[issue]] tables", "issue")
        raw = []
    issues: list[KnownIssue] = []
    seen: set[str] = set()
    for i, entry in enumerate(raw):
        errors.at_issue(i)
        ident = entry.get("id") if isinstance(entry, dict) else None
        if isinstance(ident, str) and ident in seen:
            errors.add(f"issue[{i}].id", f"duplicate id {ident!r}", ident)
        seen.add(str(ident))
        issue = _parse_issue(errors, f"issue[{i}]", entry)
        if issue is not None:
            issues.append(issue)
    if errors.messages:
        raise MatrixError("; ".join(errors.messages))
    return issues


def _parse_issue(errors: _Errors, key: str, entry: object) -> KnownIssue | None:
    if not isinstance(entry, dict):
        errors.add(key, f"expected a table, got {entry!r}")
        return None
    before = len(errors.messages)
    for name in sorted(set(entry) - _KEYS):
        errors.add(f"{key}.{name}", f"unknown key (allowed: {', '.join(sorted(_KEYS))})", name)
    for name in _REQUIRED:
        if name not in entry:
            errors.add(f"{key}.{name}", "missing required key", "[[issue]]")
    ident = _text(errors, f"{key}.id", entry.get("id", ""), required=True)
    title = _text(errors, f"{key}.title", entry.get("title", ""), required=True)
    backend = _spec(errors, f"{key}.backend", entry.get("backend", ""))
    frontend = _spec(errors, f"{key}.frontend", entry.get("frontend", ""))
    archs = _strings(errors, f"{key}.archs", entry.get("archs", []))
    for arch in archs:
        if not _ARCH.fullmatch(arch):
            errors.add(f"{key}.archs", f"bad arch {arch!r} (expected smXY, e.g. sm90)", arch)
    cases = _strings(errors, f"{key}.cases", entry.get("cases", []))
    if "cases" in entry and not cases:
        errors.add(f"{key}.cases", "expected at least one case glob", "cases")
    symptom = _symptom(errors, f"{key}.symptom", entry.get("symptom", {}))
    fixed_in = entry.get("fixed_in")
    if fixed_in is not None:
        fixed_in = _text(errors, f"{key}.fixed_in", fixed_in, required=True)
        try:
            Version(fixed_in)
        except InvalidVersion:
            errors.add(f"{key}.fixed_in", f"not a version: {fixed_in!r}", fixed_in)
    refs = _strings(errors, f"{key}.refs", entry.get("refs", []))
    note = _text(errors, f"{key}.note", entry.get("note", ""), required=False)
    if len(errors.messages) > before or backend is None or frontend is None or symptom is None:
        return None
    return KnownIssue(
        id=ident,
        title=title,
        backend=backend,
        frontend=frontend,
        archs=frozenset(archs),
        cases=tuple(cases),
        symptom=symptom,
        fixed_in=fixed_in or None,
        refs=tuple(refs),
        note=note,
    )


def _text(errors: _Errors, key: str, raw: object, *, required: bool) -> str:
    if not isinstance(raw, str) or (required and not raw.strip()):
        errors.add(key, f"expected a non-empty string, got {raw!r}", key.rsplit(".", 1)[-1])
        return ""
    return raw


def _strings(errors: _Errors, key: str, raw: object) -> list[str]:
    if not isinstance(raw, list) or not all(isinstance(s, str) and s for s in raw):
        errors.add(
            key, f"expected a list of non-empty strings, got {raw!r}", key.rsplit(".", 1)[-1]
        )
        return []
    return list(raw)


def _spec(errors: _Errors, key: str, raw: object) -> SpecifierSet | None:
    if not isinstance(raw, str):
        errors.add(key, f"expected a version specifier string, got {raw!r}", key.rsplit(".", 1)[-1])
        return None
    try:
        return SpecifierSet(raw)
    except InvalidSpecifier:
        errors.add(key, f"bad version specifier {raw!r} (e.g. '>=9.24,<9.25')", raw)
        return None


def _symptom(errors: _Errors, key: str, raw: object) -> Symptom | None:
    if not isinstance(raw, dict):
        errors.add(key, f"expected a table {{ outcomes = [...], match = '...' }}, got {raw!r}")
        return None
    for name in sorted(set(raw) - _SYMPTOM_KEYS):
        errors.add(f"{key}.{name}", "unknown key (allowed: outcomes, match)", name)
    outcomes: set[Outcome] = set()
    names = raw.get("outcomes", [])
    if not isinstance(names, list) or not names:
        errors.add(f"{key}.outcomes", f"expected a non-empty list, got {names!r}", "outcomes")
        names = []
    allowed = sorted(str(o) for o in BAD_OUTCOMES)
    for name in names:
        if name not in allowed:
            errors.add(f"{key}.outcomes", f"{name!r} is not one of {allowed}", str(name))
        else:
            outcomes.add(Outcome(name))
    match = raw.get("match")
    pattern = None
    if match is not None:
        try:
            pattern = re.compile(str(match))
        except re.error as exc:
            errors.add(f"{key}.match", f"bad regex {match!r}: {exc}", str(match))
            return None
    if not outcomes:
        return None
    return Symptom(outcomes=frozenset(outcomes), match=pattern)
