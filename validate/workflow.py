"""`cudnn-matrix validate`: plan -> environment per cell -> run cases -> known issues -> verdict.

One small function per stage; each takes the previous stage's value plus the config, so each
can be tested alone. Results are appended (and fsynced) as each case finishes, so a killed run
loses nothing and `--resume` completes it.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import platform
import shlex
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from validate import __version__
from validate.config import ValidateConfig
from validate.env.sources import Sources
from validate.errors import ConfigError
from validate.execute import EXECUTORS, Executor, RunContext, resolve_executor
from validate.execute.cases import SHIPPED_CASES, Case, cases_for
from validate.execute.records import now_stamp, record_all
from validate.judge.known_issues import KnownIssue, apply_known_issues, load_known_issues
from validate.model.axes import AXES
from validate.model.matrix import load_matrix
from validate.model.outcome import Outcome
from validate.model.results import CaseResult, ResultStore, load_results, write_json
from validate.plan.host import HostFacts, detect_host, python_version_of
from validate.plan.rules import Plan, load_rules, plan_cells
from validate.plan.steps import plan_steps

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["SHIPPED_CASES", "KnownIssueStore", "ValidateConfig", "record_all", "run", "run_cells"]

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent


# --- stages -----------------------------------------------------------------------------------


def plan_stage(config: ValidateConfig) -> Plan:
    """Planned and pruned cells for the selectors; the rules read the base python's version for
    cells without a python value (the interpreter their environments are made from)."""
    selectors = config.selectors
    matrix, rules = load_matrix(selectors.matrix), load_rules(selectors.rules)
    return plan_cells(matrix, rules, selectors, python=python_version_of(config.base_python))


def cases_stage(config: ValidateConfig) -> list[Case]:
    """The cases to run: named files/folders, a frontend checkout's samples, else the shipped ones."""
    return cases_for(config)


class KnownIssueStore(ResultStore):
    """A ResultStore that judges each result against the known issues before it is written."""

    def __init__(self, path: Path, issues: Sequence[KnownIssue]) -> None:
        super().__init__(path)
        self._issues = issues

    def append(self, result: CaseResult) -> None:
        super().append(apply_known_issues([result], self._issues)[0])


def _git_commit(path: Path) -> str | None:
    try:
        proc = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() or None


def provenance(config: ValidateConfig, host: HostFacts, plan: Plan, run_id: str) -> dict[str, Any]:
    """Who ran what where: written to run.json next to the results."""
    samples_commit = None
    if config.samples is not None:
        marker = config.samples / "COMMIT"
        samples_commit = (
            marker.read_text().strip() if marker.is_file() else _git_commit(config.samples)
        )
    return {
        "run_id": run_id,
        "tool": {"name": "cudnn-matrix", "version": __version__, "commit": _git_commit(REPO_ROOT)},
        "command": "cudnn-matrix " + shlex.join(config.argv),
        "started_at": now_stamp(),
        "host": {
            **host.to_dict(),
            "hostname": platform.node(),
            "cpus": os.cpu_count(),
            "os": platform.platform(),
            "python": platform.python_version(),
        },
        "executor": config.executor,
        "env_mode": config.env_mode,
        "samples": {"path": str(config.samples), "commit": samples_commit}
        if config.samples
        else None,
        "planned": [c.id for c in plan.planned],
        "pruned": [{"id": c.id, **c.pins(), "reason": r} for c, r in plan.pruned],
    }


def run_cells(
    config: ValidateConfig,
    plan: Plan,
    cases: Sequence[Case],
    host: HostFacts,
    store: ResultStore,
    run_id: str,
    *,
    executor: Executor | None = None,
) -> None:
    """Group the cells into steps (one environment each), prepare each step's environment and
    run its cells there, through the configured executor whichever it is; closes it at the end."""
    executor = executor or EXECUTORS[config.executor]()
    context = RunContext(
        config=config,
        host=host,
        run_id=run_id,
        sources=Sources(config.backend_source, config.frontend_source, store=config.backend_store),
        store=store,
    )
    try:
        steps = plan_steps(plan.planned, host, lambda cell: executor.env_key(cell, context))
        for cell, skip in steps.skipped:
            log.info("skip %s %s: %s", cell.id, cell.label, skip)
            record_all(store, cell, cases, Outcome.SKIP, skip, run_id)
        for step in steps.steps:
            target = executor.prepare(step, context)
            if isinstance(target, str):  # the environment could not be made: error, run goes on
                for cell in step.cells:
                    record_all(store, cell, cases, Outcome.ERROR, target, run_id)
                continue
            executor.run(step, target, cases, context)
    finally:
        executor.close()


def run(config: ValidateConfig) -> int:
    """The whole job; returns the sign-off exit code (0 signed off, 1 regressions/errors)."""
    from validate.judge.signoff import decide, summary  # the report side is only needed at the end

    config = replace(config, executor=resolve_executor(config.executor))
    executor = EXECUTORS[config.executor]()
    executor.check(config)  # before any work: options the executor cannot honour are bad input
    plan = plan_stage(config)
    cases = cases_stage(config)
    host = detect_host()
    run_id = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    # like `run` and `report`: under the working directory (the checkout, for nox), never inside
    # an installed package
    results_dir = config.results_dir or Path("reports") / "runs" / run_id
    if config.resume and config.results_dir is None:
        msg = "validate: --resume needs --results DIR (the folder of the run to complete)"
        raise ConfigError(msg)
    results_dir.mkdir(parents=True, exist_ok=True)
    meta_path = results_dir / "run.json"
    meta = provenance(config, host, plan, run_id)
    if config.resume and meta_path.is_file():
        meta = {**json.loads(meta_path.read_text(encoding="utf-8")), "resumed_at": now_stamp()}
    write_json(meta_path, meta)
    log.info(
        "run %s: %d planned cells, %d pruned, %d cases -> %s",
        run_id,
        len(plan.planned),
        len(plan.pruned),
        len(cases),
        results_dir,
    )
    start = time.monotonic()
    store = KnownIssueStore(results_dir / "results.jsonl", load_known_issues(config.known_issues))
    run_cells(config, plan, cases, host, store, meta["run_id"], executor=executor)
    store.seal()  # every case has ended: the folder's lines verify wherever it is read
    results = list({r.key: r for r in load_results([results_dir])}.values())  # later wins
    write_json(meta_path, {**meta, "finished_at": now_stamp(), "wall_s": time.monotonic() - start})
    print(cell_summary(results, plan))
    verdict = decide(results)
    print(summary(verdict))
    print(f"results: {results_dir}")
    return verdict.exit_code


def cell_summary(results: Sequence[CaseResult], plan: Plan) -> str:
    """One line per cell: its pins and how many cases got each outcome."""
    from tabulate import tabulate

    by_cell: dict[str, list[CaseResult]] = {}
    for result in results:
        by_cell.setdefault(result.cell_id, []).append(result)
    axes = [
        a for a in AXES if any(getattr(c, a) for c in plan.planned)
    ]  # an unused optional: no column
    rows = []
    for cell in plan.planned:
        got = by_cell.get(cell.id, [])
        counts = {o: sum(r.outcome is o for r in got) for o in Outcome}
        text = ", ".join(f"{n} {o}" for o, n in counts.items() if n) or "not run"
        reasons = sorted({r.reason for r in got if r.outcome is Outcome.SKIP and r.reason})
        note = reasons[0][:70] if len(reasons) == 1 and counts[Outcome.SKIP] == len(got) else ""
        rows.append([cell.id, *(getattr(cell, a) for a in axes), text, note])
    headers = ["cell", *axes, "outcomes", "note"]
    return str(tabulate(rows, headers=headers, tablefmt="github"))
