"""Stored runs for the report: load, merge, the known-issue database a run was judged with."""

from __future__ import annotations

import gc
import json
import logging
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from validate.errors import ConfigError
from validate.judge.known_issues import apply_known_issues, load_known_issues
from validate.judge.signoff import decide
from validate.judge.speed import Thresholds
from validate.model.results import CaseResult, load_results
from validate.report import Report
from validate.report.case_matrix import build_case_matrix
from validate.report.ki_table import build_ki_table
from validate.report.model import (
    RunInfo,
    RunSet,
    StoredResult,
    cell_spans,
    is_bad,
    merge_runs,
    result_key,
    sharing,
)
from validate.report.speed import load_speed, mark_table
from validate.report.table import Pivot, build_table

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from validate.judge.known_issues import KnownIssue
    from validate.model.outcome import FlakyPolicy
    from validate.report.model import Prefer

__all__ = [
    "DEFAULT_RUNS_DIR",
    "bug_report_items",
    "build_report",
    "bulk",
    "load_known_issue_db",
    "load_run",
    "load_runs",
    "newest_run",
]

log = logging.getLogger(__name__)
DEFAULT_RUNS_DIR = Path("reports/runs")
_SNAPSHOT = "known_issues.toml"  # a run folder may keep the KI database it was checked against


@contextmanager
def bulk() -> Iterator[None]:
    """No cyclic garbage collection while a report is read and built: results make no reference
    cycles, and at a million results (issue #27) the collector's passes over the growing heap
    were a fifth of the time. Reference counting still frees everything; the collector is
    restored (and catches up) after."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


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
    skipped: list[str] = []
    # every string as every report format shows it: undecodable bytes and control characters
    # escaped (\\xff, \\x1b), so md, rst, html, JUnit and JSON all carry it
    results = load_results([file], skipped=skipped, for_display=True)
    for line in skipped:  # one warning per line that is not counted, naming file:line
        log.warning("skipped %s", line)
    if not results:
        msg = f"{flag} {path}: results.jsonl holds no readable results"
        raise ConfigError(msg)
    run_id = str(meta.get("run_id") or folder.name)
    return RunInfo(run_id=run_id, path=folder, meta=meta), results


def load_runs(paths: Sequence[Path], flag: str = "--results", *, prefer: Prefer = "last") -> RunSet:
    """Merge run folders in the order given (report.model.merge_runs; `prefer` settles two
    folders that disagree on one cell x case). A folder given twice is read once."""
    unique: dict[Path, Path] = {}
    for path in paths:
        unique.setdefault(path.resolve(), path)  # first place, first spelling
    return merge_runs((load_run(p, flag) for p in unique.values()), prefer=prefer)


def load_known_issue_db(path: Path | None, runs: Sequence[RunInfo] = ()) -> tuple[KnownIssue, ...]:
    """Known issues from `path`, else the snapshot in the newest run folder, else the default DB."""
    if path is None:
        path = next(
            (r.path / _SNAPSHOT for r in reversed(runs) if (r.path / _SNAPSHOT).is_file()), None
        )
    if path is not None and not path.is_file():
        msg = f"--known-issues {path}: no such file"
        raise ConfigError(msg)
    return tuple(load_known_issues(path))


def not_run(runs: RunSet) -> list[dict[str, str]]:
    """The pins of the planned cells a tier left out (run.json tier.left_out) that no merged
    run has a result for: the reports show them as not run, never as not reproduced."""
    ran = {head.cell_id for head, _ in cell_spans(runs.items)}  # once per cell, not per result
    out: dict[str, dict[str, str]] = {}
    for run in runs.runs:
        tier = run.meta.get("tier")
        left = tier.get("left_out") if isinstance(tier, dict) else None
        for cell in left if isinstance(left, list) else []:
            if isinstance(cell, dict) and cell.get("id") not in ran:
                pins = {k: str(v) for k, v in cell.items()}
                if all(k in pins for k in ("cudnn", "frontend", "arch")):
                    out.setdefault(pins["id"], pins)
    return list(out.values())


def build_report(
    runs: RunSet,
    *,
    pivot: Pivot | None = None,
    known_issues: Sequence[KnownIssue] = (),
    baseline: RunSet | None = None,
    link_base: Path | None = None,
    link_prefix: str | None = None,
    flaky: FlakyPolicy = "block",
    require_gpu: bool = False,
    slower: Thresholds | None = None,
) -> Report:
    """Tables + verdict for merged runs (and an optional baseline); `flaky` is the sign-off policy
    for results that passed on a re-run, `require_gpu` whether GPU cases skipped for want of a
    GPU fail the exit code, `link_prefix` the --link-base of evidence links, `slower` the Speed
    section's thresholds (report/speed.py). The
    verdict judges the results against `known_issues` as the tables do, so a database given at
    report time (`--known-issues`) turns a failure it declares into xfail in the sign-off too."""
    with sharing(runs.items):  # each stage's per-cell pieces cut once
        return _build(
            runs,
            pivot=pivot,
            known_issues=known_issues,
            baseline=baseline,
            link_base=link_base,
            link_prefix=link_prefix,
            flaky=flaky,
            require_gpu=require_gpu,
            slower=slower,
        )


def _build(
    runs: RunSet,
    *,
    pivot: Pivot | None,
    known_issues: Sequence[KnownIssue],
    baseline: RunSet | None,
    link_base: Path | None,
    link_prefix: str | None,
    flaky: FlakyPolicy,
    require_gpu: bool,
    slower: Thresholds | None,
) -> Report:
    judged = apply_known_issues(runs.results, known_issues)
    speed = load_speed(runs, slower or Thresholds())
    return Report(
        runs=runs,
        table=mark_table(build_table(runs.items, pivot, known_issues), speed),
        cases=build_case_matrix(runs.items),
        verdict=decide(
            judged,
            None if baseline is None else baseline.results,
            flaky=flaky,
            require_gpu=require_gpu,
        ),
        ki_table=build_ki_table(runs.items, known_issues, not_run(runs)),
        known_issues=tuple(known_issues),
        baseline_runs=() if baseline is None else baseline.runs,
        link_base=link_base,
        link_prefix=link_prefix,
        speed=speed,
    )


def bug_report_items(
    report: Report, baseline: RunSet | None
) -> list[tuple[StoredResult, CaseResult | None]]:
    by_key = {result_key(item.result): item for item in report.runs.items}
    items: list[tuple[StoredResult, CaseResult | None]] = [
        (by_key[result_key(r)], None)
        for r in (*report.verdict.regressions, *(f for f in report.verdict.flaky if is_bad(f)))
    ]
    if baseline is not None:
        items += [
            (by_key[t.key], t.before)
            for t in report.verdict.blocking_transitions
            if t.kind == "unsupported" and t.key in by_key
        ]
    return items
