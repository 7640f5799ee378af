"""`cudnn-matrix validate`: plan -> environment per cell -> run cases -> known issues -> verdict.

One small function per stage; each takes the previous stage's value plus the config, so each
can be tested alone. Results are appended (and fsynced) as each case finishes, so a killed run
loses nothing and `--resume` completes it. `run` returns a RunOutcome (results and verdict) and
prints nothing: the CLI prints it, bisect reads it, a Slurm task hands it to its output.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shlex
import subprocess
import threading
import time
from contextlib import suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from validate import __version__
from validate.config import ValidateConfig
from validate.env.sources import Sources
from validate.env.venvs import cache_root
from validate.errors import ConfigError, ResultsLost
from validate.execute import EXECUTORS, Executor, RunContext, resolve_executor
from validate.execute.cases import SHIPPED_CASES, Case, cases_for
from validate.execute.history import History
from validate.execute.pool import Pool
from validate.execute.progress import pool_progress
from validate.execute.records import now_stamp, record_all
from validate.execute.runner import run_pool, usage_sampler
from validate.execute.slots import plan_ledger
from validate.judge.known_issues import KnownIssue, apply_known_issues, load_known_issues
from validate.model.axes import AXES
from validate.model.matrix import Cell, load_matrix
from validate.model.outcome import Outcome
from validate.model.results import CaseResult, ResultStore, write_json
from validate.model.runs import check_resumed_pins, open_run, stored_meta
from validate.plan.host import HostFacts, detect_host, python_version_of
from validate.plan.rules import Plan, load_rules, plan_cells
from validate.plan.shard import ShardSpec, assign, expected, read_durations
from validate.plan.steps import Step, plan_steps
from validate.plan.tiers import TierChoice, apply_tier

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from validate.judge.signoff import Verdict
    from validate.judge.speed import SpeedCheck

__all__ = [
    "SHIPPED_CASES",
    "RunOutcome",
    "ValidateConfig",
    "describe",
    "record_all",
    "run",
    "run_cells",
    "stamp_known_issues",
]

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent


# --- stages -----------------------------------------------------------------------------------


def plan_stage(config: ValidateConfig) -> Plan:
    """Planned and pruned cells for the selectors (and --tier); the rules read the base python's
    version for cells without a python value (the interpreter their environments are made from)."""
    return tier_stage(config)[0]


def tier_stage(config: ValidateConfig) -> tuple[Plan, TierChoice | None, list[Cell]]:
    """The plan kept to --tier, the tier's choice (None without --tier), and the selected planned
    cells the tier leaves out. The tier is chosen over the whole matrix from the files alone, so
    every shard, CI job and Slurm task runs its part of the same cells."""
    selectors = config.selectors
    matrix, rules = load_matrix(selectors.matrix), load_rules(selectors.rules)
    python = python_version_of(config.base_python)
    plan = plan_cells(matrix, rules, selectors, python=python)
    if config.tier is None:
        return plan, None, []
    narrowed, left_out, choice = apply_tier(matrix, rules, plan, config.tier, python=python)
    log.info("tier %s", choice.summary(len(choice.cells) + len(choice.left_out)))
    return narrowed, choice, left_out


def tier_record(choice: TierChoice | None, left_out: Sequence[Cell]) -> dict[str, Any] | None:
    """run.json's `tier`: which tier ran and the planned cells it left out (reports show them)."""
    if choice is None:
        return None
    return {
        "name": choice.name,
        "cells": len(choice.cells),
        "pairs": choice.pairs,
        "covered": choice.covered,
        "lower_bound": choice.lower_bound,
        "left_out": [{"id": c.id, **c.pins()} for c in left_out],
    }


def cases_stage(config: ValidateConfig) -> list[Case]:
    """The cases to run: named files/folders, a frontend checkout's samples, else the shipped ones."""
    return cases_for(config)


def stamp_known_issues(store: ResultStore, issues: Sequence[KnownIssue]) -> list[CaseResult]:
    """The known-issue step, once every case has ended: judge the run's results (the latest per
    cell x case) against the database; a result the judgement changes (xfail, xpass, a note) is
    appended once more, judged, so the folder reads judged (the later line wins) and keeps the
    outcome the case itself gave beside it. The judged results, in store order."""
    latest = list({r.key: r for r in store}.values())
    judged = apply_known_issues(latest, issues)
    for before, after in zip(latest, judged, strict=True):
        if after != before:
            store.append(after)
    return judged


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
        "versions": config.versions,  # the pins as checked and resolved (env.versions)
        "planned": [c.id for c in plan.planned],
        "pins": plan_pins(plan.planned),  # what --resume must match (model/runs.py)
        "pruned": [{"id": c.id, **c.pins(), "reason": r} for c, r in plan.pruned],
    }


def plan_pins(cells: Sequence[Cell]) -> dict[str, list[str]]:
    """Per axis, the values the planned cells pin (run.json's `pins`)."""
    pins: dict[str, set[str]] = {}
    for cell in cells:
        for axis, value in cell.pins().items():
            pins.setdefault(axis, set()).add(str(value))
    return {a: sorted(v) for a, v in pins.items()}


def _check_resume(config: ValidateConfig, plan: Plan) -> None:
    """--resume into a run of other pins is bad input, named both ways, before anything is
    written; a run.json of an older version (no `pins`) is compared by its planned cells."""
    if not config.resume or config.results_dir is None:
        return
    meta = stored_meta(config.results_dir)
    if not meta:
        return
    given = plan_pins(plan.planned)
    stored = meta.get("pins")
    if isinstance(stored, dict):
        check_resumed_pins(config.results_dir, stored, given)
    planned = meta.get("planned")
    if isinstance(planned, list) and set(planned) != {c.id for c in plan.planned}:
        check_resumed_pins(
            config.results_dir,
            {"cells": sorted(map(str, planned))},
            {"cells": sorted(c.id for c in plan.planned)},
        )


def run_cells(
    config: ValidateConfig,
    plan: Plan,
    cases: Sequence[Case],
    host: HostFacts,
    store: ResultStore,
    run_id: str,
    *,
    executor: Executor | None = None,
    only: Mapping[str, frozenset[str]] | None = None,
) -> None:
    """Group the cells into steps (one environment each) and run every cell's cases in one pool.

    A background thread prepares the steps' environments in plan order and hands each step to
    the executor as soon as its environment is ready; the jobs it returns go into the pool,
    which runs them longest first while the next environments are prepared (a build never
    holds a case slot). Closes the executor at the end.

    `only` (a shard's units: cell id -> case names) keeps those cases of those cells; a step with
    none is not prepared, and its cells that share a case set run together.
    """
    executor = executor or EXECUTORS[config.executor]()
    history = History.load(cache_root(config.cache_dir) / "durations.json")
    bound, ledger = plan_ledger(host, jobs=config.jobs, gpus=config.gpus, history=history)
    log.info("%s", "; ".join([bound.line(), *ledger.lines()]))
    sampler = usage_sampler(host.has_gpu)
    context = RunContext(
        config=config,
        host=host,
        run_id=run_id,
        sources=Sources(config.backend_source, config.frontend_source, store=config.backend_store),
        store=store,
        slots=bound.slots,
        history=history,
        sampler=sampler,
    )
    try:
        steps = plan_steps(plan.planned, host, lambda cell: executor.env_key(cell, context))
        for cell, skip in steps.skipped:
            mine = _cases_of(cell.id, cases, only)
            if mine:
                log.info("skip %s %s: %s", cell.id, cell.label, skip)
                record_all(store, cell, mine, Outcome.SKIP, skip, run_id)
        work = [(step, parts) for step in steps.steps if (parts := _step_parts(step, cases, only))]
        with pool_progress() as on_change:
            pool = Pool(bound.slots, ledger=ledger, on_change=on_change)
            counted = [(c, len(part.cells)) for _, step_parts in work for part, c in step_parts]
            pool.expect(sum(len(c) * n for c, n in counted), _expected_s(history, counted))
            feeder = threading.Thread(
                target=_feed, args=(pool, executor, context, work), name="prepare", daemon=True
            )
            feeder.start()
            run_pool(pool)
            feeder.join()
    finally:
        sampler.stop()
        figures = sampler.figures()
        if figures is not None:
            log.info(
                "gpu utilization while cases ran: mean %.0f%%, median %.0f%%, p95 %.0f%%, max"
                " %.0f%% (%d polls)",
                *(100 * figures[k] for k in ("mean", "p50", "p95", "max")),
                figures["polls"],
            )
            with suppress(OSError):
                (store.path.parent / "gpu_utilization.json").write_text(
                    json.dumps(figures, indent=1), encoding="utf-8"
                )
        history.save()
        executor.close()


def _expected_s(history: History, parts: Sequence[tuple[Sequence[Case], int]]) -> float | None:
    """Seconds of work the run's cases hold by the history (for the ETA); a case it does not
    know counts as the mean of those it knows. None when it knows none of them: no basis for
    an ETA (the pool shows none until a case finishes)."""
    if all(history.estimate(case.name) is None for cases, _ in parts for case in cases):
        return None
    known = list(history.durations.values())
    mean = sum(known) / len(known)
    return sum(n * (history.estimate(case.name) or mean) for cases, n in parts for case in cases)


def _feed(
    pool: Pool,
    executor: Executor,
    context: RunContext,
    work: Sequence[tuple[Step, list[tuple[Step, list[Case]]]]],
) -> None:
    """Prepare each step's environment in turn and submit its jobs; closes the pool at the end
    (an exception stops the pool and is raised by `Pool.run`)."""
    try:
        for step, parts in work:
            target = executor.prepare(step, context)
            for part, part_cases in parts:
                announced = len(part_cases) * len(part.cells)
                if isinstance(target, str):  # no environment: error, the run goes on
                    for cell in part.cells:
                        record_all(
                            context.store, cell, part_cases, Outcome.ERROR, target, context.run_id
                        )
                    pool.expect(-announced)
                    continue
                jobs = executor.run(part, target, part_cases, context)
                pool.submit(jobs or (), announced=announced)
    except BaseException as exc:  # noqa: BLE001 - handed to the dispatching thread
        pool.fail(exc)
    finally:
        pool.close()


def _cases_of(
    cell_id: str, cases: Sequence[Case], only: Mapping[str, frozenset[str]] | None
) -> list[Case]:
    if only is None:
        return list(cases)
    names = only.get(cell_id, frozenset())
    return [c for c in cases if c.name in names]


def _step_parts(
    step: Step, cases: Sequence[Case], only: Mapping[str, frozenset[str]] | None
) -> list[tuple[Step, list[Case]]]:
    """The step's cells grouped by the cases they run (one group, the step itself, unsharded)."""
    if only is None:
        return [(step, list(cases))]
    groups: dict[frozenset[str], list[Cell]] = {}
    for cell in step.cells:
        names = only.get(cell.id, frozenset())
        if names:
            groups.setdefault(names, []).append(cell)
    return [
        (Step(key=step.key, cells=tuple(cells)), [c for c in cases if c.name in names])
        for names, cells in groups.items()
    ]


def shard_units(
    config: ValidateConfig, plan: Plan, cases: Sequence[Case]
) -> tuple[dict[str, frozenset[str]], dict[str, Any]] | None:
    """This shard's units (cell id -> case names) and what run.json records of it; None unsharded."""
    if config.shard is None:
        return None
    spec = ShardSpec.parse(config.shard)
    source = config.durations or cache_root(config.cache_dir) / "durations.json"
    durations = {} if str(source) == "none" else read_durations(source)
    units = [(cell.id, case.name) for cell in plan.planned for case in cases]
    shards = assign(units, durations, spec.total)
    mine = shards[spec.index - 1]
    only: dict[str, set[str]] = {}
    for cell_id, name in mine:
        only.setdefault(cell_id, set()).add(name)
    loads = [round(sum(expected(s, durations)), 2) for s in shards]
    digest = hashlib.sha256(json.dumps(durations, sort_keys=True).encode()).hexdigest()[:16]
    record = {
        "index": spec.index,
        "total": spec.total,
        "units": len(mine),
        "of_units": len(units),
        "expected_s": loads[spec.index - 1],
        "expected_makespan_s": max(loads, default=0.0),
        "durations": str(source),
        "durations_sha256": digest,
    }
    return {k: frozenset(v) for k, v in only.items()}, record


@dataclass(frozen=True, kw_only=True)
class RunOutcome:
    """How a run ended: its id and folder, its plan, its results (the latest per cell x case,
    judged against the known issues) and the sign-off verdict."""

    run_id: str
    folder: Path
    plan: Plan
    results: tuple[CaseResult, ...]
    verdict: Verdict
    speed: SpeedCheck | None = None  # the speed stage's candidates and findings (remeasure.py)

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code


def run(
    config: ValidateConfig, *, resolve: Callable[[ValidateConfig], ValidateConfig] | None = None
) -> RunOutcome:
    """The whole job: plan, run the cells, judge the known issues, seal, decide. `resolve` (the
    CLI's env.versions.resolve_versions) checks the version pins against their sources once the
    input files are read, before any work."""
    from validate.judge.signoff import decide  # the report side is only needed at the end

    config = replace(config, executor=resolve_executor(config.executor, cpp=config.cpp is not None))
    executor = EXECUTORS[config.executor]()
    executor.check(config)  # before any work: options the executor cannot honour are bad input
    if config.resume and config.results_dir is None:
        msg = "validate: --resume needs --results DIR (the folder of the run to complete)"
        raise ConfigError(msg)
    # every input file (matrix, rules, cases and their cases.toml, known issues) is read and
    # checked before the run folder exists or a line is printed: bad input writes nothing
    plan, tier, left_out = tier_stage(config)
    cases = cases_stage(config)
    issues = load_known_issues(config.known_issues)
    if resolve is not None:
        resolved = resolve(config)
        if resolved.selectors != config.selectors:  # a partial version resolved: its cells
            plan, tier, left_out = tier_stage(resolved)
        config = resolved
    _check_resume(config, plan)
    sharded = shard_units(config, plan, cases)  # reads --durations
    host = detect_host()
    with open_run(config.results_dir) as opened:  # a fresh folder of its own, or --results
        meta_path = opened.folder / "run.json"
        meta = provenance(config, host, plan, opened.id)
        if tier is not None:
            meta["tier"] = tier_record(tier, left_out)
        if sharded is not None:
            meta["shard"] = sharded[1]
        if config.resume and meta_path.is_file():
            meta = {**json.loads(meta_path.read_text(encoding="utf-8")), "resumed_at": now_stamp()}
        write_json(meta_path, meta)
        log.info(
            "run %s: %d planned cells, %d pruned, %d cases -> %s",
            opened.id,
            len(plan.planned),
            len(plan.pruned),
            len(cases),
            opened.folder,
        )
        start = time.monotonic()
        only = None if sharded is None else sharded[0]
        store = opened.store
        try:
            run_cells(
                config, plan, cases, host, store, meta["run_id"], executor=executor, only=only
            )
        except KeyboardInterrupt:  # the cases that finished are judged all the same
            with suppress(ResultsLost):
                if store.problem() is None:
                    stamp_known_issues(store, issues)
            raise
        results = stamp_known_issues(store, issues)
        store.seal()  # every case has ended: the folder's lines verify wherever it is read
        from validate.remeasure import remeasure  # the speed stage: evidence, no outcome changes

        speed = remeasure(config, plan, cases, host, results, opened.folder, meta["run_id"])
        end = {**meta, "finished_at": now_stamp(), "wall_s": time.monotonic() - start}
        write_json(meta_path, end)
    verdict = decide(results, flaky=config.flaky, require_gpu=config.require_gpu)
    return RunOutcome(
        run_id=str(meta["run_id"]),
        folder=opened.folder,
        plan=plan,
        results=tuple(results),
        verdict=verdict,
        speed=speed,
    )


def describe(outcome: RunOutcome, width: int | None = None) -> str:
    """What `validate` prints at the end: the verdict line first, then one line per cell, the
    speed findings, the lists the verdict rests on and the run folder. With `width` (a
    terminal's columns) every line fits it: the cell table where its rows do, else one line
    per cell (as `report` does on a terminal)."""
    from validate.judge.signoff import summary
    from validate.report.text import fit, grid_or_lines

    verdict, *lists = summary(outcome.verdict).splitlines()
    table = cell_summary(outcome.results, outcome.plan)
    cells = (
        table
        if width is None
        else "\n".join(grid_or_lines(table, cell_lines(outcome.results, outcome.plan), width))
    )
    text = "\n".join(
        [
            verdict,
            cells,
            *(outcome.speed.lines() if outcome.speed is not None else ()),
            *lists,
            f"results: {outcome.folder}",
        ]
    )
    return text if width is None else fit(text, width)


def _cell_rows(results: Sequence[CaseResult], plan: Plan) -> tuple[list[str], list[list[str]]]:
    """The cell table's headers and rows: a cell's id, pins, outcome counts and its one skip
    reason (where every case skipped for it)."""
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
    return ["cell", *axes, "outcomes", "note"], rows


def cell_summary(results: Sequence[CaseResult], plan: Plan) -> str:
    """One line per cell: its pins and how many cases got each outcome."""
    from tabulate import tabulate

    headers, rows = _cell_rows(results, plan)
    # versions as declared ("13.0", "580"), not as numbers tabulate would print "13" and right-align
    return str(tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True))


def cell_lines(results: Sequence[CaseResult], plan: Plan) -> list[str]:
    """The cell table one line per cell, for a terminal narrower than its rows:
    `245a041ac8 9.24.0.43 / 1.26.0 / 12.9 / 570 / sm80: 1 pass, 4 skip (note)`."""
    _, rows = _cell_rows(results, plan)
    return [
        f"{cell} {' / '.join(v for v in pins if v)}: {text}" + (f" ({note})" if note else "")
        for cell, *pins, text, note in rows
    ]
