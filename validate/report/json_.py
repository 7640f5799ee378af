"""JSON report, schema ``cudnn-matrix/report/v2`` (documented below; bump the suffix on any change).

v2 (from v1): a table cell's status may be ``unproven``; ``verdict`` is the first key.

Top-level object (in this order, ``verdict`` first; its fields are listed further down):

``schema``      "cudnn-matrix/report/v2"
``runs``        list of {run_id, path, meta} - the merged run folders, oldest first (meta = run.json)
``baseline_runs`` same shape, for ``--baseline`` (empty list when none)
``pivot``       {rows: [axis, ...], cols: [axis, ...]}; axes are cudnn, frontend, cuda, driver, arch, case
``table``       {headers: [str], rows: [{key: [str], cells: [cell]}]} where cell is
                {text, status, counts: {outcome: n}, affected: [KI id], fixed: [{fixed_in, id}],
                notes: [footnote index], results: [result key]}; status is one of
                regression, error, flaky, known, xpass, pass, unproven (passes beside
                cases skipped for want of a GPU), skip, empty
``footnotes``   list of {index, kind: skip|error, reason, count}
``case_matrix`` {common: [axis label], columns: [{cell_id, cell: {axis: value}, label}],
                rows: [{case, cells: [null | entry]}]} (one entry per column, null: not run), entry =
                {key, outcome, status, flaky, text, reason, evidence}; evidence is the link to the
                case's folder (as --link-base makes it) or null. Pytest node ids (a case id with
                "::") are not rows: ``files`` = [{file, cells: [null | {status, text, counts:
                {status: n}}]}] per test file, and ``tests`` = [{case, cells: [null | entry]}] for
                the test ids that neither passed nor skipped
``verdict``     {signed_off, exit_code, counts: {outcome: n}, regressions: [key], errors: [key],
                notices: [key], flaky: [key], flaky_policy: block|warn, flaky_blocks: bool,
                no_gpu: [key], missing_modules: [key], pins_verified: n, require_gpu: bool,
                line: the verdict line,
                baseline: null | {changed_axes: [axis],
                transitions: [{kind, key, before, after, note}]}}; before/after are outcomes or null;
                kind is new_failure, unsupported, new_error, new_pass, ki_fixed, still_failing, missing
``known_issues`` list of {id, title, backend, frontend, archs, cases, fixed_in, declared, cells}:
                declared = {backend, frontend, archs, fixed_in}; cells = one per backend x frontend x
                arch seen, {cudnn, frontend, arch, label, state, symbol, in_declared_range, note,
                evidence: [result key]}; state is affected, outside_range, fixed, not_reproduced or
                not_covered (report/ki_table.py says when each applies)
``known_issue_states`` list of {state, symbol, meaning}, the legend of those states
``results``     list of CaseResult dicts (validate.model.results schema) plus ``key``, ``cell_label``,
                ``run_dir``, ``passed_on_rerun`` (a flaky result: not a pass, then a pass on a re-run)

``verdict.flaky`` lists the results that passed on a re-run; they are in neither ``regressions``
nor ``errors``. With ``flaky_policy`` block they withhold sign-off (``flaky_blocks`` true).
``verdict.no_gpu`` lists the cases skipped for want of a GPU or driver: ``signed_off`` is false,
``exit_code`` 0, or 1 with ``require_gpu``; ``pins_verified`` counts the environments whose pins a
case process verified. ``verdict.missing_modules`` (skipped: a module missing from the case
environment) withholds sign-off with exit 1.

A result key is ``<cell_id>::<case>``. Readers must ignore unknown keys (additions keep v1).
"""

from __future__ import annotations

import json
from functools import cache
from typing import TYPE_CHECKING, Any, Final

from validate.judge.signoff import passed_on_rerun, verdict_line
from validate.judge.suggest import spec_text
from validate.report.json_fast import CellLabels, ResultLines, compact
from validate.report.ki_table import KI_SYMBOLS
from validate.report.model import natural_key, result_key
from validate.report.speed import speed_dict

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from validate.judge.signoff import Verdict
    from validate.model.results import CaseResult
    from validate.report import Report
    from validate.report.case_matrix import MatrixEntry
    from validate.report.ki_table import KITableRow
    from validate.report.model import RunInfo, StoredResult

__all__ = ["REPORT_SCHEMA", "render_json", "report_dict", "write_json"]

REPORT_SCHEMA: Final = "cudnn-matrix/report/v2"


def _run(run: RunInfo) -> dict[str, Any]:
    return {"run_id": run.run_id, "path": str(run.path), "meta": dict(run.meta)}


def _keys(results: tuple[CaseResult, ...]) -> list[str]:
    return [result_key(r) for r in results]


def _verdict(verdict: Verdict) -> dict[str, Any]:
    baseline = None
    if verdict.baseline is not None:
        baseline = {
            "changed_axes": list(verdict.baseline.changed_axes),
            "transitions": [
                {
                    "kind": t.kind,
                    "key": t.key,
                    "before": None if t.before is None else str(t.before.outcome),
                    "after": None if t.after is None else str(t.after.outcome),
                    "note": t.note,
                }
                for t in verdict.baseline.transitions
            ],
        }
    return {
        "signed_off": verdict.signed_off,
        "exit_code": verdict.exit_code,
        "counts": dict(verdict.counts),
        "regressions": _keys(verdict.regressions),
        "errors": _keys(verdict.errors),
        "notices": _keys(verdict.notices),
        "flaky": _keys(verdict.flaky),
        "flaky_policy": verdict.flaky_policy,
        "flaky_blocks": verdict.flaky_blocks,
        "no_gpu": _keys(verdict.no_gpu),
        "missing_modules": _keys(verdict.missing_modules),
        "pins_verified": verdict.pins_verified,
        "require_gpu": verdict.require_gpu,
        "line": verdict_line(verdict),
        "baseline": baseline,
    }


def _ki(row: KITableRow) -> dict[str, Any]:
    ki = row.issue
    archs = sorted(ki.archs, key=natural_key)  # a frozenset: sorted for stable output
    return {
        "id": ki.id,
        "title": ki.title,
        "backend": str(ki.backend),
        "frontend": str(ki.frontend),
        "archs": archs,
        "cases": list(ki.cases),
        "fixed_in": ki.fixed_in,
        "declared": {  # lower bound first, as the database writes it
            "backend": spec_text(ki.backend),
            "frontend": spec_text(ki.frontend),
            "archs": archs,
            "fixed_in": ki.fixed_in,
        },
        "cells": [
            {
                "cudnn": c.column.cudnn,
                "frontend": c.column.frontend,
                "arch": c.column.arch,
                "label": c.column.label,
                "state": str(c.state),
                "symbol": KI_SYMBOLS[c.state],
                "in_declared_range": c.in_declared_range,
                "note": c.note,
                "evidence": list(c.evidence),
            }
            for c in row.cells
        ],
    }


def _entry(
    href: Callable[[Path | None], str | None], entry: MatrixEntry | None
) -> dict[str, Any] | None:
    if entry is None:
        return None
    return {
        "key": entry.key,
        "outcome": entry.outcome,
        "status": entry.status,
        "flaky": entry.flaky,
        "text": entry.text,
        "reason": entry.reason,
        "evidence": href(entry.evidence),
    }


def _case_matrix(report: Report) -> dict[str, Any]:
    matrix = report.cases
    if matrix is None:
        return {"common": [], "columns": [], "rows": [], "files": [], "tests": []}
    href = cache(report.href)  # a case folder's link, worked out once (it resolves the path)
    rows = []
    for case in matrix.cases:
        cells = [_entry(href, matrix.entry(case, column)) for column in matrix.columns]
        rows.append({"case": case, "cells": cells})
    return {
        "files": [
            {
                "file": file,
                "cells": [
                    None
                    if (found := matrix.file_entry(file, column)) is None
                    else {"status": found.status, "text": found.text, "counts": dict(found.counts)}
                    for column in matrix.columns
                ],
            }
            for file in matrix.files
        ],
        "tests": [
            {"case": case, "cells": [_entry(href, matrix.entry(case, c)) for c in matrix.columns]}
            for case in matrix.tests
        ],
        "common": list(matrix.common),
        "columns": [
            {"cell_id": c.ident, "cell": dict(c.cell), "label": c.label} for c in matrix.columns
        ],
        "rows": rows,
    }


def _head(report: Report) -> dict[str, Any]:
    """Every top-level entry of the document but ``results``, in the document's order."""
    table = report.table
    rows = [
        {
            "key": list(row),
            "cells": [
                {
                    "text": cell.text,
                    "status": cell.status,
                    "counts": dict(cell.counts),
                    "affected": list(cell.affected),
                    "fixed": [{"fixed_in": v, "id": ki} for v, ki in cell.fixed],
                    "notes": list(cell.notes),
                    "results": list(cell.keys),
                }
                for cell in (table.cell(row, col) for col in table.col_keys)
            ],
        }
        for row in table.row_keys
    ]
    return {
        "verdict": _verdict(report.verdict),  # first: what a reader opening the file wants
        "schema": REPORT_SCHEMA,
        "runs": [_run(r) for r in report.runs.runs],
        "baseline_runs": [_run(r) for r in report.baseline_runs],
        "pivot": {"rows": list(table.pivot.rows), "cols": list(table.pivot.cols)},
        "table": {"headers": table.headers(), "rows": rows},
        "footnotes": [
            {"index": n.index, "kind": n.kind, "reason": n.reason, "count": n.count}
            for n in table.footnotes
        ],
        "case_matrix": _case_matrix(report),
        "known_issues": [_ki(row) for row in report.ki_table.rows],
        "speed": speed_dict(report),
        "known_issue_states": [
            {"state": str(state), "symbol": KI_SYMBOLS[state], "meaning": meaning}
            for state, meaning in report.ki_table.legend_items()
        ],
    }


def _result(item: StoredResult, label: str) -> dict[str, Any]:
    """One entry of ``results``: the result's dict and what the report adds to it (`label`:
    CellLabels.of the result)."""
    return {
        **item.result.to_dict(),
        "key": result_key(item.result),
        "cell_label": label,
        "run_dir": str(item.run.path),
        "passed_on_rerun": passed_on_rerun(item.result),
    }


def report_dict(report: Report) -> dict[str, Any]:
    """The v1 document as plain data (what render_json serialises)."""
    labels = CellLabels()
    results = [_result(item, labels.of(item.result)) for item in report.runs.items]
    return {**_head(report), "results": results}


#: Top-level keys whose lists may hold a million entries: one compact entry per line.
_LONG: Final = ("table", "case_matrix")


def render_json(report: Report) -> str:
    """The document, indented; the long parts (results, table, case matrix) one compact entry
    per line, since indenting a million results is what made a report of a suite slow."""
    chunks: list[str] = []
    write_json(report, chunks.append)
    return "".join(chunks)


def write_json(report: Report, write: Callable[[str], object]) -> None:
    """render_json's text, in pieces, to `write` (e.g. a file's write: no text of the whole
    report in memory)."""
    write("{\n")
    for key, value in _head(report).items():
        text = _lines(value) if key in _LONG else _indented(value)
        write(f"  {json.dumps(key)}: {text},\n")
    write('  "results": ')
    items = report.runs.items
    if not items:
        write("[]\n}\n")
        return
    lines = ResultLines(_result)
    write("[\n")
    # results per write: few calls, and pieces small enough (~100 KB) for malloc to reuse
    # (a fresh mmap per larger piece, its pages faulted in, made writing a million 3x slower)
    batch = 100
    for start in range(0, len(items), batch):
        end = "\n  ]\n}\n" if start + batch >= len(items) else ",\n"
        write(",\n".join([lines.line(item) for item in items[start : start + batch]]) + end)


def _indented(value: Any) -> str:
    return json.dumps(value, indent=2, default=str).replace("\n", "\n  ")


def _lines(value: Any) -> str:
    """A list one compact element per line; a dict one key per line, its lists alike."""
    if isinstance(value, list):
        if not value:
            return "[]"
        return "[\n" + ",\n".join(f"    {compact(v)}" for v in value) + "\n  ]"
    if isinstance(value, dict):
        items = [
            f"    {json.dumps(k)}: {compact(v)}"
            if not isinstance(v, list) or not v
            else f"    {json.dumps(k)}: [\n"
            + ",\n".join(f"      {compact(x)}" for x in v)
            + "\n    ]"
            for k, v in value.items()
        ]
        return "{\n" + ",\n".join(items) + "\n  }" if items else "{}"
    return compact(value)
