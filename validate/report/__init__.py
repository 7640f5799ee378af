"""Renderers for stored results: Markdown, RST, JSON, JUnit XML and a single-file HTML page."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, get_args
from urllib.parse import quote

if TYPE_CHECKING:
    from validate.judge.known_issues import KnownIssue
    from validate.judge.signoff import Verdict
    from validate.judge.speed import SpeedCheck
    from validate.report.case_matrix import CaseMatrix
    from validate.report.ki_table import KITable
    from validate.report.model import RunInfo, RunSet
    from validate.report.table import CompatTable

__all__ = ["FORMATS", "SUFFIXES", "Format", "Report", "render", "write_report"]

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
    cases: CaseMatrix | None = None  # the case x cell matrix (report/case_matrix.py)
    known_issues: tuple[KnownIssue, ...] = ()
    baseline_runs: tuple[RunInfo, ...] = ()
    link_base: Path | None = None  # folder of the output file; log links are made relative to it
    #: `report --link-base`: links are this prefix + the path relative to the current directory
    link_prefix: str | None = None
    speed: SpeedCheck | None = None  # the Speed section (report/speed.py)

    def href(self, path: Path | None) -> str | None:
        """A link to a file or folder: --link-base + its path from the current directory; else
        relative to the output file's folder; else an absolute file:// URI."""
        if path is None:
            return None
        if self.link_prefix is not None:
            rel = os.path.relpath(path.resolve(), Path.cwd().resolve()).replace(os.sep, "/")
            return self.link_prefix + quote(rel)
        if self.link_base is None:
            return path.resolve().as_uri()
        return quote(os.path.relpath(path.resolve(), self.link_base.resolve()).replace(os.sep, "/"))


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


def write_report(report: Report, fmt: Format, out: Path) -> None:
    """Write render(report, fmt) to a file (UTF-8). JSON and JUnit go in pieces, so the text of
    a report of a million results is never in memory whole; should one fail part-way, the file
    is removed rather than left cut short."""
    if fmt not in ("json", "junit"):
        text = render(report, fmt)
        with out.open("w", encoding="utf-8") as file:
            file.write(text)
        return
    try:
        with out.open("w", encoding="utf-8") as file:
            if fmt == "json":
                from validate.report.json_ import write_json

                write_json(report, file.write)
            else:
                from validate.report.junit import write_junit

                write_junit(report, file.write)
    except BaseException:
        out.unlink(missing_ok=True)
        raise
