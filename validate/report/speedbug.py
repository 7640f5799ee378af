"""A Markdown bug report per confirmed slowdown (issue 39), in the shape of the failure reports
(report/bugreport.py): the cuDNN frontend issue form.

One report per slow case: a case whose timed units the quiet re-measurement confirmed slower
(judge/speed.py: re-run alone, the minimum of the repeats still shows both thresholds) in a newer
release of one axis than in an older one, every other pin the same. It groups that case's slow
units: each unit's time on each release measured (min and median of the quiet repeats and their
count), the ratio, the first slow release (from a `bisect --slower-than` of the unit where one is
given with `report --bisect` or lies in bisect's default folder, else the boundary the runs
measured) and the commands that show it again. A candidate the repeats did not confirm (load,
unmeasured, no re-measurement at all) gets no report, and neither does a unit that is slower
only in the older release (a speed-up is nothing to send upstream).
"""

from __future__ import annotations

import json
import logging
import shlex
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from validate.errors import ConfigError
from validate.execute.cases.kinds import kind_for_result
from validate.judge.bisect import folder_name
from validate.judge.speed import DEFAULT_MIN_S, DEFAULT_RATIO, SLOWER
from validate.model.axes import axis_named, pins_label
from validate.model.order import natural_key
from validate.report.bugreport import environment_rows, fence, file_slug, reproduce_command
from validate.report.model import cell_label
from validate.textsafe import display, redact

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from validate.judge.speed import Finding, SpeedCheck
    from validate.report import Report
    from validate.report.model import StoredResult

__all__ = [
    "BISECT_DIR",
    "Bisect",
    "SlowCase",
    "load_bisects",
    "slow_cases",
    "speed_bug_report",
    "write_speed_bug_reports",
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
    if not isinstance(state, dict) or not isinstance(state.get("probes"), list):
        msg = f"--bisect {path}: not a bisect.json (no probes); pass a bisect's folder or its bisect.json"
        raise ConfigError(msg)
    return Bisect(path=file, state=state)


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
class _Side:
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

    def sides(self, unit: str) -> list[_Side]:
        """Every cell the unit was measured in, oldest release first."""
        got: dict[str, _Side] = {}
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
                    _Side(
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

    def order_key(self, value: str) -> object:
        return axis_named(self.axis).sort_key(value)


def _newer(axis: str, a: str, b: str) -> bool:
    key = axis_named(axis).sort_key
    return bool(key(a) > key(b))  # type: ignore[operator]


def slow_cases(check: SpeedCheck | None) -> list[SlowCase]:
    """The confirmed findings grouped per slow case; only those slower in the newer release."""
    groups: dict[tuple[str, str, tuple[tuple[str, str], ...]], list[Finding]] = {}
    for f in check.confirmed if check is not None else ():
        c = f.candidate
        if not _newer(c.axis, c.slow_pins.get(c.axis, ""), c.fast_pins.get(c.axis, "")):
            log.info("no bug report: %s %s is slower in the older %s", c.case, c.unit, c.axis)
            continue
        fixed = tuple(sorted((k, v) for k, v in c.slow_pins.items() if k != c.axis))
        groups.setdefault((c.case, c.axis, fixed), []).append(f)
    return [
        SlowCase(case=case, axis=axis, pins=dict(fixed), findings=tuple(found))
        for (case, axis, fixed), found in sorted(groups.items())
    ]


def _bisect_for(
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
        if a.version not in slow_set
        and b.version in slow_set
        and _newer(slow.axis, b.version, a.version)
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


def _first_slow(slow: SlowCase, unit: str, bisect: Bisect | None) -> list[str]:
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


def _figures(side: _Side) -> tuple[str, str, str]:
    if not side.repeats:
        return "—", "—", "0"
    return (
        f"{min(side.repeats):.4f}",
        f"{statistics.median(side.repeats):.4f}",
        str(len(side.repeats)),
    )


def _table(slow: SlowCase) -> list[str]:
    """One row per unit and measured release: min, median and count of the quiet repeats, each
    repeat, the main run's time, and the ratio of minima to each faster release it was held to."""
    head = [
        "unit",
        slow.axis,
        "min s",
        "median s",
        "repeats",
        "each repeat s",
        "main run s",
        "ratio (min / min)",
    ]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for unit in slow.units():
        for side in slow.sides(unit):
            ratios = [
                f"{f.ratio:.2f}x vs {f.candidate.fast_pins.get(slow.axis)}"
                for f in slow.findings
                if f.candidate.unit == unit
                and f.candidate.slow_cell == side.cell_id
                and f.ratio is not None
            ]
            low, median, n = _figures(side)
            cells = [
                unit,
                side.version,
                low,
                median,
                n,
                ", ".join(f"{t:.4f}" for t in side.repeats) or "—",
                f"{side.main_s:.4f}",
                "; ".join(ratios) or "fast",
            ]
            rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return rows


def _main_results(report: Report, slow: SlowCase) -> dict[str, StoredResult]:
    cells = {s.cell_id for u in slow.units() for s in slow.sides(u)}
    return {
        item.result.cell_id: item
        for item in report.runs.items
        if item.result.case == slow.case and item.result.cell_id in cells
    }


def _in_order(slow: SlowCase, items: Mapping[str, StoredResult]) -> list[StoredResult]:
    """The measured cells' main results, oldest release first."""
    return sorted(items.values(), key=lambda i: slow.order_key(i.result.cell.get(slow.axis, "")))


def _environment(slow: SlowCase, items: Sequence[StoredResult]) -> list[str]:
    """Each fact once where every measured cell agrees, else per release."""
    per_cell = [(item, dict(environment_rows(item.result))) for item in items]
    out = []
    for name in per_cell[0][1]:
        values = [(item.result.cell.get(slow.axis, "?"), rows[name]) for item, rows in per_cell]
        if len({v for _, v in values}) == 1:
            out.append(f"- {name}: {values[0][1] or 'not captured'}")
        else:
            shown = "; ".join(
                v if v.startswith(a) else f"{v or 'not captured'} ({slow.axis} {a})"
                for a, v in values
            )
            out.append(f"- {name}: {shown}")
    host = items[0].run.meta.get("host")
    if isinstance(host, dict):
        gpus = ", ".join(
            str(g.get("name", "?")) for g in host.get("gpus", []) if isinstance(g, dict)
        )
        out.append(
            f"- host (the run's run.json): {gpus or 'no GPU'}, driver "
            f"{host.get('driver_version', '?')}, {host.get('cpus', '?')} CPUs"
        )
    return out


def _bare_line(item: StoredResult) -> str:
    """The case by hand with the library path the case ran with, timed."""
    r = item.result
    recorded = r.env.get("env")
    env = recorded if isinstance(recorded, dict) else {}
    pairs = [
        f"{k}={shlex.quote(str(env[k]))}" for k in ("LD_LIBRARY_PATH", "LD_PRELOAD") if env.get(k)
    ]
    line = kind_for_result(r.case_path, r.case).repro_line(r.case_path, r.case)
    return display(redact("time " + (f"env {' '.join(pairs)} " if pairs else "") + line))


def speed_bug_report(
    report: Report,
    slow: SlowCase,
    bisects: Sequence[Bisect] = (),
    bisect_dir: Path = BISECT_DIR,
) -> str:
    """Markdown for one slow case: the frontend issue form filled from the speed evidence."""
    items = _main_results(report, slow)
    units = slow.units()
    last_fast, first_slow = min(
        (slow.boundary(u) for u in units), key=lambda b: slow.order_key(b[1])
    )
    worst = max(
        (f for f in slow.findings if f.candidate.slow_pins.get(slow.axis) == first_slow),
        key=lambda f: f.ratio or 0.0,
    )
    fast_item, slow_item = items[worst.candidate.fast_cell], items[worst.candidate.slow_cell]
    title = axis_named(slow.axis).title
    slower_in = sorted({v for u in units for v in slow.slow_versions(u)}, key=slow.order_key)
    check = report.speed
    thresholds = check.thresholds if check is not None else None
    ratio = thresholds.ratio if thresholds else DEFAULT_RATIO
    min_s = thresholds.min_s if thresholds else DEFAULT_MIN_S
    repeats = max(len(s.repeats) for u in units for s in slow.sides(u))
    out = [
        (
            f"# [cudnn-matrix] {slow.case}: {worst.candidate.unit} {worst.ratio or 0:.2f}x "
            f"slower with {title} {first_slow} than {last_fast}"
        ),
        "",
        "**Describe the bug**",
        "",
        (
            f"`{slow.case}` passes, but {len(units)} of its timed units ({', '.join(units)}) take "
            f"longer with {title} "
            f"{' and '.join(slower_in)} than with {last_fast} ({pins_label(slow.pins)}). Each "
            f"release's case was re-run alone (nothing beside it) {repeats} times; a unit counts "
            f"as slower only where the minimum of its repeats is still at least {ratio:g}x and "
            f"{min_s:g} s above the faster release's minimum."
        ),
        "",
        *_table(slow),
        "",
    ]
    for unit in units:
        lines = _first_slow(slow, unit, _bisect_for(slow, unit, bisects, bisect_dir))
        out += [f"- {unit}: {lines[0]}", *lines[1:]]
    out += [
        (
            "- outcome: pass in every measured cell of the main run (a speed finding; no outcome "
            "changed); the times are the units as the case timed them, start-up excluded"
        ),
        "",
        "**Expected behavior**",
        "",
        (
            f"The units take about as long with {title} {first_slow} as with {last_fast} (less "
            f"than {ratio:g}x or {min_s:g} s more), as {last_fast} shows they can."
        ),
        "",
        "**System Environment (please complete the following information):**",
        "",
        *_environment(slow, _in_order(slow, items)),
        "",
        "**API logs**",
        "",
    ]
    logged = [
        (item, name, path)
        for item in items.values()
        for name in ("frontend", "backend")
        if (path := item.resolve(item.result.api_logs.get(name, ""))) is not None
    ]
    for item, name, path in logged:
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()[-40:]
        out += [
            f"{name.capitalize()} API log of {cell_label(item.result)} (last 40 lines of `{path}`):",
            "",
            fence(display(redact("\n".join(text)))),
            "",
        ]
    if not logged:
        out += [
            (
                "Not captured: the quiet repeats run without API logging, so that logging's own "
                "cost is not in the times. To capture them, add `CUDNN_FRONTEND_LOG_INFO=1 "
                "CUDNN_FRONTEND_LOG_FILE=fe.log CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG=be.log` "
                "to the `env` of step 2 (and time it without them)."
            ),
            "",
        ]
    remeasure = slow_item.result.with_(
        cell={**slow_item.result.cell, slow.axis: f"{last_fast},{first_slow}"}
    )
    command = reproduce_command(remeasure, slow_item.run.meta) + f" --speed-repeats {repeats}"
    if (ratio, min_s) != (DEFAULT_RATIO, DEFAULT_MIN_S):
        command += f" --slower-ratio {ratio:g} --slower-min-s {min_s:g}"
    gap = sum(
        min(s.repeats) - min(f.repeats)
        for u in units
        for f, s in [_pair(slow, u, fast_item.result.cell_id, slow_item.result.cell_id)]
        if f is not None and s is not None and f.repeats and s.repeats
    )
    out += [
        "**To Reproduce**",
        "",
        "Steps to reproduce the behavior:",
        "",
        (
            f"1. Re-measure it with the tool: both releases, the case re-run alone {repeats} "
            "times in each after the main run (its `speed:` line, `speed.json` and the report's "
            "Speed section give the figures):"
        ),
        "",
        fence(command, "sh"),
        "",
        (
            f"2. Or without the tool, once per release, with the library path the case ran with "
            f"(the whole case; expect the second to take about {gap:.1f} s longer, the slow "
            "units' minima added up):"
        ),
        "",
        fence(
            f"# {slow.axis} {last_fast} (fast)\n{_bare_line(fast_item)}\n"
            f"# {slow.axis} {first_slow} (slow)\n{_bare_line(slow_item)}",
            "sh",
        ),
        "",
        "**Additional context**",
        "",
    ]
    for item in _in_order(slow, items):
        r = item.result
        out.append(
            f"- {slow.axis} {r.cell.get(slow.axis)}: cell {cell_label(r)} (id `{r.cell_id}`), run "
            f"`{r.run_id or item.run.run_id}` in `{item.run.path}`"
        )
    if check is not None:
        out.append(f"- speed check: {check.summary()}")
    out += ["", "The quiet repeats' case folders (each unit of the case is timed in each):", ""]
    folders = {s.version: s.folders for u in units for s in slow.sides(u)}
    for version in sorted(folders, key=slow.order_key):
        shown = ", ".join(f"`{p}`" for p in folders[version]) or "—"
        out.append(f"- {slow.axis} {version}: {shown}")
    return "\n".join(out).rstrip() + "\n"


def _pair(
    slow: SlowCase, unit: str, fast_cell: str, slow_cell: str
) -> tuple[_Side | None, _Side | None]:
    sides = {s.cell_id: s for s in slow.sides(unit)}
    return sides.get(fast_cell), sides.get(slow_cell)


def write_speed_bug_reports(
    report: Report,
    directory: Path,
    bisects: Sequence[Bisect] = (),
    bisect_dir: Path = BISECT_DIR,
) -> list[Path]:
    """One Markdown file per slow case, `<first slow cell>__<case>__slower.md`, in `directory`."""
    written: list[Path] = []
    for slow in slow_cases(report.speed):
        directory.mkdir(parents=True, exist_ok=True)
        units = slow.units()
        first = min((slow.boundary(u)[1] for u in units), key=slow.order_key)
        cell = next(
            f.candidate.slow_cell
            for f in slow.findings
            if f.candidate.slow_pins.get(slow.axis) == first
        )
        path = directory / f"{file_slug(cell)}__{file_slug(slow.case)}__slower.md"
        path.write_text(speed_bug_report(report, slow, bisects, bisect_dir), encoding="utf-8")
        written.append(path)
    return written
