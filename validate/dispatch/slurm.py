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

Here: the command and what a task runs. slurm_state.py: slurm.json and each group's config and
units; slurm_jobs.py: submit, resubmit and wait; slurm_merge.py: the merge.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from validate.config import ValidateConfig
from validate.dispatch import sbatch as sl
from validate.dispatch.runners import load_runners, prune_without_runner
from validate.dispatch.slurm_jobs import POLL_ENV, job_ids, resubmit, submit, wait
from validate.dispatch.slurm_merge import finalize, merge_job, summarise
from validate.dispatch.slurm_state import (
    STATE_FILE,
    group_config,
    load_state,
    shard_dir,
    state_path,
)
from validate.errors import ConfigError
from validate.judge.known_issues import load_known_issues
from validate.model.results import write_json
from validate.model.runs import open_run
from validate.workflow import RunOutcome, cases_stage, provenance, tier_record, tier_stage

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from validate.dispatch import DispatchOptions

__all__ = ["POLL_ENV", "SlurmDispatcher", "finalize", "merge_job", "run", "run_task"]

log = logging.getLogger(__name__)


def run_task(run_dir: Path, task: str) -> RunOutcome:
    """Inside an array task (`validate --slurm-task GROUP:INDEX --results RUN`): the group's
    shard INDEX+1 as an ordinary sharded validate run (it opens its shard folder as any run does).
    The CLI exits 0 whatever the verdict (the merge judges); bad input or a broken environment
    raises, and fails the task."""
    from validate.workflow import run as run_validate

    group_id, _, index_text = task.rpartition(":")
    state = load_state(run_dir)
    group = next((g for g in state["groups"] if g["id"] == group_id), None)
    if group is None or not index_text.isdigit() or int(index_text) >= group["tasks"]:
        msg = f"--slurm-task {task}: no such group task in {state_path(run_dir)}"
        raise ConfigError(msg)
    index = int(index_text)
    base = ValidateConfig.from_dict(state["config"])
    folder = shard_dir(run_dir, group_id, index)
    config = replace(
        group_config(base, group, run_dir),
        shard=f"{index + 1}/{group['tasks']}",
        results_dir=folder,
        resume=(folder / "run.json").is_file(),  # a requeued task completes its run
        argv=tuple(sys.argv[1:]),
    )
    return run_validate(config)


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
    if given is not None and state_path(given).is_file():
        if not config.resume:
            msg = (
                f"--results {given}: already holds a Slurm run ({STATE_FILE}); --resume "
                "reattaches to its jobs, or choose another folder"
            )
            raise ConfigError(msg)
        state = load_state(given)
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
            log.info("slurm: reattaching to jobs %s", " ".join(job_ids(state)))
            wait(run_dir, state, queue_timeout)
            resubmit(run_dir, state)
        else:
            config = replace(config, results_dir=run_dir, resume=False)
            meta = provenance(config, detect_host(), plan, opened.id)
            if tier is not None:
                meta["tier"] = tier_record(tier, left_out)
            write_json(run_dir / "run.json", meta)
            state = submit(config, run_dir, runners, shards, plan)
        wait(run_dir, state, queue_timeout)
        return summarise(run_dir, state)


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
