"""The jobs of a Slurm run: the groups' array jobs and the merge job submitted, the unfinished
tasks submitted again on --resume, and the wait, with its progress lines and the queue timeout."""

from __future__ import annotations

import logging
import os
import shlex
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from validate.config import ValidateConfig
from validate.dispatch import sbatch as sl
from validate.dispatch.runners import Runners, job_groups
from validate.dispatch.slurm_state import (
    STATE_VERSION,
    group_config,
    group_units,
    put_task_states,
    save_state,
    shard_dir,
    shard_results,
    state_path,
    task_states,
)
from validate.errors import ConfigError
from validate.execute.records import now_stamp
from validate.model.results import write_json
from validate.plan.shard import read_durations

if TYPE_CHECKING:
    from collections.abc import Sequence

    from validate.dispatch.runners import JobGroup
    from validate.plan.rules import Plan

__all__ = [
    "POLL_ENV",
    "batch_script",
    "job_ids",
    "poll",
    "resubmit",
    "sbatch_options",
    "submit",
    "wait",
]

log = logging.getLogger(__name__)


#: Seconds between two looks at the queue (default 10); the tests use 1.
POLL_ENV: Final = "CUDNN_MATRIX_SLURM_POLL_S"


def sbatch_options(group: JobGroup) -> list[str]:
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
    # the ledger inside the task books the CPUs and memory the task was given (its affinity,
    # its free memory): without these a cluster's default task may hold one CPU for 8 GPUs
    if runner.cpus:
        options.append(f"--cpus-per-task={runner.cpus}")
    if runner.mem:
        options.append(f"--mem={runner.mem}")
    return options


def batch_script(run_dir: Path, name: str, args: Sequence[str], comment: str) -> Path:
    """A batch script that runs this tool: this interpreter and this package, the folder that
    holds `validate/` first on PYTHONPATH (the nodes share their paths, as they share the run
    folder), so a checkout that is not installed runs there too."""
    path = run_dir / "slurm" / f"{name}.sh"
    path.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "validate", "validate", *args]
    body = " ".join(shlex.quote(a) for a in argv).replace("@TASK@", '"$SLURM_ARRAY_TASK_ID"')
    package = shlex.quote(str(Path(__file__).resolve().parents[2]))
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
    script = batch_script(
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


def submit(
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
        "version": STATE_VERSION,
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
                "sbatch": sbatch_options(group),
                "tasks": shards,
                "job_id": None,
                "states": {},
                "not_scheduled": [],
            }
            state["groups"].append(entry)
            batch_script(
                run_dir,
                group_id,
                ["--slurm-task", f"{group_id}:@TASK@", "--results", str(run_dir)],
                f"cudnn-matrix: group {group_id} ({_describe(group)}), one shard per array task",
            )
            save_state(run_dir, state)  # the group is on disk before its job exists
            submitted.append(_submit_array(run_dir, entry, range(shards)))
            save_state(run_dir, state)
        _submit_merge(run_dir, state, submitted)
        save_state(run_dir, state)
    except BaseException:
        sl.cancel(submitted)  # no half-submitted run left queued, nothing to reattach to
        state_path(run_dir).unlink(missing_ok=True)
        raise
    return state


def _incomplete(run_dir: Path, state: dict[str, Any]) -> dict[str, list[int]]:
    """Group id -> the tasks whose folder lacks a result for some of their units."""
    config = ValidateConfig.from_dict(state["config"])
    out: dict[str, list[int]] = {}
    for group in state["groups"]:
        _, _, units = group_units(group_config(config, group, run_dir), group["tasks"])
        for index, mine in enumerate(units):
            folder = shard_dir(run_dir, group["id"], index)
            _, results = shard_results(folder)
            done = {(r.cell_id, r.case) for r in results}
            if any(u not in done for u in mine):
                out.setdefault(group["id"], []).append(index)
    return out


def resubmit(run_dir: Path, state: dict[str, Any]) -> bool:
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
        states = {i: t for i, t in task_states(group).items() if i not in indices}
        put_task_states(group, states)
        group["not_scheduled"] = [i for i in group.get("not_scheduled", []) if i not in indices]
        arrays.append(_submit_array(run_dir, group, indices))
        save_state(run_dir, state)
    _submit_merge(run_dir, state, arrays)
    save_state(run_dir, state)
    return True


def job_ids(state: dict[str, Any]) -> list[str]:
    ids = [g["job_id"] for g in state["groups"] if g.get("job_id")]
    if state.get("merge"):
        ids.append(state["merge"]["job_id"])
    return ids


def poll(state: dict[str, Any]) -> bool:
    """Refresh every task's state (and the merge job's); True when every array task ended and
    the merge job is not running. A merge job that has not started by then is cancelled: the
    tool merges itself (the merge job is for a run whose tool is gone)."""
    done = True
    for group in state["groups"]:
        if not group.get("job_id"):
            continue
        states = sl.array_states(group["job_id"], task_states(group), group["tasks"])
        put_task_states(group, states)
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
        late = [i for i, s in task_states(group).items() if s.state == "PENDING"]
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
        for task in task_states(group).values():
            counts[task.state] = counts.get(task.state, 0) + 1
        text = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "submitted"
        parts.append(f"{group['id']} (job {group['job_id']}): {text}")
    merge = state.get("merge") or {}
    if merge.get("state"):
        parts.append(f"merge (job {merge['job_id']}): {merge['state']['state']}")
    return "slurm: " + "; ".join(parts)


def wait(run_dir: Path, state: dict[str, Any], queue_timeout: float | None) -> None:
    poll_s = float(os.environ.get(POLL_ENV) or 10.0)
    shown = ""
    try:
        while True:
            done = poll(state)
            save_state(run_dir, state)
            line = _progress(state)
            if line != shown:
                log.info("%s", line)
                shown = line
            if done:
                return
            _queue_timeouts(state, queue_timeout)
            save_state(run_dir, state)
            time.sleep(poll_s)
    except KeyboardInterrupt:
        ids = job_ids(state)
        log.warning("slurm: interrupted: scancel %s", " ".join(ids))
        sl.cancel(ids)
        state["cancelled_at"] = now_stamp()
        save_state(run_dir, state)
        raise
