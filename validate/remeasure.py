"""The quiet re-measurement stage of `validate` (issue 29): after the main cases, each case with a
speed candidate (judge/speed.py) that fits `--speed-budget` runs again alone, `--speed-repeats`
times in each cell the candidate compares.

The stage says what it will cost before it starts (runs and seconds, by the main run's own
durations of those cases: measured under load, so an upper bound) and which candidates it leaves
(`select`: the strongest of each finding first); a job that would start past the budget's
deadline is not started. Those left are "not re-measured" in every report, never "not slower".

Each re-run is an exclusive pool job (execute/pool.py): no other case runs beside it, on the GPU or
the host's slots. The repeats interleave the cells (r1 of every cell, then r2, ...), so a load
that comes and goes cannot favour one side. Each repeat is a run folder of its own,
`<run>/speed/r<i>/` (results.jsonl signed and sealed as any run's, the case folders below
`cases/<cell>/`), each re-run stored as it ends: `--resume` keeps them and runs only the rest. They are evidence, never verdicts: the main results.jsonl is not touched, and no
outcome changes. `<run>/speed.json` keeps the thresholds, every measurement and the finding of
each candidate; the report re-judges them with its own thresholds (report/speed.py).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from validate.env.sources import Sources
from validate.execute import EXECUTORS, RunContext
from validate.execute.pool import Pool
from validate.execute.runner import run_pool
from validate.judge.speed import Measurement, Selection, SpeedCheck, Thresholds, candidates, judge
from validate.judge.speed import select as select_candidates
from validate.model.results import load_results
from validate.model.runs import open_run
from validate.plan.steps import Step, plan_steps

if TYPE_CHECKING:
    from collections.abc import Sequence

    from validate.config import ValidateConfig
    from validate.execute import Executor
    from validate.execute.cases import Case
    from validate.execute.pool import Job
    from validate.model.matrix import Cell
    from validate.model.results import CaseResult
    from validate.plan.host import HostFacts
    from validate.plan.rules import Plan

__all__ = ["SPEED_DIR", "SPEED_FILE", "remeasure", "thresholds_of"]

log = logging.getLogger(__name__)

SPEED_FILE: Final = "speed.json"
SPEED_DIR: Final = "speed"


def thresholds_of(config: ValidateConfig) -> Thresholds:
    return Thresholds(ratio=config.slower_ratio, min_s=config.slower_min_s)


def remeasure(
    config: ValidateConfig,
    plan: Plan,
    cases: Sequence[Case],
    host: HostFacts,
    results: Sequence[CaseResult],
    run_dir: Path,
    run_id: str,
) -> SpeedCheck:
    """Find the candidates of the run's `results`, re-run the cases of those that fit the speed
    budget alone in both cells and judge them; writes `<run>/speed.json`. `--speed-repeats 0`
    (`--no-speed`): no re-run, nothing confirmed."""
    thresholds = thresholds_of(config)
    repeats = config.speed_repeats
    found = candidates(results, thresholds)
    measurements: list[Measurement] | None = None
    note = ""
    selection: Selection | None = None
    if repeats > 0:
        cost = {(r.case, r.cell_id): r.duration_s for r in results}
        selection = select_candidates(found, cost, config.speed_budget_s, repeats)
        note = _note(selection)
        log.info("speed: %d candidates; %s", len(found), note)
        measurements = (
            _measure(config, plan, cases, host, selection, run_dir, run_id)
            if selection.chosen
            else []
        )
    check = replace(judge(results, measurements, thresholds, repeats), note=note)
    data: dict[str, Any] = {
        "check": check.to_dict(),
        "budget_s": config.speed_budget_s,
        "expected_s": None if selection is None else selection.expected_s * repeats,
        "measurements": [m.to_dict() for m in measurements or ()],
    }
    (run_dir / SPEED_FILE).write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return check


def _note(selection: Selection) -> str:
    """What the stage will re-measure, what it costs and what it leaves, in one line."""
    chosen, left, repeats = selection.chosen, selection.left, selection.repeats
    if not chosen:
        return (
            f"re-measuring none (no candidate's re-runs fit --speed-budget "
            f"{selection.budget_s:g} s); {len(left)} left not re-measured"
        )
    cells = {cell for _, cell in selection.runs}
    text = (
        f"re-measuring {len(chosen)} (the largest ratios beyond load that fit --speed-budget "
        f"{selection.budget_s:g} s): {_n(len({c.case for c in chosen}), 'case')} in "
        f"{_n(len(cells), 'cell')}, "
        f"{repeats} times each alone, {len(selection.runs) * repeats} runs, expected "
        f"{selection.expected_s * repeats:.0f} s by their main-run times"
    )
    if left:
        text += f"; {len(left)} left not re-measured"
    return text


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _measure(
    config: ValidateConfig,
    plan: Plan,
    cases: Sequence[Case],
    host: HostFacts,
    selection: Selection,
    run_dir: Path,
    run_id: str,
) -> list[Measurement]:
    """Run each (case, cell) the chosen candidates name `speed_repeats` times, each alone; a
    resumed run keeps the re-runs already stored and runs the rest."""
    wanted: dict[str, set[str]] = {}  # cell id -> case names
    for case, cell_id in selection.runs:
        wanted.setdefault(cell_id, set()).add(case)
    cells = [c for c in plan.planned if c.id in wanted]
    by_name = {c.name: c for c in cases}
    folder = run_dir / SPEED_DIR
    if not config.resume:
        shutil.rmtree(folder, ignore_errors=True)  # never another run's re-runs
    quiet = replace(config, reruns=0, api_logs=False, resume=False)
    executor = EXECUTORS[config.executor]()
    sources = Sources(config.backend_source, config.frontend_source, store=config.backend_store)
    repeats = [  # each repeat a run of its own, opened as every run is (model/runs.py)
        open_run(folder / f"r{i}", run_id=f"{run_id}-speed-r{i}")
        for i in range(1, config.speed_repeats + 1)
    ]
    contexts = [
        RunContext(config=quiet, host=host, run_id=r.id, sources=sources, store=r.store)
        for r in repeats
    ]
    done = [repeat.store.done_keys() for repeat in repeats]  # --resume: stored re-runs
    n_runs = sum(len(v) for v in wanted.values()) * len(contexts)
    n_done = sum(f"{cell}::{name}" in d for d in done for cell, v in wanted.items() for name in v)
    if n_done:
        log.info("speed: %d of %d runs already stored (--resume); running the rest", n_done, n_runs)
    deadline = time.monotonic() + config.speed_budget_s
    late: list[str] = []
    try:
        pool = Pool(1)
        steps = plan_steps(cells, host, lambda cell: executor.env_key(cell, contexts[0])).steps
        prepared = [(s, executor.prepare(s, contexts[0])) for s in steps] if n_done < n_runs else []
        for context, stored in zip(contexts, done, strict=True):  # r1 of every cell, then r2, ...
            for step, target in prepared:
                if isinstance(target, str):
                    log.warning("speed: no environment for %s: %s", step.first.id, target)
                    continue
                for cell in step.cells:
                    mine = [
                        by_name[n]
                        for n in sorted(wanted[cell.id])
                        if n in by_name and f"{cell.id}::{n}" not in stored
                    ]
                    if mine:
                        jobs = _alone(executor, cell, step, target, mine, context)
                        pool.submit(_by(deadline, job, late) for job in jobs)
        pool.close()
        run_pool(pool)
    finally:
        executor.close()
        for repeat in repeats:
            repeat.store.seal()
            repeat.close()
    if late:
        log.warning(
            "speed: --speed-budget %g s spent; %d re-runs not started (their candidates are "
            "not re-measured where no repeat of theirs is stored)",
            config.speed_budget_s,
            len(late),
        )
    return _read(contexts, wanted, run_dir)


def _by(deadline: float, job: Job, late: list[str]) -> Job:
    """`job`, not started (noted in `late`) once the speed budget's deadline has passed."""
    run = job.run

    def guarded() -> Sequence[Job]:
        if time.monotonic() > deadline:
            late.append(job.name)
            return ()
        return run()

    return replace(job, run=guarded)


def _alone(
    executor: Executor, cell: Cell, step: Step, target: Any, cases: Sequence[Case], run: RunContext
) -> list[Job]:
    """The executor's jobs for one cell's cases, each made exclusive and kept in submission
    order (no estimate: the pool keeps the order of jobs without one)."""
    jobs = executor.run(Step(key=step.key, cells=(cell,)), target, cases, run) or ()
    return [replace(job, exclusive=True, estimate_s=None) for job in jobs]


def _read(
    contexts: Sequence[RunContext], wanted: dict[str, set[str]], run_dir: Path
) -> list[Measurement]:
    """One Measurement per (case, cell): each repeat's units, outcome and case folder."""
    repeats: dict[tuple[str, str], list[CaseResult]] = {}
    for context in contexts:
        got = {r.key: r for r in load_results([context.store.path])}  # later wins
        for cell_id, names in wanted.items():
            for name in names:
                result = got.get(f"{cell_id}::{name}")
                if result is not None:
                    repeats.setdefault((name, cell_id), []).append(result)
    out = []
    for (name, cell_id), runs in sorted(repeats.items()):
        out.append(
            Measurement(
                case=name,
                cell_id=cell_id,
                units=tuple(r.units for r in runs),
                outcomes=tuple(str(r.outcome) for r in runs),
                folders=tuple(_relative(Path(r.log_path).parent, run_dir) for r in runs),
            )
        )
    return out


def _relative(path: Path, run_dir: Path) -> str:
    try:
        return str(path.resolve().relative_to(run_dir.resolve()))
    except ValueError:
        return str(path)
