"""Known issues against the evidence: what each result says about an issue, and the corrected
`[[issue]]` entry the evidence supports (`cudnn-matrix known-issues suggest`).

A result is evidence for an issue when the issue names its case: it is `bad` when it reproduced
(xfail, or fail/crash/timeout inside the declared range, or with the issue's symptom outside it)
and `good` when it passed (pass/xpass). Skips, errors and failures with another symptom outside
the range say nothing. Versions are compared as packaging Versions, never as strings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from packaging.version import InvalidVersion, Version

from validate.judge.known_issues import result_pins
from validate.model.order import natural_key
from validate.model.outcome import Outcome, policy

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from packaging.specifiers import Specifier, SpecifierSet

    from validate.judge.known_issues import KnownIssue
    from validate.model.results import CaseResult

__all__ = [
    "Evidence",
    "EvidenceKind",
    "Suggestion",
    "evidence_kind",
    "gather",
    "normal_arch",
    "render_suggestion",
    "spec_text",
    "suggest",
]

EvidenceKind = Literal["bad", "good"]
_MAX_NAMED = 3  # evidence named per bound in a comment; the rest are counted


_OP_ORDER = {">": 0, "=": 1, "~": 1, "<": 2, "!": 3}


def spec_text(spec: SpecifierSet) -> str:
    """A specifier set as people write it, lower bound first: ">=9.24,<9.25"."""
    return ",".join(sorted((str(s) for s in spec), key=lambda s: (_OP_ORDER.get(s[0], 4), s)))


def normal_arch(text: str) -> str:
    """sm_90, SM9.0 -> sm90 (as the known-issue check compares archs)."""
    return text.lower().replace("_", "").replace(".", "")


def evidence_kind(ki: KnownIssue, result: CaseResult) -> EvidenceKind | None:
    """What one result says about one issue: reproduced (bad), passed (good), or nothing."""
    if not ki.covers_case(result.case):
        return None
    rule = policy(result.outcome)
    if rule.good:
        return "good"
    in_range = ki.out_of_range(result_pins(result)) is None
    if result.outcome is Outcome.XFAIL:
        return "bad" if in_range or result.known_issue == ki.id else None
    if rule.bad:
        return "bad" if in_range or ki.symptom.seen_in(result) else None
    return None


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


@dataclass(frozen=True, kw_only=True)
class Evidence:
    """One result that says something about one issue, with the run it came from."""

    result: CaseResult
    run_id: str
    kind: EvidenceKind
    backend: Version | None
    frontend: Version | None
    arch: str

    def describe(self) -> str:
        pins = result_pins(self.result)
        where = " · ".join(
            p
            for p in (
                f"cudnn {pins['backend'] or '?'}",
                f"fe {pins['frontend'] or '?'}",
                self.arch or "arch ?",
            )
        )
        run = f", run {self.run_id}" if self.run_id else ""
        return f"{self.result.case} @ {where} ({self.result.outcome}{run})"


def gather(ki: KnownIssue, results: Iterable[tuple[CaseResult, str]]) -> list[Evidence]:
    """The evidence for `ki` among (result, run id) pairs."""
    out = []
    for result, run_id in results:
        kind = evidence_kind(ki, result)
        if kind is None:
            continue
        pins = result_pins(result)
        out.append(
            Evidence(
                result=result,
                run_id=run_id or result.run_id,
                kind=kind,
                backend=_version(pins["backend"]),
                frontend=_version(pins["frontend"]),
                arch=normal_arch(pins["arch"]),
            )
        )
    return out


# --------------------------------------------------------------------------- intervals


@dataclass(frozen=True, kw_only=True)
class _Interval:
    """A version range with at most one lower and one upper bound (None: open)."""

    lower: tuple[Version, bool] | None = None  # (version, inclusive)
    upper: tuple[Version, bool] | None = None

    @classmethod
    def of(cls, spec: SpecifierSet) -> _Interval | None:
        """The interval a specifier set describes, or None when it is no interval (!=, ===)."""
        lower: tuple[Version, bool] | None = None
        upper: tuple[Version, bool] | None = None
        for one in spec:
            bounds = _bounds(one)
            if bounds is None:
                return None
            lo, hi = bounds
            if lo is not None and (lower is None or _tighter_lower(lo, lower)):
                lower = lo
            if hi is not None and (upper is None or _tighter_upper(hi, upper)):
                upper = hi
        return cls(lower=lower, upper=upper)

    def above_lower(self, v: Version) -> bool:
        if self.lower is None:
            return True
        bound, inclusive = self.lower
        return v > bound or (inclusive and v == bound)

    def below_upper(self, v: Version) -> bool:
        if self.upper is None:
            return True
        bound, inclusive = self.upper
        return v < bound or (inclusive and v == bound)

    def contains(self, v: Version) -> bool:
        return self.above_lower(v) and self.below_upper(v)

    def widened(self, versions: Iterable[Version]) -> _Interval:
        """The smallest interval holding this one and every version given."""
        seen = sorted(versions)
        if not seen:
            return self
        lower, upper = self.lower, self.upper
        if not self.above_lower(seen[0]):
            lower = (seen[0], True)
        if not self.below_upper(seen[-1]):
            upper = (seen[-1], True)
        return _Interval(lower=lower, upper=upper)

    def lower_text(self) -> str:
        return "" if self.lower is None else f"{'>=' if self.lower[1] else '>'}{self.lower[0]}"

    def upper_text(self) -> str:
        return "" if self.upper is None else f"{'<=' if self.upper[1] else '<'}{self.upper[0]}"


def _tighter_lower(a: tuple[Version, bool], b: tuple[Version, bool]) -> bool:
    return a[0] > b[0] or (a[0] == b[0] and not a[1])


def _tighter_upper(a: tuple[Version, bool], b: tuple[Version, bool]) -> bool:
    return a[0] < b[0] or (a[0] == b[0] and not a[1])


def _bump(release: Sequence[int]) -> Version:
    """The first version after every version with this release prefix: (9, 24) -> 9.25."""
    head = list(release)
    head[-1] += 1
    return Version(".".join(str(p) for p in head))


def _bounds(
    spec: Specifier,
) -> tuple[tuple[Version, bool] | None, tuple[Version, bool] | None] | None:
    op, text = spec.operator, spec.version
    if op == "==" and text.endswith(".*"):
        prefix = Version(text[:-2])
        return (prefix, True), (_bump(prefix.release), False)
    version = Version(text)
    match op:
        case ">=":
            return (version, True), None
        case ">":
            return (version, False), None
        case "<=":
            return None, (version, True)
        case "<":
            return None, (version, False)
        case "==":
            return (version, True), (version, True)
        case "~=":
            return (version, True), (_bump(version.release[:-1]), False)
        case _:
            return None  # != and === describe no single interval


# --------------------------------------------------------------------------- suggestions


@dataclass(frozen=True, kw_only=True)
class Suggestion:
    """A corrected entry for one contradicted issue; `reasons` name the evidence behind it."""

    issue: KnownIssue
    reasons: tuple[str, ...]
    backend: str
    frontend: str
    archs: tuple[str, ...]
    fixed_in: str | None
    derivable: bool  # False: the evidence contradicts the entry but gives no bound to suggest


def _named(evidence: Sequence[Evidence]) -> str:
    """The evidence as indented list lines (each after a newline), at most a few named."""
    shown = "".join(f"\n  - {e.describe()}" for e in evidence[:_MAX_NAMED])
    more = len(evidence) - _MAX_NAMED
    return shown + (f"\n  - and {more} more" if more > 0 else "")


@dataclass(frozen=True, kw_only=True)
class _Dim:
    spec: str
    reasons: tuple[str, ...]
    first_good_after: Version | None
    last_bad: Version | None


def _dimension(
    name: str,
    declared: SpecifierSet,
    bads: Sequence[Evidence],
    goods: Sequence[Evidence],
    value: Callable[[Evidence], Version | None],
) -> _Dim:
    """The range of one version axis the evidence supports, and why it differs from `declared`."""
    unchanged = _Dim(spec=spec_text(declared), reasons=(), first_good_after=None, last_bad=None)
    interval = _Interval.of(declared)
    bad_at: dict[Version, list[Evidence]] = {}
    for e in bads:
        if (v := value(e)) is not None:
            bad_at.setdefault(v, []).append(e)
    if not bad_at:
        return unchanged
    if interval is None:
        why = f"{name} {spec_text(declared)} is not one range (!= or ===): no bound suggested"
        return _Dim(spec=spec_text(declared), reasons=(why,), first_good_after=None, last_bad=None)
    good_at: dict[Version, list[Evidence]] = {}
    for e in goods:
        if (v := value(e)) is not None and v not in bad_at:
            good_at.setdefault(v, []).append(e)
    lo, hi = min(bad_at), max(bad_at)
    last_good = max((g for g in good_at if g < lo), default=None)
    first_good = min((g for g in good_at if g > hi), default=None)
    reasons: list[str] = []
    lower, upper = interval.lower_text(), interval.upper_text()
    before = "last good before it: unknown (no pass seen below it)"
    if last_good is not None:
        before = f"last good before it: {last_good}:{_named(good_at[last_good])}"
    after = "first good after it: unknown (no pass seen above it), so the upper bound is left open"
    if first_good is not None:
        after = f"first good after it: {first_good}:{_named(good_at[first_good])}"
    if not interval.above_lower(lo):
        reasons.append(
            f"{name} lower bound: reproduces below {lower}; first bad {lo}:{_named(bad_at[lo])}\n{before}"
        )
        lower = f">={lo}"
    elif last_good is not None and interval.above_lower(last_good):
        reasons.append(
            f"{name} lower bound: passes at the lower end of {spec_text(declared)}; "
            f"last good {last_good}:{_named(good_at[last_good])}\nfirst bad {lo}:{_named(bad_at[lo])}"
        )
        lower = f">={lo}"
    if not interval.below_upper(hi):
        reasons.append(
            f"{name} upper bound: reproduces above {upper}; last bad {hi}:{_named(bad_at[hi])}\n{after}"
        )
        upper = "" if first_good is None else f"<{first_good}"
    elif first_good is not None and interval.below_upper(first_good):
        reasons.append(
            f"{name} upper bound: passes at the upper end of {spec_text(declared)}; "
            f"last bad {hi}:{_named(bad_at[hi])}\nfirst good {first_good}:{_named(good_at[first_good])}"
        )
        upper = f"<{first_good}"
    if not reasons:
        return _Dim(spec=spec_text(declared), reasons=(), first_good_after=first_good, last_bad=hi)
    spec = ",".join(p for p in (lower, upper) if p)
    return _Dim(spec=spec, reasons=tuple(reasons), first_good_after=first_good, last_bad=hi)


def _in(interval: _Interval | None, v: Version | None) -> bool:
    """Whether a version lies in a (possibly open) range; an unknown version only in an open one."""
    if interval is None:
        return True
    if v is None:
        return interval.lower is None and interval.upper is None
    return interval.contains(v)


def suggest(ki: KnownIssue, results: Iterable[tuple[CaseResult, str]]) -> Suggestion | None:
    """The corrected entry for `ki`, or None when no evidence contradicts it."""
    evidence = gather(ki, results)
    bads = [e for e in evidence if e.kind == "bad"]
    goods = [e for e in evidence if e.kind == "good"]
    if not bads:
        inside = [e for e in goods if ki.out_of_range(result_pins(e.result)) is None]
        if not inside:
            return None
        why = (
            "never reproduced; the evidence gives no bound (unknown): check that the cases provoke "
            f"it, or whether it is fixed. Passes inside the declared range:{_named(inside)}"
        )
        return Suggestion(
            issue=ki,
            reasons=(why,),
            backend=spec_text(ki.backend),
            frontend=spec_text(ki.frontend),
            archs=tuple(sorted(ki.archs, key=natural_key)),
            fixed_in=ki.fixed_in,
            derivable=False,
        )
    reasons: list[str] = []
    archs = set(ki.archs)
    outside = sorted({e.arch for e in bads if e.arch} - archs, key=natural_key) if archs else []
    if outside:
        on = [e for e in bads if e.arch in outside]
        reasons.append(
            f"archs: reproduces on {', '.join(outside)}, outside "
            f"{', '.join(sorted(archs, key=natural_key))}:{_named(on)}"
        )
        archs |= set(outside)
    # A pass speaks about one axis only where the other axes lie in the range that holds every
    # reproduction (the declared range, widened to the bad evidence).
    wide_fe = _widen(ki.frontend, [e.frontend for e in bads])
    wide_be = _widen(ki.backend, [e.backend for e in bads])

    def arch_ok(e: Evidence) -> bool:
        return not archs or e.arch in archs

    backend = _dimension(
        "backend",
        ki.backend,
        bads,
        [e for e in goods if arch_ok(e) and _in(wide_fe, e.frontend)],
        lambda e: e.backend,
    )
    frontend = _dimension(
        "frontend",
        ki.frontend,
        bads,
        [e for e in goods if arch_ok(e) and _in(wide_be, e.backend)],
        lambda e: e.frontend,
    )
    reasons[:0] = [*backend.reasons, *frontend.reasons]
    fixed_in = ki.fixed_in
    fixed = _version(ki.fixed_in or "")
    upper_moved = any(r.startswith("backend upper bound") for r in backend.reasons)
    late = backend.last_bad is not None and fixed is not None and backend.last_bad >= fixed
    if upper_moved or late:
        after = backend.first_good_after
        new = None if after is None else str(after)
        if new != ki.fixed_in:
            if late:
                reasons.append(
                    f"fixed_in {ki.fixed_in}: reproduces at {backend.last_bad}, after it"
                )
            fixed_in = new
    if not reasons:
        return None
    return Suggestion(
        issue=ki,
        reasons=tuple(reasons),
        backend=backend.spec,
        frontend=frontend.spec,
        archs=tuple(sorted(archs, key=natural_key)),
        fixed_in=fixed_in,
        derivable=True,
    )


def _widen(spec: SpecifierSet, versions: Iterable[Version | None]) -> _Interval | None:
    interval = _Interval.of(spec)
    if interval is None:
        return None
    return interval.widened(v for v in versions if v is not None)


# --------------------------------------------------------------------------- TOML


def _toml(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(value, ensure_ascii=False)


def _toml_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(_toml(v) for v in values) + "]"


def render_suggestion(s: Suggestion) -> str:
    """Comment lines naming the evidence, then the whole `[[issue]]` entry in the database format."""
    ki = s.issue
    lines = [f"# {ki.id}: the evidence contradicts the declared entry"]
    lines += [f"#   {line}" for reason in s.reasons for line in reason.splitlines()]
    if not s.derivable:
        lines.append(f"#   no corrected range can be derived; the entry below is {ki.id} unchanged")
    lines += [
        "[[issue]]",
        f"id = {_toml(ki.id)}",
        f"title = {_toml(ki.title)}",
        f"backend = {_toml(s.backend)}",
    ]
    if s.frontend:
        lines.append(f"frontend = {_toml(s.frontend)}")
    if s.archs:
        lines.append(f"archs = {_toml_list(s.archs)}")
    lines.append(f"cases = {_toml_list(ki.cases)}")
    symptom = f"outcomes = {_toml_list(sorted(str(o) for o in ki.symptom.outcomes))}"
    if ki.symptom.match is not None:
        symptom += f", match = {_toml(ki.symptom.match.pattern)}"
    lines.append(f"symptom = {{ {symptom} }}")
    if s.fixed_in:
        lines.append(f"fixed_in = {_toml(s.fixed_in)}")
    if ki.refs:
        lines.append(f"refs = {_toml_list(ki.refs)}")
    if ki.note:
        lines.append(f"note = {_toml(ki.note)}")
    return "\n".join(lines) + "\n"
