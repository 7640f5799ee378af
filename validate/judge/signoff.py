"""Release sign-off: does every outcome match its expectation, and what changed since a baseline.

Expectations (documented policy):

* pass, skip, xfail -> as expected (xfail: a declared known issue reproduced in its range).
* xpass -> a "fixed?" notice: a known issue did not reproduce; not a regression, exit 0.
* fail, crash, timeout -> regression, exit 1.
* error -> the harness or environment broke, so nothing was proven: not signed off, exit 1, but
  listed as "infra errors", separate from product regressions.
* A non-pass that passed on a re-run (the API-log re-run, or one of --reruns) is *flaky*: listed
  in its own section, never among the regressions or infra errors. `--flaky block` (the default)
  still withholds sign-off for it, `--flaky warn` only lists it; the verdict line names the policy.
* With a baseline: a case that passed before and now fails is a *new failure*; one that passed and
  is now skipped (e.g. "graph not supported") is *supported -> unsupported*, a regression although
  nothing crashed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from validate.model.matrix import AXES
from validate.model.order import natural_key, value_key
from validate.model.outcome import policy
from validate.model.results import axis_value, cell_label, is_bad, result_key

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from validate.model.outcome import FlakyPolicy
    from validate.model.results import CaseResult

__all__ = [
    "BaselineDiff",
    "Transition",
    "TransitionKind",
    "Verdict",
    "compare",
    "decide",
    "passed_on_rerun",
    "rerun_note",
    "summary",
]

TransitionKind = Literal[
    "new_failure", "unsupported", "new_error", "new_pass", "ki_fixed", "still_failing", "missing"
]
#: Transitions that block sign-off (on top of the current run's own regressions and errors).
BLOCKING: frozenset[str] = frozenset({"new_failure", "unsupported"})
_TITLES: Mapping[TransitionKind, str] = {
    "new_failure": "new failures (passed in baseline)",
    "unsupported": "supported -> unsupported (passed in baseline, now skipped)",
    "new_error": "new infra errors (passed in baseline)",
    "new_pass": "new passes",
    "ki_fixed": "known issues fixed",
    "still_failing": "still failing (failed in baseline too)",
    "missing": "in baseline but not run now",
}


@dataclass(frozen=True, kw_only=True)
class Transition:
    """One case whose verdict changed (or did not) between the baseline and the current run."""

    kind: TransitionKind
    key: str
    before: CaseResult | None
    after: CaseResult | None
    note: str = ""

    @property
    def subject(self) -> CaseResult:
        """The current result, or the baseline one for a case that was not run now."""
        result = self.after or self.before
        assert result is not None, "a transition has at least one side"
        return result


@dataclass(frozen=True, kw_only=True)
class BaselineDiff:
    """Current vs baseline, matched on case and the axes that did not change between the runs."""

    changed_axes: tuple[str, ...]
    transitions: tuple[Transition, ...]
    matched_axes: tuple[str, ...] = ()  # the unchanged axes some result carries a value for

    def of(self, kind: TransitionKind) -> tuple[Transition, ...]:
        return tuple(t for t in self.transitions if t.kind == kind)


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """Counts, what blocks sign-off and what is only worth a look."""

    counts: Mapping[str, int]
    regressions: tuple[CaseResult, ...]  # unexpected fail / crash / timeout
    errors: tuple[CaseResult, ...]  # infra: the environment or harness broke
    notices: tuple[CaseResult, ...]  # xpass: a known issue did not reproduce ("fixed?")
    flaky: tuple[CaseResult, ...]  # a non-pass that passed on a re-run (passed_on_rerun)
    baseline: BaselineDiff | None = None
    flaky_policy: FlakyPolicy = "block"

    @property
    def flaky_blocks(self) -> bool:
        return bool(self.flaky) and self.flaky_policy == "block"

    @property
    def blocking_transitions(self) -> tuple[Transition, ...]:
        if self.baseline is None:
            return ()
        return tuple(
            t
            for t in self.baseline.transitions
            if t.kind in BLOCKING
            and not (
                self.flaky_policy == "warn" and t.after is not None and passed_on_rerun(t.after)
            )
        )

    @property
    def signed_off(self) -> bool:
        return not (
            self.regressions or self.errors or self.blocking_transitions or self.flaky_blocks
        )

    @property
    def exit_code(self) -> int:
        return 0 if self.signed_off else 1


def passed_on_rerun(result: CaseResult) -> bool:
    """A flaky result: its outcome is not a pass (fail, crash, timeout, error) and a re-run of it
    passed. The runner records every attempt's outcome, the first run first."""
    return not policy(result.outcome).good and "pass" in result.attempts[1:]


def rerun_note(result: CaseResult) -> str:
    """`fail, then pass on the API-log re-run (attempts fail/pass)`: which re-run passed."""
    attempts = "/".join(result.attempts)
    # the runner's first re-run is the one with API logs when it kept them (runner.run_case)
    which = (
        "the API-log re-run"
        if result.attempts[1:2] == ("pass",) and result.api_logs
        else "a re-run"
    )
    return f"{result.outcome}, then pass on {which} (attempts {attempts})"


def decide(
    results: Sequence[CaseResult],
    baseline: Sequence[CaseResult] | None = None,
    *,
    flaky: FlakyPolicy = "block",
) -> Verdict:
    """The sign-off verdict for merged results, optionally compared with a baseline run. A flaky
    result is in `flaky` only; `flaky` (the policy) says whether it withholds sign-off."""
    steady = [r for r in results if not passed_on_rerun(r)]
    return Verdict(
        counts=dict(sorted(Counter(str(r.outcome) for r in results).items())),
        regressions=tuple(r for r in steady if is_bad(r)),
        errors=tuple(r for r in steady if policy(r.outcome).infra),
        notices=tuple(r for r in results if policy(r.outcome).status == "xpass"),
        flaky=tuple(r for r in results if passed_on_rerun(r)),
        baseline=None if baseline is None else compare(results, baseline),
        flaky_policy=flaky,
    )


def _changed_axes(current: Sequence[CaseResult], baseline: Sequence[CaseResult]) -> tuple[str, ...]:
    """Axes whose current values are not all present in the baseline (e.g. the new backend)."""
    changed = []
    for axis in AXES:
        now = {axis_value(r, axis) for r in current}
        before = {axis_value(r, axis) for r in baseline}
        if not now <= before:
            changed.append(axis)
    return tuple(changed)


def _match_key(result: CaseResult, keep: Sequence[str]) -> tuple[str, ...]:
    return (*(axis_value(result, a) for a in keep), result.case)


def compare(current: Sequence[CaseResult], baseline: Sequence[CaseResult]) -> BaselineDiff:
    """Match each current result to the baseline result for the same case and unchanged pins.

    Axes that changed between the runs (typically cudnn) are left out of the match; where several
    baseline results then match, the one with the newest values on the changed axes is used (the
    previous release).
    """
    changed = _changed_axes(current, baseline)
    keep = [a for a in AXES if a not in changed]
    before: dict[tuple[str, ...], CaseResult] = {}
    for r in sorted(baseline, key=lambda r: [value_key(axis_value(r, a)) for a in changed]):
        before[_match_key(r, keep)] = r  # newest on the changed axes wins
    seen: set[tuple[str, ...]] = set()
    out: list[Transition] = []
    for now in current:
        key = _match_key(now, keep)
        seen.add(key)
        old = before.get(key)
        if old is not None and (kind := _kind(old, now)) is not None:
            out.append(
                Transition(
                    kind=kind,
                    key=result_key(now),
                    before=old,
                    after=now,
                    note=_note(kind, old, now),
                )
            )
    for key, old in before.items():
        if key not in seen:
            out.append(Transition(kind="missing", key=result_key(old), before=old, after=None))
    carried = {a for r in (*current, *baseline) for a, v in r.cell.items() if v}
    matched = tuple(a for a in keep if a in carried)
    return BaselineDiff(changed_axes=changed, transitions=tuple(out), matched_axes=matched)


def _kind(old: CaseResult, now: CaseResult) -> TransitionKind | None:
    was, got = policy(old.outcome), policy(now.outcome)
    if was.good:
        if got.bad:
            return "new_failure"
        if got.status == "skip":
            return "unsupported"
        if got.infra:
            return "new_error"
        return None
    if got.good:
        if was.status == "known" or (old.known_issue and was.bad):
            return "ki_fixed"
        return "new_pass"
    if was.bad and got.bad:
        return "still_failing"
    return None


def _note(kind: TransitionKind, old: CaseResult, now: CaseResult) -> str:
    if kind == "ki_fixed":
        return f"{old.known_issue or 'known issue'} no longer reproduces"
    return f"{old.outcome} -> {now.outcome}" + (f": {now.reason}" if now.reason else "")


def _line(result: CaseResult, extra: str = "") -> str:
    reason = (result.reason.splitlines() or [""])[0]
    text = f"  {result.outcome:<7} {result.case}  [{cell_label(result)}]"
    text += f"  {reason}" if reason else ""
    text = text if len(text) <= 160 else text[:159] + "…"
    return text + (f"\n          ↳ {extra[:140]}" if extra else "")


def _section(title: str, lines: Sequence[str], limit: int) -> list[str]:
    if not lines:
        return []
    more = [f"  … and {len(lines) - limit} more"] if len(lines) > limit else []
    return [f"{title}: {len(lines)}", *lines[:limit], *more]


def summary(verdict: Verdict, *, limit: int = 8) -> str:
    """A one-screen summary: verdict line, counts, then each list capped at `limit` lines."""
    counts = ", ".join(f"{n} {k}" for k, n in verdict.counts.items()) or "no results"
    head = "SIGNED OFF" if verdict.signed_off else "NOT SIGNED OFF"
    out = [f"{head}: {counts} (flaky: {verdict.flaky_policy})"]
    out += _section(
        "regressions (unexpected fail/crash/timeout)",
        [_line(r, r.ki_note) for r in sorted(verdict.regressions, key=_sort)],
        limit,
    )
    out += _section(
        "infra errors (environment/harness, not the product)",
        [_line(r) for r in verdict.errors],
        limit,
    )
    effect = "blocks sign-off" if verdict.flaky_policy == "block" else "does not block"
    out += _section(
        f"≈ flaky: failed, then passed on a re-run (--flaky {verdict.flaky_policy}: {effect})",
        [_line(r, rerun_note(r)) for r in sorted(verdict.flaky, key=_sort)],
        limit,
    )
    if verdict.baseline is not None:
        diff = verdict.baseline
        out.append(f"baseline: matched on case + {', '.join(diff.matched_axes) or 'case only'}")
        for kind in _TITLES:
            rows = [_line(t.subject, t.note) for t in diff.of(kind)]
            out += _section(_TITLES[kind], rows, limit)
    out += _section(
        "notices: xpass (known issue did not reproduce — fixed?)",
        [_line(r, r.known_issue or "") for r in verdict.notices],
        limit,
    )
    return "\n".join(out)


def _sort(result: CaseResult) -> tuple[object, ...]:
    return (*(value_key(axis_value(result, a)) for a in AXES), natural_key(result.case))
