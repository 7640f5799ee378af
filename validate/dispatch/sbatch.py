"""Slurm's command-line tools, as this tool uses them: submit, watch, cancel (no case logic here).

`sbatch --parsable` submits; `scontrol show job -o` is the state of an array's tasks while the
controller keeps them (pending, running, and ended ones for `MinJobAge` seconds); after that
`sacct` (accounting storage), else `sacct -c` (the jobcomp file) gives the final state. With the
jobcomp file `sacct` prints raw job ids only, so the raw id of each task is remembered from
`scontrol` while the task was known there (`TaskState.job_id`).

The orchestration (which tasks, what they run, how results merge) is dispatch/slurm.py.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final

from validate.errors import ConfigError, ValidateError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

__all__ = [
    "FINAL_STATES",
    "SlurmError",
    "TaskState",
    "array_states",
    "available",
    "cancel",
    "job_state",
    "parse_scontrol",
    "require",
    "submit",
]

log = logging.getLogger(__name__)

#: States after which a job never runs again (squeue(1) JOB STATE CODES).
FINAL_STATES: Final = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
    }
)
_TOOLS: Final = ("sbatch", "scontrol", "scancel", "sacct")
_CALL_TIMEOUT_S: Final = 60.0
_TASK_IDS: Final = re.compile(r"(\d+)(?:-(\d+))?(?::(\d+))?")


class SlurmError(ValidateError):
    """Slurm refused a request or cannot be reached (sbatch, scontrol, scancel failed)."""

    return_code = 4


def available() -> bool:
    """Whether Slurm's client tools are on PATH."""
    return all(shutil.which(tool) for tool in _TOOLS)


def require() -> None:
    """A ConfigError naming the missing tools (before anything is submitted)."""
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if missing:
        msg = (
            f"--executor slurm: {', '.join(missing)} not on PATH; run on a host with Slurm's "
            "client tools (a login node)"
        )
        raise ConfigError(msg)


def _call(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(
            list(argv), capture_output=True, text=True, check=False, timeout=_CALL_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        msg = f"{argv[0]}: {exc}"
        raise SlurmError(msg) from exc
    if check and proc.returncode != 0:
        said = (proc.stderr or proc.stdout).strip().splitlines()
        msg = f"{' '.join(argv[:2])}: exit {proc.returncode}: {said[-1] if said else 'no output'}"
        raise SlurmError(msg)
    return proc


def submit(options: Sequence[str], script: Path) -> str:
    """`sbatch --parsable OPTIONS SCRIPT`; the job id (an array's id for `--array`)."""
    proc = _call(["sbatch", "--parsable", *options, str(script)])
    job_id = proc.stdout.strip().split(";")[0]
    if not job_id.isdigit():
        msg = f"sbatch: expected a job id, got {proc.stdout.strip()!r}"
        raise SlurmError(msg)
    return job_id


def cancel(job_ids: Sequence[str]) -> None:
    """`scancel` these jobs (an array id cancels all its tasks, `id_i` one task); never raises
    for a job that already ended."""
    if job_ids:
        proc = _call(["scancel", *job_ids], check=False)
        if proc.returncode != 0:
            log.warning("scancel %s: %s", " ".join(job_ids), proc.stderr.strip())


@dataclass(frozen=True, kw_only=True)
class TaskState:
    """One array task (or a plain job) as Slurm last reported it."""

    index: int
    state: str  # PENDING, RUNNING, COMPLETED, TIMEOUT, ... ("UNKNOWN": Slurm no longer knows it)
    job_id: str = ""  # the task's own (raw) job id, once Slurm gave it one
    reason: str = ""  # why it is pending, or why it ended (TimeLimit, NonZeroExitCode, ...)
    exit_code: str = ""  # "3:0": exit status and signal
    run_time: str = ""

    @property
    def final(self) -> bool:
        """Ended for good; UNKNOWN (neither the controller nor accounting knows the task any more,
        which happens only long after it ended) counts as ended."""
        return self.state in FINAL_STATES or self.state == "UNKNOWN"


def _fields(line: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for token in line.split():
        name, sep, value = token.partition("=")
        if sep and name not in out:
            out[name] = value
    return out


def _indices(text: str) -> list[int]:
    """ArrayTaskId as scontrol prints it: `3`, `0-7`, `1,4-6`, `0-9%2` (a limit), `0-8:2`."""
    out: list[int] = []
    for part in text.split("%")[0].split(","):
        found = _TASK_IDS.fullmatch(part.strip())
        if found is None:
            continue
        first = int(found[1])
        last = int(found[2]) if found[2] else first
        out += range(first, last + 1, int(found[3] or 1))
    return out


def parse_scontrol(text: str) -> dict[int, TaskState]:
    """Task index -> state from `scontrol show job -o ID` (one line per record; pending tasks of
    an array share one record whose ArrayTaskId is a range)."""
    out: dict[int, TaskState] = {}
    for line in text.splitlines():
        got = _fields(line)
        if "JobState" not in got:
            continue
        indices = _indices(got["ArrayTaskId"]) if "ArrayTaskId" in got else [0]
        for index in indices:
            out[index] = TaskState(
                index=index,
                state=got["JobState"],
                job_id=got.get("JobId", "") if len(indices) == 1 else "",
                reason=got.get("Reason", "").removeprefix("None"),
                exit_code=got.get("ExitCode", ""),
                run_time=got.get("RunTime", ""),
            )
    return out


def _sacct(job_id: str, known: Mapping[int, TaskState]) -> dict[int, TaskState]:
    """Final states from accounting, else from the jobcomp file (`sacct -c`)."""
    columns = ["-n", "-P", "-X", "-j", job_id, "-o", "JobIDRaw,JobID,State,ExitCode"]
    by_raw = {t.job_id: i for i, t in known.items() if t.job_id}
    out: dict[int, TaskState] = {}
    for argv in (["sacct", *columns], ["sacct", "-c", *columns]):
        proc = _call(argv, check=False)
        if proc.returncode != 0:
            continue
        for line in proc.stdout.splitlines():
            parts = line.split("|")
            if len(parts) < 4:
                continue
            raw, shown, state, code = parts[:4]
            index: int | None
            if "_" in shown:  # accounting names array tasks ARRAY_INDEX
                tail = shown.rpartition("_")[2]
                index = int(tail) if tail.isdigit() else None
            else:
                index = by_raw.get(raw, 0 if raw == job_id and not by_raw else None)
            if index is None:
                continue
            out[index] = TaskState(index=index, state=state.split()[0], job_id=raw, exit_code=code)
        if out:
            return out
    return out


def array_states(job_id: str, known: Mapping[int, TaskState], tasks: int) -> dict[int, TaskState]:
    """The state of each of `tasks` tasks of array `job_id`; `known`: what was seen before (its
    raw ids find the tasks in `sacct -c`, its final states stand). A task Slurm no longer knows
    anywhere keeps its last known state, else is UNKNOWN."""
    out = {i: t for i, t in known.items() if t.final}
    if len(out) == tasks:
        return out
    proc = _call(["scontrol", "show", "job", "-o", job_id], check=False)
    if proc.returncode != 0 and "invalid job id" not in proc.stderr.lower():
        # the controller did not answer (restarting, overloaded): no news, try again later
        log.warning("scontrol show job %s: %s", job_id, proc.stderr.strip())
        return {i: known.get(i) or TaskState(index=i, state="SUBMITTED") for i in range(tasks)}
    seen = parse_scontrol(proc.stdout) if proc.returncode == 0 else {}
    # an array cancelled whole while pending is one record whose ArrayTaskId is NO_VAL: it names
    # no task, so accounting says which
    seen = {i: t for i, t in seen.items() if i < tasks}
    for index, state in seen.items():
        if index not in out:
            before = known.get(index)
            job = state.job_id or (before.job_id if before else "")
            out[index] = replace(state, job_id=job)
    missing = [i for i in range(tasks) if i not in out or not out[i].final]
    if missing and any(i not in seen for i in missing):
        for index, state in _sacct(job_id, known).items():
            if index in missing and index not in seen:
                out[index] = state
    for index in range(tasks):
        if index not in out:
            before = known.get(index)
            out[index] = before or TaskState(index=index, state="UNKNOWN")
    return out


def job_state(job_id: str, known: TaskState | None = None) -> TaskState:
    """The state of a plain (non-array) job."""
    return array_states(job_id, {0: known} if known else {}, 1)[0]
