"""Markdown and reStructuredText through tabulate: provenance, table, legend, footnotes, sign-off."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Any

from tabulate import tabulate

from validate.judge.signoff import summary, verdict_line
from validate.report.case_matrix import MATRIX_LEGEND
from validate.report.ki_table import KIState, ki_bands
from validate.report.speed import speed_lines

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from validate.report import Report
    from validate.report.case_matrix import CaseMatrix, MatrixColumn, MatrixEntry
    from validate.report.ki_table import KITable
    from validate.report.model import RunInfo
    from validate.report.table import CompatTable

__all__ = [
    "LEGEND",
    "case_matrix_lines",
    "fit",
    "grid_or_lines",
    "ki_lines",
    "ki_table_text",
    "provenance_facts",
    "provenance_lines",
    "render_markdown",
    "render_rst",
    "render_terminal",
    "table_text",
]

LEGEND = (
    "✓ n: passed · ✕ k/n: k of n failed, crashed or timed out · ! error: environment or harness "
    "broke · ⚠ affected (KI): known issue reproduced · ? xpass: known issue did not reproduce "
    "(fixed?) · ≈ k/n flaky: k of n did not pass, then passed on a re-run · skip [i]: see "
    "footnote i · fixed in V (KI): known issue fixed from backend V · —: not run"
)
_PROVENANCE_KEYS = (
    "provenance",
    "date",
    "started_at",
    "finished_at",
    "gpu",
    "driver",
    "cuda",
    "host",
    "executor",
    "env_mode",
    "command",
)


def table_text(table: CompatTable, tablefmt: str = "github") -> str:
    """The table plus its footnote list, exactly as the docs embed it."""
    body = [[cell.replace("|", "\\|") for cell in row] for row in table.body()]
    text = tabulate(body, headers=table.headers(), tablefmt=tablefmt, disable_numparse=True)
    notes = table.footnote_lines()
    return text + ("\n\n" + "\n".join(f"- {n}" for n in notes) if notes else "")


def ki_table_text(ki: KITable, tablefmt: str = "github") -> str:
    """The known-issues table alone (cells escaped for Markdown when `tablefmt` is github)."""
    body = ki.body()
    if tablefmt == "github":
        body = [[cell.replace("|", "\\|") for cell in row] for row in body]
    return tabulate(body, headers=ki.headers(), tablefmt=tablefmt, disable_numparse=True)


def ki_lines(ki: KITable, tablefmt: str = "github") -> list[str]:
    """The known-issues section below its heading: scope, table, titles, outside-range cells, legend."""
    if not ki.rows:
        return ["No known-issue database was given.", ""]
    scope = "Rows: the known-issue database; columns: the backends seen"
    scope += f" ({', '.join(ki.common)} in every column)." if ki.common else "."
    out = [scope, "", ki_table_text(ki, tablefmt), ""]
    out += [f"- {line}" for line in ki.title_lines()] + [""]
    outside = ki.outside_lines()
    if outside:
        out += ["Reproduced outside the declared range:", ""]
        out += [f"- {line}" for line in outside] + [""]
    out += [f"Legend: {ki.legend()}", ""]
    return out


def case_matrix_lines(report: Report, tablefmt: str = "github") -> list[str]:
    """The case x cell matrix below its heading: scope, table (each entry that did not pass marked
    [eN]), the evidence folder of each mark (a Markdown link, or `text <href>` in rst), legend.
    Pytest test ids follow as a test file x cell table of counts, then the test ids that neither
    passed nor skipped, each linked to its evidence."""
    matrix: CaseMatrix | None = report.cases
    if matrix is None or matrix.empty:
        return ["No results.", ""]
    out = _case_rows(report, matrix, tablefmt) if matrix.cases else []
    if matrix.files:
        out += _file_rows(report, matrix, tablefmt)
    return [*out, f"Legend: {MATRIX_LEGEND}", ""]


def _case_rows(report: Report, matrix: CaseMatrix, tablefmt: str) -> list[str]:
    marks: dict[str, int] = {}
    notes: list[str] = []
    for case, column, entry in matrix.unpassed():
        href = report.href(entry.evidence)
        if href is None:
            continue
        marks[entry.key] = index = len(marks) + 1
        notes.append(f"- [e{index}] {_evidence_item(case, column, entry, href, tablefmt)}")
    body = []
    for case in matrix.cases:
        row = [case]
        for column in matrix.columns:
            found = matrix.entry(case, column)
            text = "—" if found is None else found.text
            if found is not None and found.key in marks:
                text += f" [e{marks[found.key]}]"
            row.append(text)
        body.append(row)
    if tablefmt == "github":
        body = [[cell.replace("|", "\\|") for cell in row] for row in body]
    scope = "Rows: cases; columns: cells"
    scope += f" ({', '.join(matrix.common)} in every column)." if matrix.common else "."
    table = tabulate(body, headers=matrix.headers(), tablefmt=tablefmt, disable_numparse=True)
    out = [scope, "", table, ""]
    if notes:
        out += ["Evidence (the case's folder in its run) of each entry that did not pass:", ""]
        out += [*notes, ""]
    return out


def _file_rows(report: Report, matrix: CaseMatrix, tablefmt: str) -> list[str]:
    """Test files x cells (counts per status), then every test id that neither passed nor
    skipped, with its evidence folder."""
    body = [
        [
            file,
            *(
                "—" if (found := matrix.file_entry(file, column)) is None else found.text
                for column in matrix.columns
            ),
        ]
        for file in matrix.files
    ]
    if tablefmt == "github":
        body = [[cell.replace("|", "\\|") for cell in row] for row in body]
    what, per = matrix.file_kinds()
    scope = f"{what}, summarised per {per}; columns: cells"
    scope += f" ({', '.join(matrix.common)} in every column)." if matrix.common else "."
    table = tabulate(body, headers=matrix.file_headers(), tablefmt=tablefmt, disable_numparse=True)
    out = [scope, "", table, ""]
    listed = matrix.listed_tests()
    if listed:
        out += [
            f"Test ids that neither passed nor skipped ({len(listed)}), with their evidence:",
            "",
        ]
        out += [
            f"- {_evidence_item(case, column, entry, report.href(entry.evidence), tablefmt)}"
            for case, column, entry in listed
        ]
        out += [""]
    return out


def _evidence_item(
    case: str, column: MatrixColumn, entry: MatrixEntry, href: str | None, tablefmt: str
) -> str:
    """`✕ fail: `case` at <cell> (reason): [cases/<cell>/<folder>](href)`."""
    quote = "`" if tablefmt == "github" else "``"
    why = f" ({_inline(entry.reason, tablefmt)})" if entry.reason else ""
    text = _folder_text(entry.evidence)
    if href is None:
        link = "no evidence folder"
    else:
        link = f"[{text}]({href})" if tablefmt == "github" else f"`{text} <{href}>`__"
    return f"{entry.text}: {quote}{case}{quote} at {column.label}{why}: {link}"


#: Characters that start markup inside running text: Markdown's and reStructuredText's.
_MARKUP = {"github": "\\`*_[]<>", "rst": "\\`*_|"}


def _inline(text: str, tablefmt: str) -> str:
    """Text (a failure's reason) as plain text in a list item: markup characters escaped, so
    `CUDNN_ATTR_..._` is no rst reference and `*x*` no emphasis."""
    special = _MARKUP.get(tablefmt, _MARKUP["rst"])
    return "".join(f"\\{c}" if c in special else c for c in text)


def _folder_text(path: Path | None) -> str:
    """`cases/<cell id>/<case folder>`: the evidence folder as its run names it."""
    if path is None:
        return ""
    parts = path.parts
    return "/".join(parts[parts.index("cases") :]) if "cases" in parts else path.name


def _fact(value: Any) -> str:
    """A run.json value on one line; dicts (e.g. host) as k=v for the facts that are set."""
    if isinstance(value, dict):
        return ", ".join(f"{k}={_fact(v)}" for k, v in value.items() if v not in (None, "", [], {}))
    if isinstance(value, list):
        return "[" + ", ".join(_fact(v) for v in value) + "]"
    return str(value)


def _tier_fact(tier: Mapping[str, Any]) -> str:
    """`pr: 5 cells ran; 1 planned cell left out (not run): aa2ac32aea` (ids: the first 20)."""
    left = [str(c.get("id")) for c in tier.get("left_out") or [] if isinstance(c, dict)]
    shown = ", ".join(left[:20]) + (f" and {len(left) - 20} more" if len(left) > 20 else "")
    text = f"{tier.get('name')}: {tier.get('cells')} cells ran"
    return text + (f"; {len(left)} planned cells left out (not run): {shown}" if left else "")


def provenance_facts(run: RunInfo) -> list[tuple[str, str]]:
    """(name, value) per provenance fact recorded in a run's run.json, in a fixed order."""
    meta: Mapping[str, Any] = run.meta
    facts = [(key, _fact(meta[key])) for key in _PROVENANCE_KEYS if meta.get(key)]
    if isinstance(meta.get("tier"), dict):
        facts.append(("tier", _tier_fact(meta["tier"])))
    return facts


def provenance_lines(run: RunInfo) -> list[str]:
    """One line per provenance fact recorded in a run's run.json."""
    facts = [f"{key}: {value}" for key, value in provenance_facts(run)]
    return [f"run `{run.run_id}` ({run.path})", *(f"  {fact}" for fact in facts)]


def _sources(report: Report) -> list[str]:
    lines: list[str] = []
    for run in report.runs.runs:
        lines += provenance_lines(run)
    for run in report.baseline_runs:
        lines += [
            f"baseline {line}" if not line.startswith(" ") else line
            for line in provenance_lines(run)
        ]
    return lines


def render_markdown(report: Report) -> str:
    """A docs page: title, the verdict line, the compatibility table, legend, footnotes, sources,
    speed, cases, known issues, and the sign-off lists (the first screen is the verdict)."""
    out = ["# cuDNN frontend x backend compatibility", ""]
    out += ["```text", verdict_line(report.verdict), "```", ""]
    out += [
        f"Rows: {', '.join(report.table.pivot.rows)}; columns: {', '.join(report.table.pivot.cols)}.",
        "",
    ]
    out += [table_text(report.table), "", f"Legend: {LEGEND}", ""]
    out += ["Generated by `cudnn-matrix report` from stored results (do not edit by hand).", ""]
    out += ["```text", *_sources(report), "```", ""]
    out += ["## Speed", "", *speed_lines(report)]
    out += ["## Cases", "", *case_matrix_lines(report)]
    out += ["## Known issues", "", *ki_lines(report.ki_table)]
    out += ["## Sign-off", "", "```text", summary(report.verdict), "```", ""]
    return "\n".join(out)


def render_rst(report: Report) -> str:
    """The same page in reStructuredText (tabulate's rst grid)."""
    title = "cuDNN frontend x backend compatibility"
    out = [title, "=" * len(title), "", "::", "", f"   {verdict_line(report.verdict)}", ""]
    body = tabulate(
        report.table.body(), headers=report.table.headers(), tablefmt="rst", disable_numparse=True
    )
    out += [body, ""]
    out += [f"- {n}" for n in report.table.footnote_lines()]
    out += ["", f"Legend: {LEGEND}", ""]
    out += ["Generated by ``cudnn-matrix report`` from stored results.", ""]
    out += ["::", "", *(f"   {line}" for line in _sources(report)), ""]
    out += ["Speed", "-----", "", *speed_lines(report, "rst")]
    out += ["Cases", "-----", ""]
    out += case_matrix_lines(report, "rst")
    out += ["Known issues", "------------", ""]
    out += ki_lines(report.ki_table, "rst")
    out += ["Sign-off", "--------", "", "::", ""]
    out += [f"   {line}" for line in summary(report.verdict).splitlines()]
    return "\n".join(out) + "\n"


def fit(text: str, width: int) -> str:
    """Every line of `text` wrapped to `width` columns (never cut: a wrapped line goes on indented
    under its own start), for a terminal whose width is known."""
    out: list[str] = []
    for line in text.splitlines():
        if len(line) <= width:
            out.append(line)
            continue
        lead = line[: len(line) - len(line.lstrip())]
        indent = (lead + "    ")[: max(0, min(len(lead) + 4, width // 3))]
        out += textwrap.wrap(
            line.strip(),
            width=width,
            initial_indent=lead[: width // 3],
            subsequent_indent=indent,
            break_on_hyphens=False,
        ) or [""]
    return "\n".join(out)


def _cell_list(table: CompatTable) -> list[str]:
    """The table as one line per non-empty cell (`9.24.0.43 · fe 1.26.0 / sm80: ✓ 2 · 18 skip`):
    what a terminal shows where the grid is wider than it."""
    cols = table.headers()[len(table.pivot.rows) :]
    lines = []
    for row in table.row_keys:
        for col, header in zip(table.col_keys, cols, strict=True):
            cell = table.cell(row, col)
            if cell.status != "empty":
                lines.append(f"{' / '.join(row)} · {header}: {cell.text}")
    return lines


def grid_or_lines(grid: str, lines: list[str], width: int) -> list[str]:
    """`grid` (a table's text) where every row fits `width` columns, else `lines` (the same
    table one line per row or cell): what a terminal shows, `report`'s and `validate`'s alike."""
    if max(map(len, grid.splitlines()), default=0) <= width:
        return grid.splitlines()
    return lines


def render_terminal(report: Report, width: int) -> str:
    """What `report` prints on a terminal, each line within `width` columns: the verdict line
    first, then the per-cell summary (the compatibility table, or one line per cell where the
    table is wider than the terminal), its footnotes, one line per known issue, and the lists
    the verdict rests on. The case x cell matrix and the known-issue table go to files only
    (--out)."""
    table = report.table
    verdict, *lists = summary(report.verdict).splitlines()
    out = [verdict, "", f"results: {', '.join(str(run.path) for run in report.runs.runs)}", ""]
    grid = table_text(table).split("\n\n", 1)[0]
    out += [*grid_or_lines(grid, _cell_list(table), width), ""]
    out += [f"- {note}" for note in table.footnote_lines()]
    bands = ki_bands(report.ki_table)
    shown = [band.text for band in bands if band.state is not KIState.NOT_COVERED]
    quiet = [band.issue.id for band in bands if band.state is KIState.NOT_COVERED]
    if quiet:
        shown.append(f"{', '.join(quiet)}: not covered: no case they name ran here")
    if shown:
        out += ["", "Known issues:", *(f"- {line}" for line in shown)]
    if lists:
        out += ["", *lists]
    out += [
        "",
        (
            "The case x cell matrix, the known-issue table and the evidence links: --out FILE "
            "(.md, .html, .rst, .json, .junit.xml)."
        ),
        "",
    ]
    return fit("\n".join(out), width) + "\n"
