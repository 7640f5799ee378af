"""`cudnn-matrix report`: re-render stored runs (merged) as md/rst/json/junit/html and sign off.

Reads stored results only, so a report can be re-rendered at any time without re-running. Exit code
is the sign-off verdict (validate.signoff): 0 when every outcome matches its expectation, 1 when
there are regressions or infra errors; 2 for bad input.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from validate._compat import tomllib
from validate.cli import add_selector_args, split_list
from validate.errors import ConfigError, MatrixError
from validate.matrix import AXES
from validate.render import FORMATS, SUFFIXES, Format, Report, render
from validate.render.model import (
    KnownIssueLike,
    RunInfo,
    RunSet,
    StoredResult,
    axis_value,
    merge_runs,
    result_key,
)
from validate.render.table import Pivot, build_table
from validate.results import load_results
from validate.signoff import decide, summary

if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence

    from validate.results import CaseResult

__all__ = [
    "DEFAULT_RUNS_DIR",
    "build_report",
    "load_known_issue_db",
    "load_run",
    "load_runs",
    "newest_run",
    "register",
]

log = logging.getLogger(__name__)
DEFAULT_RUNS_DIR = Path("reports/runs")
_SNAPSHOT = "known_issues.toml"  # a run folder may keep the KI database it was checked against


def newest_run(runs_dir: Path = DEFAULT_RUNS_DIR) -> Path | None:
    """The run folder under `runs_dir` whose results.jsonl was written last, or None."""
    found = [p.parent for p in runs_dir.glob("*/results.jsonl")]
    return max(found, key=lambda d: ((d / "results.jsonl").stat().st_mtime, d.name), default=None)


def load_run(path: Path, flag: str = "--results") -> tuple[RunInfo, list[CaseResult]]:
    """Read one run folder (results.jsonl + optional run.json) or a bare results .jsonl file."""
    file = path / "results.jsonl" if path.is_dir() else path
    if not file.is_file():
        msg = f"{flag} {path}: no results.jsonl found; expected a run folder such as reports/runs/<run-id>"
        raise ConfigError(msg)
    folder = file.parent
    meta: dict[str, Any] = {}
    if (folder / "run.json").is_file():
        try:
            meta = json.loads((folder / "run.json").read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            msg = f"{folder / 'run.json'}: not valid JSON ({exc.msg} at line {exc.lineno}); fix or delete it"
            raise ConfigError(msg) from exc
    results = load_results([file])
    if not results:
        msg = f"{flag} {path}: results.jsonl holds no readable results"
        raise ConfigError(msg)
    run_id = str(meta.get("run_id") or folder.name)
    return RunInfo(run_id=run_id, path=folder, meta=meta), results


def load_runs(paths: Sequence[Path], flag: str = "--results") -> RunSet:
    """Merge run folders in the order given: later results for the same cell x case win."""
    return merge_runs(load_run(p, flag) for p in paths)


@dataclass(frozen=True, kw_only=True)
class _KnownIssue:
    """Fallback KnownIssue until validate.known_issues exists (same fields, read from TOML)."""

    id: str
    title: str = ""
    backend: SpecifierSet
    frontend: SpecifierSet
    archs: tuple[str, ...] = ()
    cases: tuple[str, ...] = ()
    symptom: str = ""
    fixed_in: str | None = None
    refs: tuple[str, ...] = ()


def _fallback_known_issues(path: Path) -> list[KnownIssueLike]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        msg = f"{path}: cannot read known issues ({exc})"
        raise MatrixError(msg) from exc
    entries: list[dict[str, Any]] = next(
        (data[k] for k in ("issue", "issues", "known_issue", "known_issues") if k in data), []
    )
    out: list[KnownIssueLike] = []
    for i, entry in enumerate(entries):
        try:
            out.append(
                _KnownIssue(
                    id=str(entry["id"]),
                    title=str(entry.get("title", "")),
                    backend=SpecifierSet(entry.get("backend", "")),
                    frontend=SpecifierSet(entry.get("frontend", "")),
                    archs=tuple(entry.get("archs", ())),
                    cases=tuple(entry.get("cases", ())),
                    symptom=str(entry.get("symptom", "")),
                    fixed_in=entry.get("fixed_in"),
                    refs=tuple(entry.get("refs", ())),
                )
            )
        except (KeyError, InvalidSpecifier, TypeError) as exc:
            msg = f"{path}: known issue #{i + 1}: {exc!r}"
            raise MatrixError(msg) from exc
    return out


def load_known_issue_db(
    path: Path | None, runs: Sequence[RunInfo] = ()
) -> tuple[KnownIssueLike, ...]:
    """Known issues from `path`, else the snapshot in the newest run folder, else the default DB."""
    if path is None:
        path = next(
            (r.path / _SNAPSHOT for r in reversed(runs) if (r.path / _SNAPSHOT).is_file()), None
        )
    if path is not None and not path.is_file():
        msg = f"--known-issues {path}: no such file"
        raise ConfigError(msg)
    try:
        from validate.known_issues import load_known_issues  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # the known-issues module is written in parallel; read the TOML ourselves
        return tuple(_fallback_known_issues(path)) if path is not None else ()
    return tuple(cast("Sequence[KnownIssueLike]", load_known_issues(path)))


def _select(runs: RunSet, args: argparse.Namespace) -> RunSet:
    """Narrow merged results with the shared --cudnn/--frontend/... selectors."""
    wanted = {axis: set(split_list(getattr(args, axis, None))) for axis in AXES}
    keep = tuple(
        item
        for item in runs.items
        if all(
            not values or axis_value(item.result, axis) in values for axis, values in wanted.items()
        )
    )
    if not keep:
        msg = "the --cudnn/--frontend/--cuda/--driver/--arch selection leaves no stored results"
        raise ConfigError(msg)
    return RunSet(runs=runs.runs, items=keep)


def build_report(
    runs: RunSet,
    *,
    pivot: Pivot | None = None,
    known_issues: Sequence[KnownIssueLike] = (),
    baseline: RunSet | None = None,
    link_base: Path | None = None,
) -> Report:
    """Table + verdict for merged runs (and an optional baseline)."""
    return Report(
        runs=runs,
        table=build_table(runs.items, pivot, known_issues),
        verdict=decide(runs.results, None if baseline is None else baseline.results),
        known_issues=tuple(known_issues),
        baseline_runs=() if baseline is None else baseline.runs,
        link_base=link_base,
    )


def _format(args: argparse.Namespace) -> Format:
    if args.format:
        return cast("Format", args.format)
    if args.out:
        for fmt, suffix in sorted(SUFFIXES.items(), key=lambda kv: -len(kv[1])):
            if str(args.out).endswith(suffix) or (
                fmt == "junit" and str(args.out).endswith(".xml")
            ):
                return cast("Format", fmt)
    return "md"


def _bug_report_items(
    report: Report, baseline: RunSet | None
) -> list[tuple[StoredResult, CaseResult | None]]:
    by_key = {result_key(item.result): item for item in report.runs.items}
    items: list[tuple[StoredResult, CaseResult | None]] = [
        (by_key[result_key(r)], None) for r in report.verdict.regressions
    ]
    if baseline is not None:
        items += [
            (by_key[t.key], t.before)
            for t in report.verdict.blocking_transitions
            if t.kind == "unsupported" and t.key in by_key
        ]
    return items


def _handle(args: argparse.Namespace) -> int:
    paths = [Path(p) for p in args.results or ()]
    if not paths:
        newest = newest_run(Path(args.runs_dir))
        if newest is None:
            msg = (
                f"--runs-dir {args.runs_dir}: no stored run found; run `cudnn-matrix validate` first "
                "or pass --results RUN_DIR (e.g. tests/resources/runs/example)"
            )
            raise ConfigError(msg)
        paths = [newest]
    runs = _select(load_runs(paths), args)
    baseline = load_runs([Path(p) for p in args.baseline], "--baseline") if args.baseline else None
    out = Path(args.out) if args.out else None
    report = build_report(
        runs,
        pivot=Pivot.parse(args.pivot),
        known_issues=load_known_issue_db(
            Path(args.known_issues) if args.known_issues else None, runs.runs
        ),
        baseline=baseline,
        link_base=out.parent if out else Path.cwd(),
    )
    text = render(report, _format(args))
    if out is None:
        sys.stdout.write(text)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        log.info("wrote %s", out)
    if args.bug_reports:
        from validate.bugreport import write_bug_reports

        written = write_bug_reports(_bug_report_items(report, baseline), Path(args.bug_reports))
        log.info("wrote %d bug report(s) to %s", len(written), args.bug_reports)
    print(summary(report.verdict), file=sys.stderr)
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
        metavar="RUN_DIR",
        help="run folder(s) to merge, oldest first (default: newest under --runs-dir)",
    )
    parser.add_argument(
        "--runs-dir",
        default=str(DEFAULT_RUNS_DIR),
        metavar="DIR",
        help="where stored runs live (default: %(default)s)",
    )
    parser.add_argument(
        "--format", choices=FORMATS, help="output format (default: from --out suffix, else md)"
    )
    parser.add_argument("--out", metavar="FILE", help="write here instead of stdout")
    parser.add_argument(
        "--baseline",
        action="append",
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
        "--bug-reports", metavar="DIR", help="write a Markdown bug report per unexpected failure"
    )
    parser.add_argument(
        "--known-issues",
        metavar="FILE",
        help="known-issues TOML (default: the run's snapshot, else matrix/known_issues.toml)",
    )
    add_selector_args(parser)
    parser.set_defaults(func=_handle)
