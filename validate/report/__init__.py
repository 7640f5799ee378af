"""Renderers for stored results: Markdown, RST, JSON, JUnit XML and a single-file HTML page."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, get_args

if TYPE_CHECKING:
    from pathlib import Path

    from validate.judge.known_issues import KnownIssue
    from validate.judge.signoff import Verdict
    from validate.report.ki_table import KITable
    from validate.report.model import RunInfo, RunSet
    from validate.report.table import CompatTable

__all__ = ["FORMATS", "SUFFIXES", "Format", "Report", "render"]

Format = Literal["md", "rst", "json", "junit", "html"]
FORMATS: Final[tuple[str, ...]] = get_args(Format)
SUFFIXES: Final[dict[str, str]] = {
    "md": ".md",
    "rst": ".rst",
    "json": ".json",
    "junit": ".junit.xml",
    "html": ".html",
}


@dataclass(frozen=True, kw_only=True)
class Report:
    """Everything a renderer needs: merged results, the tables, the verdict and where links point from."""

    runs: RunSet
    table: CompatTable
    verdict: Verdict
    ki_table: KITable  # the known-issues section (report/ki_table.py)
    known_issues: tuple[KnownIssue, ...] = ()
    baseline_runs: tuple[RunInfo, ...] = ()
    link_base: Path | None = None  # folder of the output file; log links are made relative to it


def render(report: Report, fmt: Format) -> str:
    """Render a report in one format (imports the renderer only when it is used)."""
    match fmt:
        case "md":
            from validate.report.text import render_markdown

            return render_markdown(report)
        case "rst":
            from validate.report.text import render_rst

            return render_rst(report)
        case "json":
            from validate.report.json_ import render_json

            return render_json(report)
        case "junit":
            from validate.report.junit import render_junit

            return render_junit(report)
        case "html":
            from validate.report.html import render_html

            return render_html(report)
