"""Confirmed slowdowns as the bug reports group them (issue 39), and the speed bisects that give
their first slow release.

A slow case is one case whose timed units the quiet re-measurement confirmed slower
(judge/speed.py) in a newer release of one axis than in an older one, every other pin the same.
A unit slower only in the older release is none: a speed-up is nothing to send upstream. Its
first slow release comes from a finished `bisect --slower-than` of the unit between a fast and a
slow measured release (given with `report --bisect`, or in bisect's own default folder), else
it is the boundary the runs measured, said to be unbisected.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from validate.errors import ConfigError
from validate.judge.bisect import folder_name
from validate.judge.speed import SLOWER
from validate.model.axes import axis_named
from validate.model.order import natural_key, value_key

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from packaging.version import Version

    from validate.judge.speed import Finding, SpeedCheck

__all__ = [
    "BISECT_DIR",
    "Bisect",
    "Side",
    "SlowCase",
    "bisect_for",
    "first_slow_lines",
    "load_bisects",
    "slow_cases",
]

log = logging.getLogger(__name__)

#: Where `bisect` keeps its folders by default (cli/bisect.py), from the current folder.
BISECT_DIR: Final = Path("reports/bisect")
_STATE: Final = "bisect.json"


@dataclass(frozen=True, kw_only=True)
class Bisect:
    """A speed bisect's bisect.json: where it lies and what it holds."""

    path: Path
    state: Mapping[str, Any]

    def matches(self, case: str, axis: str, unit: str, pins: Mapping[str, str]) -> bool:
        """Whether this is a finished `bisect --slower-than` of `unit` of `case` over `axis`
        with the same fixed pins (where it recorded them)."""
        s, result = self.state, self.state.get("result")
        if not isinstance(result, dict) or result.get("bad_class") != SLOWER:
            return False
        if s.get("case") != case or s.get("axis") != axis:
            return False
        if "unit" in s:
            if s["unit"] != unit:
                return False
        else:  # written before bisect.json named its unit: each probe's reason starts with it
            reasons = [o.get("reason", "") for p in s.get("probes", []) for o in p["observations"]]
            if not reasons or not all(str(r).startswith(f"{unit}:") for r in reasons):
                return False
        recorded = s.get("pins")
        if isinstance(recorded, dict):
            for name, value in recorded.items():
                if name != axis and name in pins and not axis_named(name).same(value, pins[name]):
                    return False
        return True


def _read_bisect(path: Path) -> Bisect:
    file = path / _STATE if path.is_dir() else path
    try:
        state = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        msg = f"--bisect {path}: not a readable bisect.json ({exc}); pass a bisect's folder or its bisect.json"
        raise ConfigError(msg) from exc
    if not _well_formed(state):
        msg = (
            f"--bisect {path}: not a bisect.json as `bisect` writes it (each probe with its "
            "candidate and observations; a result with first_bad and last_good); pass a "
            "bisect's folder or its bisect.json"
        )
        raise ConfigError(msg)
    return Bisect(path=file, state=state)


def _well_formed(state: object) -> bool:
    """The shape the report reads: probes of candidate + observations, a result's two ends."""
    if not isinstance(state, dict) or not isinstance(state.get("probes"), list):
        return False
    for probe in state["probes"]:
        if not isinstance(probe, dict) or "candidate" not in probe:
            return False
        observations = probe.get("observations")
        if not isinstance(observations, list) or not all(isinstance(o, dict) for o in observations):
            return False
    result = state.get("result")
    return result is None or (
        isinstance(result, dict) and "first_bad" in result and "last_good" in result
    )


def load_bisects(paths: Iterable[Path]) -> list[Bisect]:
    """The bisects named by `report --bisect` (a folder or its bisect.json); bad input when one
    is missing or unreadable."""
    return [_read_bisect(p) for p in paths]


def _stored_bisect(path: Path) -> Bisect | None:
    """A bisect in bisect's default folder, or None (absent or unreadable: then not used)."""
    if not (path / _STATE).is_file():
        return None
    try:
        return _read_bisect(path)
    except ConfigError as exc:
        log.warning("skipped %s", exc)
        return None


@dataclass(frozen=True, kw_only=True)
class Side:
    """One unit of the case in one measured cell: its quiet repeats and its main-run time."""

    cell_id: str
    version: str
    repeats: tuple[float, ...]
    main_s: float
    folders: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class SlowCase:
    """A case's confirmed slower units along one axis, every other pin (`pins`) fixed."""

    case: str
    axis: str
    pins: Mapping[str, str]
    findings: tuple[Finding, ...]

    def units(self) -> list[str]:
        return sorted({f.candidate.unit for f in self.findings}, key=natural_key)

    def sides(self, unit: str) -> list[Side]:
        """Every cell the unit was measured in, oldest release first."""
        got: dict[str, Side] = {}
        for f in self.findings:
            c = f.candidate
            if c.unit != unit:
                continue
            for cell, pins, repeats, main, folders in (
                (c.fast_cell, c.fast_pins, f.fast_repeats, c.fast_s, f.fast_folders),
                (c.slow_cell, c.slow_pins, f.slow_repeats, c.slow_s, f.slow_folders),
            ):
                got.setdefault(
                    cell,
                    Side(
                        cell_id=cell,
                        version=pins.get(self.axis, "?"),
                        repeats=tuple(repeats),
                        main_s=main,
                        folders=tuple(folders),
                    ),
                )
        return sorted(got.values(), key=lambda s: self.order_key(s.version))

    def slow_versions(self, unit: str) -> set[str]:
        return {
            f.candidate.slow_pins.get(self.axis, "?")
            for f in self.findings
            if f.candidate.unit == unit
        }

    def boundary(self, unit: str) -> tuple[str, str]:
        """(last fast release, first slow release) the runs measured for `unit`."""
        slow = self.slow_versions(unit)
        first = min(slow, key=self.order_key)
        fast = [s.version for s in self.sides(unit) if s.version not in slow]
        older = [v for v in fast if self.order_key(v) < self.order_key(first)]
        return max(older, key=self.order_key), first

    def order_key(self, value: str) -> tuple[int, Version, tuple[tuple[int, int | str], ...]]:
        """Release order on the axis (a version axis: cudnn or frontend)."""
        return value_key(value)


def _newer(a: str, b: str) -> bool:
    return value_key(a) > value_key(b)


def slow_cases(check: SpeedCheck | None) -> list[SlowCase]:
    """The confirmed findings grouped per slow case; only those slower in the newer release."""
    groups: dict[tuple[str, str, tuple[tuple[str, str], ...]], list[Finding]] = {}
    for f in check.confirmed if check is not None else ():
        c = f.candidate
        if not _newer(c.slow_pins.get(c.axis, ""), c.fast_pins.get(c.axis, "")):
            log.info("no bug report: %s %s is slower in the older %s", c.case, c.unit, c.axis)
            continue
        fixed = tuple(sorted((k, v) for k, v in c.slow_pins.items() if k != c.axis))
        groups.setdefault((c.case, c.axis, fixed), []).append(f)
    return [
        SlowCase(case=case, axis=axis, pins=dict(fixed), findings=tuple(found))
        for (case, axis, fixed), found in sorted(groups.items())
    ]


def bisect_for(
    slow: SlowCase, unit: str, given: Sequence[Bisect], bisect_dir: Path
) -> Bisect | None:
    """A speed bisect of `unit` between a fast and a slow measured release: one given, else one
    in bisect's default folder; the one whose ends are the measured boundary first."""
    sides = slow.sides(unit)
    slow_set = slow.slow_versions(unit)
    pairs = [
        (a.version, b.version)
        for a in sides
        for b in sides
        if a.version not in slow_set and b.version in slow_set and _newer(b.version, a.version)
    ]
    last_fast, first_slow = slow.boundary(unit)
    pairs.sort(key=lambda p: p != (last_fast, first_slow))
    found = [b for b in given if b.matches(slow.case, slow.axis, unit, slow.pins)]
    for good, bad in pairs:
        for b in found:
            if (b.state.get("good"), b.state.get("bad")) == (good, bad):
                return b
        stored = _stored_bisect(bisect_dir / folder_name(slow.case, slow.axis, good, bad, unit))
        if stored is not None and stored.matches(slow.case, slow.axis, unit, slow.pins):
            return stored
    return found[0] if found else None


def first_slow_lines(slow: SlowCase, unit: str, bisect: Bisect | None) -> list[str]:
    """The first-slow-release line of one unit, and a bisect's probes below it."""
    last_fast, first = slow.boundary(unit)
    sides = slow.sides(unit)
    slow_set = slow.slow_versions(unit)
    also_slow = [s.version for s in sides if s.version in slow_set and s.version != first]
    also_fast = [s.version for s in sides if s.version not in slow_set and s.version != last_fast]
    measured = f"measured: {last_fast} fast, {first} slow"
    if also_slow:
        measured += f" (also slow: {', '.join(also_slow)})"
    if also_fast:
        measured += f" (also fast: {', '.join(also_fast)})"
    if bisect is None:
        return [f"first slow release not bisected; {measured}"]
    s, result = bisect.state, bisect.state["result"]
    ratio = s.get("slower_than")
    how = f"`bisect --slower-than {ratio}`" if ratio is not None else "a speed bisect"
    between = f"{max(0, len(s.get('candidates', [])) - 2)} candidates between {s.get('good')} and {s.get('bad')}"
    where = f"{between} from {s.get('source', '?')}; `{bisect.path}`"
    if result.get("ends_agree"):
        head = (
            f"first slow release not bisected: {how} from {s.get('good')} to {s.get('bad')} saw "
            f"no change ({result.get('good_class')} at both ends; `{bisect.path}`); {measured}"
        )
    elif result.get("found"):
        head = (
            f"first slow release: {result['first_bad']} (bisected with {how}: last fast "
            f"{result['last_good']}; {where}); {measured}"
        )
    else:
        head = (
            f"first slow release not bisected exactly: one of "
            f"{', '.join(result.get('unresolved', []))} (untestable, skipped) or "
            f"{result['first_bad']}; last fast {result['last_good']} ({how}; {where}); {measured}"
        )
    probes = []
    for p in s.get("probes", []):
        reasons = "; ".join(dict.fromkeys(str(o.get("reason", "")) for o in p["observations"]))
        outcomes = ", ".join(str(o.get("outcome", "")) for o in p["observations"])
        probes.append(f"  - {p['candidate']}: {outcomes} ({reasons or 'no reason recorded'})")
    return [head, *probes]
