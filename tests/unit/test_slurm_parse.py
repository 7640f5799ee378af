"""Slurm's answers as dispatch/sbatch.py reads them (lines as `scontrol show job -o` printed them on
slurm-wlm 22.05), and the `validate --executor slurm` flags refused before anything is submitted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from usercli import cli

from validate.dispatch.sbatch import FINAL_STATES, TaskState, parse_scontrol

# an array of three: task 2 still pending, tasks 0 and 1 ended (trimmed to the fields read)
ARRAY = """\
JobId=1 ArrayJobId=1 ArrayTaskId=2 JobName=wrap JobState=PENDING Reason=Resources ExitCode=0:0 RunTime=00:00:00
JobId=3 ArrayJobId=1 ArrayTaskId=1 JobName=wrap JobState=COMPLETED Reason=None ExitCode=0:0 RunTime=00:00:02
JobId=2 ArrayJobId=1 ArrayTaskId=0 JobName=wrap JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0 RunTime=00:00:02
"""
PENDING_RANGE = (
    "JobId=7 ArrayJobId=7 ArrayTaskId=0-3,5%2 JobState=PENDING Reason=JobHeldUser ExitCode=0:0\n"
)


def test_each_task_of_an_array_gets_its_state_and_own_job_id() -> None:
    states = parse_scontrol(ARRAY)
    assert sorted(states) == [0, 1, 2]
    assert states[0] == TaskState(
        index=0,
        state="FAILED",
        job_id="2",
        reason="NonZeroExitCode",
        exit_code="3:0",
        run_time="00:00:02",
    )
    assert states[1].state == "COMPLETED"
    assert states[1].reason == ""  # "None" is no reason
    assert states[2].state == "PENDING"
    assert [s.final for _, s in sorted(states.items())] == [True, True, False]


def test_pending_tasks_that_share_one_record_are_each_pending_without_a_job_id() -> None:
    states = parse_scontrol(PENDING_RANGE)
    assert sorted(states) == [0, 1, 2, 3, 5]  # the %2 limit is no task
    assert {s.state for s in states.values()} == {"PENDING"}
    assert {s.job_id for s in states.values()} == {""}  # not the array's id: not yet their own
    assert states[5].reason == "JobHeldUser"


def test_a_plain_job_is_task_zero_and_unknown_counts_as_ended() -> None:
    (state,) = parse_scontrol("JobId=9 JobName=merge JobState=TIMEOUT Reason=TimeLimit\n").values()
    assert (state.index, state.job_id, state.state, state.final) == (0, "9", "TIMEOUT", True)
    assert TaskState(index=0, state="UNKNOWN").final
    assert not TaskState(index=0, state="RUNNING").final
    assert {"TIMEOUT", "CANCELLED", "NODE_FAIL", "COMPLETED", "FAILED"} <= FINAL_STATES


@pytest.mark.parametrize(
    ("flags", "shown"),
    [
        (["--queue-timeout", "5"], "--queue-timeout is for --executor slurm"),
        (["--runners", "r.toml"], "--runners is for --executor slurm"),
        (["--shards", "2"], "--shards is for --executor slurm"),
        (["--executor", "slurm", "--shards", "0"], "argument --shards"),
        (["--executor", "slurm", "--queue-timeout", "nan"], "argument --queue-timeout"),
    ],
)
def test_slurm_flags_are_checked_before_any_work(
    flags: list[str], shown: str, tmp_path: Path
) -> None:
    proc = cli("validate", *flags, "--results", str(tmp_path), cwd=tmp_path, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert shown in proc.stderr


def test_slurm_without_its_tools_is_one_line_exit_2(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(Path(sys.executable).parent)}  # no sbatch there
    run = str(tmp_path / "run")
    proc = cli(
        "validate", "--executor", "slurm", "--results", run, cwd=tmp_path, env=env, timeout=60
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "sbatch" in proc.stderr
    assert "not on PATH" in proc.stderr
    assert not (tmp_path / "run" / "slurm.json").exists()


def test_a_case_killed_with_its_task_is_an_error_not_a_crash() -> None:
    from validate.dispatch.slurm_merge import killed_by_slurm
    from validate.model.outcome import Outcome
    from validate.model.results import CaseResult

    results = [
        CaseResult(case="a.py", outcome=Outcome.CRASH, signal="SIGTERM"),
        CaseResult(case="b.py", outcome=Outcome.CRASH, signal="SIGSEGV"),  # the product's own
        CaseResult(case="c.py", outcome=Outcome.PASS),
    ]
    out = killed_by_slurm(results, "slurm TIMEOUT: task 6_0 hit its time limit")
    assert [r.outcome for r in out] == [Outcome.ERROR, Outcome.CRASH, Outcome.PASS]
    assert out[0].reason == "slurm TIMEOUT: task 6_0 hit its time limit (the case died of SIGTERM)"


def test_sbatch_options_come_from_the_arch_runner() -> None:
    from validate.dispatch.runners import JobGroup, Runner
    from validate.dispatch.slurm_jobs import sbatch_options

    def options(**fields: object) -> list[str]:
        runner = Runner(arch="sm90", tags=("gpu",), runs_on=("gpu",), **fields)  # type: ignore[arg-type]
        return sbatch_options(JobGroup(runner=runner, env=(), drivers=("580",), cells=1))

    hopper = options(partition="hopper", constraint="sm90", gpus=2, time="02:00:00")
    assert hopper == ["--partition=hopper", "--constraint=sm90", "--gres=gpu:2", "--time=02:00:00"]
    assert options(gres="gpu:h200:1") == ["--gres=gpu:h200:1"]  # an explicit gres wins
    assert options(gpus=0) == []  # a CPU-only runner: no gres, the cluster's defaults
    # the CPUs and memory the task's ledger books its cases on
    assert options(gpus=8, cpus=64, mem="480G") == [
        "--gres=gpu:8",
        "--cpus-per-task=64",
        "--mem=480G",
    ]


def test_a_batch_script_puts_the_folder_holding_this_package_on_pythonpath(tmp_path: Path) -> None:
    """The task and merge scripts run `python -m validate` on the nodes, from a checkout that may
    not be installed there: PYTHONPATH must name the folder that holds `validate/`."""
    import validate
    from validate.dispatch.slurm_jobs import batch_script

    script = batch_script(tmp_path, "g-1", ["--slurm-task", "g-1:@TASK@"], "a group")
    text = script.read_text()
    (export,) = [ln for ln in text.splitlines() if ln.startswith("export PYTHONPATH=")]
    shown = subprocess.run(
        ["bash", "-c", f'{export}; printf %s "$PYTHONPATH"'],
        env={"PATH": os.environ["PATH"], "PYTHONPATH": "/elsewhere"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    first, rest = shown.split(":", 1)
    assert Path(first) / "validate" / "__init__.py" == Path(validate.__file__).resolve()
    assert rest == "/elsewhere"  # the node's own PYTHONPATH is kept after it
    assert '"$SLURM_ARRAY_TASK_ID"' in text
