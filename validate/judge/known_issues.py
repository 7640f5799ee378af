"""Known-issue database (matrix/known_issues.toml) and the pure check that turns results into xfail/xpass."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fnmatch import translate
from functools import lru_cache
from operator import attrgetter
from typing import TYPE_CHECKING, Final

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from validate.datafile import Key, TomlErrors, read_toml
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
    "named_cases",
    "result_pins",
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
    #: answers already given, per case and per pins: a run of 40,000 tests x 25 cells asks each
    #: issue a million times about 40,000 names and 25 cells (issue #27)
    _covered: dict[str, bool] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )
    _ranges: dict[tuple[str, str, str, bool], str | None] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    def covers_case(self, case: str) -> bool:
        found = self._covered.get(case)
        if found is None:
            found = self._covered[case] = any(case_matches(case, p) for p in self.cases)
        return found

    def matches(self, result: CaseResult, *, check_backend: bool = True) -> bool:
        """Whether the issue names this result's case and its cell lies in the declared range.

        The judge and the report's table both ask this; `check_backend=False` leaves the backend
        range out (the table asks whether the releases after `fixed_in` pass).
        """
        if not self.covers_case(result.case):
            return False
        return self.out_of_range(_pins(result), check_backend=check_backend) is None

    def out_of_range(self, pins: Mapping[str, str], *, check_backend: bool = True) -> str | None:
        """None when the cell lies in the declared range; else why not, e.g. "backend 9.23.2.1 not in ..."."""
        key = (
            pins.get("backend", ""),
            pins.get("frontend", ""),
            pins.get("arch", ""),
            check_backend,
        )
        if key in self._ranges:
            return self._ranges[key]
        why = self._ranges[key] = self._out_of_range(pins, check_backend=check_backend)
        return why

    def _out_of_range(self, pins: Mapping[str, str], *, check_backend: bool) -> str | None:
        for axis, spec in (("backend", self.backend), ("frontend", self.frontend)):
            raw = pins.get(axis, "")
            if not str(spec) or (axis == "backend" and not check_backend):
                continue
            try:
                version = Version(raw)
            except InvalidVersion:
                return f"{axis} {raw or 'unknown'} cannot be compared with {spec}"
            if not spec.contains(version, prereleases=True):
                return f"{axis} {raw} not in {spec}"
        arch = pins.get("arch", "").lower().replace("_", "").replace(".", "")  # sm_90, SM9.0: sm90
        if self.archs and arch not in self.archs:
            return f"arch {arch or 'unknown'} not in {', '.join(sorted(self.archs))}"
        return None


def named_cases(issues: Sequence[KnownIssue], cases: Iterable[str]) -> dict[str, frozenset[str]]:
    """Per issue id, which of `cases` it names: its case globs asked once per distinct case, not
    once per result and cell (a pytest suite's cell holds 40,000 results, issue #27)."""
    distinct = set(cases)
    return {ki.id: frozenset(c for c in distinct if ki.covers_case(c)) for ki in issues}


def case_matches(case: str, pattern: str) -> bool:
    """Glob match on the case name or its file name; `[`/`]` also match literally ("repro[*]").

    A pytest node id (`test/python/test_mhas.py::test_sdpa[fp16-64]`) is matched whole, and
    from its file's base name on (`test_mhas.py::test_sdpa[*]`); `test_mhas.py::*` names every
    test of a file, and a `/` inside the parameters never shortens the name."""
    if not all(part in case for part in _needles(pattern)):
        return False  # a literal part of the pattern is not in the name: no regex needed
    file, sep, rest = case.partition("::")
    names = (case, file.rsplit("/", 1)[-1] + sep + rest)
    glob = _glob(pattern)
    return any(glob.match(name) is not None for name in names)


@lru_cache(maxsize=4096)
def _needles(pattern: str) -> tuple[str, ...]:
    """Text that any name the pattern matches contains, in either reading of its brackets: the
    runs between `*` and `?` before its first `[` (after it, a set may hold `*` or `]`). The
    file-name form of a case is a tail of the case, so both forms contain them. Most names fail
    here: a whole L0 suite asked 20 issues about 41,000 names, 1.2 million regex matches."""
    head = pattern.split("[", 1)[0]
    return tuple(run for run in re.split(r"[*?]", head) if run)


@lru_cache(maxsize=4096)
def _glob(pattern: str) -> re.Pattern[str]:
    """The pattern as fnmatch reads it, or with `[`/`]` taken literally, as one regex."""
    literal = re.sub(r"([\[\]])", r"[\1]", pattern)
    return re.compile(f"(?:{translate(pattern)})|(?:{translate(literal)})")


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
    """Judge each result against the issues: xfail, xpass, a flagged failure, or unchanged. The
    issues that name a case are found once per distinct case (a pytest suite's million results
    name 40,000 cases, issue #27); a result no issue names is left as it is."""
    results = list(results)
    covering: dict[str, tuple[KnownIssue, ...]] = {}
    for case in set(map(_CASE, results)):
        if mine := tuple(ki for ki in issues if ki.covers_case(case)):
            covering[case] = mine
    return [
        _judge(r, covering[r.case]) if r.case in covering and r.outcome in _JUDGED else r
        for r in results
    ]


_CASE: Final = attrgetter("case")
#: The outcomes the known-issues check judges: skip/error/xfail/xpass have nothing to say (and
#: applying it twice changes nothing).
_JUDGED: Final = BAD_OUTCOMES | {Outcome.PASS}


def _judge(result: CaseResult, mine: Sequence[KnownIssue]) -> CaseResult:
    """`result` judged against `mine`, the issues whose case globs name its case."""
    pins = _pins(result)
    in_range = [ki for ki in mine if ki.out_of_range(pins) is None]  # what `matches` asks
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


def load_known_issues(path: Path | None = None) -> list[KnownIssue]:
    """Read and check the database; every bad entry is reported at once in one MatrixError line."""
    doc = read_toml(DEFAULT_KNOWN_ISSUES if path is None else path, what="known-issues")
    data, errors = doc.data, doc.errors
    for extra in sorted(set(data) - {"issue"}):
        errors.add(Key.of(extra), "unknown top-level key (expected only [[issue]] tables)")
    raw = data.get("issue", [])
    if not isinstance(raw, list):
        errors.add(Key.of("issue"), "expected [[issue]] tables")
        raw = []
    issues: list[KnownIssue] = []
    seen: set[str] = set()
    for i, entry in enumerate(raw):
        key = Key.of("issue", i)
        ident = entry.get("id") if isinstance(entry, dict) else None
        if isinstance(ident, str) and ident in seen:
            errors.add(key / "id", f"duplicate id {ident!r}")
        seen.add(str(ident))
        issue = _parse_issue(errors, key, entry)
        if issue is not None:
            issues.append(issue)
    errors.raise_if_any()
    return issues


def _parse_issue(errors: TomlErrors, key: Key, entry: object) -> KnownIssue | None:
    if not isinstance(entry, dict):
        errors.add(key, f"expected a table, got {entry!r}")
        return None
    before = len(errors.messages)
    for name in sorted(set(entry) - _KEYS):
        errors.add(key / name, f"unknown key (allowed: {', '.join(sorted(_KEYS))})")
    for name in _REQUIRED:
        if name not in entry:
            errors.add(key / name, "missing required key")
    ident = _text(errors, key / "id", entry.get("id", ""), required=True)
    title = _text(errors, key / "title", entry.get("title", ""), required=True)
    backend = _spec(errors, key / "backend", entry.get("backend", ""))
    frontend = _spec(errors, key / "frontend", entry.get("frontend", ""))
    archs = _strings(errors, key / "archs", entry.get("archs", []))
    for arch in archs:
        if not _ARCH.fullmatch(arch):
            errors.add(key / "archs", f"bad arch {arch!r} (expected smXY, e.g. sm90)")
    cases = _strings(errors, key / "cases", entry.get("cases", []))
    if "cases" in entry and not cases:
        errors.add(key / "cases", "expected at least one case glob")
    symptom = _symptom(errors, key / "symptom", entry.get("symptom", {}))
    fixed_in = entry.get("fixed_in")
    if fixed_in is not None:
        fixed_in = _text(errors, key / "fixed_in", fixed_in, required=True)
        try:
            Version(fixed_in)
        except InvalidVersion:
            errors.add(key / "fixed_in", f"not a version: {fixed_in!r}")
    refs = _strings(errors, key / "refs", entry.get("refs", []))
    note = _text(errors, key / "note", entry.get("note", ""), required=False)
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


def _text(errors: TomlErrors, key: Key, raw: object, *, required: bool) -> str:
    if not isinstance(raw, str) or (required and not raw.strip()):
        errors.add(key, f"expected a non-empty string, got {raw!r}")
        return ""
    return raw


def _strings(errors: TomlErrors, key: Key, raw: object) -> list[str]:
    if not isinstance(raw, list) or not all(isinstance(s, str) and s for s in raw):
        errors.add(key, f"expected a list of non-empty strings, got {raw!r}")
        return []
    return list(raw)


def _spec(errors: TomlErrors, key: Key, raw: object) -> SpecifierSet | None:
    if not isinstance(raw, str):
        errors.add(key, f"expected a version specifier string, got {raw!r}")
        return None
    try:
        return SpecifierSet(raw)
    except InvalidSpecifier:
        errors.add(key, f"bad version specifier {raw!r} (e.g. '>=9.24,<9.25')")
        return None


def _symptom(errors: TomlErrors, key: Key, raw: object) -> Symptom | None:
    if not isinstance(raw, dict):
        errors.add(key, f"expected a table {{ outcomes = [...], match = '...' }}, got {raw!r}")
        return None
    for name in sorted(set(raw) - _SYMPTOM_KEYS):
        errors.add(key / name, "unknown key (allowed: outcomes, match)")
    outcomes: set[Outcome] = set()
    names = raw.get("outcomes", [])
    if not isinstance(names, list) or not names:
        errors.add(key / "outcomes", f"expected a non-empty list, got {names!r}")
        names = []
    allowed = sorted(str(o) for o in BAD_OUTCOMES)
    for name in names:
        if name not in allowed:
            errors.add(key / "outcomes", f"{name!r} is not one of {allowed}")
        else:
            outcomes.add(Outcome(name))
    match = raw.get("match")
    pattern = None
    if match is not None:
        try:
            pattern = re.compile(str(match))
        except re.error as exc:
            errors.add(key / "match", f"bad regex {match!r}: {exc}")
            return None
    if not outcomes:
        return None
    return Symptom(outcomes=frozenset(outcomes), match=pattern)


def result_pins(result: CaseResult) -> dict[str, str]:
    """backend/frontend/arch of the cell a result ran in, as the check compares them."""
    return _pins(result)
