"""`validate --executor docker` end to end against a real daemon: image built, runner inside it.

Real backend (9.12.0.46) and frontend (1.27.0) wheels from the shared wheelhouse, the local base
image (`nox -s base_image`); no NVIDIA runtime here, so the container is CPU-only. The repro
cases need backend >= 9.13, so with 9.12 they skip on that requirement, checked against the
backend loaded inside the container. The fixture removes every image this test built.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from usercli import cli

from validate.config import ValidateConfig
from validate.env.builder import ImageBuilder, base_image_for, docker_client
from validate.env.images import LOCAL_BASE_IMAGE
from validate.errors import DockerError
from validate.model.matrix import Cell

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.docker, pytest.mark.slow]  # image builds take minutes

RESOURCES = Path(__file__).resolve().parents[1] / "resources"

CELL = Cell(cudnn="9.12.0.46", frontend="1.27.0", cuda="13.0", driver="580", arch="sm90")
SELECT = ["--cudnn", CELL.cudnn, "--frontend", CELL.frontend, "--cuda", CELL.cuda]
SELECT += ["--driver", CELL.driver, "--arch", CELL.arch]


def _unavailable(reason: str) -> None:
    """Skip, or fail where CI demands the docker tier (CUDNN_MATRIX_REQUIRE_DOCKER=1)."""
    if os.environ.get("CUDNN_MATRIX_REQUIRE_DOCKER") == "1":
        pytest.fail(f"CUDNN_MATRIX_REQUIRE_DOCKER=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def cell_tags(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[set[str]]:
    """The cell's image tags; those absent before this module's tests are removed after them."""
    try:
        client = docker_client(timeout=600)
    except DockerError as exc:
        _unavailable(f"no docker daemon: {exc}")
    ctx = tmp_path_factory.mktemp("ctx")
    builder = ImageBuilder(wheelhouse=wheelhouse, cache_dir=ctx, client=client)
    if not builder.image_exists(LOCAL_BASE_IMAGE):
        _unavailable(f"no {LOCAL_BASE_IMAGE}; run `sudo nox -s base_image` first")
    spec = builder.spec_for(
        CELL, base_image=base_image_for(CELL, ValidateConfig().base_image, builder)
    )
    tags = {spec.tag, spec.backend_tag}
    existed = {tag for tag in tags if builder.image_exists(tag)}
    try:
        yield tags
    finally:
        builder.prune(i for i in builder.list_images() if i.tag in tags - existed)
        builder.close()


def test_validate_runs_the_cell_in_its_container(
    wheelhouse: Path, cell_tags: set[str], tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    argv = ["validate", "--executor", "docker", *SELECT]
    argv += ["--wheelhouse", str(wheelhouse), "--results", str(run_dir), "--jobs", "2"]
    proc = cli(*argv, cwd=tmp_path, timeout=1200)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    results = {json.loads(line)["case"]: json.loads(line) for line in lines}
    run_id = json.loads((run_dir / "run.json").read_text())["run_id"]
    assert {r["cell_id"] for r in results.values()} == {CELL.id}
    assert {r["run_id"] for r in results.values()} == {run_id}
    check = results["pin_check.py"]
    assert check["outcome"] == "pass", check
    assert check["env"]["backend_version"] == 91200  # captured inside the container
    main_lib = next(p for p in check["env"]["cudnn_libs"] if "libcudnn.so" in p)
    assert main_lib.startswith("/opt/venv/"), main_lib
    assert check["log_path"].startswith(str(run_dir / "cells" / CELL.id))
    variants = [r for name, r in results.items() if name.startswith("repro_fusion_uid[")]
    assert len(variants) == 4
    for result in variants:  # the repro needs >= 9.13: judged on the container's backend
        assert result["outcome"] == "skip", result
        assert str(result["reason"]).startswith("backend 91200 < 91300"), result
    assert (run_dir / "cells" / CELL.id / "build.log").is_file()
    assert cell_tags
    client = docker_client(timeout=60)
    try:
        assert all(client.images.get(tag) for tag in cell_tags)  # the run built both images
    finally:
        client.close()
    assert "SIGNED OFF" in proc.stdout


def test_forward_compat_cell_on_the_local_base_is_an_error_with_one_line(
    wheelhouse: Path, tmp_path: Path
) -> None:
    """No NVIDIA CUDA apt repository in the Debian base: each case an `error`, nothing built."""
    try:
        client = docker_client(timeout=600)
    except DockerError as exc:
        _unavailable(f"no docker daemon: {exc}")
    fc = replace(CELL, driver="fc-610@580")
    builder = ImageBuilder(wheelhouse=wheelhouse, cache_dir=tmp_path / "ctx", client=client)
    try:
        spec = builder.spec_for(fc)
        if spec.base_image != LOCAL_BASE_IMAGE:
            _unavailable(f"validate chooses {spec.base_image}, not {LOCAL_BASE_IMAGE}, here")
        run_dir = tmp_path / "run"
        argv = ["validate", "--executor", "docker"]
        argv += [*SELECT[:-4], "--driver", fc.driver, "--arch", fc.arch]
        argv += ["--wheelhouse", str(wheelhouse), "--results", str(run_dir)]
        proc = cli(*argv, cwd=tmp_path, timeout=600)
        assert proc.returncode == 1, proc.stdout + proc.stderr[-4000:]  # not signed off; no crash
        lines = (run_dir / "results.jsonl").read_text().splitlines()
        results = [json.loads(line) for line in lines]
        assert results
        assert {r["cell_id"] for r in results} == {fc.id}
        assert {r["outcome"] for r in results} == {"error"}
        reasons = {r["reason"] for r in results}
        assert len(reasons) == 1
        (reason,) = reasons
        assert "\n" not in reason
        assert "needs cuda-compat-13-0 from NVIDIA's CUDA apt repository" in reason
        assert f"base image {LOCAL_BASE_IMAGE} does not have" in reason
        assert not builder.image_exists(spec.backend_tag)
    finally:
        builder.close()


def test_case_selects_what_runs_in_the_container(
    wheelhouse: Path, cell_tags: set[str], tmp_path: Path
) -> None:
    """Issue 11 item 6(a): `--case` reached only the host; the container ran every case and all
    of them were stored. The container reads the run's config now: only pin_check.py runs."""
    assert cell_tags
    run_dir = tmp_path / "run"
    argv = ["validate", "--executor", "docker", *SELECT]
    argv += ["--wheelhouse", str(wheelhouse), "--results", str(run_dir), "--case", "pin_check.py"]
    proc = cli(*argv, cwd=tmp_path, timeout=1200)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    stored = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert [(r["case"], r["outcome"], r["cell_id"]) for r in stored] == [
        ("pin_check.py", "pass", CELL.id)
    ]
    cell_dir = run_dir / "cells" / CELL.id
    ran = [
        json.loads(line)["case"] for line in (cell_dir / "results.jsonl").read_text().splitlines()
    ]
    assert ran == ["pin_check.py"]  # the container itself ran nothing else
    inner = json.loads((cell_dir / "config.json").read_text())
    assert inner["config"]["case_names"] == ["pin_check.py"]


def test_a_suite_runs_in_the_container_one_result_per_test_id(
    wheelhouse: Path, cell_tags: set[str], tmp_path: Path
) -> None:
    """Issue #37 item 4 against a real daemon: `--tests` goes into the cell's container (whose
    image carries pytest), each test id is one result there, a crash is named by its id and the
    ids after it still run; the suite's own name is no `error` (the container recorded it by id).
    Before the image carried pytest, the whole suite was one error: "pytest is not installed"."""
    assert cell_tags
    shutil.copytree(RESOURCES / "pytest_suite", tmp_path / "suite")
    argv = ["validate", "--executor", "docker", *SELECT, "--wheelhouse", str(wheelhouse)]
    argv += ["--tests", "suite", "--tests-select", "test_crashes.py test_fixtures.py"]
    argv += ["--results", "run", "--jobs", "2"]
    proc = cli(*argv, cwd=tmp_path, timeout=1200)
    assert proc.returncode == 1, proc.stdout + proc.stderr[-4000:]  # the suite's failures
    stored = [
        json.loads(line) for line in (tmp_path / "run/results.jsonl").read_text().splitlines()
    ]
    outcomes = {r["case"]: r["outcome"] for r in stored}
    assert outcomes == {
        "test_crashes.py::test_before_crashes": "pass",
        "test_crashes.py::test_segfault": "crash",
        "test_crashes.py::test_abort": "crash",
        "test_crashes.py::test_cuda_exit": "crash",
        "test_crashes.py::test_after_crashes": "pass",
        "test_fixtures.py::test_setup_error": "error",
        "test_fixtures.py::test_teardown_error": "error",
        "test_fixtures.py::test_plain_failure": "fail",
    }, proc.stdout
    assert {r["cell_id"] for r in stored} == {CELL.id}
    segfault = next(r for r in stored if r["case"] == "test_crashes.py::test_segfault")
    assert "SIGSEGV" in segfault["reason"], segfault
