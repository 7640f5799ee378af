"""Speed along one axis, free of I/O (issue 29): which timed units look slower in one cell than
in a cell that differs from it in one axis only, and which of those a quiet re-measurement bears
out.

A *candidate* is a unit (a notebook cell, a script's section, a test's call phase: CaseResult.units)
of one case that took at least `ratio` times, and at least `min_s` seconds, longer in one cell than
in a cell with the same pins but one (the backend or the frontend), and still did after the fast
side's time is scaled by the load the two runs' start-ups show (`load_factor`): on a saturated
host every case of the slower-started run is stretched, which says nothing of the backend. Both
results must have passed: a failed run's times say nothing about speed. A candidate is never
reported as it stands, since a run of many cases side by side slows some of them by contention
alone. Those that fit the speed budget (`select`: one per finding first, largest ratio first) are
re-run alone (validate/remeasure.py) `repeats` times in both cells. The flag stands (`confirmed`)
only where the minimum of the repeats still shows both thresholds. The rest are dropped as load; a
candidate whose re-runs gave no time in either cell is `unmeasured`, and so is one left out of the
re-measurement (`tried` False: "not re-measured", never "not slower"). Re-measurements are
evidence, never verdicts: no outcome changes here.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from validate.model.outcome import Outcome

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from validate.model.results import CaseResult

__all__ = [
    "AXES",
    "DEFAULT_BUDGET_S",
    "DEFAULT_MIN_S",
    "DEFAULT_RATIO",
    "DEFAULT_REPEATS",
    "LOAD_PROBE_MIN_S",
    "NOT_SLOWER",
    "SLOWER",
    "Candidate",
    "Finding",
    "Measurement",
    "Selection",
    "SpeedCheck",
    "Thresholds",
    "candidates",
    "judge",
    "load_factor",
    "one_axis",
    "select",
    "slower",
    "slower_class",
]

#: The axes a slowdown is attributed to: two cells compared differ in exactly one of these.
AXES: Final = ("cudnn", "frontend")
DEFAULT_RATIO: Final = 1.5
DEFAULT_MIN_S: Final = 1.0
DEFAULT_REPEATS: Final = 3
#: seconds of quiet re-runs the speed stage may spend by default (`--speed-budget`): the cases
#: phase of the whole H100 matrix took about 500 s, and its 597 candidates would have taken
#: thousands (reports/gpu/2026-12-05-h100-matrix)
DEFAULT_BUDGET_S: Final = 600.0
#: start-ups shorter than this (a plain script's, a test's) are too short to measure load by
LOAD_PROBE_MIN_S: Final = 0.5

Status = Literal["confirmed", "load", "unmeasured"]


@dataclass(frozen=True, kw_only=True)
class Thresholds:
    """A unit is slower when it took at least `ratio` times and at least `min_s` seconds longer."""

    ratio: float = DEFAULT_RATIO
    min_s: float = DEFAULT_MIN_S

    def to_dict(self) -> dict[str, float]:
        return {"ratio": self.ratio, "min_s": self.min_s}


def slower(slow_s: float, fast_s: float, thresholds: Thresholds) -> bool:
    """Whether `slow_s` is slower than `fast_s` by both thresholds."""
    return slow_s - fast_s >= thresholds.min_s and _ratio(slow_s, fast_s) >= thresholds.ratio


def _ratio(slow_s: float, fast_s: float) -> float:
    if fast_s > 0:
        return slow_s / fast_s
    return math.inf if slow_s > 0 else 1.0


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """A unit of one case that was slower in `slow_cell` than in `fast_cell` in the main run."""

    case: str
    unit: str
    axis: str  # the one axis the two cells differ in: "cudnn" or "frontend"
    fast_cell: str  # cell ids
    slow_cell: str
    fast_pins: Mapping[str, str] = field(default_factory=dict)
    slow_pins: Mapping[str, str] = field(default_factory=dict)
    fast_s: float
    slow_s: float
    load: float = 1.0  # load_factor(slow, fast): the fast side's time is scaled by it

    @property
    def ratio(self) -> float:
        return _ratio(self.slow_s, self.fast_s)

    @property
    def beyond_load(self) -> float:
        """The ratio left once the fast side is scaled by the load: what `select` ranks by."""
        return _ratio(self.slow_s, self.fast_s * self.load)

    @property
    def finding(self) -> tuple[str, str, str, str | None, str | None]:
        """What it says: this unit is slower at this axis value than at that one. Cells apart in
        another axis (the same backends under each frontend) say the same thing."""
        axis = self.axis
        return (self.case, self.unit, axis, self.slow_pins.get(axis), self.fast_pins.get(axis))

    def to_dict(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "unit": self.unit,
            "axis": self.axis,
            "fast_cell": self.fast_cell,
            "slow_cell": self.slow_cell,
            "fast_pins": dict(self.fast_pins),
            "slow_pins": dict(self.slow_pins),
            "fast_s": self.fast_s,
            "slow_s": self.slow_s,
            "ratio": _finite(self.ratio),
            "load": round(self.load, 4),
        }


def one_axis(a: Mapping[str, str], b: Mapping[str, str]) -> str | None:
    """The one axis of AXES that two cells' pins differ in, or None (none, several, or another)."""
    differ = {k for k in {*a, *b} if a.get(k) != b.get(k)}
    if len(differ) == 1 and (axis := next(iter(differ))) in AXES:
        return axis
    return None


def load_factor(slow: CaseResult, fast: CaseResult) -> float:
    """How much more crowded `slow`'s run was than `fast`'s, by their start-up: the seconds
    outside every timed unit (process and kernel start, imports). No backend kernel runs there,
    but a saturated host stretches it as it stretches the units. 1.0 where `fast`'s start-up is
    under LOAD_PROBE_MIN_S or `slow`'s was no longer."""
    fast_up = fast.duration_s - sum(fast.units.values())
    slow_up = slow.duration_s - sum(slow.units.values())
    if fast_up < LOAD_PROBE_MIN_S or slow_up <= fast_up:
        return 1.0
    return slow_up / fast_up


def candidates(results: Iterable[CaseResult], thresholds: Thresholds) -> list[Candidate]:
    """Every (case, unit, pair of passed cells one axis apart) where one cell was slower, by
    both thresholds, than the other's time scaled by the load their start-ups show."""
    by_case: dict[str, list[CaseResult]] = {}
    for result in results:
        if result.outcome is Outcome.PASS and result.units and result.cell:
            by_case.setdefault(result.case, []).append(result)
    found: list[Candidate] = []
    for case, got in sorted(by_case.items()):
        got = sorted(got, key=lambda r: r.cell_id)
        for i, a in enumerate(got):
            for b in got[i + 1 :]:
                axis = one_axis(a.cell, b.cell)
                if axis is None:
                    continue
                for unit in sorted(set(a.units) & set(b.units)):
                    ta, tb = a.units[unit], b.units[unit]
                    fast, slow = (a, b) if ta <= tb else (b, a)
                    if not slower(slow.units[unit], fast.units[unit], thresholds):
                        continue
                    load = load_factor(slow, fast)
                    if slower(slow.units[unit], fast.units[unit] * load, thresholds):
                        found.append(_candidate(case, unit, axis, fast, slow, load))
    return found


def _candidate(
    case: str, unit: str, axis: str, fast: CaseResult, slow: CaseResult, load: float
) -> Candidate:
    return Candidate(
        case=case,
        unit=unit,
        axis=axis,
        fast_cell=fast.cell_id,
        slow_cell=slow.cell_id,
        fast_pins=dict(fast.cell),
        slow_pins=dict(slow.cell),
        fast_s=fast.units[unit],
        slow_s=slow.units[unit],
        load=load,
    )


@dataclass(frozen=True, kw_only=True)
class Selection:
    """The candidates the speed budget re-measures (`chosen`) and those it leaves (`left`), the
    (case, cell id) runs they need and what one repeat of them is expected to take."""

    chosen: tuple[Candidate, ...]
    left: tuple[Candidate, ...]
    runs: tuple[tuple[str, str], ...]
    expected_s: float  # one repeat of every run, by `cost`
    budget_s: float
    repeats: int


def select(
    found: Sequence[Candidate],
    cost: Mapping[tuple[str, str], float],
    budget_s: float,
    repeats: int,
) -> Selection:
    """The candidates whose re-runs (`repeats` of each (case, cell) they need, `cost` seconds
    each) fit `budget_s`: the strongest of each finding first (largest ratio beyond the load),
    then the other pairs of cells that show the same finding; a candidate whose cells are
    already chosen costs nothing. Greedy: one too dear is left and the next still tried."""
    best: dict[tuple[str, str, str, str | None, str | None], Candidate] = {}
    for cand in sorted(found, key=_rank):
        best.setdefault(cand.finding, cand)
    firsts = list(best.values())
    rest = [c for c in sorted(found, key=_rank) if best[c.finding] is not c]
    runs: dict[tuple[str, str], float] = {}
    chosen: list[Candidate] = []
    left: list[Candidate] = []
    spent = 0.0
    for cand in (*firsts, *rest):
        need = [
            (cand.case, cell)
            for cell in dict.fromkeys((cand.fast_cell, cand.slow_cell))
            if (cand.case, cell) not in runs
        ]
        more = sum(cost.get(run, 0.0) for run in need)
        if spent + more * repeats > budget_s:
            left.append(cand)
            continue
        spent += more * repeats
        runs.update((run, cost.get(run, 0.0)) for run in need)
        chosen.append(cand)
    return Selection(
        chosen=tuple(chosen),
        left=tuple(left),
        runs=tuple(runs),
        expected_s=sum(runs.values()),
        budget_s=budget_s,
        repeats=repeats,
    )


def _rank(cand: Candidate) -> tuple[float, float, str, str, str, str]:
    excess = cand.slow_s - cand.fast_s * cand.load
    return (-cand.beyond_load, -excess, cand.case, cand.unit, cand.slow_cell, cand.fast_cell)


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """One case re-run alone in one cell: each repeat's units, outcome and evidence folder
    (relative to the run folder)."""

    case: str
    cell_id: str
    units: tuple[Mapping[str, float], ...]
    outcomes: tuple[str, ...] = ()
    folders: tuple[str, ...] = ()

    def seconds(self, unit: str) -> list[float]:
        """The unit's time in each repeat that passed and timed it."""
        return [
            u[unit]
            for i, u in enumerate(self.units)
            if unit in u and (i >= len(self.outcomes) or self.outcomes[i] == Outcome.PASS)
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "cell_id": self.cell_id,
            "units": [dict(u) for u in self.units],
            "outcomes": list(self.outcomes),
            "folders": list(self.folders),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Measurement:
        return cls(
            case=str(data["case"]),
            cell_id=str(data["cell_id"]),
            units=tuple(
                {str(k): float(v) for k, v in dict(u).items()} for u in data.get("units", ())
            ),
            outcomes=tuple(str(o) for o in data.get("outcomes", ())),
            folders=tuple(str(f) for f in data.get("folders", ())),
        )


@dataclass(frozen=True, kw_only=True)
class Finding:
    """A candidate and what the quiet re-measurement made of it."""

    candidate: Candidate
    status: Status
    fast_repeats: tuple[float, ...] = ()
    slow_repeats: tuple[float, ...] = ()
    fast_folders: tuple[str, ...] = ()
    slow_folders: tuple[str, ...] = ()
    #: whether both its cells were re-run alone (False: left out, "not re-measured")
    tried: bool = True

    @property
    def ratio(self) -> float | None:
        """min over min of the repeats; None where either side has none."""
        if not self.fast_repeats or not self.slow_repeats:
            return None
        return _ratio(min(self.slow_repeats), min(self.fast_repeats))

    def figures(self, side: Literal["fast", "slow"]) -> tuple[float, float] | None:
        """(min, median) of one side's repeats."""
        got = self.fast_repeats if side == "fast" else self.slow_repeats
        return (min(got), statistics.median(got)) if got else None

    def to_dict(self) -> dict[str, Any]:
        fast, slow = self.figures("fast"), self.figures("slow")
        return {
            **self.candidate.to_dict(),
            "status": self.status,
            "fast_repeats_s": list(self.fast_repeats),
            "slow_repeats_s": list(self.slow_repeats),
            "fast_min_s": fast[0] if fast else None,
            "fast_median_s": fast[1] if fast else None,
            "slow_min_s": slow[0] if slow else None,
            "slow_median_s": slow[1] if slow else None,
            "ratio_min": None if self.ratio is None else _finite(self.ratio),
            "fast_folders": list(self.fast_folders),
            "slow_folders": list(self.slow_folders),
            "tried": self.tried,
        }


@dataclass(frozen=True, kw_only=True)
class SpeedCheck:
    """Every candidate of a run and its finding; `measured` False where no re-measurement ran
    (a run from before this check, or one that skipped it): then nothing is confirmed."""

    thresholds: Thresholds
    repeats: int
    findings: tuple[Finding, ...] = ()
    measured: bool = True
    #: what the speed stage said of its own extent (the budget, what it left), "" in a report
    note: str = ""

    @property
    def confirmed(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.status == "confirmed")

    def count(self, status: Status) -> int:
        return sum(f.status == status for f in self.findings)

    @property
    def left_out(self) -> int:
        """Candidates never re-run alone (over the budget, or --speed-repeats 0)."""
        return sum(not f.tried for f in self.findings)

    def summary(self) -> str:
        """'4 candidates, 1 confirmed, 3 were load' (and how many could not be re-measured)."""
        n = len(self.findings)
        head = f"{n} candidate{'' if n == 1 else 's'}"
        rule = (
            f"(>= {self.thresholds.ratio:g}x and >= {self.thresholds.min_s:g} s slower than a cell "
            "one axis apart)"
        )
        if not self.measured and not self.findings:
            return "no speed check: the runs hold no quiet re-measurement (speed.json)"
        if not self.measured:
            return f"{head} {rule}; not re-measured, none reported"
        text = f"{head}, {self.count('confirmed')} confirmed, {self.count('load')} were load"
        if failed := self.count("unmeasured") - self.left_out:
            text += f", {failed} could not be re-measured"
        if self.left_out:
            text += f", {self.left_out} not re-measured (unconfirmed, not cleared)"
        return f"{text} {rule}; {self.repeats} quiet repeats per cell, min of repeats"

    def lines(self) -> list[str]:
        """The summary, one line per re-measured candidate (confirmed first; those not
        re-measured are counted only), then the stage's note on its extent."""
        order = {"confirmed": 0, "load": 1, "unmeasured": 2}
        out = [f"speed: {self.summary()}"]
        tried = [f for f in self.findings if f.tried] if self.measured else []
        for f in sorted(tried, key=lambda f: order[f.status]):
            c = f.candidate
            ratio = "—" if f.ratio is None else f"{f.ratio:.2f}x"
            slow, fast = f.figures("slow"), f.figures("fast")
            alone = (
                f"alone min {slow[0]:.2f} s vs {fast[0]:.2f} s"
                if slow is not None and fast is not None
                else "no time alone"
            )
            out.append(
                f"  {f.status}: {c.case} {c.unit}: {c.axis} {c.slow_pins.get(c.axis)} vs "
                f"{c.fast_pins.get(c.axis)}: main run {c.slow_s:.2f} s vs {c.fast_s:.2f} s; "
                f"{alone} ({ratio})"
            )
        return [*out, *([f"  {self.note}"] if self.note else ())]

    def to_dict(self) -> dict[str, Any]:
        return {
            "thresholds": self.thresholds.to_dict(),
            "repeats": self.repeats,
            "measured": self.measured,
            "candidates": len(self.findings),
            "confirmed": self.count("confirmed"),
            "load": self.count("load"),
            "unmeasured": self.count("unmeasured"),
            "not_remeasured": self.left_out,
            "note": self.note,
            "summary": self.summary(),
            "findings": [f.to_dict() for f in self.findings],
        }


def judge(
    results: Iterable[CaseResult],
    measurements: Sequence[Measurement] | None,
    thresholds: Thresholds,
    repeats: int = DEFAULT_REPEATS,
) -> SpeedCheck:
    """The candidates of `results` and, with `measurements` (None: none were made), each one's
    finding by the minimum of its quiet repeats in both cells."""
    found = candidates(results, thresholds)
    if measurements is None:
        findings = tuple(Finding(candidate=c, status="unmeasured", tried=False) for c in found)
        return SpeedCheck(thresholds=thresholds, repeats=repeats, findings=findings, measured=False)
    by_cell = {(m.case, m.cell_id): m for m in measurements}
    out: list[Finding] = []
    for cand in found:
        fast_m = by_cell.get((cand.case, cand.fast_cell))
        slow_m = by_cell.get((cand.case, cand.slow_cell))
        fast = tuple(fast_m.seconds(cand.unit)) if fast_m else ()
        slow = tuple(slow_m.seconds(cand.unit)) if slow_m else ()
        status: Status
        if not fast or not slow:
            status = "unmeasured"
        elif slower(min(slow), min(fast), thresholds):
            status = "confirmed"
        else:
            status = "load"
        out.append(
            Finding(
                candidate=cand,
                status=status,
                fast_repeats=fast,
                slow_repeats=slow,
                fast_folders=fast_m.folders if fast_m else (),
                slow_folders=slow_m.folders if slow_m else (),
                tried=fast_m is not None and slow_m is not None,
            )
        )
    return SpeedCheck(thresholds=thresholds, repeats=repeats, findings=tuple(out))


#: The outcome classes of a speed bisect's probe (judge/bisect.py compares them as any class).
SLOWER: Final = "slower"
NOT_SLOWER: Final = "not slower"


def slower_class(
    unit: str, seconds: Sequence[float], baseline: Sequence[float], thresholds: Thresholds
) -> tuple[str, str]:
    """A speed bisect's probe: `slower` when the minimum of its quiet repeats (`seconds`) is slower
    than the minimum of the good end's (`baseline`) by both thresholds, else `not slower`; an
    untestable `error` where either side has no time for the unit. Returns (class, reason)."""
    if not seconds or not baseline:
        side = "this candidate" if not seconds else "the good end"
        return "error", f"{unit}: no time from {side} (the case did not pass or did not time it)"
    low, base = min(seconds), min(baseline)
    figures = (
        f"{unit}: min {low:.2f} s, median {statistics.median(seconds):.2f} s of {len(seconds)} "
        f"alone; good end min {base:.2f} s ({_ratio(low, base):.2f}x)"
    )
    return (SLOWER if slower(low, base, thresholds) else NOT_SLOWER), figures


def _finite(value: float) -> float | None:
    """A ratio for JSON (which has no infinity): None where the fast side took no time."""
    return round(value, 4) if math.isfinite(value) else None
