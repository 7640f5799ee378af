"""A single-file HTML page (no network) a release engineer can publish, top to bottom: the verdict
as a banner, one line per known issue (what the evidence says), the compatibility grid (fitted to a
1,400 px window: transposed or split when wide) with its legend, whole footnotes and a per-cell
drill-down, then the collapsed case x cell matrix, the known-issue table, the sign-off lists and the
run metadata. One function per section; `render_html` only puts them in order."""

from __future__ import annotations

import html
import json
from typing import TYPE_CHECKING, Any

from validate.judge.signoff import summary, verdict_line
from validate.model.outcome import policy
from validate.report.case_matrix import MATRIX_LEGEND
from validate.report.html_grid import fitted_grid, grid_notes
from validate.report.html_parts import COLOURS, CSS, JS, KI_COLOURS, carried, code, esc
from validate.report.ki_table import KI_SYMBOLS, KIState, ki_bands
from validate.report.model import cell_label
from validate.report.speed import speed_html
from validate.report.text import provenance_facts

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from validate.judge.signoff import Verdict
    from validate.report import Report
    from validate.report.case_matrix import CaseMatrix
    from validate.report.ki_table import KITable
    from validate.report.model import RunInfo, StoredResult

__all__ = ["render_html"]


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
        "colours": {k: v[0] for k, v in COLOURS.items()},
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
        f'<div id="verdict" class="v-{kind}" role="status">{esc(verdict_line(verdict))}'
        f'<div class="why">{esc(" · ".join(why))} (<a href="#signoff">sign-off details</a>)'
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
            f'<li class="ki-band-{band.state}{" quiet" if quiet else ""}" title="{esc(tip)}" '
            f'style="border-left-color:{KI_COLOURS[band.state]}">'
            f"<b>{esc(band.issue.id)}</b>: {esc(band.words)}</li>"
        )
    return f'<ul id="ki-band">{"".join(lines)}</ul>'


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
                f'style="background:{KI_COLOURS[cell.state]}">{html.escape(cell.text)}</td>'
            )
        rows.append(f"<tr>{tds}</tr>")
    scope = f"<p>{html.escape('In every column: ' + ', '.join(ki.common))}</p>" if ki.common else ""
    titles = "".join(f"<li>{html.escape(t)}</li>" for t in ki.title_lines())
    outside = "".join(f"<li>{html.escape(t)}</li>" for t in ki.outside_lines())
    outside = f"<p>Reproduced outside the declared range:</p><ul>{outside}</ul>" if outside else ""
    legend = "".join(
        f'<span class="sw" style="background:{KI_COLOURS[state]}"></span>'
        f"{code(KI_SYMBOLS[state] + ' ' + text)}"
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
            colour = COLOURS.get(entry.status, COLOURS["empty"])[0]
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
            colour = COLOURS.get(found.status, COLOURS["empty"])[0]
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
    what, per = matrix.file_kinds()
    return (
        f'<h3>{html.escape(what)} per {per}</h3><div class="scroll"><table class="matrix files">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>{listed}"
    )


def _signoff(verdict: Verdict) -> str:
    """The sign-off lists below the verdict line (the banner shows the line itself)."""
    lines = summary(verdict).splitlines()[1:]
    if not lines:
        return "<p>Nothing to list.</p>"
    return (
        f"<details open><summary>what the verdict rests on ({len(lines)} lines)</summary>"
        f"<pre>{esc(chr(10).join(lines))}</pre></details>"
    )


def _run_facts(run: RunInfo, role: str = "run") -> str:
    """One run's provenance as a two-column table (what the md page shows in a text block)."""
    rows = [("path", str(run.path)), *provenance_facts(run)]
    body = "".join(
        f"<tr><th>{esc(k)}</th><td>{f'<code>{esc(v)}</code>' if k == 'command' else esc(v)}</td></tr>"
        for k, v in rows
    )
    return f'<h3>{esc(role)} <code>{esc(run.run_id)}</code></h3><table class="meta">{body}</table>'


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
    return f'<p class="sub">{esc("; ".join(bits))} · <a href="#runs">run details</a></p>'


def render_html(report: Report) -> str:
    """Render the page; all data is inline JSON, all styling and script inline."""
    # a pytest test id that passed or skipped is counted in its cell, not carried in the page
    # (a suite gives 40,000 of them a cell, issue #27); every other result is
    items = [item for item in report.runs.items if carried(item)]
    grid, cells, omitted = fitted_grid(report, items)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>cudnn-matrix compatibility report</title>
<link rel="icon" href="data:,">
<style>{CSS}</style></head>
<body>
<h1>cuDNN frontend x backend compatibility</h1>
{_subtitle(report)}
{_banner(report.verdict)}
{_ki_band(report.ki_table)}
{grid}
{grid_notes(report.table)}
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
<script>{JS}</script>
</body></html>
"""
