"""A Slurm run folder's state (`slurm.json`) and what each array task runs: read by the tool
that submits and waits, by every task, and by the merge job (dispatch/slurm.py has the whole
layout)."""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any, Final

from validate.config import Selectors, ValidateConfig
from validate.dispatch import sbatch as sl
from validate.errors import ConfigError
from validate.model.results import CaseResult, RunKey, load_results, write_json
from validate.plan.shard import Unit, assign, read_durations
from validate.workflow import cases_stage, plan_stage

if TYPE_CHECKING:
    from pathlib import Path

    from validate.execute.cases import Case
    from validate.plan.rules import Plan

__all__ = [
    "STATE_FILE",
    "STATE_VERSION",
    "group_config",
    "group_units",
    "load_state",
    "put_task_states",
    "save_state",
    "shard_dir",
    "shard_results",
    "state_path",
    "task_states",
]

log = logging.getLogger(__name__)


STATE_FILE: Final = "slurm.json"


STATE_VERSION: Final = 1


def state_path(run_dir: Path) -> Path:
    return run_dir / STATE_FILE


def load_state(run_dir: Path) -> dict[str, Any]:
    path = state_path(run_dir)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        msg = f"--results {run_dir}: {STATE_FILE} unreadable ({exc}); not a Slurm run folder"
        raise ConfigError(msg) from exc
    if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
        msg = f"--results {run_dir}: {STATE_FILE} is not a Slurm run of this tool (version {STATE_VERSION})"
        raise ConfigError(msg)
    return data


def save_state(run_dir: Path, state: dict[str, Any]) -> None:
    write_json(state_path(run_dir), state)


def shard_dir(run_dir: Path, group_id: str, index: int) -> Path:
    return run_dir / "shards" / group_id / str(index + 1)


def task_states(group: dict[str, Any]) -> dict[int, sl.TaskState]:
    return {int(i): sl.TaskState(**s) for i, s in group.get("states", {}).items()}


def put_task_states(group: dict[str, Any], states: dict[int, sl.TaskState]) -> None:
    group["states"] = {str(i): asdict(s) for i, s in sorted(states.items())}


def group_config(config: ValidateConfig, group: dict[str, Any], run_dir: Path) -> ValidateConfig:
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


def group_units(config: ValidateConfig, tasks: int) -> tuple[Plan, list[Case], list[list[Unit]]]:
    """The group's plan, cases, and each task's units: what `validate --shard i/n` would pick."""
    plan, cases = plan_stage(config), cases_stage(config)
    durations = read_durations(config.durations)
    units = [(cell.id, case.name) for cell in plan.planned for case in cases]
    return plan, cases, assign(units, durations, tasks)


def shard_results(folder: Path) -> tuple[dict[str, Any], list[CaseResult]]:
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
