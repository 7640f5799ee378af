"""`plan --emit gitlab|github`: the files validate against the engines' published schemas (the copies
check-jsonschema vendors: GitLab's ci.json, SchemaStore's github-workflow.json), one job per arch x
environment x shard, GitLab's limits respected by splitting; matrix/runners.toml prunes cells."""

from __future__ import annotations

import importlib.resources
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonschema
import pytest
import yaml

from validate.cli import main
from validate.dispatch.ci import GITLAB_MATRIX_MAX

if TYPE_CHECKING:
    from collections.abc import Iterator

SCHEMAS = importlib.resources.files("check_jsonschema") / "builtin_schemas" / "vendor"


@pytest.fixture(autouse=True)
def _fresh_log_handler() -> Iterator[None]:
    """cli.main installs a stderr handler once; drop it so the next test's capsys stream is used."""
    yield
    logger = logging.getLogger("validate")
    for handler in [h for h in logger.handlers if h.get_name() == "cudnn-matrix"]:
        logger.removeHandler(handler)


def _schema_errors(doc: Any, name: str) -> list[str]:
    schema = json.loads((SCHEMAS / name).read_text(encoding="utf-8"))
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]


def _emit(tmp_path: Path, engine: str, *flags: str) -> dict[str, Any]:
    out = tmp_path / f"{engine}.yml"
    assert main(["plan", "--emit", engine, "--out", str(out), *flags]) == 0
    doc: dict[str, Any] = yaml.safe_load(out.read_text(encoding="utf-8"))
    return doc


SMALL = ["--cudnn", "9.24.0.43", "--frontend", "1.27.0,1.32.0", "--cuda", "13.0"]


def test_gitlab_child_pipeline_is_valid_and_one_job_per_arch_env_shard(tmp_path: Path) -> None:
    doc = _emit(tmp_path, "gitlab", *SMALL, "--shards", "3", "--install", "pip install .")
    assert _schema_errors(doc, "gitlab-ci.json") == []
    jobs = {k: v for k, v in doc.items() if k.startswith("validate:")}
    # sm120 has no runner in matrix/runners.toml: only three runner groups
    assert sorted(jobs) == ["validate:sm100", "validate:sm80", "validate:sm90"]
    hopper = jobs["validate:sm90"]
    assert hopper["tags"] == ["gpu", "hopper"]
    entries = hopper["parallel"]["matrix"]
    envs = {(e["CUDNN"], e["FRONTEND"], e["CUDA"]) for e in entries}
    assert envs == {("9.24.0.43", "1.27.0", "13.0"), ("9.24.0.43", "1.32.0", "13.0")}
    assert sorted(e["SHARD"] for e in entries) == ["1", "1", "2", "2", "3", "3"]
    assert {e["DRIVERS"] for e in entries} == {"580,fc-610@580"}
    script = hopper["script"][0]
    assert '--shard "${SHARD}/${SHARDS}"' in script
    assert '--arch "${ARCH}"' in script
    assert "test $rc -le 1" in script  # not signed off is the report's to judge
    assert hopper["artifacts"]["reports"]["junit"].endswith("/junit.xml")
    assert hopper["artifacts"]["paths"] == ["runs/sm90-${CI_JOB_ID}/"]
    report = doc["report"]
    assert [n["job"] for n in report["needs"]] == list(jobs)
    # GPU runners: a job that found no GPU there fails the sign-off (NOT SIGNED OFF — no GPU)
    assert report["script"][-1] == "$CUDNN_MATRIX report $args --require-gpu --out compat.md"
    assert "when" not in report  # never after a failed validate job
    assert report["artifacts"]["reports"]["junit"] == "junit.xml"
    assert doc["default"]["before_script"] == ["pip install ."]


def test_github_workflow_is_valid_with_the_same_shape(tmp_path: Path) -> None:
    doc = _emit(tmp_path, "github", *SMALL, "--shards", "2")
    assert _schema_errors(doc, "github-workflows.json") == []
    jobs = doc["jobs"]
    assert sorted(jobs) == ["report", "validate-sm100", "validate-sm80", "validate-sm90"]
    hopper = jobs["validate-sm90"]
    assert hopper["runs-on"] == ["self-hosted", "linux", "gpu-hopper"]
    assert hopper["strategy"]["max-parallel"] == 2
    assert len(hopper["strategy"]["matrix"]["include"]) == 2 * 2
    uses = [s.get("uses", "") for s in hopper["steps"]]
    assert "actions/upload-artifact@v4" in uses
    report = jobs["report"]
    assert sorted(report["needs"]) == sorted(j for j in jobs if j != "report")
    assert "actions/download-artifact@v4" in [s.get("uses", "") for s in report["steps"]]
    assert "if" not in report


def _big_matrix(tmp_path: Path, cudnn: int, frontend: int, arch: str) -> list[str]:
    """A matrix of cudnn x frontend environments on one arch, no rules: the flags that select it."""
    matrix, rules = tmp_path / "big.toml", tmp_path / "rules.toml"
    cudnns = ", ".join(f'"9.{minor}.0.1"' for minor in range(10, 10 + cudnn))
    frontends = ", ".join(f'"1.{minor}.0"' for minor in range(10, 10 + frontend))
    matrix.write_text(
        f'[axes]\ncudnn = [{cudnns}]\nfrontend = [{frontends}]\ncuda = ["13.0"]\n'
        f'driver = ["580"]\narch = [{arch}]\n'
    )
    rules.write_text("")
    return ["--matrix", str(matrix), "--rules", str(rules)]


def test_a_runner_group_over_gitlabs_limit_is_split_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "child.yml"
    # 50 environments on sm90, 5 shards each: 250 jobs, more than one parallel:matrix holds
    flags = [*_big_matrix(tmp_path, 10, 5, '"sm90"'), "--shards", "5"]
    assert main(["plan", "--emit", "gitlab", *flags, "--out", str(out)]) == 0
    text = out.read_text()
    doc = yaml.safe_load(text)
    assert _schema_errors(doc, "gitlab-ci.json") == []
    parts = [k for k in doc if k.startswith("validate:")]
    assert parts == ["validate:sm90:1", "validate:sm90:2"]
    sizes = [len(doc[k]["parallel"]["matrix"]) for k in parts]
    assert sizes == [GITLAB_MATRIX_MAX, 50]
    assert f"sm90: 250 jobs split into 2 jobs of at most {GITLAB_MATRIX_MAX}" in text
    assert [n["job"] for n in doc["report"]["needs"]] == parts


def test_github_matrix_over_256_is_split(tmp_path: Path) -> None:
    doc = _emit(tmp_path, "github", *_big_matrix(tmp_path, 10, 3, '"sm90"'), "--shards", "10")
    assert _schema_errors(doc, "github-workflows.json") == []
    parts = [k for k in doc["jobs"] if k.startswith("validate-")]
    assert parts == ["validate-sm90-1", "validate-sm90-2"]
    sizes = [len(doc["jobs"][k]["strategy"]["matrix"]["include"]) for k in parts]
    assert sizes == [256, 44]


def _runners(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "runners.toml"
    path.write_text(text)
    return path


def test_plan_runners_prunes_cells_without_a_runner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runners = _runners(tmp_path, '[runner.sm90]\ntags = ["gpu"]\n')
    argv = ["plan", *SMALL, "--runners", str(runners), "--show-pruned", "--format", "json"]
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    planned = {r["arch"] for r in rows if r["status"] == "planned"}
    assert planned == {"sm90"}
    reasons = {r["reason"] for r in rows if r["reason"].startswith("no runner")}
    assert reasons == {
        "no runner for arch sm80 in runners.toml",
        "no runner for arch sm100 in runners.toml",
        "no runner for arch sm120 in runners.toml",
    }


def test_bad_runners_file_is_every_problem_located_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runners = _runners(
        tmp_path,
        "[runner.sm90]\n"
        'tags = ["gpu"]\n'
        "concurrency = 0\n"
        'executor = "slurm"\n'
        "[runner.sm99]\n"
        'tags = ["x"]\n'
        "[runner.sm80]\n"
        "gpus = 1\n"
        'colour = "red"\n',
    )
    assert main(["plan", "--runners", str(runners)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    for where in (
        f"{runners}:3: runner.sm90.concurrency: expected a whole number of at least 1",
        f"{runners}:4: runner.sm90.executor: unknown executor 'slurm'",
        f"{runners}:5: runner.sm99: unknown arch",
        f"{runners}:7: runner.sm80.tags: missing",
        f"{runners}:9: runner.sm80.colour: unknown key",
    ):
        assert where in err, err


def test_slurm_keys_are_allowed(tmp_path: Path) -> None:
    runners = _runners(
        tmp_path,
        '[runner.sm90]\ntags = ["gpu"]\npartition = "hopper"\nconstraint = "sm90"\n'
        'gres = "gpu:1"\ntime = "01:00:00"\ncpus = 16\nmem = "120G"\n',
    )
    assert main(["plan", *SMALL, "--runners", str(runners)]) == 0


def test_slurm_cpus_must_be_a_whole_number(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runners = _runners(tmp_path, '[runner.sm90]\ntags = ["gpu"]\ncpus = 0\n')
    assert main(["plan", *SMALL, "--runners", str(runners)]) == 2
    err = capsys.readouterr().err
    assert f"{runners}:3: runner.sm90.cpus: expected a whole number of at least 1" in err, err


def test_emit_with_no_cell_left_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runners = _runners(tmp_path, '[runner.sm70]\ntags = ["volta"]\n')
    out = tmp_path / "child.yml"
    argv = ["plan", *SMALL, "--runners", str(runners), "--emit", "gitlab", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no cell is left to run" in err
    assert "no runner for arch" in err
    assert not out.exists()


def test_emitted_job_names_stay_under_gitlabs_limit(tmp_path: Path) -> None:
    doc = _emit(tmp_path, "gitlab", "--shards", "2")
    for name, job in doc.items():
        if name.startswith("validate:"):
            for entry in job["parallel"]["matrix"]:
                assert len(f"{name}: [{', '.join(entry.values())}]") <= 255


def test_ten_thousand_cells_emit_as_one_job_each(tmp_path: Path) -> None:
    """Scale: 10 000 cells (2 500 environments on each of 4 arches) emit one job per cell on
    the three arches that have a runner, split under GitLab's limit; bench/pipeline_bench.py
    prints the time it takes."""
    flags = _big_matrix(tmp_path, 50, 50, '"sm80", "sm90", "sm100", "sm120"')
    doc = _emit(tmp_path, "gitlab", *flags)
    parts = {k: v for k, v in doc.items() if k.startswith("validate:")}
    assert sum(len(v["parallel"]["matrix"]) for v in parts.values()) == 3 * 2500
    assert all(len(v["parallel"]["matrix"]) <= GITLAB_MATRIX_MAX for v in parts.values())
    assert len(parts) == 3 * 13  # 2 500 = 12 x 200 + 100


def test_the_documented_parent_job_is_valid_gitlab_ci() -> None:
    """The parent job users copy into .gitlab-ci.yml (docs/runners.md, linked from the README):
    valid, and it triggers the emitted child."""
    readme = (Path(__file__).resolve().parents[2] / "docs" / "runners.md").read_text(
        encoding="utf-8"
    )
    block = readme.split("<!-- parent-job:", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    doc = yaml.safe_load(block)
    assert _schema_errors(doc, "gitlab-ci.json") == []
    trigger = doc["cudnn-matrix:validate"]["trigger"]
    assert trigger["include"] == [{"artifact": "child.yml", "job": "cudnn-matrix:plan"}]
    assert trigger["strategy"] == "depend"
    assert "--emit gitlab" in " ".join(doc["cudnn-matrix:plan"]["script"])


@pytest.mark.parametrize(
    ("gpus", "line"),
    [
        ("", "$CUDNN_MATRIX report $args --require-gpu --out compat.md"),  # default: 1 GPU
        ("gpus = 2\n", "$CUDNN_MATRIX report $args --require-gpu --out compat.md"),
        ("gpus = 0\n", "$CUDNN_MATRIX report $args --out compat.md"),
    ],
)
@pytest.mark.parametrize("engine", ["gitlab", "github"])
def test_report_job_requires_gpu_evidence_where_runners_have_gpus(
    tmp_path: Path, engine: str, gpus: str, line: str
) -> None:
    """The report job's sign-off line: --require-gpu unless every runner is CPU-only."""
    runners = _runners(tmp_path, f'[runner.sm90]\ntags = ["x"]\nruns_on = ["x"]\n{gpus}')
    doc = _emit(tmp_path, engine, *SMALL, "--runners", str(runners))
    report = doc["report"] if engine == "gitlab" else doc["jobs"]["report"]
    lines = (
        report["script"]
        if engine == "gitlab"
        else next(s["run"] for s in report["steps"] if s.get("name") == "report").splitlines()
    )
    assert lines[-1] == line
