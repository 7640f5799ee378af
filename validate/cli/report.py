"""`cudnn-matrix report`: re-render stored runs (merged) as md/rst/json/junit/html and sign off.

Reads stored results only, so a report can be re-rendered at any time without re-running. Exit code
is the sign-off verdict (validate.judge.signoff): 0 when every outcome matches its expectation, 1 when
there are regressions or infra errors; 2 for bad input. Results whose GPU cases were skipped for want
of a GPU are NOT SIGNED OFF — no GPU, exit 0, or 1 with --require-gpu.

On a terminal (stdout a TTY, no --out, no --format) it prints what fits the terminal's width: the
verdict line first, then the per-cell table (one line per cell where the table is wider), its
footnotes, one line per known issue, and the lists the verdict rests on; the case x cell matrix
goes to files only. Piped, stdout is the Markdown report (its verdict line under the title) and
stderr the verdict.
"""

from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from validate.cli import (
    add_flaky_option,
    add_require_gpu_option,
    add_selector_args,
    add_speed_options,
    caller_path,
    writable_dir,
    writable_file,
)
from validate.config import Selectors
from validate.errors import ConfigError
from validate.judge.signoff import summary
from validate.judge.speed import Thresholds
from validate.model.axes import axis_named
from validate.model.results import axis_value
from validate.report import FORMATS, SUFFIXES, Format, render, write_report
from validate.report.model import PREFER, RunSet
from validate.report.store import (
    DEFAULT_RUNS_DIR,
    bug_report_items,
    build_report,
    bulk,
    load_known_issue_db,
    load_runs,
    newest_run,
)
from validate.report.table import Pivot

if TYPE_CHECKING:
    import argparse

__all__ = ["register"]

log = logging.getLogger(__name__)


def _as_shown(path: Path) -> Path:
    """A run folder under the current folder as the path from it, as the user typed it: a report
    reads in this process, and what it writes (committed tables, bug reports) names the folder
    the way a reader of the checkout finds it, not by this machine's absolute path."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def _select(runs: RunSet, args: argparse.Namespace) -> RunSet:
    """Narrow merged results with the shared --cudnn/--frontend/... selectors, comparing values as
    the planner does (the registry's equality: --cuda 13 keeps cuda 13.0)."""
    selectors = Selectors.from_args(args)  # checked and normalised as `plan` does
    wanted = [(axis_named(axis), values) for axis, values in selectors.values.items()]
    keep = tuple(
        item
        for item in runs.items
        if all(
            any(axis.same(axis_value(item.result, axis.name), v) for v in values)
            for axis, values in wanted
        )
    )
    if not keep:
        msg = f"the selection leaves no stored results ({selectors.describe()})"
        raise ConfigError(msg)
    return RunSet(runs=runs.runs, items=keep)


def _suffix_format(out: str) -> Format | None:
    """The format an --out file's suffix names (`.junit.xml` and `.xml`: junit), or None."""
    for fmt, suffix in sorted(SUFFIXES.items(), key=lambda kv: -len(kv[1])):
        if out.endswith(suffix) or (fmt == "junit" and out.endswith(".xml")):
            return cast("Format", fmt)
    return None


def _format(args: argparse.Namespace) -> Format:
    """--format, else the format --out's suffix names, else md. An --out whose suffix names
    another format than --format, or (without --format) no format, is bad input."""
    named = _suffix_format(str(args.out)) if args.out else None
    if args.format and named not in (None, args.format):
        msg = f"--out {args.out}: the suffix names {named}, not --format {args.format}"
        raise ConfigError(msg)
    if args.format:
        return cast("Format", args.format)
    if args.out and named is None:
        known = ", ".join(sorted({*SUFFIXES.values(), ".xml"}))
        msg = (
            f"--out {args.out}: the suffix names no report format (known: {known}); "
            "pass --format md|rst|json|junit|html"
        )
        raise ConfigError(msg)
    return named or "md"


def _handle(args: argparse.Namespace) -> int:
    with bulk():  # a million results: no cyclic collector passes meanwhile
        return _report(args)


def _report(args: argparse.Namespace) -> int:
    fmt = _format(args)  # an --out suffix that contradicts it: bad input before anything is read
    if args.out:
        writable_file("--out", Path(args.out))
    if args.bug_reports:
        writable_dir("--bug-reports", Path(args.bug_reports))
    if args.bisect and not args.bug_reports:
        msg = "--bisect: it gives the slowdown bug reports their first slow release; add --bug-reports DIR"
        raise ConfigError(msg)
    from validate.report.slowcase import load_bisects

    bisects = load_bisects(_as_shown(Path(p)) for p in args.bisect or ())
    paths = [_as_shown(Path(p)) for p in args.results or ()]
    if not paths:
        newest = newest_run(Path(args.runs_dir))
        if newest is None:
            msg = (
                f"--runs-dir {args.runs_dir}: no stored run found; run `cudnn-matrix validate` first "
                "or pass --results RUN_DIR (e.g. tests/resources/runs/example)"
            )
            raise ConfigError(msg)
        paths = [newest]
    runs = _select(load_runs(paths, prefer=args.prefer), args)
    baseline = (
        load_runs([_as_shown(Path(p)) for p in args.baseline], "--baseline")
        if args.baseline
        else None
    )
    out = Path(args.out) if args.out else None
    report = build_report(
        runs,
        pivot=Pivot.parse(args.pivot),
        known_issues=load_known_issue_db(
            Path(args.known_issues) if args.known_issues else None, runs.runs
        ),
        baseline=baseline,
        link_base=out.parent if out else Path.cwd(),
        link_prefix=args.link_base,
        flaky=args.flaky,
        require_gpu=args.require_gpu,
        slower=Thresholds(ratio=args.slower_ratio, min_s=args.slower_min_s),
    )
    # a terminal gets what fits it (the per-cell summary, footnotes, known issues; the verdict
    # once, below); the wide case x cell matrix goes to files only (--out, `nox -s report`)
    width = shutil.get_terminal_size().columns
    terminal = out is None and not args.format and sys.stdout.isatty()
    if terminal:  # the verdict line first, then the table, then what the verdict rests on
        from validate.report.text import render_terminal

        sys.stdout.write(render_terminal(report, width))
    elif out is None:
        sys.stdout.write(render(report, fmt))
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_report(report, fmt, out)
        log.info("wrote %s", out)
    if args.bug_reports:
        from validate.report.bugreport import write_bug_reports
        from validate.report.speedbug import write_speed_bug_reports

        written = write_bug_reports(bug_report_items(report, baseline), Path(args.bug_reports))
        slow = write_speed_bug_reports(report, Path(args.bug_reports), bisects)
        log.info(
            "wrote %d bug report(s) and %d slowdown report(s) to %s",
            len(written),
            len(slow),
            args.bug_reports,
        )
    if terminal or args.quiet:  # the terminal's summary had it; --quiet: the exit code says it
        return report.verdict.exit_code
    verdict = summary(report.verdict)
    if sys.stderr.isatty():
        from validate.report.text import fit

        verdict = fit(verdict, width)
    print(verdict, file=sys.stderr)
    return report.verdict.exit_code


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `report` sub-command."""
    parser = subparsers.add_parser(
        "report",
        help="render stored results: compatibility table, JUnit, JSON, HTML; sign-off exit code",
        description=__doc__,
    )
    parser.add_argument(
        "--results",
        action="append",
        type=caller_path,
        metavar="RUN_DIR",
        help="run folder(s) to merge, oldest first (default: newest under --runs-dir)",
    )
    parser.add_argument(
        "--prefer",
        choices=PREFER,
        default="refuse",
        help="when two --results folders disagree on a cell x case: refuse (default, names both), "
        "newest (the result that started last wins) or last (the later folder wins: a rerun)",
    )
    parser.add_argument(
        "--runs-dir",
        type=caller_path,
        default=str(DEFAULT_RUNS_DIR),
        metavar="DIR",
        help="where stored runs live (default: %(default)s)",
    )
    parser.add_argument(
        "--format",
        choices=FORMATS,
        help="output format (default: from --out suffix, else md; on a terminal without --out, a "
        "summary that fits it)",
    )
    parser.add_argument(
        "--out",
        type=caller_path,
        metavar="FILE",
        help="write here instead of stdout (on a terminal, stdout gets a summary that fits it)",
    )
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no verdict on stderr (the exit code still gives it): for a render to a file "
        "beside others, as `nox -s report` makes, whose verdict is printed once",
    )
    parser.add_argument(
        "--baseline",
        action="append",
        type=caller_path,
        metavar="RUN_DIR",
        help="compare with this run (new failures, new passes, KIs fixed, supported -> unsupported)",
    )
    parser.add_argument(
        "--pivot",
        default="cudnn:frontend,arch",
        metavar="ROWS:COLS",
        help="table axes, e.g. cudnn:frontend,arch or case:cudnn (default: %(default)s)",
    )
    parser.add_argument(
        "--bug-reports",
        type=caller_path,
        metavar="DIR",
        help="write a Markdown bug report per unexpected failure, and one per case with units "
        "confirmed slower in a newer release (the quiet repeats' figures)",
    )
    parser.add_argument(
        "--bisect",
        action="append",
        type=caller_path,
        metavar="DIR",
        help="with --bug-reports: a `bisect --slower-than` folder (or its bisect.json) that gives "
        "a slowdown report its first slow release (default: bisect's own folder under "
        "reports/bisect/, where present)",
    )
    parser.add_argument(
        "--known-issues",
        type=caller_path,
        metavar="FILE",
        help="known-issues TOML (default: the run's snapshot, else matrix/known_issues.toml)",
    )
    parser.add_argument(
        "--link-base",
        metavar="PREFIX",
        help="links to logs and evidence folders are PREFIX + the path from the current folder, "
        "e.g. https://host/repo/-/blob/main/ or ../ for a page one folder down "
        "(default: relative to the --out folder)",
    )
    add_flaky_option(parser)
    add_require_gpu_option(parser)
    add_speed_options(parser, repeats=False)
    add_selector_args(parser)
    parser.set_defaults(func=_handle)
