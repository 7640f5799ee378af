"""`validate --executor slurm` against a real one-node Slurm (Debian slurm-wlm 22.05 + munge).

The fixture writes a slurm.conf (free ports, a private munge socket and key, the jobcomp file for
`sacct -c`), starts munged, slurmctld and slurmd in the foreground and stops each by its PID. The
cells are CPU-only: `--env current` over a venv holding real backend and frontend wheels, with
the small scripts of tests/resources/scripts as cases.

Skips with a reason when Slurm or munge is not installed, or when not root (slurmd runs jobs as
their user), unless CUDNN_MATRIX_REQUIRE_SLURM=1 (CI) turns the skip into a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from proctags import default_sigint
from usercli import cli, start

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "tests" / "resources" / "scripts"
BACKEND, FRONTEND = "9.13.0.50", "1.27.0"
#: two runner groups: sm90 on partition hopper with the node's feature, sm80 on the default one
CELLS = ["--cudnn", BACKEND, "--frontend", FRONTEND, "--cuda", "13.0", "--driver", "580"]
RUNNERS = """\
[runner.sm90]
tags = ["cpu"]
gpus = 0
partition = "hopper"
constraint = "sm90"
time = "{time}"

[runner.sm80]
tags = ["cpu"]
gpus = 0
time = "{time}"
"""
MATRIX = REPO / "tests" / "resources" / "matrices" / "two_runner_groups.toml"
_DAEMONS = ("munged", "slurmctld", "slurmd")
_TOOLS = ("sbatch", "squeue", "scontrol", "scancel", "sacct", "sinfo")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _missing() -> str | None:
    tools = [t for t in _DAEMONS if shutil.which(t) is None and not Path("/usr/sbin", t).exists()]
    tools += [t for t in _TOOLS if shutil.which(t) is None]
    if tools:
        return f"{', '.join(tools)} not installed (apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "not root: slurmd must start jobs as their user"
    return None


def _daemon(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


class Cluster:
    """A running one-node cluster: its folder and the environment its clients need."""

    def __init__(self, root: Path, env: Mapping[str, str], node: str) -> None:
        self.root, self.env, self.node = root, dict(env), node

    def call(self, *argv: str) -> str:
        proc = subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, check=True, timeout=60
        )
        return proc.stdout

    def node_state(self, state: str) -> None:
        """drain (nothing new starts; the jobs stay pending) or resume (of a drained node)."""
        extra = ["reason=test"] if state == "drain" else []
        self.call("scontrol", "update", f"nodename={self.node}", f"state={state}", *extra)

    def drained(self) -> bool:
        return "drain" in self.call("sinfo", "-h", "-n", self.node, "-o", "%T")

    def job_state(self, job: str) -> dict[str, str]:
        """Task index (or the job's own id) -> JobState, from scontrol."""
        out: dict[str, str] = {}
        for line in self.call("scontrol", "show", "job", "-o", job).splitlines():
            fields = dict(t.partition("=")[::2] for t in line.split() if "=" in t)
            out[fields.get("ArrayTaskId", fields["JobId"])] = fields["JobState"]
        return out

    def settled_state(self, job: str, timeout: float = 60.0) -> dict[str, str]:
        """`job_state` once no task is COMPLETING any more (a task cancelled while it ran shows
        COMPLETING until slurmd has reaped it, then CANCELLED)."""
        _wait_for(
            f"job {job} to settle",
            lambda: "COMPLETING" not in self.job_state(job).values(),
            timeout,
        )
        return self.job_state(job)


def _wait_for(what: str, check: Callable[[], bool], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    reason = _missing()
    if reason is not None:
        if os.environ.get("CUDNN_MATRIX_REQUIRE_SLURM") == "1":
            pytest.fail(f"CUDNN_MATRIX_REQUIRE_SLURM=1 but {reason}")
        pytest.skip(reason)
    # munged refuses a socket folder others cannot enter, and pytest's folders are 0700
    root = Path(tempfile.mkdtemp(prefix="cudnn-matrix-slurm-"))
    root.chmod(0o755)
    for sub in ("state", "spool"):
        (root / sub).mkdir()
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    node = socket.gethostname().split(".")[0]
    cpus = os.cpu_count() or 2
    conf = root / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=cudnnmatrix",
                f"SlurmctldHost={node}",
                f"SlurmctldPort={_free_port()}",
                f"SlurmdPort={_free_port()}",
                "SlurmUser=root",
                "AuthType=auth/munge",
                f"AuthInfo=socket={root / 'munge.sock'}",
                "MpiDefault=none",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core_Memory",
                "DefMemPerCPU=500",  # without it every job takes the node's whole memory
                "MailProg=/bin/true",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",
                "JobCompType=jobcomp/filetxt",  # `sacct -c` reads it
                f"JobCompLoc={root / 'jobcomp.txt'}",
                f"StateSaveLocation={root / 'state'}",
                f"SlurmdSpoolDir={root / 'spool'}",
                f"SlurmctldPidFile={root / 'slurmctld.pid'}",
                f"SlurmdPidFile={root / 'slurmd.pid'}",
                f"SlurmctldLogFile={root / 'slurmctld.log'}",
                f"SlurmdLogFile={root / 'slurmd.log'}",
                "ReturnToService=2",
                "MinJobAge=3600",  # scontrol keeps final states for the whole module
                "KillWait=5",
                f"NodeName={node} CPUs={cpus} RealMemory={500 * cpus * 2} Feature=sm90 State=UNKNOWN",
                "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
                "PartitionName=hopper Nodes=ALL MaxTime=INFINITE State=UP",
            ]
        )
        + "\n"
    )
    env = {**os.environ, "SLURM_CONF": str(conf)}
    started: list[subprocess.Popen[bytes]] = []

    def start(name: str, *argv: str) -> None:
        with (root / f"{name}.out").open("wb") as log:  # the daemon keeps its own copy
            started.append(
                subprocess.Popen(
                    [_daemon(name), *argv],
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )

    try:
        start(
            "munged",
            "-F",
            f"--key-file={key}",
            f"--socket={root / 'munge.sock'}",
            f"--pid-file={root / 'munged.pid'}",
            f"--log-file={root / 'munged.log'}",
            f"--seed-file={root / 'munged.seed'}",
        )
        _wait_for("munged", lambda: (root / "munge.sock").exists(), 30)
        start("slurmctld", "-D", "-i")
        start("slurmd", "-D")
        cluster = Cluster(root, env, node)

        def idle() -> bool:
            proc = subprocess.run(
                ["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True, check=False
            )
            return proc.stdout.strip() == "idle"

        _wait_for("the node to be idle", idle, 60)
        yield cluster
    finally:
        for proc in reversed(started):  # by PID, each one this fixture started
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def base_python(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding the real backend and frontend wheels: the cells' `--env current`."""
    base = tmp_path_factory.mktemp("slurm-base") / "venv"
    subprocess.run(["uv", "venv", "--quiet", str(base)], check=True)
    python = base / "bin" / "python"
    wheels = [
        min(wheelhouse.glob(f"nvidia_cudnn_cu13-{BACKEND}-*.whl")),
        min(wheelhouse.glob(f"nvidia_cudnn_frontend-{FRONTEND}-*.whl")),
    ]
    install = ["uv", "pip", "install", "--quiet", "--python", str(python), "--no-index"]
    subprocess.run([*install, "--no-deps", *map(str, wheels)], check=True)
    return python


def _args(
    base_python: Path, tmp_path: Path, *cases: str, time_limit: str = "00:10:00"
) -> list[str]:
    runners = tmp_path / "runners.toml"
    runners.write_text(RUNNERS.format(time=time_limit))
    argv = [*CELLS, "--env", "current", "--base-python", str(base_python)]
    argv += ["--frontend-source", "current", "--runners", str(runners)]
    # the test's own cache, so its tasks' history is its own: in the session's cache an earlier
    # test recorded pass_script.py's CPU share (1.008), and on the 2-CPU node that share beside
    # hang.py's unknown one (1.0) ran the two one after the other (CI K, the Ctrl-C test: hang.py
    # had its timeout's result before the interrupt came). The ledger now reads a share that near
    # a whole number as that number (execute/ledger.py near_whole); the own cache stays, so that
    # no other test's history decides what these tests see
    argv += ["--cache-dir", str(tmp_path / "cache")]
    for case in cases:
        argv += ["--cases", str(SCRIPTS / case)]
    return argv


def _tool(cluster: Cluster, *args: str, cwd: Path) -> subprocess.Popen[str]:
    """`cudnn-matrix validate ARGS` started in `cwd` with the cluster's clients, left running."""
    return start(
        "validate",
        *args,
        cwd=cwd,
        env={**cluster.env, "CUDNN_MATRIX_SLURM_POLL_S": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )


def _finish(proc: subprocess.Popen[str], timeout: float = 300) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def _results(run_dir: Path) -> dict[tuple[str, str], dict[str, object]]:
    out = {}
    for line in (run_dir / "results.jsonl").read_text().splitlines():
        data = json.loads(line)
        out[data["cell_id"], data["case"]] = data
    return out


def _state(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_dir / "slurm.json").read_text())
    return data


def _jobs(run_dir: Path) -> list[str]:
    groups = _state(run_dir)["groups"]
    assert isinstance(groups, list)
    return [str(g["job_id"]) for g in groups]


def _submitted(run_dir: Path) -> bool:
    """Every array job of the run has its id in slurm.json."""
    try:
        jobs = _jobs(run_dir)
    except (OSError, ValueError, KeyError):  # not written yet, or written while read
        return False
    return bool(jobs) and "None" not in jobs


def _merge_submitted(run_dir: Path) -> bool:
    try:
        return bool(_state(run_dir).get("merge"))
    except (OSError, ValueError):
        return False


def _results_of_shards(run_dir: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line) for p in _shard_results(run_dir) for line in p.read_text().splitlines()
    ]


def _shard_results(run_dir: Path) -> list[Path]:
    return sorted(run_dir.glob("shards/*/*/results.jsonl"))


def test_submit_run_merge_equals_a_local_run(
    cluster: Cluster, wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """Two runner groups of one environment each (one cell per environment: a CPU-only host
    checks the pins of cells that share one only once), two shards each, real wheels."""
    (tmp_path / "matrix.toml").write_text(MATRIX.read_text())
    (tmp_path / "runners.toml").write_text(RUNNERS.format(time="00:10:00"))
    cache = tmp_path_factory.mktemp("slurm-envs")
    args = ["--matrix", "matrix.toml", "--wheelhouse", str(wheelhouse), "--no-backend-deps"]
    args += ["--cache-dir", str(cache)]
    for case in ("pass_script.py", "slow_pass.py", "fail_exit1.py"):
        args += ["--cases", str(SCRIPTS / case)]
    run_dir = tmp_path / "slurm-run"
    slurm_args = [*args, "--executor", "slurm", "--runners", "runners.toml", "--shards", "2"]
    rc, out, err = _finish(_tool(cluster, *slurm_args, "--results", str(run_dir), cwd=tmp_path))
    assert rc == 1, out + err  # fail_exit1.py fails: not signed off, like the local run
    assert "slurm: submitted job" in err
    assert "COMPLETED" in err  # progress from the queue
    local = tmp_path / "local-run"
    proc = cli("validate", *args, "--results", str(local), cwd=tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    merged, single = _results(run_dir), _results(local)
    assert {k: v["outcome"] for k, v in merged.items()} == {
        k: v["outcome"] for k, v in single.items()
    }
    assert len(merged) == 2 * 3  # 2 cells (sm90, sm80) x 3 cases
    assert sorted({str(v["outcome"]) for v in merged.values()}) == ["fail", "pass"]
    # two array jobs (one per runner group) of two tasks each, then the merge job
    state = _state(run_dir)
    groups = state["groups"]
    assert isinstance(groups, list)
    assert sorted(g["arch"] for g in groups) == ["sm80", "sm90"]
    for group in groups:
        tasks = cluster.job_state(str(group["job_id"]))
        assert sorted(tasks.values()) == ["COMPLETED", "COMPLETED"], tasks
    merge = state["merge"]
    assert isinstance(merge, dict)
    # the merge job merged, or had not started when the arrays ended and the tool merged itself
    assert cluster.job_state(str(merge["job_id"]))[str(merge["job_id"])] in {
        "COMPLETED",
        "CANCELLED",
    }
    assert len(_shard_results(run_dir)) == 4
    shards = sorted(
        (json.loads((p.parent / "run.json").read_text())["shard"]["index"])
        for p in _shard_results(run_dir)
    )
    assert shards == [1, 1, 2, 2]
    sm90 = run_dir / "slurm" / f"{next(g['id'] for g in groups if g['arch'] == 'sm90')}.sh"
    assert sm90.is_file()
    # the merged folder is an ordinary run folder for `report`
    report = cli("report", "--results", str(run_dir), "--format", "json", cwd=tmp_path, timeout=120)
    assert report.returncode == 1, report.stderr
    assert len(json.loads(report.stdout)["results"]) == 6


def _wait_for_result(run_dir: Path, case: str) -> None:
    def landed() -> bool:
        return any(case in p.read_text() for p in _shard_results(run_dir))

    _wait_for(f"{case} to finish in a task", landed, 180)


def test_a_task_cancelled_mid_run_keeps_its_finished_results(
    cluster: Cluster, base_python: Path, tmp_path: Path
) -> None:
    args = _args(base_python, tmp_path, "pass_script.py", "hang.py")
    run_dir = tmp_path / "run"
    tool = _tool(
        cluster,
        *["--executor", "slurm", *args, "--arch", "sm90", "--jobs", "2"],
        *["--results", str(run_dir)],
        cwd=tmp_path,
    )
    _wait_for_result(run_dir, "pass_script.py")
    (job,) = _jobs(run_dir)
    cluster.call("scancel", f"{job}_0")
    rc, out, err = _finish(tool)
    assert rc == 1, out + err
    results = {case: r for (_, case), r in _results(run_dir).items()}
    assert results["pass_script.py"]["outcome"] == "pass"  # finished before the cancel: kept
    hang = results["hang.py"]
    assert hang["outcome"] == "error"
    assert str(hang["reason"]).startswith(f"slurm CANCELLED: task {job}_0")
    assert "was cancelled" in str(hang["reason"])


def test_a_task_past_its_time_limit_is_error_timeout(
    cluster: Cluster, base_python: Path, tmp_path: Path
) -> None:
    """Slurm's smallest limit is a minute, and it checks limits about every 30 s."""
    args = _args(base_python, tmp_path, "pass_script.py", "hang.py", time_limit="00:01:00")
    run_dir = tmp_path / "run"
    tool = _tool(
        cluster,
        *["--executor", "slurm", *args, "--arch", "sm90", "--jobs", "2"],
        *["--results", str(run_dir)],
        cwd=tmp_path,
    )
    rc, out, err = _finish(tool, timeout=400)
    assert rc == 1, out + err
    (job,) = _jobs(run_dir)
    assert cluster.job_state(job) == {"0": "TIMEOUT"}
    results = {case: r for (_, case), r in _results(run_dir).items()}
    assert results["pass_script.py"]["outcome"] == "pass"
    reason = str(results["hang.py"]["outcome"]), str(results["hang.py"]["reason"])
    assert reason[0] == "error"
    assert reason[1].startswith(f"slurm TIMEOUT: task {job}_0")
    assert "hit its time limit (--time 00:01:00)" in reason[1]


@pytest.fixture
def drained(cluster: Cluster) -> Iterator[Cluster]:
    """The node drained: nothing new starts, submitted jobs stay pending; resumed afterwards."""
    cluster.node_state("drain")
    try:
        yield cluster
    finally:
        if cluster.drained():
            cluster.node_state("resume")


def test_the_tool_restarted_while_jobs_pend_reattaches_with_resume(
    drained: Cluster, base_python: Path, tmp_path: Path
) -> None:
    args = _args(base_python, tmp_path, "pass_script.py", "slow_pass.py")
    run_dir = tmp_path / "run"
    argv = ["--executor", "slurm", *args, "--arch", "sm90", "--results", str(run_dir)]
    first = _tool(drained, *argv, cwd=tmp_path)
    _wait_for("the jobs to be submitted", lambda: _submitted(run_dir) and _merge_submitted(run_dir))
    (job,) = _jobs(run_dir)
    assert drained.job_state(job) == {"0": "PENDING"}
    first.kill()  # the tool dies; its jobs stay queued
    first.communicate(timeout=30)
    assert drained.job_state(job) == {"0": "PENDING"}
    again = _tool(drained, *argv, "--resume", cwd=tmp_path)
    _wait_for("the restarted tool to watch", lambda: "PENDING" in json.dumps(_state(run_dir)))
    drained.node_state("resume")
    rc, out, err = _finish(again)
    assert rc == 0, out + err
    assert f"slurm: reattaching to jobs {job}" in err
    assert "submitted job" not in err  # nothing submitted twice
    assert drained.job_state(job) == {"0": "COMPLETED"}
    results = _results(run_dir)
    assert sorted((case, r["outcome"]) for (_, case), r in results.items()) == [
        ("pass_script.py", "pass"),
        ("slow_pass.py", "pass"),
    ]


def test_the_merge_job_merges_when_the_tool_is_gone(
    drained: Cluster, base_python: Path, tmp_path: Path
) -> None:
    args = _args(base_python, tmp_path, "pass_script.py", "fail_exit1.py")
    run_dir = tmp_path / "run"
    argv = ["--executor", "slurm", *args, "--arch", "sm90", "--results", str(run_dir)]
    tool = _tool(drained, *argv, cwd=tmp_path)
    _wait_for("the jobs to be submitted", lambda: _submitted(run_dir) and _merge_submitted(run_dir))
    tool.kill()
    tool.communicate(timeout=30)
    drained.node_state("resume")
    merge = str(_state(run_dir)["merge"]["job_id"])
    _wait_for("the merge job", lambda: drained.job_state(merge)[merge] == "COMPLETED", 180)
    assert "NOT SIGNED OFF: 1 fail, 1 pass" in (run_dir / "slurm" / "merge.out").read_text()
    results = {case: r["outcome"] for (_, case), r in _results(run_dir).items()}
    assert results == {"pass_script.py": "pass", "fail_exit1.py": "fail"}
    assert "finished_at" in json.loads((run_dir / "run.json").read_text())


def test_a_task_pending_past_the_queue_timeout_is_not_scheduled(
    drained: Cluster, base_python: Path, tmp_path: Path
) -> None:
    args = _args(base_python, tmp_path, "pass_script.py")
    run_dir = tmp_path / "run"
    argv = ["--executor", "slurm", *args, "--arch", "sm90", "--queue-timeout", "3"]
    rc, out, err = _finish(_tool(drained, *argv, "--results", str(run_dir), cwd=tmp_path))
    assert rc == 1, out + err
    assert "still pending after --queue-timeout 3 s: cancelled" in err
    (job,) = _jobs(run_dir)
    assert set(drained.job_state(job).values()) == {"CANCELLED"}
    assert _state(run_dir)["groups"][0]["states"]["0"]["state"] == "CANCELLED"
    (result,) = _results(run_dir).values()
    assert result["outcome"] == "error"
    assert str(result["reason"]).startswith("not scheduled: slurm task")
    assert not _shard_results(run_dir)  # the task never ran


def test_ctrl_c_cancels_the_jobs_and_resume_completes_the_run(
    cluster: Cluster, base_python: Path, tmp_path: Path
) -> None:
    """Interrupted while hang.py runs; --resume runs only the unfinished task again, which runs
    only hang.py (its own --timeout ends it this time)."""
    args = _args(base_python, tmp_path, "pass_script.py", "hang.py")
    args += ["--arch", "sm90", "--jobs", "2", "--timeout", "8", "--no-api-logs"]
    run_dir = tmp_path / "run"
    argv = ["--executor", "slurm", *args, "--results", str(run_dir)]
    tool = _tool(cluster, *argv, cwd=tmp_path)
    _wait_for_result(run_dir, "pass_script.py")
    tool.send_signal(signal.SIGINT)
    rc, out, err = _finish(tool, timeout=60)
    assert rc == 130, out + err
    assert "slurm: interrupted: scancel" in err
    (job,) = _jobs(run_dir)
    merge = str(_state(run_dir)["merge"]["job_id"])
    _wait_for("the task to end", lambda: cluster.job_state(job) == {"0": "CANCELLED"}, 60)
    assert cluster.job_state(merge) == {merge: "CANCELLED"}
    first = _results_of_shards(run_dir)
    assert [r["case"] for r in first] == ["pass_script.py"]  # hang.py was cut short: no result

    rc, out, err = _finish(_tool(cluster, *argv, "--resume", cwd=tmp_path))
    assert rc == 1, out + err  # hang.py times out: a blocking outcome
    assert f"slurm: reattaching to jobs {job}" in err
    assert "--resume runs the unfinished tasks again" in err
    (again,) = _jobs(run_dir)
    assert again != job
    assert _state(run_dir)["groups"][0]["previous_jobs"] == [job]
    assert cluster.job_state(again) == {"0": "COMPLETED"}
    results = {case: r for (_, case), r in _results(run_dir).items()}
    assert results["pass_script.py"] == {**first[0], "mac": results["pass_script.py"]["mac"]}
    assert results["hang.py"]["outcome"] == "timeout"  # the case's own verdict, run to its end


def test_a_partition_slurm_refuses_is_one_line_and_leaves_nothing_queued(
    cluster: Cluster, base_python: Path, tmp_path: Path
) -> None:
    args = _args(base_python, tmp_path, "pass_script.py")
    # sm90 (planned first) is accepted; sm80 names a partition the cluster lacks
    head, _, tail = RUNNERS.format(time="00:10:00").partition("[runner.sm80]\n")
    (tmp_path / "runners.toml").write_text(f'{head}[runner.sm80]\npartition = "nosuch"\n{tail}')
    run_dir = tmp_path / "run"
    argv = ["--executor", "slurm", *args, "--arch", "sm90,sm80", "--results", str(run_dir)]
    rc, out, err = _finish(_tool(cluster, *argv, cwd=tmp_path))
    assert rc == 4, out + err
    assert err.count("cudnn-matrix: error:") == 1
    assert "invalid partition" in err.lower()
    assert not (run_dir / "slurm.json").exists()  # nothing for --resume to reattach to
    # the group submitted before the refused one was cancelled
    submitted = [
        line.split()[3].rstrip(":") for line in err.splitlines() if "submitted job" in line
    ]
    assert len(submitted) == 1, err
    assert set(cluster.settled_state(submitted[0]).values()) == {"CANCELLED"}


TIER_MATRIX = f"""\
[axes]
cudnn = ["{BACKEND}"]
frontend = ["{FRONTEND}"]
cuda = ["12.9", "13.0"]
driver = ["570", "580"]
arch = ["sm80", "sm90"]

[tiers]
pr = {{ cover = "pairs", always = [{{ cuda = "newest", driver = "newest", arch = "newest" }}] }}
"""


def test_slurm_tier_runs_exactly_the_tier_in_every_group(
    cluster: Cluster, base_python: Path, tmp_path: Path
) -> None:
    """Each runner group (arch) runs its part of the one tier: the same cells as `plan --tier`."""
    (tmp_path / "matrix.toml").write_text(TIER_MATRIX)
    plan_args = ["plan", "--matrix", "matrix.toml", "--tier", "pr", "--format=json"]
    plan = cli(*plan_args, cwd=tmp_path, timeout=60)
    assert plan.returncode == 0, plan.stderr
    tier_ids = {row["id"] for row in json.loads(plan.stdout)}
    runners = tmp_path / "runners.toml"
    runners.write_text(RUNNERS.format(time="00:10:00"))
    args = ["--matrix", "matrix.toml", "--tier", "pr", "--env", "current"]
    args += ["--base-python", str(base_python), "--frontend-source", "current"]
    args += ["--cases", str(SCRIPTS / "pass_script.py"), "--executor", "slurm"]
    run_dir = tmp_path / "slurm-run"
    args += ["--runners", str(runners), "--results", str(run_dir)]
    rc, out, err = _finish(_tool(cluster, *args, cwd=tmp_path))
    assert rc == 0, out + err
    assert {cell for cell, _ in _results(run_dir)} == tier_ids
    meta = json.loads((run_dir / "run.json").read_text())
    assert meta["tier"]["name"] == "pr"
    assert meta["tier"]["left_out"]  # the pair cover leaves some planned cell out
    assert not tier_ids & {c["id"] for c in meta["tier"]["left_out"]}
