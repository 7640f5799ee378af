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
* No sign-off without evidence. A skip for a declared requirement the cell does not meet (backend
  floor, arch, SM) or one the case or the product gave ("graph not supported") is as expected. Two
  skips are not (plan/requirements.py `skip_kind`):
  - *no GPU*: a case skipped for want of a GPU or driver never ran its GPU part. The verdict line
    says so (`NOT SIGNED OFF — no GPU: 223 GPU cases skipped; pins verified in 7 environments`)
    but exits 0, the run did what a host without a GPU can (the pins); `--require-gpu` makes it
    exit 1, for a job that must sign off.
  - *missing module*: the case environment lacks a module the case imports (torch, cupy): the
    environment broke, as with an infra error: not signed off, exit 1.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from validate.model.axes import REGISTRY
from validate.model.matrix import AXES
from validate.model.order import natural_key, value_key
from validate.model.outcome import POLICY, Outcome, policy
from validate.model.results import axis_value, cell_label, result_key
from validate.plan.requirements import MISSING_MODULE_PREFIX, SkipKind, skip_kind

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
    "pins_verified",
    "rerun_note",
    "summary",
    "verdict_line",
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
    no_gpu: tuple[CaseResult, ...] = ()  # skipped for want of a GPU or driver: GPU part not run
    missing_modules: tuple[CaseResult, ...] = ()  # skipped: the case env lacks a module it imports
    pins_verified: int = 0  # environments whose pins a case process verified (`pins_verified`)
    require_gpu: bool = False  # --require-gpu: `no_gpu` makes the exit code 1

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
    def blocked(self) -> bool:
        """Something the results say is wrong: regressions, infra errors, blocking transitions,
        flaky results under `block`, or a case environment that lacks a module."""
        return bool(
            self.regressions
            or self.errors
            or self.blocking_transitions
            or self.flaky_blocks
            or self.missing_modules
        )

    @property
    def signed_off(self) -> bool:
        """Nothing wrong and nothing unproven: every cell ran its GPU cases."""
        return not (self.blocked or self.no_gpu)

    @property
    def exit_code(self) -> int:
        """1 when blocked; a run short only of a GPU exits 0 (it did what a host without one can:
        its verdict line says NOT SIGNED OFF — no GPU) unless `require_gpu`."""
        return 1 if self.blocked or (self.no_gpu and self.require_gpu) else 0


def passed_on_rerun(result: CaseResult) -> bool:
    """A flaky result: its outcome is not a pass (fail, crash, timeout, error) and a re-run of it
    passed. The runner records every attempt's outcome, the first run first."""
    attempts = result.attempts
    return len(attempts) > 1 and "pass" in attempts[1:] and not policy(result.outcome).good


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


#: The axes that make an environment (what is installed): cells equal on them share one.
_ENV_AXES: Final = tuple(axis.name for axis in REGISTRY if axis.env)


def pins_verified(results: Sequence[CaseResult]) -> int:
    """How many environments had their pins verified: a case process captured what it loaded
    (`env.captured_in` = case) and the runner's pin check did not turn it into an `error` (a
    pin not honoured is one). Environments are told apart by the values of the axes that change
    what is installed, so cells that share one count once."""
    return len(
        {
            tuple(axis_value(r, a) for a in _ENV_AXES)
            for r in results
            if r.env and r.env.get("captured_in") == "case" and not policy(r.outcome).infra
        }
    )


def decide(
    results: Sequence[CaseResult],
    baseline: Sequence[CaseResult] | None = None,
    *,
    flaky: FlakyPolicy = "block",
    require_gpu: bool = False,
) -> Verdict:
    """The sign-off verdict for merged results, optionally compared with a baseline run. A flaky
    result is in `flaky` only; `flaky` (the policy) says whether it withholds sign-off;
    `require_gpu` whether GPU cases skipped for want of a GPU fail the exit code too."""
    # one pass over the results: a pytest suite gives a million of them (issue #27), and a pass
    # touching each result once costs less than several that each touch a field
    counts: Counter[str] = Counter()
    regressions, errors, notices, flaky_ones = [], [], [], []
    skipped: dict[SkipKind, list[CaseResult]] = {SkipKind.NO_GPU: [], SkipKind.MISSING_MODULE: []}
    kinds: dict[str, SkipKind] = {}  # skip_kind per distinct reason
    captured: list[CaseResult] = []  # results with a captured environment, for pins_verified
    for r in results:
        outcome = r.outcome
        counts[outcome] += 1
        rule = POLICY[outcome]
        if r.attempts and passed_on_rerun(r):  # most results ran once: no call for them
            flaky_ones.append(r)
        else:
            if rule.bad:
                regressions.append(r)
            if rule.infra:
                errors.append(r)
        if rule.status == "xpass":
            notices.append(r)
        if r.env:
            captured.append(r)
        if outcome is Outcome.SKIP:
            kind = kinds.get(r.reason)
            if kind is None:
                kind = kinds[r.reason] = skip_kind(r.reason)
            if kind in skipped:
                skipped[kind].append(r)
    return Verdict(
        counts=dict(sorted((str(k), n) for k, n in counts.items())),
        regressions=tuple(regressions),
        errors=tuple(errors),
        notices=tuple(notices),
        flaky=tuple(flaky_ones),
        baseline=None if baseline is None else compare(results, baseline),
        flaky_policy=flaky,
        no_gpu=tuple(skipped[SkipKind.NO_GPU]),
        missing_modules=tuple(skipped[SkipKind.MISSING_MODULE]),
        pins_verified=pins_verified(captured),
        require_gpu=require_gpu,
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


def _n(count: int, what: str) -> str:
    return f"{count} {what}" if count == 1 else f"{count} {what}s"


def _modules(results: Sequence[CaseResult]) -> str:
    names = {
        name.strip()
        for r in results
        for name in r.reason.removeprefix(MISSING_MODULE_PREFIX).split(" (", 1)[0].split(",")
    }
    return ", ".join(sorted(names - {""}))


def _gaps(verdict: Verdict) -> list[str]:
    """What the results do not prove, in the words of the verdict line."""
    gaps = []
    if verdict.missing_modules:
        missing = verdict.missing_modules
        gaps.append(f"missing modules: {_n(len(missing), 'case')} skipped ({_modules(missing)})")
    if verdict.no_gpu:
        gaps.append(
            f"no GPU: {_n(len(verdict.no_gpu), 'GPU case')} skipped; "
            f"pins verified in {_n(verdict.pins_verified, 'environment')}"
        )
    return gaps


def verdict_line(verdict: Verdict) -> str:
    """`SIGNED OFF: 7 pass (flaky: block)`; `NOT SIGNED OFF: 1 fail, ...` when the results say
    something is wrong; `NOT SIGNED OFF — no GPU: 223 GPU cases skipped; pins verified in 7
    environments (7 pass, 223 skip; flaky: block)` when they only leave cases unproven. Every line
    starts with SIGNED OFF or NOT SIGNED OFF, and the first only when `signed_off`."""
    counts = ", ".join(f"{n} {k}" for k, n in verdict.counts.items()) or "no results"
    flaky = f"flaky: {verdict.flaky_policy}"
    gaps = "; ".join(_gaps(verdict))
    if verdict.signed_off:
        return f"SIGNED OFF: {counts} ({flaky})"
    if not gaps:
        return f"NOT SIGNED OFF: {counts} ({flaky})"
    if (
        verdict.regressions
        or verdict.errors
        or verdict.blocking_transitions
        or verdict.flaky_blocks
    ):
        return f"NOT SIGNED OFF: {counts} ({flaky}) — {gaps}"  # what is wrong comes first
    return f"NOT SIGNED OFF — {gaps} ({counts}; {flaky})"


def summary(verdict: Verdict, *, limit: int = 8) -> str:
    """A one-screen summary: verdict line, then each list capped at `limit` lines."""
    out = [verdict_line(verdict)]
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
    out += _section(
        "missing modules (the case environment lacks them; blocks sign-off)",
        [_line(r) for r in sorted(verdict.missing_modules, key=_sort)],
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
    exit_code = "exit 1 (--require-gpu)" if verdict.require_gpu else "exit 0; --require-gpu: exit 1"
    out += _section(
        f"no GPU: skipped for want of a GPU or driver, not proven ({exit_code})",
        [_line(r) for r in sorted(verdict.no_gpu, key=_sort)],
        limit,
    )
    out += _section(
        "notices: xpass (known issue did not reproduce — fixed?)",
        [_line(r, r.known_issue or "") for r in verdict.notices],
        limit,
    )
    return "\n".join(out)


def _sort(result: CaseResult) -> tuple[object, ...]:
    return (*(value_key(axis_value(result, a)) for a in AXES), natural_key(result.case))
