"""`validate --executor slurm`: the matrix as Slurm array jobs, each task one shard of a run.

Slurm schedules, the tool does what it does on any host. The planned cells are grouped as for a CI
pipeline (dispatch/runners.py `job_groups`: one group per arch runner x environment); each group is
one `sbatch --array=0-(n-1)` job with the arch's partition, constraint, gres and time limit from
matrix/runners.toml, and task i runs an ordinary `validate --shard i+1/n` of the group's cells
(plan/shard.py splits their cell x case units) into its own run folder. A merge job
(`--dependency=afterany` on every array) merges the shard folders even when the tool is gone; the
tool waits, printing progress, and merges itself once every job ended.

The run folder (`--results RUN`):
  slurm.json          the config, the groups, job ids and each task's last known state: `--resume`
                      reattaches to the jobs after the tool itself was restarted
  slurm/              the batch scripts and each task's Slurm output
  shards/<group>/<i>/ one run folder per task (a plain `validate --shard` run folder)
  results.jsonl, run.json  the merged run: `report --results RUN` reads it like any other

Honest failures: a task Slurm ended before it finished (TIMEOUT, CANCELLED, NODE_FAIL, FAILED ...)
keeps its finished results; each of its units without a result is `error` naming that state. A
task still pending past `--queue-timeout` is cancelled and its units are `error` "not scheduled".
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from validate.config import Selectors, ValidateConfig
from validate.dispatch import sbatch as sl
from validate.dispatch.runners import Runners, job_groups, load_runners, prune_without_runner
from validate.errors import ConfigError
from validate.execute.records import not_run, now_stamp
from validate.judge.known_issues import apply_known_issues, load_known_issues
from validate.model.outcome import Outcome
from validate.model.results import CaseResult, ResultStore, RunKey, load_results, write_json
from validate.model.runs import open_run
from validate.plan.rules import Plan
from validate.plan.shard import Unit, assign, read_durations
from validate.report.model import RunInfo, merge_runs
from validate.workflow import (
    RunOutcome,
    cases_stage,
    plan_stage,
    provenance,
    tier_record,
    tier_stage,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from validate.dispatch import DispatchOptions
    from validate.dispatch.runners import JobGroup
    from validate.execute.cases import Case
    from validate.model.matrix import Cell

__all__ = ["POLL_ENV", "SlurmDispatcher", "finalize", "merge_job", "run", "run_task"]

log = logging.getLogger(__name__)

STATE_FILE: Final = "slurm.json"
#: Seconds between two looks at the queue (default 10); the tests use 1.
POLL_ENV: Final = "CUDNN_MATRIX_SLURM_POLL_S"
_VERSION: Final = 1


# --- the run folder's state -----------------------------------------------------------------------


def _state_path(run_dir: Path) -> Path:
    return run_dir / STATE_FILE


def _load_state(run_dir: Path) -> dict[str, Any]:
    path = _state_path(run_dir)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        msg = f"--results {run_dir}: {STATE_FILE} unreadable ({exc}); not a Slurm run folder"
        raise ConfigError(msg) from exc
    if not isinstance(data, dict) or data.get("version") != _VERSION:
        msg = f"--results {run_dir}: {STATE_FILE} is not a Slurm run of this tool (version {_VERSION})"
        raise ConfigError(msg)
    return data


def _save_state(run_dir: Path, state: dict[str, Any]) -> None:
    write_json(_state_path(run_dir), state)


def _shard_dir(run_dir: Path, group_id: str, index: int) -> Path:
    return run_dir / "shards" / group_id / str(index + 1)


def _states(group: dict[str, Any]) -> dict[int, sl.TaskState]:
    return {int(i): sl.TaskState(**s) for i, s in group.get("states", {}).items()}


def _put_states(group: dict[str, Any], states: dict[int, sl.TaskState]) -> None:
    group["states"] = {str(i): asdict(s) for i, s in sorted(states.items())}


# --- what each task runs --------------------------------------------------------------------------


def _group_config(config: ValidateConfig, group: dict[str, Any], run_dir: Path) -> ValidateConfig:
    """The config of one group's tasks: the group's cells selected, its runner's executor."""
    values = {**config.selectors.values, **{k: tuple(v) for k, v in group["values"].items()}}
    return replace(
        config,
        selectors=Selectors(
            matrix=config.selectors.matrix, rules=config.selectors.rules, values=values
        ),
        executor=group["executor"],
        durations=run_dir / "durations.json",
        resume=False,
        shard=None,
    )


def _units(config: ValidateConfig, tasks: int) -> tuple[Plan, list[Case], list[list[Unit]]]:
    """The group's plan, cases, and each task's units: what `validate --shard i/n` would pick."""
    plan, cases = plan_stage(config), cases_stage(config)
    durations = read_durations(config.durations)
    units = [(cell.id, case.name) for cell in plan.planned for case in cases]
    return plan, cases, assign(units, durations, tasks)


def run_task(run_dir: Path, task: str) -> RunOutcome:
    """Inside an array task (`validate --slurm-task GROUP:INDEX --results RUN`): the group's
    shard INDEX+1 as an ordinary sharded validate run (it opens its shard folder as any run does).
    The CLI exits 0 whatever the verdict (the merge judges); bad input or a broken environment
    raises, and fails the task."""
    from validate.workflow import run as run_validate

    group_id, _, index_text = task.rpartition(":")
    state = _load_state(run_dir)
    group = next((g for g in state["groups"] if g["id"] == group_id), None)
    if group is None or not index_text.isdigit() or int(index_text) >= group["tasks"]:
        msg = f"--slurm-task {task}: no such group task in {_state_path(run_dir)}"
        raise ConfigError(msg)
    index = int(index_text)
    base = ValidateConfig.from_dict(state["config"])
    folder = _shard_dir(run_dir, group_id, index)
    config = replace(
        _group_config(base, group, run_dir),
        shard=f"{index + 1}/{group['tasks']}",
        results_dir=folder,
        resume=(folder / "run.json").is_file(),  # a requeued task completes its run
        argv=tuple(sys.argv[1:]),
    )
    return run_validate(config)


# --- submit ---------------------------------------------------------------------------------------


def _sbatch_options(group: JobGroup) -> list[str]:
    runner = group.runner
    options = []
    if runner.partition:
        options.append(f"--partition={runner.partition}")
    if runner.constraint:
        options.append(f"--constraint={runner.constraint}")
    gres = runner.gres or (f"gpu:{runner.gpus}" if runner.gpus > 0 else None)
    if gres:
        options.append(f"--gres={gres}")
    if runner.time:
        options.append(f"--time={runner.time}")
    return options


def _script(run_dir: Path, name: str, args: Sequence[str], comment: str) -> Path:
    """A batch script that runs this tool: this interpreter and this package (the nodes share
    their paths, as they share the run folder)."""
    path = run_dir / "slurm" / f"{name}.sh"
    path.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "validate", "validate", *args]
    body = " ".join(shlex.quote(a) for a in argv).replace("@TASK@", '"$SLURM_ARRAY_TASK_ID"')
    package = shlex.quote(str(Path(__file__).resolve().parent.parent))
    lines = [
        "#!/bin/bash",
        f"# {comment}",
        f'export PYTHONPATH={package}"${{PYTHONPATH:+:$PYTHONPATH}}"',
        f"exec {body}",
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path.chmod(0o755)
    return path


def _describe(group: JobGroup) -> str:
    env = " ".join(f"{axis}={value}" for axis, value in group.env)
    return f"{group.arch} {env}".strip()


def _submit_array(run_dir: Path, entry: dict[str, Any], indices: Sequence[int]) -> str:
    """Submit the group's array job for these task indices (all of them, or the ones a --resume
    runs again); its id becomes the group's."""
    script = run_dir / "slurm" / f"{entry['id']}.sh"
    output = run_dir / "slurm" / f"{entry['id']}_%a.out"
    spec = ",".join(str(i) for i in indices)
    if list(indices) == list(range(entry["tasks"])):
        spec = f"0-{entry['tasks'] - 1}"
    options = [
        f"--job-name=cudnn-matrix-{entry['id']}",
        f"--array={spec}",
        f"--output={output}",
        f"--chdir={Path.cwd()}",
        *entry["sbatch"],
    ]
    job_id = sl.submit(options, script)
    if entry.get("job_id"):
        entry.setdefault("previous_jobs", []).append(entry["job_id"])
    entry["job_id"] = job_id
    log.info(
        "slurm: submitted job %s: %s, %d task(s) (%s)",
        job_id,
        entry["label"],
        len(indices),
        " ".join(entry["sbatch"]) or "default partition",
    )
    return job_id


def _submit_merge(run_dir: Path, state: dict[str, Any], arrays: Sequence[str]) -> None:
    script = _script(
        run_dir,
        "merge",
        ["--slurm-merge", "--results", str(run_dir)],
        "cudnn-matrix: merge the shard run folders once every array job ended",
    )
    options = [
        "--job-name=cudnn-matrix-merge",
        f"--dependency=afterany:{':'.join(arrays)}",
        f"--output={run_dir / 'slurm' / 'merge.out'}",
        f"--chdir={Path.cwd()}",
        "--time=00:30:00",
    ]
    partition = state.get("merge_partition")
    if partition:  # the first group's: a partition the cluster accepts our jobs in
        options.append(f"--partition={partition}")
    merge_id = sl.submit(options, script)
    state["merge"] = {"job_id": merge_id, "state": None}
    log.info("slurm: submitted merge job %s (afterany:%s)", merge_id, ":".join(arrays))


def _submit(
    config: ValidateConfig, run_dir: Path, runners: Runners, shards: int, plan: Plan
) -> dict[str, Any]:
    groups = job_groups(plan, runners)
    if not groups:
        msg = "--executor slurm: no planned cell has a runner in " + str(runners.path)
        raise ConfigError(msg)
    durations_src = config.durations
    if durations_src is None:
        from validate.env.venvs import cache_root

        durations_src = cache_root(config.cache_dir) / "durations.json"
    durations = {} if str(durations_src) == "none" else read_durations(durations_src)
    write_json(run_dir / "durations.json", durations)  # every task splits by this one file
    state: dict[str, Any] = {
        "version": _VERSION,
        "config": config.to_dict(),
        "runners": str(runners.path.resolve()),
        "submitted_at": time.time(),
        "merge_partition": groups[0].runner.partition,
        "groups": [],
        "merge": None,
    }
    submitted: list[str] = []
    try:
        for number, group in enumerate(groups, 1):
            group_id = f"{group.arch}-{number}"
            values = {axis: [value] for axis, value in group.env}
            values |= {"arch": [group.arch], "driver": list(group.drivers)}
            entry: dict[str, Any] = {
                "id": group_id,
                "arch": group.arch,
                "label": _describe(group),
                "values": values,
                "executor": group.runner.executor,
                "time": group.runner.time,
                "sbatch": _sbatch_options(group),
                "tasks": shards,
                "job_id": None,
                "states": {},
                "not_scheduled": [],
            }
            state["groups"].append(entry)
            _script(
                run_dir,
                group_id,
                ["--slurm-task", f"{group_id}:@TASK@", "--results", str(run_dir)],
                f"cudnn-matrix: group {group_id} ({_describe(group)}), one shard per array task",
            )
            _save_state(run_dir, state)  # the group is on disk before its job exists
            submitted.append(_submit_array(run_dir, entry, range(shards)))
            _save_state(run_dir, state)
        _submit_merge(run_dir, state, submitted)
        _save_state(run_dir, state)
    except BaseException:
        sl.cancel(submitted)  # no half-submitted run left queued, nothing to reattach to
        _state_path(run_dir).unlink(missing_ok=True)
        raise
    return state


def _incomplete(run_dir: Path, state: dict[str, Any]) -> dict[str, list[int]]:
    """Group id -> the tasks whose folder lacks a result for some of their units."""
    config = ValidateConfig.from_dict(state["config"])
    out: dict[str, list[int]] = {}
    for group in state["groups"]:
        _, _, units = _units(_group_config(config, group, run_dir), group["tasks"])
        for index, mine in enumerate(units):
            folder = _shard_dir(run_dir, group["id"], index)
            _, results = _shard_results(folder)
            done = {(r.cell_id, r.case) for r in results}
            if any(u not in done for u in mine):
                out.setdefault(group["id"], []).append(index)
    return out


def _resubmit(run_dir: Path, state: dict[str, Any]) -> bool:
    """--resume of a run whose jobs all ended: run the unfinished tasks again (each completes its
    shard folder, as `validate --resume` does); False when every task finished."""
    todo = _incomplete(run_dir, state)
    if not todo:
        return False
    log.info("slurm: --resume runs the unfinished tasks again")
    arrays: list[str] = []
    state["submitted_at"] = time.time()
    for group in state["groups"]:
        indices = todo.get(group["id"])
        if not indices:
            continue
        states = {i: t for i, t in _states(group).items() if i not in indices}
        _put_states(group, states)
        group["not_scheduled"] = [i for i in group.get("not_scheduled", []) if i not in indices]
        arrays.append(_submit_array(run_dir, group, indices))
        _save_state(run_dir, state)
    _submit_merge(run_dir, state, arrays)
    _save_state(run_dir, state)
    return True


# --- wait -----------------------------------------------------------------------------------------


def _job_ids(state: dict[str, Any]) -> list[str]:
    ids = [g["job_id"] for g in state["groups"] if g.get("job_id")]
    if state.get("merge"):
        ids.append(state["merge"]["job_id"])
    return ids


def _poll(state: dict[str, Any]) -> bool:
    """Refresh every task's state (and the merge job's); True when every array task ended and
    the merge job is not running. A merge job that has not started by then is cancelled: the
    tool merges itself (the merge job is for a run whose tool is gone)."""
    done = True
    for group in state["groups"]:
        if not group.get("job_id"):
            continue
        states = sl.array_states(group["job_id"], _states(group), group["tasks"])
        _put_states(group, states)
        done = done and all(s.final for s in states.values())
    merge = state.get("merge")
    if merge:
        known = sl.TaskState(**merge["state"]) if merge.get("state") else None
        merge_state = sl.job_state(merge["job_id"], known)
        if done and merge_state.state in {"PENDING", "SUBMITTED"}:
            sl.cancel([merge["job_id"]])
            merge_state = replace(merge_state, state="CANCELLED", reason="merged by the tool")
        merge["state"] = asdict(merge_state)
        done = done and merge_state.final
    return done


def _queue_timeouts(state: dict[str, Any], limit: float | None) -> None:
    """Cancel the tasks still pending `limit` seconds after submission (they are not scheduled)."""
    if limit is None or time.time() - float(state["submitted_at"]) < limit:
        return
    for group in state["groups"]:
        late = [i for i, s in _states(group).items() if s.state == "PENDING"]
        if late:
            sl.cancel([f"{group['job_id']}_{i}" for i in late])
            group["not_scheduled"] = sorted({*group.get("not_scheduled", []), *late})
            log.warning(
                "slurm: %s: task(s) %s still pending after --queue-timeout %g s: cancelled",
                group["id"],
                ", ".join(str(i) for i in late),
                limit,
            )


def _progress(state: dict[str, Any]) -> str:
    parts = []
    for group in state["groups"]:
        counts: dict[str, int] = {}
        for task in _states(group).values():
            counts[task.state] = counts.get(task.state, 0) + 1
        text = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "submitted"
        parts.append(f"{group['id']} (job {group['job_id']}): {text}")
    merge = state.get("merge") or {}
    if merge.get("state"):
        parts.append(f"merge (job {merge['job_id']}): {merge['state']['state']}")
    return "slurm: " + "; ".join(parts)


def _wait(run_dir: Path, state: dict[str, Any], queue_timeout: float | None) -> None:
    poll_s = float(os.environ.get(POLL_ENV) or 10.0)
    shown = ""
    try:
        while True:
            done = _poll(state)
            _save_state(run_dir, state)
            line = _progress(state)
            if line != shown:
                log.info("%s", line)
                shown = line
            if done:
                return
            _queue_timeouts(state, queue_timeout)
            _save_state(run_dir, state)
            time.sleep(poll_s)
    except KeyboardInterrupt:
        ids = _job_ids(state)
        log.warning("slurm: interrupted: scancel %s", " ".join(ids))
        sl.cancel(ids)
        state["cancelled_at"] = now_stamp()
        _save_state(run_dir, state)
        raise


# --- merge ----------------------------------------------------------------------------------------


def _reason(run_dir: Path, group: dict[str, Any], index: int, task: sl.TaskState | None) -> str:
    """Why a unit of this task has no result: the state Slurm ended the task in."""
    folder = _shard_dir(run_dir, group["id"], index)
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


def _shard_results(folder: Path) -> tuple[dict[str, Any], list[CaseResult]]:
    """A task's run folder: run.json and its results. A task Slurm killed never sealed its key;
    sealing it here (when this host sees the key) makes the folder verify anywhere."""
    if not (folder / "results.jsonl").is_file():
        return {}, []
    if not (folder / "results.key").is_file():
        with contextlib.suppress(KeyError, OSError):
            RunKey.for_run(folder).seal(folder)
    meta: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        meta = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    skipped: list[str] = []
    results = load_results([folder], skipped=skipped)
    for line in skipped:
        log.warning("skipped %s", line)
    return meta, results


#: Task states in which Slurm signalled the task's processes (its cases' too).
_KILLED: Final = frozenset({"TIMEOUT", "CANCELLED", "NODE_FAIL", "PREEMPTED", "DEADLINE"})


def _killed_by_slurm(results: Sequence[CaseResult], reason: str) -> list[CaseResult]:
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
        plan, cases, units = _units(_group_config(config, group, run_dir), group["tasks"])
        planned += plan.planned
        pruned += [p for p in plan.pruned if p[0].id not in {c.id for c, _ in pruned}]
        cells = {cell.id: cell for cell in plan.planned}
        by_name = {case.name: case for case in cases}
        tasks = _states(group)
        for index, mine in enumerate(units):
            folder = _shard_dir(run_dir, group["id"], index)
            shard_meta, results = _shard_results(folder)
            task = tasks.get(index)
            if task is not None and task.state in _KILLED:
                results = _killed_by_slurm(results, _reason(run_dir, group, index, task))
            if results:
                info = RunInfo(
                    run_id=str(shard_meta.get("run_id", folder)), path=folder, meta=shard_meta
                )
                runs.append((info, results))
            done = {(r.cell_id, r.case) for r in results}
            missing = [u for u in mine if u not in done]
            if missing:
                reason = _reason(run_dir, group, index, task)
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
            "tasks": {i: s.state for i, s in _states(g).items()},
            "not_scheduled": g.get("not_scheduled", []),
        }
        for g in state["groups"]
    }
    meta["slurm_errors"] = len(errors)
    write_json(meta_path, meta)
    return results, Plan(planned=planned, pruned=pruned)


def _summarise(run_dir: Path, state: dict[str, Any]) -> RunOutcome:
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
    state = _load_state(run_dir)
    state["merge"] = None  # this job is the merge job: it does not wait for itself
    _poll(state)
    return _summarise(run_dir, state)


# --- the command ----------------------------------------------------------------------------------


def run(
    config: ValidateConfig,
    *,
    shards: int = 1,
    queue_timeout: float | None = None,
    runners_path: Path | None = None,
    resolve: Callable[[ValidateConfig], ValidateConfig] | None = None,
) -> RunOutcome:
    """`validate --executor slurm`: submit (or, with --resume, reattach), wait, merge; the
    merged run's outcome. The tool holds RUN's lock while it waits. `resolve`: as
    workflow.run's, after the input files are read."""
    from validate.execute import EXECUTORS
    from validate.plan.host import detect_host

    sl.require()
    if config.resume and config.results_dir is None:
        msg = "validate: --resume needs --results DIR (the folder of the Slurm run to reattach to)"
        raise ConfigError(msg)
    if config.shard is not None:
        msg = "--executor slurm: --shard is for one task; use --shards N (tasks per environment)"
        raise ConfigError(msg)
    given = None if config.results_dir is None else config.results_dir.resolve()
    state: dict[str, Any] | None = None
    if given is not None and _state_path(given).is_file():
        if not config.resume:
            msg = (
                f"--results {given}: already holds a Slurm run ({STATE_FILE}); --resume "
                "reattaches to its jobs, or choose another folder"
            )
            raise ConfigError(msg)
        state = _load_state(given)
    else:
        # every input file is read and checked before the run folder exists: bad input writes
        # nothing (the tasks read the known issues again on their nodes)
        runners = load_runners(runners_path, executors=tuple(EXECUTORS))
        tiered, tier, left_out = tier_stage(config)  # --tier: the groups run their part of it
        plan = prune_without_runner(tiered, runners)
        cases_stage(config)  # bad cases are bad input now, not in every task
        load_known_issues(config.known_issues)
        if resolve is not None:  # the version pins, before the run folder (the tasks get them)
            resolved = resolve(config)
            if resolved.selectors != config.selectors:
                tiered, tier, left_out = tier_stage(resolved)
                plan = prune_without_runner(tiered, runners)
            config = resolved
    # without --results a fresh folder of its own; either way locked while the tool waits, so no
    # second tool submits into it or reattaches to the same jobs
    with open_run(given) as opened:
        run_dir = opened.folder.resolve()
        if state is not None:
            log.info("slurm: reattaching to jobs %s", " ".join(_job_ids(state)))
            _wait(run_dir, state, queue_timeout)
            _resubmit(run_dir, state)
        else:
            config = replace(config, results_dir=run_dir, resume=False)
            meta = provenance(config, detect_host(), plan, opened.id)
            if tier is not None:
                meta["tier"] = tier_record(tier, left_out)
            write_json(run_dir / "run.json", meta)
            state = _submit(config, run_dir, runners, shards, plan)
        _wait(run_dir, state, queue_timeout)
        return _summarise(run_dir, state)


class SlurmDispatcher:
    """`--executor slurm` in the DISPATCHERS registry."""

    name = "slurm"

    def available(self) -> bool:
        return sl.available()

    def run(self, config: ValidateConfig, options: DispatchOptions) -> RunOutcome:
        return run(
            config,
            shards=options.shards,
            queue_timeout=options.queue_timeout,
            runners_path=options.runners,
            resolve=options.resolve,
        )
