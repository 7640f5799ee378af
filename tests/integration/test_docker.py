"""Cell images against a real docker daemon: real backend + frontend wheels, built offline.

One image per frontend (1.26.0, 1.27.0) over the smallest real backend wheel, both built once per
session from the local base image (`nox -s base_image`); fixtures remove every image they build.
No GPU here: the GPU path of the executor is covered by tests/unit/test_docker_request.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from validate.env.builder import BuildResult, ImageBuilder, docker_client
from validate.env.images import LOCAL_BASE_IMAGE, ImageSpec
from validate.errors import DockerError, ImageBuildError
from validate.execute import ExecRequest
from validate.execute.docker import DockerExecutor
from validate.model.matrix import Cell
from validate.model.results import CaseResult, load_results

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.docker, pytest.mark.slow]  # image builds take minutes

ROOT = Path(__file__).resolve().parents[2]
WHEELHOUSE = Path(os.environ.get("CUDNN_MATRIX_TEST_WHEELHOUSE", ROOT / ".cache" / "wheelhouse"))
BACKEND = "9.12.0.46"  # nvidia-cudnn-cu13: the smallest real 9.x backend wheel (~314 MB)
FRONTENDS = ("1.26.0", "1.27.0")
CASES = ROOT / "validate" / "execute" / "resources" / "cases"


def _cell(frontend: str) -> Cell:
    return Cell(cudnn=BACKEND, frontend=frontend, cuda="13.0", driver="580", arch="sm90")


def _unavailable(reason: str) -> None:
    """Skip, or fail where CI demands the docker tier (CUDNN_MATRIX_REQUIRE_DOCKER=1)."""
    if os.environ.get("CUDNN_MATRIX_REQUIRE_DOCKER") == "1":
        pytest.fail(f"CUDNN_MATRIX_REQUIRE_DOCKER=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def builder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ImageBuilder]:
    """An offline builder on the shared wheelhouse; builds the local base image when missing."""
    try:
        client = docker_client(timeout=3600)
    except DockerError as exc:
        _unavailable(f"no docker daemon: {exc}")
    built = ImageBuilder(
        wheelhouse=WHEELHOUSE,
        cache_dir=tmp_path_factory.mktemp("image-cache"),
        network="none",
        client=client,
    )
    if not built.image_exists(LOCAL_BASE_IMAGE):
        if os.geteuid() != 0:
            _unavailable(f"no {LOCAL_BASE_IMAGE}; run `sudo nox -s base_image` first")
        from validate.env.base_image import build_base_image

        build_base_image()
    yield built
    built.close()


@pytest.fixture(scope="session")
def specs(builder: ImageBuilder) -> dict[str, ImageSpec]:
    return {
        fe: builder.spec_for(_cell(fe), base_image=LOCAL_BASE_IMAGE, python="3.11")
        for fe in FRONTENDS
    }


def _remove(builder: ImageBuilder, specs: dict[str, ImageSpec]) -> None:
    tags = {spec.tag for spec in specs.values()} | {spec.backend_tag for spec in specs.values()}
    builder.prune(info for info in builder.list_images() if info.tag in tags)


@pytest.fixture(scope="session")
def builds(
    builder: ImageBuilder, specs: dict[str, ImageSpec], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, BuildResult]]:
    """Cold build with frontend 1.26.0, then the same cell with only the frontend changed."""
    _remove(builder, specs)  # leftovers of an interrupted run would make the first build cached
    logs = tmp_path_factory.mktemp("build-logs")
    try:
        yield {fe: builder.build(specs[fe], log_path=logs / f"{fe}.log") for fe in FRONTENDS}
    finally:
        _remove(builder, specs)


def test_tag_and_labels_name_the_pins(
    builder: ImageBuilder, specs: dict[str, ImageSpec], builds: dict[str, BuildResult]
) -> None:
    first, second = (specs[fe] for fe in FRONTENDS)
    assert first.tag != second.tag
    labels = builder.client.images.get(first.tag).labels
    assert labels["io.cudnn-matrix.cudnn"] == BACKEND
    assert labels["io.cudnn-matrix.frontend"] == "1.26.0"
    assert labels["io.cudnn-matrix.cuda"] == "13.0"
    assert labels["io.cudnn-matrix.backend-source"] == "wheel"
    assert labels["io.cudnn-matrix.digest"] == first.digest
    assert labels["org.opencontainers.image.base.name"] == LOCAL_BASE_IMAGE
    assert builds["1.26.0"].tag == first.tag


def test_frontend_change_rebuilds_only_the_last_layers(
    builder: ImageBuilder, specs: dict[str, ImageSpec], builds: dict[str, BuildResult]
) -> None:
    cold, warm = builds["1.26.0"], builds["1.27.0"]
    first, second = specs["1.26.0"], specs["1.27.0"]
    assert first.backend_tag == second.backend_tag  # one backend image for both cells
    assert cold.backend_built  # the first build really installed the backend
    backend_step = next(s for s in cold.steps if "/opt/cudnn/wheels" in s.instruction)
    assert not backend_step.cached
    assert not warm.backend_built  # the frontend change reused it: no backend wheel sent
    assert [s.instruction.split()[0] for s in warm.rebuilt] == [
        "COPY",
        "RUN",
        "COPY",
        "USER",
        "LABEL",
    ]
    assert "frontend/" in warm.rebuilt[0].instruction
    layers = {
        tag: builder.client.images.get(tag).attrs["RootFS"]["Layers"]
        for tag in (first.backend_tag, first.tag, second.tag)
    }
    lower = layers[first.backend_tag]
    assert layers[first.tag][: len(lower)] == lower == layers[second.tag][: len(lower)]
    assert len(layers[second.tag]) - len(lower) == 3  # frontend copy + install, tool: all new


def _run(
    builder: ImageBuilder, specs: dict[str, ImageSpec], tmp_path: Path, expect: str
) -> dict[str, CaseResult]:
    results = tmp_path / "results"
    request = ExecRequest(
        cell=_cell("1.27.0"),
        cases=(CASES,),
        results_dir=results,
        expect_backend=expect,
        image=specs["1.27.0"].tag,
        runner_args=("--jobs", "2", "--timeout", "300"),
        timeout_s=600,
    )
    outcome = DockerExecutor(client=builder.client).run(request)
    assert outcome.gpu is False  # this daemon has no NVIDIA runtime
    by_case = {r.case: r for r in load_results([results])}
    assert by_case, outcome.tail
    return by_case


def test_pin_is_verified_inside_the_container(
    builder: ImageBuilder,
    specs: dict[str, ImageSpec],
    builds: dict[str, BuildResult],
    tmp_path: Path,
) -> None:
    assert builds  # images exist
    results = _run(builder, specs, tmp_path, BACKEND)
    pin = next(r for name, r in results.items() if name.startswith("pin_check"))
    assert pin.outcome == "pass", (pin.reason, pin.tail)
    env = pin.env
    assert env["backend_version"] == 91200
    assert env["frontend_version"] == "1.27.0"
    main_lib = next(p for p in env["cudnn_libs"] if Path(p).name.startswith("libcudnn.so"))
    assert main_lib == "/opt/venv/lib/python3.11/site-packages/nvidia/cudnn/lib/libcudnn.so.9"
    gpu_cases = [r for name, r in results.items() if name.startswith("repro_fusion_uid")]
    assert gpu_cases
    assert {r.outcome for r in gpu_cases} == {"skip"}


def test_wrong_pin_is_an_error_not_a_pass(
    builder: ImageBuilder,
    specs: dict[str, ImageSpec],
    builds: dict[str, BuildResult],
    tmp_path: Path,
) -> None:
    assert builds
    results = _run(builder, specs, tmp_path, "9.13.0.50")
    pin = next(r for name, r in results.items() if name.startswith("pin_check"))
    assert pin.outcome == "error"
    assert "pin not honoured" in pin.reason


def test_build_failure_is_image_build_error_with_log_tail(builder: ImageBuilder) -> None:
    broken = builder.spec_for(
        _cell("1.26.0"), base_image="cudnn-matrix/base:no-such-image", python="3.11"
    )
    with pytest.raises(
        ImageBuildError, match=r"^building cudnn-matrix/(backend|cell):\w+ .* failed: "
    ) as info:
        builder.build(broken)
    assert "FROM ${BASE_IMAGE}" in str(info.value)  # the build log's tail names the failing step
    assert not builder.image_exists(broken.tag)


def test_list_and_prune_remove_what_the_tests_built(
    builder: ImageBuilder, specs: dict[str, ImageSpec], builds: dict[str, BuildResult]
) -> None:
    assert builds
    cli = [sys.executable, "-m", "validate", "images"]
    listed = subprocess.run(
        [*cli, "list", "--format", "json"], capture_output=True, text=True, check=False
    )
    assert listed.returncode == 0, listed.stderr
    tags = {row["tag"] for row in json.loads(listed.stdout)}
    assert {spec.tag for spec in specs.values()} <= tags
    prune = [*cli, "prune", "--cudnn", BACKEND]
    pruned = subprocess.run(prune, capture_output=True, text=True, cwd=ROOT, check=False)
    assert pruned.returncode == 0, pruned.stderr
    for spec in specs.values():
        assert f"removed {spec.tag}" in pruned.stdout
        assert not builder.image_exists(spec.tag)
        assert not builder.image_exists(spec.backend_tag)
