"""The "Speed" section every format renders (issue 29), and the docs table's slow-cell marks.

The figures come from the run folders: the main results' timed units (CaseResult.units) give the
candidates, `<run>/speed.json` (validate's quiet re-measurement, validate/remeasure.py) the
repeats. Both are judged again here with the report's thresholds (`--slower-ratio`,
`--slower-min-s`), so a report can be stricter than the run was. A candidate that was never
re-measured is counted, never shown as a finding: nothing is reported before it was re-run alone.
"""

from __future__ import annotations

import html
import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from validate.judge.speed import (
    DEFAULT_REPEATS,
    Finding,
    Measurement,
    SpeedCheck,
    Thresholds,
    judge,
)
from validate.model.axes import pins_label

if TYPE_CHECKING:
    from collections.abc import Mapping

    from validate.report import Report
    from validate.report.model import RunSet
    from validate.report.table import CompatTable

__all__ = [
    "SLOW_SYMBOL",
    "SPEED_FILE",
    "load_speed",
    "mark_table",
    "speed_dict",
    "speed_html",
    "speed_lines",
    "speed_properties",
]

log = logging.getLogger(__name__)

#: The docs table's mark on a cell where a unit of a case is confirmed slower (footnote [sN]).
SLOW_SYMBOL: Final = "⏱"
SPEED_FILE: Final = "speed.json"  # validate/remeasure.py writes it (a higher stage: not imported)


def load_speed(runs: RunSet, thresholds: Thresholds) -> SpeedCheck:
    """Judge the merged runs' units with the re-measurements their folders hold (the evidence
    folders made absolute); not `measured` when no folder holds a speed.json."""
    measurements: list[Measurement] = []
    repeats, measured = DEFAULT_REPEATS, False
    for run in runs.runs:
        path = run.path / SPEED_FILE
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            got = [Measurement.from_dict(m) for m in data.get("measurements", ())]
            repeats = int(data.get("check", {}).get("repeats", repeats))
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            log.warning("skipped %s: not a speed record (%s)", path, exc)
            continue
        measured = True
        measurements += [
            replace(m, folders=tuple(str(run.path / f) for f in m.folders)) for m in got
        ]
    return judge(runs.results, measurements if measured else None, thresholds, repeats)


def _slow_keys(check: SpeedCheck) -> dict[str, list[int]]:
    """result key (slow cell::case) -> the footnote numbers of its confirmed findings."""
    keys: dict[str, list[int]] = {}
    for n, finding in enumerate(check.confirmed, start=1):
        cand = finding.candidate
        keys.setdefault(f"{cand.slow_cell}::{cand.case}", []).append(n)
    return keys


def mark_table(table: CompatTable, check: SpeedCheck) -> CompatTable:
    """The table with SLOW_SYMBOL [sN] on each cell that holds a confirmed slower unit, and one
    footnote per confirmed finding."""
    keys = _slow_keys(check)
    if not keys:
        return table
    cells = {}
    for where, cell in table.cells.items():
        marks = sorted({n for key in cell.keys for n in keys.get(key, ())})
        if marks:
            text = f"{cell.text} · {SLOW_SYMBOL} [{','.join(f's{n}' for n in marks)}]"
            cell = replace(cell, text=text)
        cells[where] = cell
    notes = tuple(
        f"[s{n}] {SLOW_SYMBOL} slower: {_line(f)}" for n, f in enumerate(check.confirmed, start=1)
    )
    return replace(table, cells=cells, extra_notes=(*table.extra_notes, *notes))


def _cell_text(pins: Mapping[str, str], axis: str) -> str:
    return f"{axis} {pins.get(axis, '?')}"


def _line(f: Finding) -> str:
    """`case` unit: 2.31x slower in cudnn 9.24.0.43 than in cudnn 9.22.0.52 (min 99.0 s vs 42.9 s)."""
    c = f.candidate
    slow, fast = f.figures("slow"), f.figures("fast")
    ratio = f.ratio
    figures = ""
    if slow is not None and fast is not None and ratio is not None:
        figures = f" (min of repeats {slow[0]:.2f} s vs {fast[0]:.2f} s)"
    shown = "—" if ratio is None else f"{ratio:.2f}x"
    return (
        f"{c.case} {c.unit}: {shown} slower in {_cell_text(c.slow_pins, c.axis)} than in "
        f"{_cell_text(c.fast_pins, c.axis)}{figures}"
    )


def _figures(f: Finding, side: str) -> str:
    got = f.figures("slow" if side == "slow" else "fast")
    n = len(f.slow_repeats if side == "slow" else f.fast_repeats)
    return "—" if got is None else f"{got[0]:.2f} / {got[1]:.2f} (n={n})"


def _rows(check: SpeedCheck) -> list[Finding]:
    shown = [f for f in check.findings if f.status != "unmeasured"] if check.measured else []
    order = {"confirmed": 0, "load": 1, "unmeasured": 2}
    return sorted(shown, key=lambda f: (order[f.status], f.candidate.case, f.candidate.unit))


def _headers() -> list[str]:
    return [
        "case",
        "unit",
        "slower cell",
        "faster cell",
        "main run s (slow / fast)",
        "slow min / median s",
        "fast min / median s",
        "ratio (min)",
        "finding",
    ]


def _row(f: Finding) -> list[str]:
    c = f.candidate
    return [
        c.case,
        c.unit,
        f"{_cell_text(c.slow_pins, c.axis)} ({c.slow_cell})",
        f"{_cell_text(c.fast_pins, c.axis)} ({c.fast_cell})",
        f"{c.slow_s:.2f} / {c.fast_s:.2f}",
        _figures(f, "slow"),
        _figures(f, "fast"),
        "—" if f.ratio is None else f"{f.ratio:.2f}x",
        f.status if f.status != "load" else "dropped: load",
    ]


def speed_lines(report: Report, tablefmt: str = "github") -> list[str]:
    """The section below its heading (md or rst): the summary, one row per re-measured
    candidate, and each finding's evidence folders."""
    from tabulate import tabulate

    check = report.speed
    if check is None:
        return ["No speed check.", ""]
    out = [check.summary() + ".", ""]
    rows = _rows(check)
    if not rows:
        return out
    out += [f"- {line}" for line in _pairs(rows)] + [""]
    body = [_row(f) for f in rows]
    if tablefmt == "github":
        body = [[cell.replace("|", "\\|") for cell in row] for row in body]
    out += [tabulate(body, headers=_headers(), tablefmt=tablefmt, disable_numparse=True), ""]
    out += ["Evidence (each repeat's case folder, slower cell first):", ""]
    for f in rows:
        links = [_link(report, p, tablefmt) for p in (*f.slow_folders, *f.fast_folders)]
        c = f.candidate
        out.append(
            f"- {c.case} {c.unit}, {c.slow_cell} vs {c.fast_cell}: {', '.join(links) or '—'}"
        )
    return [*out, ""]


def _link(report: Report, folder: str, tablefmt: str) -> str:
    href = report.href(Path(folder))
    text = _short(folder)
    if href is None:
        return text
    return f"[{text}]({href})" if tablefmt == "github" else f"`{text} <{href}>`__"


def _short(folder: str) -> str:
    """`speed/r1/cases/<cell>/<case>`: the folder as its run names it."""
    parts = Path(folder).parts
    return "/".join(parts[parts.index("speed") :]) if "speed" in parts else folder


def _pairs(rows: list[Finding]) -> list[str]:
    """Each compared pair of cells with all its pins, once."""
    seen: dict[tuple[str, str], str] = {}
    for f in rows:
        c = f.candidate
        seen.setdefault(
            (c.slow_cell, c.fast_cell),
            f"{c.slow_cell}: {pins_label(c.slow_pins)}; {c.fast_cell}: {pins_label(c.fast_pins)}",
        )
    return list(seen.values())


def speed_dict(report: Report) -> dict[str, Any] | None:
    """The JSON report's `speed`: thresholds, counts, summary and every finding's figures."""
    return None if report.speed is None else report.speed.to_dict()


def speed_properties(report: Report, cell_id: str) -> list[tuple[str, str]]:
    """JUnit properties of one cell's suite: the summary, and one per confirmed finding whose
    slower cell it is (`speed.<case>.<unit>`)."""
    check = report.speed
    if check is None or not (check.measured or check.findings):  # no check, nothing to say
        return []
    out = [("speed", check.summary())]
    for f in check.confirmed:
        c = f.candidate
        if c.slow_cell == cell_id:
            out.append((f"speed.{c.case}.{c.unit}", _line(f)))
    return out


def speed_html(report: Report) -> str:
    """The section as HTML: summary, table, evidence links."""
    check = report.speed
    if check is None:
        return "<p>No speed check.</p>"
    out = f"<p>{html.escape(check.summary())}.</p>"
    rows = _rows(check)
    if not rows:
        return out
    head = "".join(f"<th>{html.escape(h)}</th>" for h in [*_headers(), "evidence"])
    body = []
    for f in rows:
        tds = "".join(f"<td>{html.escape(v)}</td>" for v in _row(f))
        links = []
        for folder in (*f.slow_folders, *f.fast_folders):
            href = report.href(Path(folder))
            text = html.escape(_short(folder))
            links.append(f'<a href="{html.escape(href)}">{text}</a>' if href else text)
        body.append(f"<tr>{tds}<td>{'<br>'.join(links)}</td></tr>")
    return (
        f'{out}<div class="scroll"><table class="matrix speed"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )
