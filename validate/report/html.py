"""A single-file HTML page (no network): coloured matrix, legend, per-cell drill-down, sign-off."""

from __future__ import annotations

import html
import json
from typing import TYPE_CHECKING, Any, Final

from validate.judge.signoff import passed_on_rerun, summary
from validate.model.outcome import policy
from validate.report.case_matrix import MATRIX_LEGEND, test_file
from validate.report.ki_table import KI_SYMBOLS, KIState
from validate.report.model import cell_label, result_key
from validate.report.text import LEGEND, provenance_lines

if TYPE_CHECKING:
    from validate.report import Report
    from validate.report.case_matrix import CaseMatrix
    from validate.report.ki_table import KITable
    from validate.report.model import StoredResult

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
h1{font-size:20px;margin:0 0 8px} h2{font-size:16px;margin:16px 0 6px}
table.matrix{border-collapse:collapse;background:#fff}
.matrix th,.matrix td{border:1px solid #959da5;padding:6px 8px;text-align:left;white-space:nowrap}
.matrix th{background:#f1f3f5} td.cell{cursor:pointer} td.cell:focus,td.sel{outline:3px solid #0366d6}
.legend span.sw{display:inline-block;width:14px;height:14px;border:1px solid #959da5;margin:0 4px 0 12px;vertical-align:middle}
#detail{margin-top:12px;padding:8px 12px;border:1px solid #959da5;background:#fff;min-height:40px}
#detail section{border-top:1px solid #e1e4e8;padding:6px 0} .badge{padding:1px 6px;border-radius:3px;color:#000}
pre{background:#f6f8fa;padding:8px;overflow:auto;max-height:320px} dt{font-weight:600} dd{margin:0 0 4px 16px}
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
  function show(td) {
    document.querySelectorAll("td.sel").forEach(function (x) { x.classList.remove("sel"); });
    td.classList.add("sel");
    detail.textContent = "";
    detail.appendChild(el("h2", td.getAttribute("data-label")));
    (data.cells[td.getAttribute("data-cell")] || []).forEach(function (i) {
      var r = data.results[i], sec = el("section"), h = el("h3", r.case + " ");
      var badge = el("span", r.outcome, "badge");
      badge.style.background = data.colours[r.status];
      h.appendChild(badge); sec.appendChild(h);
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
      env.appendChild(el("pre", JSON.stringify(r.env, null, 2))); sec.appendChild(env);
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


def _result(item: StoredResult, report: Report) -> dict[str, Any]:
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
        "env": dict(r.env),
        "logs": logs,
    }


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
        f"{html.escape(KI_SYMBOLS[state] + ' ' + text)}"
        for state, text in ki.legend_items()
    )
    return (
        f'{scope}<table class="matrix known-issues"><thead><tr>{head}</tr></thead><tbody>'
        f"{''.join(rows)}</tbody></table><ul>{titles}</ul>{outside}"
        f'<p class="legend">{legend}</p>'
    )


def _case_matrix(report: Report) -> str:
    """Cases x cells; an entry that did not pass links to its evidence folder. Pytest test ids:
    test files x cells (counts), then the test ids that neither passed nor skipped, linked."""
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
    return "".join(parts)


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
        f'<table class="matrix cases"><thead><tr>{head}</tr></thead><tbody>'
        f"{''.join(rows)}</tbody></table>"
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
        f'<h3>Pytest tests per test file</h3><table class="matrix files"><thead><tr>{head}</tr>'
        f"</thead><tbody>{''.join(rows)}</tbody></table>{listed}"
    )


def render_html(report: Report) -> str:
    """Render the page; all data is inline JSON, all styling and script inline."""
    table = report.table
    # a pytest test id that passed or skipped is counted in its cell, not carried in the page
    # (a suite gives 40,000 of them a cell, issue #27); every other result is
    items = [item for item in report.runs.items if _carried(item)]
    index = {result_key(item.result): i for i, item in enumerate(items)}
    cells: dict[str, list[int]] = {}
    omitted: dict[str, int] = {}
    rows = []
    headers = "".join(f"<th>{html.escape(h)}</th>" for h in table.headers())
    for r, row in enumerate(table.row_keys):
        tds = "".join(f"<th>{html.escape(v)}</th>" for v in row)
        for c, col in enumerate(table.col_keys):
            cell = table.cell(row, col)
            if cell.status == "empty":
                tds += f'<td class="st-empty">{html.escape(cell.text)}</td>'
                continue
            key = f"{r}:{c}"
            carried = [index[k] for k in cell.keys if k in index]
            cells[key] = sorted(carried, key=lambda i: _rank(items[i]))
            if len(carried) < len(cell.keys):
                omitted[key] = len(cell.keys) - len(carried)
            label = f"{' / '.join(row)} · {' / '.join(col)}"
            tds += (
                f'<td class="cell st-{cell.status}" tabindex="0" data-cell="{key}" '
                f'data-label="{html.escape(label)}" style="background:{_COLOURS[cell.status][0]}">'
                f"{html.escape(cell.text)}</td>"
            )
        rows.append(f"<tr>{tds}</tr>")
    data = {
        "cells": cells,
        "results": [_result(item, report) for item in items],
        "omitted": omitted,
        "colours": {k: v[0] for k, v in _COLOURS.items()},
    }
    # "<" as \u003c: no "</script" or "<!--" can end or confuse the data block
    blob = json.dumps(data, default=str).replace("<", "\\u003c")
    legend = "".join(
        f'<span class="sw" style="background:{colour}"></span>{html.escape(text)}'
        for colour, text in _COLOURS.values()
    )
    sources = [line for run in report.runs.runs for line in provenance_lines(run)]
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in table.footnote_lines())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>cudnn-matrix compatibility report</title>
<link rel="icon" href="data:,">
<style>{_CSS}</style></head>
<body>
<h1>cuDNN frontend x backend compatibility</h1>
<pre>{html.escape(chr(10).join(sources))}</pre>
<table class="matrix"><thead><tr>{headers}</tr></thead><tbody>
{chr(10).join(rows)}
</tbody></table>
<p class="legend">{legend}</p>
<p>{html.escape(LEGEND)}</p>
<ul class="notes">{notes}</ul>
<div id="detail">Click a cell for its results.</div>
<h2>Cases</h2>
{_case_matrix(report)}
<h2>Known issues</h2>
{_ki_section(report.ki_table)}
<h2>Sign-off</h2>
<pre>{html.escape(summary(report.verdict))}</pre>
<script type="application/json" id="report-data">{blob}</script>
<script>{_JS}</script>
</body></html>
"""
