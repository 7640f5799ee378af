"""A Slurm run merged: every task's run folder, plus an `error` for each unit a task did not
finish (named by the state Slurm ended it in), judged against the known issues."""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any, Final

from validate.config import ValidateConfig
from validate.dispatch.slurm_jobs import poll
from validate.dispatch.slurm_state import (
    group_config,
    group_units,
    load_state,
    shard_dir,
    shard_results,
    task_states,
)
from validate.execute.records import not_run, now_stamp
from validate.judge.known_issues import apply_known_issues, load_known_issues
from validate.model.outcome import Outcome
from validate.model.results import CaseResult, ResultStore, write_json
from validate.plan.rules import Plan
from validate.report.model import RunInfo, merge_runs
from validate.workflow import RunOutcome

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from validate.dispatch import sbatch as sl
    from validate.model.matrix import Cell

__all__ = ["finalize", "killed_by_slurm", "merge_job", "summarise", "task_reason"]


def task_reason(run_dir: Path, group: dict[str, Any], index: int, task: sl.TaskState | None) -> str:
    """Why a unit of this task has no result: the state Slurm ended the task in."""
    folder = shard_dir(run_dir, group["id"], index)
    name = f"task {group['job_id']}_{index}"
    if task is not None and task.job_id:
        name += f" (job {task.job_id})"
    output = run_dir / "slurm" / (str(group["id"]) + f"_{index}.out")
    log_hint = f"; its output: {output}"
    if index in group.get("not_scheduled", []):
        return f"not scheduled: slurm {name} was still pending after --queue-timeout"
    state = task.state if task is not None else "UNKNOWN"
    started = (folder / "run.json").is_file()
    if state == "CANCELLED" and not started:
        return f"not scheduled: slurm {name} was cancelled before it started"
    what = {
        "TIMEOUT": f"hit its time limit (--time {group.get('time')})",
        "CANCELLED": "was cancelled (scancel)",
        "NODE_FAIL": "lost its node (NODE_FAIL)",
        "PREEMPTED": "was preempted",
        "OUT_OF_MEMORY": "ran out of memory",
        "BOOT_FAIL": "could not boot its node",
        "DEADLINE": "passed its deadline",
        "FAILED": f"exited {task.exit_code if task else '?'}",
        "COMPLETED": "ended",
        "UNKNOWN": "is no longer known to Slurm",
    }.get(state, f"ended {state}")
    return f"slurm {state}: {name} {what} before this case finished{log_hint}"


#: Task states in which Slurm signalled the task's processes (its cases' too).
_KILLED: Final = frozenset({"TIMEOUT", "CANCELLED", "NODE_FAIL", "PREEMPTED", "DEADLINE"})


def killed_by_slurm(results: Sequence[CaseResult], reason: str) -> list[CaseResult]:
    """Slurm signals every process of a task it ends, the running cases with the tool: a case
    stored as a crash by SIGTERM or SIGKILL there died of Slurm, not of the product."""
    return [
        r.with_(outcome=Outcome.ERROR, reason=f"{reason} (the case died of {r.signal})")
        if r.outcome is Outcome.CRASH and r.signal in {"SIGTERM", "SIGKILL"}
        else r
        for r in results
    ]


def _write_merged(run_dir: Path, results: Sequence[CaseResult]) -> None:
    """RUN/results.jsonl holds the merged results (each line verified where it was read, then
    signed under RUN's key); replaced whole, so a second merge writes the same file."""
    fresh = run_dir / "results.new.jsonl"
    fresh.unlink(missing_ok=True)
    store = ResultStore(fresh)
    for result in results:
        store.append(result)
    store.seal()  # before the rename: the store refuses to seal a file that was moved away
    fresh.replace(run_dir / "results.jsonl")


def finalize(run_dir: Path, state: dict[str, Any]) -> tuple[list[CaseResult], Plan]:
    """Merge every task's run folder, plus an `error` per unit a task did not finish (by the
    task states in `state`), into RUN, judged against the known issues (a task Slurm killed
    never reached its own known-issue step); the merged results and the whole plan."""
    config = ValidateConfig.from_dict(state["config"])
    meta_path = run_dir / "run.json"
    meta: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    run_id = str(meta.get("run_id") or run_dir.name)
    runs: list[tuple[RunInfo, list[CaseResult]]] = []
    errors: list[CaseResult] = []
    planned: list[Cell] = []
    pruned: list[tuple[Cell, str]] = []
    for group in state["groups"]:
        plan, cases, units = group_units(group_config(config, group, run_dir), group["tasks"])
        planned += plan.planned
        pruned += [p for p in plan.pruned if p[0].id not in {c.id for c, _ in pruned}]
        cells = {cell.id: cell for cell in plan.planned}
        by_name = {case.name: case for case in cases}
        tasks = task_states(group)
        for index, mine in enumerate(units):
            folder = shard_dir(run_dir, group["id"], index)
            shard_meta, results = shard_results(folder)
            task = tasks.get(index)
            if task is not None and task.state in _KILLED:
                results = killed_by_slurm(results, task_reason(run_dir, group, index, task))
            if results:
                info = RunInfo(
                    run_id=str(shard_meta.get("run_id", folder)), path=folder, meta=shard_meta
                )
                runs.append((info, results))
            done = {(r.cell_id, r.case) for r in results}
            missing = [u for u in mine if u not in done]
            if missing:
                reason = task_reason(run_dir, group, index, task)
                errors += [
                    not_run(cells[c], by_name[n], Outcome.ERROR, reason, run_id) for c, n in missing
                ]
    if errors:
        runs.append((RunInfo(run_id=run_id, path=run_dir / "slurm", meta={}), errors))
    merged = merge_runs(runs, prefer="refuse")
    issues = load_known_issues(config.known_issues)
    results = apply_known_issues([item.result for item in merged.items], issues)
    _write_merged(run_dir, results)
    meta["finished_at"] = now_stamp()
    meta["slurm"] = {
        g["id"]: {
            "job_id": g["job_id"],
            "label": g["label"],
            "tasks": {i: s.state for i, s in task_states(g).items()},
            "not_scheduled": g.get("not_scheduled", []),
        }
        for g in state["groups"]
    }
    meta["slurm_errors"] = len(errors)
    write_json(meta_path, meta)
    return results, Plan(planned=planned, pruned=pruned)


def summarise(run_dir: Path, state: dict[str, Any]) -> RunOutcome:
    from validate.judge.signoff import decide

    results, plan = finalize(run_dir, state)
    config = ValidateConfig.from_dict(state["config"])  # the sign-off policy the run was given
    verdict = decide(results, flaky=config.flaky, require_gpu=config.require_gpu)
    meta: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        meta = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    return RunOutcome(
        run_id=str(meta.get("run_id") or run_dir.name),
        folder=run_dir,
        plan=plan,
        results=tuple(results),
        verdict=verdict,
    )


def merge_job(run_dir: Path) -> RunOutcome:
    """The dependent merge job (`validate --slurm-merge --results RUN`; the CLI exits 0 once
    merged). It reads the tasks' final states itself and never writes slurm.json (the tool owns
    it)."""
    run_dir = run_dir.resolve()
    state = load_state(run_dir)
    state["merge"] = None  # this job is the merge job: it does not wait for itself
    poll(state)
    return summarise(run_dir, state)
