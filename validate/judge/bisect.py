"""Bisect logic, free of I/O: which candidate to probe next, what a probe's outcomes mean, where
the boundary lies. The caller hands in `probe(candidate) -> outcome class` (a real `validate` of
one cell and one case in cli/bisect.py; a plain function in the tests).

"Bad" is the outcome class seen at the bad end, so a crash and a fail are different classes; any
other outcome counts as good (it is not the regression being chased) and is flagged. An `error`
or `skip` outcome (the environment broke, or the case could not run there) makes the candidate
untestable: it is skipped, as `git bisect run` does with exit 125. A probe repeated (`repeats`)
whose runs disagree is reported as such and skipped too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from packaging.version import Version

from validate._compat import StrEnum
from validate.errors import ConfigError
from validate.model.outcome import Outcome, policy

__all__ = [
    "UNTESTABLE",
    "BisectResult",
    "Observation",
    "Probe",
    "ProbeFn",
    "Verdict",
    "bisect",
    "classify",
    "folder_name",
    "next_index",
    "suggested_issue",
]

#: Outcomes that say nothing about the product: the candidate is skipped.
UNTESTABLE = frozenset({"error", "skip"})


class Verdict(StrEnum):
    GOOD = "good"
    BAD = "bad"
    SKIP = "skip"  # an untestable outcome (environment error, case skipped)
    DISAGREE = "disagree"  # the repeats gave different outcomes (treated as skip)


@dataclass(frozen=True, kw_only=True)
class Observation:
    """One run of the probe: its outcome class, the reason line and where its evidence lies."""

    outcome: str
    reason: str = ""
    folder: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"outcome": self.outcome, "reason": self.reason, "folder": self.folder}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Observation:
        return cls(
            outcome=str(data["outcome"]),
            reason=str(data.get("reason", "")),
            folder=str(data.get("folder", "")),
        )


#: probe(candidate) -> its outcome class ("pass", "crash", ...) or an Observation with evidence.
ProbeFn = Callable[[str], "Observation | str"]


@dataclass(frozen=True, kw_only=True)
class Probe:
    """A candidate probed `len(observations)` times and what that means."""

    candidate: str
    observations: tuple[Observation, ...]
    verdict: Verdict
    note: str = ""

    @property
    def outcomes(self) -> tuple[str, ...]:
        return tuple(o.outcome for o in self.observations)

    def to_dict(self) -> dict[str, Any]:
        return {
            "candidate": self.candidate,
            "observations": [o.to_dict() for o in self.observations],
            "verdict": str(self.verdict),
            "note": self.note,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Probe:
        return cls(
            candidate=str(data["candidate"]),
            observations=tuple(Observation.from_dict(o) for o in data["observations"]),
            verdict=Verdict(data["verdict"]),
            note=str(data.get("note", "")),
        )


@dataclass(frozen=True, kw_only=True)
class BisectResult:
    """Every probe in the order made, the classes of both ends, and the boundary.

    `last_good`/`first_bad` are the nearest probed candidates either side of the boundary; the
    boundary is exact (`found`) when no candidate between them is left untested, else
    `unresolved` lists the skipped ones between them (the first bad is one of them or first_bad).
    """

    candidates: tuple[str, ...]
    probes: tuple[Probe, ...]
    good_class: str
    bad_class: str
    last_good: str
    first_bad: str
    unresolved: tuple[str, ...] = field(default=())

    @property
    def found(self) -> bool:
        return not self.unresolved and not self.ends_agree

    @property
    def ends_agree(self) -> bool:
        """Both ends gave the same outcome class: the range holds no change to find (a finding,
        not bad input; nothing between them was probed)."""
        return self.good_class == self.bad_class

    def to_dict(self) -> dict[str, Any]:
        return {
            "candidates": list(self.candidates),
            "probes": [p.to_dict() for p in self.probes],
            "good_class": self.good_class,
            "bad_class": self.bad_class,
            "last_good": self.last_good,
            "first_bad": self.first_bad,
            "unresolved": list(self.unresolved),
            "found": self.found,
            "ends_agree": self.ends_agree,
        }


def _common(observations: Sequence[Observation]) -> str | None:
    outcomes = {o.outcome for o in observations}
    return next(iter(outcomes)) if len(outcomes) == 1 else None


def classify(
    observations: Sequence[Observation], *, good_class: str, bad_class: str
) -> tuple[Verdict, str]:
    """The verdict of one probe's runs and a note saying why when it is not plain."""
    outcomes = [o.outcome for o in observations]
    untestable = sorted({o for o in outcomes if o in UNTESTABLE})
    if untestable:
        why = _first_line(next(o.reason for o in observations if o.outcome in UNTESTABLE))
        return Verdict.SKIP, f"skipped: {'/'.join(untestable)} is neither good nor bad ({why})"
    outcome = _common(observations)
    if outcome is None:
        return Verdict.DISAGREE, f"repeats disagree ({', '.join(outcomes)}): skipped as flaky"
    if outcome == bad_class:
        return Verdict.BAD, ""
    if outcome != good_class:
        return Verdict.GOOD, f"{outcome} is not the bad end's {bad_class}: counted as good"
    return Verdict.GOOD, ""


def next_index(lo: int, hi: int, tried: set[int]) -> int | None:
    """The untried index strictly between lo and hi nearest their middle (lower on a tie)."""
    left = [i for i in range(lo + 1, hi) if i not in tried]
    if not left:
        return None
    middle = (lo + hi) / 2
    return min(left, key=lambda i: (abs(i - middle), i))


def _observe(probe: ProbeFn, candidate: str, repeats: int) -> tuple[Observation, ...]:
    runs = []
    for _ in range(repeats):
        got = probe(candidate)
        runs.append(got if isinstance(got, Observation) else Observation(outcome=got))
    return tuple(runs)


def bisect(
    candidates: Sequence[str],
    probe: ProbeFn,
    *,
    repeats: int = 1,
    done: Mapping[str, Probe] | None = None,
    record: Callable[[Probe], None] | None = None,
) -> BisectResult:
    """Bisect `candidates` (good end first, bad end last, in order between).

    Both ends are probed first; ConfigError when either is untestable or flaky. Ends that show
    the same outcome class are a result of their own (`ends_agree`): nothing between them is
    probed. Probes in `done` (a resumed bisect) are taken as they are, not re-run;
    `record` is called with each new probe as soon as it is made.
    """
    if len(candidates) < 2 or candidates[0] == candidates[-1]:
        msg = "bisect: empty range (the good and the bad end are the same)"
        raise ConfigError(msg)
    done = dict(done or {})
    made: list[Probe] = []

    def observe(candidate: str) -> tuple[Observation, ...]:
        before = done.get(candidate)
        return before.observations if before is not None else _observe(probe, candidate, repeats)

    def keep(
        candidate: str, observations: tuple[Observation, ...], verdict: Verdict, note: str
    ) -> Probe:
        result = Probe(candidate=candidate, observations=observations, verdict=verdict, note=note)
        made.append(result)
        if record is not None and candidate not in done:
            record(result)
        return result

    good, bad = candidates[0], candidates[-1]
    good_runs = observe(good)
    good_class = _end_class(good_runs, "--good", good)
    keep(good, good_runs, Verdict.GOOD, "the good end")
    bad_runs = observe(bad)
    bad_class = _end_class(bad_runs, "--bad", bad)
    keep(bad, bad_runs, Verdict.BAD, "the bad end")
    if good_class == bad_class:  # a finding: the outcome does not change over the range
        return BisectResult(
            candidates=tuple(candidates),
            probes=tuple(made),
            good_class=good_class,
            bad_class=bad_class,
            last_good=good,
            first_bad=bad,
        )
    lo, hi, tried = 0, len(candidates) - 1, set[int]()
    while (index := next_index(lo, hi, tried)) is not None:
        tried.add(index)
        runs = observe(candidates[index])
        verdict, note = classify(runs, good_class=good_class, bad_class=bad_class)
        keep(candidates[index], runs, verdict, note)
        if verdict is Verdict.GOOD:
            lo = index
        elif verdict is Verdict.BAD:
            hi = index
    return BisectResult(
        candidates=tuple(candidates),
        probes=tuple(made),
        good_class=good_class,
        bad_class=bad_class,
        last_good=candidates[lo],
        first_bad=candidates[hi],
        unresolved=tuple(candidates[lo + 1 : hi]),
    )


def folder_name(case: str, axis: str, good: str, bad: str, unit: str | None = None) -> str:
    """The folder `bisect` keeps its probes and bisect.json in by default (under reports/bisect/):
    a speed bisect's name ends in `-slower-<unit>`. The report looks a slowdown's bisect up there."""
    speed = "" if unit is None else f"-slower-{unit}"
    text = f"{case}-{axis}-{good}-{bad}{speed}"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:120] or "bisect"


def _end_class(observations: Sequence[Observation], flag: str, candidate: str) -> str:
    """The outcome class of one end, or ConfigError when it is untestable or flaky."""
    outcome = _common(observations)
    if outcome is None or outcome in UNTESTABLE:
        shown = ", ".join(o.outcome for o in observations)
        why = _first_line(next((o.reason for o in observations if o.reason), ""))
        msg = (
            f"bisect: {flag} {candidate} gives {shown}"
            + (f" ({why})" if why else "")
            + "; an end must show one testable outcome, the same in every repeat"
        )
        raise ConfigError(msg)
    return outcome


def _is_bad_class(outcome: str) -> bool:
    try:
        return policy(Outcome(outcome)).bad
    except ValueError:  # a combined class ("a=pass, b=fail") or none we know
        return False


def suggested_issue(
    result: BisectResult, *, axis: str, case: str, pins: Mapping[str, str]
) -> str | None:
    """A matrix/known_issues.toml entry for the range the bisect found, or None where it gives
    none (no exact boundary, a commit axis, or neither/both classes a product failure).

    Only the bisected bound is evidence; the other pinned axis is written as `==` its pin.
    """
    if not result.found or axis not in _ISSUE_KEY:
        return None
    bad_is_issue, good_is_issue = _is_bad_class(result.bad_class), _is_bad_class(result.good_class)
    if bad_is_issue == good_is_issue:
        return None
    first_bad, last_good = Version(result.first_bad), Version(result.last_good)
    upper = result.first_bad if first_bad > last_good else result.last_good
    issue_above = (first_bad > last_good) == bad_is_issue
    spec = f">={upper}" if issue_above else f"<{upper}"
    symptom = result.bad_class if bad_is_issue else result.good_class
    values = {"backend": "", "frontend": ""}
    for key, pin_axis in (("backend", "cudnn"), ("frontend", "frontend")):
        if pins.get(pin_axis):
            values[key] = f"=={pins[pin_axis]}"
    values[_ISSUE_KEY[axis]] = spec
    lines = [
        (
            f"# bisect over {axis}: last good {result.last_good} ({result.good_class}), first "
            f"bad {result.first_bad} ({result.bad_class}); only that bound is bisected, the "
            "other pins are the ones probed"
        ),
        "[[issue]]",
        'id = "KI-NEW"',
        f"title = {json.dumps(f'{case}: {symptom} (bisected over {axis})')}",
        f"backend = {json.dumps(values['backend'])}",
    ]
    if values["frontend"]:
        lines.append(f"frontend = {json.dumps(values['frontend'])}")
    if pins.get("arch"):
        lines.append(f"archs = [{json.dumps(pins['arch'])}]")
    lines += [
        f"cases = [{json.dumps(case)}]",
        f"symptom = {{ outcomes = [{json.dumps(symptom)}] }}",
    ]
    if not issue_above and axis == "cudnn":
        lines.append(f"fixed_in = {json.dumps(upper)}")
    return "\n".join(lines)


_ISSUE_KEY: Final = {"cudnn": "backend", "frontend": "frontend"}


def _first_line(text: str, limit: int = 300) -> str:
    """A reason as one bounded line (a build log's tail stays in the probe's folder)."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"
