"""The emitted GitLab child pipeline run by a real engine: gitlab-ci-local, shell executor, CPU cells.

Two runner groups (sm90, sm80) with one environment each, two shards per environment: four validate
jobs with real wheels from the shared wheelhouse, then the report job that merges their run folders.
The merged report must hold the same cells, cases and outcomes as one `validate` process of the
same matrix; a pipeline whose cases fail on purpose must fail, in the report job. gitlab-ci-local
does not fail a parent for a failing `trigger:` child, so the generated file runs itself (`--file`).

Needs gitlab-ci-local 4.73.0 (npm; newer ones need Node 22) and rsync; skips with a reason when
they are missing, unless CUDNN_MATRIX_REQUIRE_GITLAB=1 (CI) turns the skip into a failure.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from usercli import cli, command

pytestmark = [pytest.mark.slow, pytest.mark.gitlab]

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "tests" / "resources" / "scripts"
MATRIX = REPO / "tests" / "resources" / "matrices" / "two_runner_groups.toml"
# CPU-only runners (gpus = 0): the report job signs off without --require-gpu, so the no-GPU
# skips of the shipped cases do not fail it (runners with GPUs would: dispatch/ci.py)
RUNNERS = '[runner.sm80]\ntags = ["cpu"]\ngpus = 0\n\n[runner.sm90]\ntags = ["cpu"]\ngpus = 0\n'


@pytest.fixture(scope="module")
def engine() -> str:
    missing = [tool for tool in ("gitlab-ci-local", "rsync", "git") if shutil.which(tool) is None]
    if missing:
        reason = f"{', '.join(missing)} not installed (npm install -g gitlab-ci-local@4.73.0; apt-get install rsync)"
        if os.environ.get("CUDNN_MATRIX_REQUIRE_GITLAB") == "1":
            pytest.fail(f"CUDNN_MATRIX_REQUIRE_GITLAB=1 but {reason}")
        pytest.skip(reason)
    path = shutil.which("gitlab-ci-local")
    assert path is not None
    return path


def _project(tmp_path: Path, name: str, job_args: str) -> Path:
    """A git checkout holding the matrix, the runners and the emitted child.yml."""
    project = tmp_path / name
    project.mkdir()
    (project / "matrix.toml").write_text(MATRIX.read_text())
    (project / "runners.toml").write_text(RUNNERS)
    emit = ["plan", "--matrix", "matrix.toml", "--runners", "runners.toml", "--emit", "gitlab"]
    tool = shlex.join(command())  # what each job runs: the tool installed for this interpreter
    emit += ["--shards", "2", "--tool", tool, "--job-args", job_args, "--out", "child.yml"]
    proc = cli(*emit, cwd=project)
    assert proc.returncode == 0, proc.stderr
    git = ["git", "-C", str(project)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run(
        [*git, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "child"], check=True
    )
    return project


def _pipeline(engine: str, project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [engine, "--file", "child.yml", "--shell-isolation"],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )


def _units(report_json: Path) -> set[tuple[str, str, str]]:
    data = json.loads(report_json.read_text())
    return {(r["cell_id"], r["case"], r["outcome"]) for r in data["results"]}


def _merged(project: Path, out: Path) -> int:
    runs = sorted(p for p in (project / "runs").iterdir() if p.is_dir())
    assert len(runs) == 4  # one run folder per validate job
    args = [arg for run in runs for arg in ("--results", str(run))]
    return cli("report", *args, "--format", "json", "--out", str(out), cwd=project).returncode


@pytest.fixture(scope="module")
def env_args(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    cache = tmp_path_factory.mktemp("gitlab-envs")
    return f"--wheelhouse {wheelhouse} --no-backend-deps --cache-dir {cache}"


def test_child_pipeline_merges_to_the_single_process_run(
    engine: str, env_args: str, tmp_path: Path
) -> None:
    project = _project(tmp_path, "pass", env_args)
    # one process over the same matrix (it also builds the environments the jobs then reuse)
    whole = cli(
        "validate",
        "--matrix",
        "matrix.toml",
        *env_args.split(),
        "--results",
        str(tmp_path / "whole"),
        cwd=project,
    )
    assert whole.returncode == 0, whole.stdout + whole.stderr
    proc = _pipeline(engine, project)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    for job in ("validate:sm90", "validate:sm80", "report"):
        assert f" PASS  {job}" in proc.stdout
    assert "9.13.0.50" in (project / "compat.md").read_text()  # the merged table, published
    assert (project / "compat.html").is_file()
    assert (project / "junit.xml").is_file()

    merged, single = tmp_path / "merged.json", tmp_path / "single.json"
    assert _merged(project, merged) == 0
    rc = cli(
        "report",
        "--results",
        str(tmp_path / "whole"),
        "--format",
        "json",
        "--out",
        str(single),
        cwd=project,
    )
    assert rc.returncode == 0
    assert _units(merged) == _units(single)
    assert len(_units(merged)) == 2 * 5  # 2 cells x the 5 shipped cases
    shards = [
        json.loads((p / "run.json").read_text())["shard"] for p in (project / "runs").iterdir()
    ]
    assert sorted((s["index"], s["total"]) for s in shards) == [(1, 2), (1, 2), (2, 2), (2, 2)]


def test_a_failing_case_fails_the_pipeline_in_the_report_job(
    engine: str, env_args: str, tmp_path: Path
) -> None:
    cases = f"--cases {SCRIPTS / 'fail_exit1.py'} --cases {SCRIPTS / 'pass_script.py'}"
    project = _project(tmp_path, "fail", f"{env_args} {cases}")
    proc = _pipeline(engine, project)
    assert proc.returncode == 1, proc.stdout[-4000:]
    # the validate jobs keep their verdict for the report: only the report job fails
    assert " PASS  validate:sm90" in proc.stdout
    assert " PASS  validate:sm80" in proc.stdout
    assert " FAIL  report" in proc.stdout
    assert "NOT SIGNED OFF" in proc.stdout
    merged = tmp_path / "merged.json"
    assert _merged(project, merged) == 1
    assert ("fail_exit1.py", "fail") in {(case, outcome) for _, case, outcome in _units(merged)}
