"""A single-file HTML page (no network) a release engineer can publish, top to bottom: the verdict
as a banner, one line per known issue (what the evidence says), the compatibility grid (fitted to a
1,400 px window: transposed or split when wide) with its legend, whole footnotes and a per-cell
drill-down, then the collapsed case x cell matrix, the known-issue table, the sign-off lists and the
run metadata. One function per section; `render_html` only puts them in order."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from validate.judge.signoff import passed_on_rerun, summary, verdict_line
from validate.model.outcome import policy
from validate.report.case_matrix import MATRIX_LEGEND, test_file
from validate.report.ki_table import KI_SYMBOLS, KIState, ki_bands
from validate.report.model import AXIS_TITLES, axis_label, cell_label, result_key
from validate.report.speed import speed_html
from validate.report.text import LEGEND, provenance_facts

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from validate.judge.signoff import Verdict
    from validate.report import Report
    from validate.report.case_matrix import CaseMatrix
    from validate.report.ki_table import KITable
    from validate.report.model import RunInfo, StoredResult
    from validate.report.table import CompatTable

__all__ = ["render_html"]

_COLOURS: Final = {
    "regression": ("#d73a49", "regression: fail / crash / timeout"),
    "error": ("#e36209", "infra error (environment or harness)"),
    "flaky": ("#b392f0", "≈ flaky: did not pass, then passed on a re-run"),
    "known": ("#f9c513", "known issue reproduced (xfail)"),
    "xpass": ("#79b8ff", "xpass: known issue did not reproduce (fixed?)"),
    "pass": ("#34d058", "all ran cases passed"),
    "skip": ("#d1d5da", "only skipped"),
    "empty": ("#ffffff", "not run"),
}
#: Known-issues table colours, one per state.
_KI_COLOURS: Final = {
    KIState.AFFECTED: "#f9c513",
    KIState.OUTSIDE: "#d73a49",
    KIState.FIXED: "#34d058",
    KIState.NOT_REPRODUCED: "#c8e1ff",
    KIState.NOT_COVERED: "#ffffff",
    KIState.NOT_RUN: "#e1e4e8",
}
_CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:16px;color:#24292e;background:#fafbfc}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:20px 0 6px} .sub{color:#586069;margin:0 0 8px}
#verdict{padding:10px 14px;border-radius:6px;margin:0 0 10px;font-size:17px;font-weight:600}
#verdict .why{font-size:13px;font-weight:400;margin-top:2px}
.v-signed{background:#dcffe4;border:2px solid #28a745;color:#144620}
.v-blocked{background:#ffeef0;border:2px solid #d73a49;color:#86181d}
.v-unproven{background:#fff5b1;border:2px solid #dbab09;color:#5c4400}
#ki-band{margin:0 0 12px;padding:0;list-style:none}
#ki-band li{padding:3px 0 3px 8px;border-left:6px solid #e1e4e8;margin:2px 0}
#ki-band li.quiet{color:#6a737d}
#grid{max-width:100%;overflow-x:auto} #grid table{margin:0 0 8px}
table.matrix{border-collapse:collapse;background:#fff}
.matrix th,.matrix td{border:1px solid #959da5;padding:6px 8px;text-align:left;white-space:nowrap}
.matrix th{background:#f1f3f5} td.cell{cursor:pointer} td.cell:focus,td.sel{outline:3px solid #0366d6}
.scroll{max-width:100%;overflow-x:auto}
.legend span.sw{display:inline-block;width:14px;height:14px;border:1px solid #959da5;margin:0 4px 0 12px;vertical-align:middle}
ul.notes li{white-space:pre-wrap;overflow-wrap:anywhere} ul.tests li{overflow-wrap:anywhere}
#detail{margin-top:12px;padding:8px 12px;border:1px solid #959da5;background:#fff;min-height:40px}
#detail details{border-top:1px solid #e1e4e8;padding:4px 0} #detail summary{cursor:pointer}
.badge{padding:1px 6px;border-radius:3px;color:#000}
table.meta{border-collapse:collapse;margin:0 0 12px} .meta th,.meta td{padding:2px 12px 2px 0;text-align:left;vertical-align:top}
.meta th{font-weight:600;white-space:nowrap} .meta td{overflow-wrap:anywhere}
pre{background:#f6f8fa;padding:8px;overflow:auto;max-height:320px;white-space:pre-wrap} dt{font-weight:600} dd{margin:0 0 4px 16px}
"""
_JS = """
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var detail = document.getElementById("detail");
  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    if (cls) { e.className = cls; }
    return e;
  }
  function row(dl, name, value) {
    if (value === undefined || value === null || value === "" ) { return; }
    dl.appendChild(el("dt", name)); dl.appendChild(el("dd", value));
  }
  function environment(refs) {
    // a result's environment: interned [path, value] parts (most are shared by a cell's results)
    var out = {};
    refs.forEach(function (n) {
      var part = data.env_parts[n], at = out, path = part[0];
      for (var k = 0; k < path.length - 1; k++) { at = at[path[k]] = at[path[k]] || {}; }
      at[path[path.length - 1]] = part[1];
    });
    return out;
  }
  function show(td) {
    document.querySelectorAll("td.sel").forEach(function (x) { x.classList.remove("sel"); });
    td.classList.add("sel");
    detail.textContent = "";
    detail.appendChild(el("h2", td.getAttribute("data-label")));
    (data.cells[td.getAttribute("data-cell")] || []).forEach(function (i) {
      var r = data.results[i], sec = el("details"), h = el("summary", r.case + " ");
      var badge = el("span", r.outcome, "badge");
      badge.style.background = data.colours[r.status];
      h.appendChild(badge);
      if (r.reason) { h.appendChild(document.createTextNode(" " + r.reason.split("\\n")[0].slice(0, 160))); }
      sec.appendChild(h);
      var dl = el("dl");
      row(dl, "reason", r.reason); row(dl, "cell", r.label); row(dl, "known issue", r.known_issue);
      row(dl, "note", r.ki_note); row(dl, "duration", r.duration + " s");
      row(dl, "attempts", r.attempts); row(dl, "signal", r.signal); row(dl, "exit code", r.exit_code);
      sec.appendChild(dl);
      if (r.logs.length) {
        var p = el("p", "logs: ");
        r.logs.forEach(function (l) { var a = el("a", l.name); a.href = l.href; p.appendChild(a); p.appendChild(document.createTextNode(" ")); });
        sec.appendChild(p);
      }
      if (r.tail) { var t = el("details"); t.appendChild(el("summary", "output tail")); t.appendChild(el("pre", r.tail)); sec.appendChild(t); }
      var env = el("details"); env.appendChild(el("summary", "environment"));
      env.appendChild(el("pre", JSON.stringify(environment(r.env), null, 2))); sec.appendChild(env);
      detail.appendChild(sec);
    });
    var omitted = data.omitted[td.getAttribute("data-cell")];
    if (omitted) { detail.appendChild(el("p", omitted + " pytest test ids that passed or skipped are counted, not listed")); }
  }
  document.querySelectorAll("td.cell[data-cell]").forEach(function (td) {
    td.addEventListener("click", function () { show(td); });
    td.addEventListener("keydown", function (ev) { if (ev.key === "Enter") { show(td); } });
  });
  var order = ["td.st-regression", "td.st-error", "td.st-known", "td.cell[data-cell]"];
  for (var i = 0; i < order.length; i++) {
    var first = document.querySelector(order[i]);
    if (first) { show(first); break; }
  }
})();
"""


def _carried(item: StoredResult) -> bool:
    """Whether the page carries a result's details: all but a pytest test id's pass or skip."""
    r = item.result
    return (
        test_file(r.case) is None
        or passed_on_rerun(r)
        or policy(r.outcome).status
        not in (
            "pass",
            "skip",
        )
    )


def _rank(item: StoredResult) -> int:
    """Worst first in a drill-down."""
    return policy(item.result.outcome).rank


def _esc(value: object) -> str:
    return html.escape(str(value))


def _code(text: str) -> str:
    """Escaped text whose `backticked` spans (Markdown in shared legend strings) are <code>."""
    parts = html.escape(text).split("`")
    if len(parts) % 2 == 0:  # an odd backtick: leave the text as it is
        return html.escape(text)
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


# -- the data block --------------------------------------------------------------------------------


class _EnvParts:
    """Results' environments as interned (path, value) parts: the results of one cell share almost
    all of theirs (libraries, compiler, variables), so the page holds each part once and every
    result a list of indices (2.4 MB -> a fraction for the committed 435-result run)."""

    def __init__(self) -> None:
        self.parts: list[tuple[list[str], Any]] = []
        self._index: dict[str, int] = {}

    def refs(self, env: Mapping[str, Any]) -> list[int]:
        out = []
        for key, value in env.items():
            # one level down for the environment variables, where only a few differ per result
            items = value.items() if key == "env" and isinstance(value, dict) else [(None, value)]
            for sub, leaf in items:
                path = [key] if sub is None else [key, sub]
                text = json.dumps([path, leaf], default=str, sort_keys=True)
                if text not in self._index:
                    self._index[text] = len(self.parts)
                    self.parts.append((path, leaf))
                out.append(self._index[text])
        return out


def _result(item: StoredResult, report: Report, envs: _EnvParts) -> dict[str, Any]:
    r = item.result
    logs = []
    for name, recorded in (("output", r.log_path), *sorted(r.api_logs.items())):
        href = report.href(item.resolve(recorded))
        if href is not None:
            logs.append({"name": name, "href": href})
    return {
        "case": r.case,
        "outcome": str(r.outcome),
        "status": policy(r.outcome).status,
        "reason": r.reason,
        "label": cell_label(r),
        "known_issue": r.known_issue,
        "ki_note": r.ki_note,
        "duration": f"{r.duration_s:.1f}",
        "attempts": ", ".join(r.attempts),
        "signal": r.signal,
        "exit_code": r.exit_code,
        "tail": r.tail,
        "env": envs.refs(r.env),
        "logs": logs,
    }


def _data_block(
    report: Report,
    items: Sequence[StoredResult],
    cells: Mapping[str, list[int]],
    omitted: Mapping[str, int],
) -> str:
    """The inline JSON the drill-down reads: the carried results, each cell's, and per cell how
    many pytest test ids it counts without carrying."""
    envs = _EnvParts()
    data = {
        "cells": cells,
        "results": [_result(item, report, envs) for item in items],
        "omitted": omitted,
        "env_parts": envs.parts,
        "colours": {k: v[0] for k, v in _COLOURS.items()},
    }
    # "<" as \\u003c: no "</script" or "<!--" can end or confuse the data block
    blob = json.dumps(data, default=str, separators=(",", ":")).replace("<", "\\u003c")
    return f'<script type="application/json" id="report-data">{blob}</script>'


# -- the top: verdict banner and known-issue band ---------------------------------------------------


def _banner(verdict: Verdict) -> str:
    """The verdict line, coloured: green signed off, red blocked, amber only unproven (no GPU)."""
    if verdict.signed_off:
        kind = "signed"
    elif verdict.exit_code or verdict.blocked:
        kind = "blocked"
    else:
        kind = "unproven"
    counts = (
        (len(verdict.regressions), "regression", "regressions"),
        (len(verdict.errors), "infra error", "infra errors"),
        (len(verdict.flaky), "flaky result", "flaky results"),
        (len(verdict.missing_modules), "missing module", "missing modules"),
        (len(verdict.no_gpu), "GPU case not run (no GPU)", "GPU cases not run (no GPU)"),
        (len(verdict.notices), "xpass (fixed?)", "xpass (fixed?)"),
    )
    why = [f"{n} {one if n == 1 else many}" for n, one, many in counts if n]
    why.append(f"exit {verdict.exit_code}")
    return (
        f'<div id="verdict" class="v-{kind}" role="status">{_esc(verdict_line(verdict))}'
        f'<div class="why">{_esc(" · ".join(why))} (<a href="#signoff">sign-off details</a>)'
        "</div></div>"
    )


def _ki_band(ki: KITable) -> str:
    """One line per known issue, from the evidence (report/ki_table.py `ki_bands`), coloured by
    its headline state; the title and the declared range as a tooltip."""
    if not ki.rows:
        return '<ul id="ki-band"><li class="quiet">No known-issue database was given.</li></ul>'
    lines = []
    for band in ki_bands(ki):
        quiet = band.state in (KIState.NOT_COVERED, KIState.NOT_RUN)
        tip = f"{band.issue.title}\ndeclared: {band.declared}"
        lines.append(
            f'<li class="ki-band-{band.state}{" quiet" if quiet else ""}" title="{_esc(tip)}" '
            f'style="border-left-color:{_KI_COLOURS[band.state]}">'
            f"<b>{_esc(band.issue.id)}</b>: {_esc(band.words)}</li>"
        )
    return f'<ul id="ki-band">{"".join(lines)}</ul>'


# -- the compatibility grid ------------------------------------------------------------------------

#: What the grid may take of a 1,400 px window (body margins, a scroll bar), and a cell's cost.
_GRID_BUDGET_PX: Final = 1300
_CHAR_PX: Final = 8.5  # a generous average for 14 px system-ui with symbols
_PAD_PX: Final = 18  # padding and border of a cell


@dataclass(frozen=True, kw_only=True)
class _Grid:
    """The table laid out for the page: header cells over the row headers, a header per data
    column, and per row its header values and the (row, column) index of each data cell."""

    corner: tuple[str, ...]
    heads: tuple[str, ...]
    rows: tuple[tuple[tuple[str, ...], tuple[tuple[int, int], ...]], ...]

    def width(self, table: CompatTable, columns: Sequence[int] | None = None) -> float:
        """Estimated width in px of the row headers plus the given data columns (all if None)."""
        picked = range(len(self.heads)) if columns is None else columns
        total = 0.0
        for k in range(len(self.corner)):
            longest = max([len(self.corner[k]), *(len(head[k]) for head, _ in self.rows)])
            total += longest * _CHAR_PX + _PAD_PX
        for j in picked:
            texts = [self.heads[j], *(_text(table, at[j]) for _, at in self.rows)]
            total += max(map(len, texts)) * _CHAR_PX + _PAD_PX
        return total


def _text(table: CompatTable, at: tuple[int, int]) -> str:
    return table.cell(table.row_keys[at[0]], table.col_keys[at[1]]).text


def _layouts(table: CompatTable) -> tuple[_Grid, _Grid]:
    """The table as pivoted, and transposed (its columns as rows)."""
    pivot = table.pivot
    rows, cols = range(len(table.row_keys)), range(len(table.col_keys))
    as_is = _Grid(
        corner=tuple(AXIS_TITLES[a] for a in pivot.rows),
        heads=tuple(table.headers()[len(pivot.rows) :]),
        rows=tuple((table.row_keys[r], tuple((r, c) for c in cols)) for r in rows),
    )
    turned = _Grid(
        corner=tuple(AXIS_TITLES[a] for a in pivot.cols),
        heads=tuple(
            " / ".join(axis_label(a, v) for a, v in zip(pivot.rows, key, strict=True))
            for key in table.row_keys
        ),
        rows=tuple(
            (
                tuple(axis_label(a, v) for a, v in zip(pivot.cols, table.col_keys[c], strict=True)),
                tuple((r, c) for r in rows),
            )
            for c in cols
        ),
    )
    return as_is, turned


def _fit(table: CompatTable) -> tuple[_Grid, list[list[int]]]:
    """The layout and its data columns split into groups that each fit the budget: the table as
    pivoted where it fits, else transposed where that fits, else the narrower of the two split
    into several tables (each with the row headers again)."""
    as_is, turned = _layouts(table)
    for grid in (as_is, turned):
        if grid.width(table) <= _GRID_BUDGET_PX:
            return grid, [list(range(len(grid.heads)))]
    grid = min((as_is, turned), key=lambda g: g.width(table))
    groups: list[list[int]] = [[]]
    for j in range(len(grid.heads)):
        if groups[-1] and grid.width(table, [*groups[-1], j]) > _GRID_BUDGET_PX:
            groups.append([])
        groups[-1].append(j)
    return grid, groups


def _grid(
    report: Report, items: Sequence[StoredResult]
) -> tuple[str, dict[str, list[int]], dict[str, int]]:
    """The compatibility grid (cells clickable for their results); per data cell, the indices
    of its results in `items` (those the page carries, worst first) and the count of those it
    leaves out."""
    table = report.table
    index = {result_key(item.result): i for i, item in enumerate(items)}
    grid, groups = _fit(table)
    cells: dict[str, list[int]] = {}
    omitted: dict[str, int] = {}
    tables = []
    for group in groups:
        head = "".join(
            f"<th>{_esc(h)}</th>" for h in (*grid.corner, *(grid.heads[j] for j in group))
        )
        rows = []
        for values, at in grid.rows:
            tds = "".join(f"<th>{_esc(v)}</th>" for v in values)
            for j in group:
                r, c = at[j]
                row, col = table.row_keys[r], table.col_keys[c]
                cell = table.cell(row, col)
                if cell.status == "empty":
                    tds += f'<td class="st-empty">{_esc(cell.text)}</td>'
                    continue
                key = f"{r}:{c}"
                carried = [index[k] for k in cell.keys if k in index]
                cells[key] = sorted(carried, key=lambda i: _rank(items[i]))
                if len(carried) < len(cell.keys):
                    omitted[key] = len(cell.keys) - len(carried)
                label = f"{' / '.join(row)} · {' / '.join(col)}"
                tds += (
                    f'<td class="cell st-{cell.status}" tabindex="0" data-cell="{key}" '
                    f'data-label="{_esc(label)}" style="background:{_COLOURS[cell.status][0]}">'
                    f"{_esc(cell.text)}</td>"
                )
            rows.append(f"<tr>{tds}</tr>")
        tables.append(
            f'<table class="matrix grid"><thead><tr>{head}</tr></thead><tbody>'
            f"{chr(10).join(rows)}</tbody></table>"
        )
    return f'<div id="grid">{"".join(tables)}</div>', cells, omitted


def _grid_notes(table: CompatTable) -> str:
    """Colour legend, symbol legend and the footnotes, whole (the md table cuts them)."""
    legend = "".join(
        f'<span class="sw" style="background:{colour}"></span>{_esc(text)}'
        for colour, text in _COLOURS.values()
    )
    plural = {True: "results", False: "result"}
    notes = "".join(
        f"<li>[{n.index}] {_esc(n.kind)}: {_esc(n.full or n.reason)} "
        f"({n.count} {plural[n.count != 1]})</li>"
        for n in table.footnotes
    )
    return (
        f'<p class="legend">{legend}</p><p>{_esc(LEGEND)}</p><ul class="notes">{notes}</ul>'
        '<div id="detail">Click a cell for its results.</div>'
    )


# -- below the grid: cases, known-issue table, sign-off, runs --------------------------------------


def _ki_section(ki: KITable) -> str:
    """The known-issues table: one coloured cell per issue x column, its evidence as a tooltip."""
    if not ki.rows:
        return "<p>No known-issue database was given.</p>"
    head = "".join(f"<th>{html.escape(h)}</th>" for h in ki.headers())
    rows = []
    for row in ki.rows:
        tds = f'<th title="{html.escape(row.issue.title)}">{html.escape(row.issue.id)}</th>'
        tds += f"<td>{html.escape(row.declared)}</td>"
        for cell in row.cells:
            tip = "\n".join(cell.evidence) or "no case the issue names ran here"
            tip = f"{cell.note}\n{tip}" if cell.note else tip
            tds += (
                f'<td class="ki ki-{cell.state}" title="{html.escape(tip)}" '
                f'style="background:{_KI_COLOURS[cell.state]}">{html.escape(cell.text)}</td>'
            )
        rows.append(f"<tr>{tds}</tr>")
    scope = f"<p>{html.escape('In every column: ' + ', '.join(ki.common))}</p>" if ki.common else ""
    titles = "".join(f"<li>{html.escape(t)}</li>" for t in ki.title_lines())
    outside = "".join(f"<li>{html.escape(t)}</li>" for t in ki.outside_lines())
    outside = f"<p>Reproduced outside the declared range:</p><ul>{outside}</ul>" if outside else ""
    legend = "".join(
        f'<span class="sw" style="background:{_KI_COLOURS[state]}"></span>'
        f"{_code(KI_SYMBOLS[state] + ' ' + text)}"
        for state, text in ki.legend_items()
    )
    return (
        f'{scope}<div class="scroll"><table class="matrix known-issues"><thead><tr>{head}</tr>'
        f"</thead><tbody>{''.join(rows)}</tbody></table></div><ul>{titles}</ul>{outside}"
        f'<p class="legend">{legend}</p>'
    )


def _case_matrix(report: Report) -> str:
    """Cases x cells, collapsed; an entry that did not pass links to its evidence folder. Pytest
    test ids: test files x cells (counts), then the test ids that neither passed nor skipped,
    linked."""
    matrix = report.cases
    if matrix is None or matrix.empty:
        return "<p>No results.</p>"
    scope = ", ".join(matrix.common)
    scope = f"<p>{html.escape('In every column: ' + scope)}</p>" if scope else ""
    parts = [scope]
    if matrix.cases:
        parts.append(_case_rows(report, matrix))
    if matrix.files:
        parts.append(_file_rows(report, matrix))
    parts.append(
        f"<p>{html.escape(MATRIX_LEGEND)}; an entry that did not pass links to its evidence "
        "folder.</p>"
    )
    size = f"{len(matrix.cases)} cases" if matrix.cases else ""
    if matrix.files:
        size += f"{', ' if size else ''}{len(matrix.files)} test files"
    unpassed = len(matrix.unpassed()) + len(matrix.listed_tests())
    return (
        f"<details><summary>{size} &times; {len(matrix.columns)} cells; {unpassed} entries "
        f"did not pass</summary>{''.join(parts)}</details>"
    )


def _case_rows(report: Report, matrix: CaseMatrix) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in matrix.headers())
    rows = []
    for case in matrix.cases:
        tds = f"<th>{html.escape(case)}</th>"
        for column in matrix.columns:
            entry = matrix.entry(case, column)
            if entry is None:
                tds += '<td class="st-empty">—</td>'
                continue
            text = html.escape(entry.text)
            href = None if entry.passed else report.href(entry.evidence)
            if href is not None:
                text = f'<a href="{html.escape(href)}">{text}</a>'
            tip = f' title="{html.escape(entry.reason)}"' if entry.reason else ""
            colour = _COLOURS.get(entry.status, _COLOURS["empty"])[0]
            tds += f'<td class="st-{entry.status}"{tip} style="background:{colour}">{text}</td>'
        rows.append(f"<tr>{tds}</tr>")
    return (
        f'<div class="scroll"><table class="matrix cases"><thead><tr>{head}</tr></thead><tbody>'
        f"{''.join(rows)}</tbody></table></div>"
    )


def _file_rows(report: Report, matrix: CaseMatrix) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in matrix.file_headers())
    rows = []
    for file in matrix.files:
        tds = f"<th>{html.escape(file)}</th>"
        for column in matrix.columns:
            found = matrix.file_entry(file, column)
            if found is None:
                tds += '<td class="st-empty">—</td>'
                continue
            colour = _COLOURS.get(found.status, _COLOURS["empty"])[0]
            tds += (
                f'<td class="st-{found.status}" style="background:{colour}">'
                f"{html.escape(found.text)}</td>"
            )
        rows.append(f"<tr>{tds}</tr>")
    items = []
    for case, column, entry in matrix.listed_tests():
        href = report.href(entry.evidence)
        text = html.escape(entry.text)
        if href is not None:
            text = f'<a href="{html.escape(href)}">{text}</a>'
        why = f": {html.escape(entry.reason)}" if entry.reason else ""
        items.append(
            f"<li>{text} <code>{html.escape(case)}</code> at {html.escape(column.label)}{why}</li>"
        )
    listed = (
        f"<p>Test ids that neither passed nor skipped ({len(items)}), linked to their evidence:"
        f'</p><ul class="tests">{"".join(items)}</ul>'
        if items
        else ""
    )
    return (
        f'<h3>Pytest tests per test file</h3><div class="scroll"><table class="matrix files">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>{listed}"
    )


def _signoff(verdict: Verdict) -> str:
    """The sign-off lists below the verdict line (the banner shows the line itself)."""
    lines = summary(verdict).splitlines()[1:]
    if not lines:
        return "<p>Nothing to list.</p>"
    return (
        f"<details open><summary>what the verdict rests on ({len(lines)} lines)</summary>"
        f"<pre>{_esc(chr(10).join(lines))}</pre></details>"
    )


def _run_facts(run: RunInfo, role: str = "run") -> str:
    """One run's provenance as a two-column table (what the md page shows in a text block)."""
    rows = [("path", str(run.path)), *provenance_facts(run)]
    body = "".join(
        f"<tr><th>{_esc(k)}</th><td>{f'<code>{_esc(v)}</code>' if k == 'command' else _esc(v)}</td></tr>"
        for k, v in rows
    )
    return (
        f'<h3>{_esc(role)} <code>{_esc(run.run_id)}</code></h3><table class="meta">{body}</table>'
    )


def _runs(report: Report) -> str:
    parts = [_run_facts(run) for run in report.runs.runs]
    parts += [_run_facts(run, "baseline run") for run in report.baseline_runs]
    return "".join(parts)


def _where(meta: Mapping[str, Any]) -> list[str]:
    """The GPU, driver and start of a run, from run.json (`gpu`/`driver`, else what `host` probed)."""
    found = meta.get("host")
    host: Mapping[str, Any] = found if isinstance(found, dict) else {}
    listed = host.get("gpus")
    gpus: list[Any] = listed if isinstance(listed, list) else []
    names = sorted({str(g.get("name")) for g in gpus if isinstance(g, dict) and g.get("name")})
    gpu = (
        meta.get("gpu") or ", ".join(names) or ("no GPU" if host.get("has_driver") is False else "")
    )
    driver = meta.get("driver") or host.get("driver_version")
    when = meta.get("date") or meta.get("started_at")
    return [str(v) for v in (gpu, f"driver {driver}" if driver else "", when) if v]


def _subtitle(report: Report) -> str:
    """One line under the title: the runs and where they ran (the full facts are at the bottom)."""
    bits = [" · ".join([f"run {run.run_id}", *_where(run.meta)]) for run in report.runs.runs]
    return f'<p class="sub">{_esc("; ".join(bits))} · <a href="#runs">run details</a></p>'


def render_html(report: Report) -> str:
    """Render the page; all data is inline JSON, all styling and script inline."""
    # a pytest test id that passed or skipped is counted in its cell, not carried in the page
    # (a suite gives 40,000 of them a cell, issue #27); every other result is
    items = [item for item in report.runs.items if _carried(item)]
    grid, cells, omitted = _grid(report, items)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>cudnn-matrix compatibility report</title>
<link rel="icon" href="data:,">
<style>{_CSS}</style></head>
<body>
<h1>cuDNN frontend x backend compatibility</h1>
{_subtitle(report)}
{_banner(report.verdict)}
{_ki_band(report.ki_table)}
{grid}
{_grid_notes(report.table)}
<h2>Speed</h2>
{speed_html(report)}
<h2>Cases</h2>
{_case_matrix(report)}
<h2>Known issues</h2>
{_ki_section(report.ki_table)}
<h2 id="signoff">Sign-off</h2>
{_signoff(report.verdict)}
<h2 id="runs">Runs</h2>
{_runs(report)}
{_data_block(report, items, cells, omitted)}
<script>{_JS}</script>
</body></html>
"""
