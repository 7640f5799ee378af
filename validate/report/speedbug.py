"""A Markdown bug report per confirmed slowdown (issue 39), in the shape of the failure reports
(report/bugreport.py): the cuDNN frontend issue form.

One report per slow case (report/slowcase.py: a case whose timed units the quiet re-measurement
confirmed slower in a newer release of one axis than in an older one, every other pin the same).
It groups that case's slow units: each unit's time on each release measured (min and median of
the quiet repeats and their count), the ratio, the first slow release (a speed bisect's, else
the measured boundary) and the commands that show it again, with the tool and without. A
candidate the repeats did not confirm (load, unmeasured, no re-measurement at all) gets none.
"""

from __future__ import annotations

import shlex
import statistics
from typing import TYPE_CHECKING

from validate.execute.cases.kinds import kind_for_result
from validate.judge.speed import DEFAULT_MIN_S, DEFAULT_RATIO
from validate.model.axes import axis_named, pins_label
from validate.report.bugreport import environment_rows, fence, file_slug, reproduce_command
from validate.report.model import cell_label
from validate.report.slowcase import BISECT_DIR, bisect_for, first_slow_lines, slow_cases
from validate.textsafe import display, redact

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from validate.report import Report
    from validate.report.model import StoredResult
    from validate.report.slowcase import Bisect, Side, SlowCase

__all__ = ["speed_bug_report", "write_speed_bug_reports"]


def _figures(side: Side) -> tuple[str, str, str]:
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
        lines = first_slow_lines(slow, unit, bisect_for(slow, unit, bisects, bisect_dir))
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
) -> tuple[Side | None, Side | None]:
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
