"""Cell images against a real docker daemon: real backend + frontend wheels, built offline.

One image per frontend (1.26.0, 1.27.0) over the smallest real backend wheel, both built once per
session from the local base image (`nox -s base_image`); fixtures remove every image they build.
No GPU here: the GPU path of the executor is covered by tests/unit/test_docker_request.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import tarfile
import uuid
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import docker
import pytest
from usercli import cli

from validate.config import ValidateConfig
from validate.env.builder import BuildResult, ImageBuilder, base_image_for, docker_client
from validate.env.images import DEFAULT_BASE_IMAGE, LOCAL_BASE_IMAGE, ImageSpec
from validate.errors import DockerError, ImageBuildError
from validate.execute import ExecTarget
from validate.execute.cases import SHIPPED_CASES
from validate.execute.docker import DockerExecutor
from validate.model.matrix import Cell
from validate.model.results import CaseResult, load_results

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Iterator

pytestmark = [pytest.mark.docker, pytest.mark.slow]  # image builds take minutes

ROOT = Path(__file__).resolve().parents[2]
WHEELHOUSE = Path(os.environ.get("CUDNN_MATRIX_TEST_WHEELHOUSE", ROOT / ".cache" / "wheelhouse"))
BACKEND = "9.12.0.46"  # nvidia-cudnn-cu13: the smallest real 9.x backend wheel (~314 MB)
FRONTENDS = ("1.26.0", "1.27.0")
CASES = SHIPPED_CASES  # the installed package's cases


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
    return {fe: builder.spec_for(_cell(fe), base_image=LOCAL_BASE_IMAGE) for fe in FRONTENDS}


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
    # cold by construction: the daemon's build cache may still hold the backend layer from an
    # earlier run that stopped halfway, so this run's backend layers get a key of their own
    builder.cache_epoch = uuid.uuid4().hex
    try:
        yield {fe: builder.build(specs[fe], log_path=logs / f"{fe}.log") for fe in FRONTENDS}
    finally:
        builder.cache_epoch = ""
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
    executor = DockerExecutor(client=builder.client)
    outcome = executor.run_cell(
        _cell("1.27.0"),
        ExecTarget(image=specs["1.27.0"].tag, expected_backend=expect),
        ValidateConfig(cases=(CASES,), jobs=2, timeout_s=300),
        results,
        timeout_s=600,
    )
    assert executor.gpu is False  # this daemon has no NVIDIA runtime
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


@pytest.fixture
def empty_image(builder: ImageBuilder) -> Iterator[str]:
    """An image with no files at all (no /bin/sh): every RUN step on it fails."""
    tag = "cudnn-matrix/test-empty:1"
    buffer = io.BytesIO()
    tarfile.open(fileobj=buffer, mode="w").close()
    builder.client.api.import_image_from_data(
        buffer.getvalue(), repository=tag.split(":")[0], tag="1"
    )
    root = builder.client.images.get(tag).id
    try:
        yield tag
    finally:  # the image and the (empty) intermediate images of the failed build on it
        family = [root]
        for image in family:
            everything = builder.client.images.list(all=True)
            family += [i.id for i in everything if i.attrs.get("Parent") == image]
        for image in reversed(family):  # children first; removing one may prune its parents
            with contextlib.suppress(docker.errors.ImageNotFound):
                builder.client.images.remove(image, force=True)


def test_build_failure_is_image_build_error_with_log_tail(
    builder: ImageBuilder, empty_image: str
) -> None:
    # a missing base no longer reaches the build (test_missing_base_is_one_line): a base whose
    # first RUN step fails makes the build itself fail
    broken = builder.spec_for(_cell("1.26.0"), base_image=empty_image)
    with pytest.raises(
        ImageBuildError, match=r"^building cudnn-matrix/(backend|cell):\w+ .* failed: "
    ) as info:
        builder.build(broken)
    steps = [line for line in str(info.value).splitlines() if line.startswith("Step ")]
    assert "FROM ${BASE_IMAGE}" in steps[1]  # the build log's tail names the steps ...
    assert "RUN set -eux;" in steps[-1]  # ... up to the failing one
    assert "/bin/sh: no such file or directory" in str(info.value)
    assert not builder.image_exists(broken.backend_tag)
    assert not builder.image_exists(broken.tag)


def _images_build(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`cudnn-matrix images build --wheelhouse W ARGS` started in `cwd`."""
    return cli("images", "build", "--wheelhouse", str(WHEELHOUSE), *args, cwd=cwd, timeout=None)


def _select(driver: str) -> list[str]:
    cell = _cell("1.27.0")
    return ["--cudnn", BACKEND, "--frontend", "1.27.0", "--cuda", cell.cuda, "--driver", driver]


def test_missing_base_is_one_line(builder: ImageBuilder, tmp_path: Path) -> None:
    """No such image on the daemon and no registry to pull it from: one line naming the fix."""
    missing = "cudnn-matrix/base:no-such-image"
    assert not builder.image_exists(missing)
    proc = _images_build(*_select("580"), "--arch", "sm90", "--base-image", missing, cwd=tmp_path)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    *logged, line = proc.stderr.splitlines()
    assert logged == [f"pulling {missing}"]  # and one line: no docker output dumped
    assert line.startswith(f"cudnn-matrix: error: base image {missing} is not on the docker daemon")
    assert re.search(r"cannot be pulled \((no registry is reachable|pull failed): ", line), line
    assert "`nox -s base_image`" in line
    assert "--base-image" in line
    assert "registry-1.docker.io/v2" not in line  # docker's raw request text stays out


def test_images_build_falls_back_to_the_local_base_as_validate_does(
    builder: ImageBuilder,
    specs: dict[str, ImageSpec],
    builds: dict[str, BuildResult],
    tmp_path: Path,
) -> None:
    """No --base-image, a daemon with only the local base: the image validate builds (cached)."""
    assert builds
    cell = _cell("1.27.0")
    nvidia = DEFAULT_BASE_IMAGE.format(cuda=cell.cuda)
    if builder.image_exists(nvidia):
        pytest.skip(f"the daemon holds {nvidia}: both paths choose it, not the local base")
    assert base_image_for(cell, None, builder) == LOCAL_BASE_IMAGE  # validate's choice
    proc = _images_build(*_select(cell.driver), "--arch", cell.arch, "--offline", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert specs["1.27.0"].tag in proc.stdout.split()  # same pins, same base: the same tag


def test_forward_compat_on_the_local_base_is_one_line(
    builder: ImageBuilder, tmp_path: Path
) -> None:
    """The Debian base has no NVIDIA CUDA apt repository: caught before any build step."""
    fc = replace(_cell("1.27.0"), driver="fc-610@580")
    spec = builder.spec_for(fc)  # the base is chosen as for any cell
    if spec.base_image != LOCAL_BASE_IMAGE:
        pytest.skip(f"the daemon holds {spec.base_image}: the cell is built on it")
    assert spec.compat == "13-0"
    proc = _images_build(*_select(fc.driver), "--arch", fc.arch, cwd=tmp_path)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    (line,) = proc.stderr.splitlines()
    assert "needs cuda-compat-13-0 from NVIDIA's CUDA apt repository" in line
    assert f"which base image {LOCAL_BASE_IMAGE} does not have" in line
    assert "--base-image nvidia/cuda:13.0.0-runtime-ubuntu24.04" in line
    assert not builder.image_exists(spec.backend_tag)  # nothing was built


@pytest.fixture
def cuda_repo_image(builder: ImageBuilder) -> Iterator[str]:
    """The local base plus an apt source for NVIDIA's CUDA repository (as nvidia/cuda images have)."""
    tag = "cudnn-matrix/test-cuda-repo:1"
    source = "deb https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/ /"
    dockerfile = (
        f"FROM {LOCAL_BASE_IMAGE}\nRUN echo '{source}' > /etc/apt/sources.list.d/cuda.list\n"
    )
    builder.client.images.build(
        fileobj=io.BytesIO(dockerfile.encode()), tag=tag, network_mode="none", rm=True
    )
    try:
        yield tag
    finally:
        builder.client.images.remove(tag, force=True)


def test_cuda_apt_repository_is_read_from_the_image(
    builder: ImageBuilder, cuda_repo_image: str
) -> None:
    assert not builder.has_cuda_apt_repo(LOCAL_BASE_IMAGE)
    assert builder.has_cuda_apt_repo(cuda_repo_image)
    fc = replace(_cell("1.27.0"), driver="fc-610@580")
    builder.check_base(builder.spec_for(fc, base_image=cuda_repo_image))  # passes: no error
    with pytest.raises(
        ImageBuildError, match=r"needs cuda-compat-13-0 .* base image cudnn-matrix/base"
    ):
        builder.check_base(builder.spec_for(fc, base_image=LOCAL_BASE_IMAGE))


def test_list_and_prune_remove_what_the_tests_built(
    builder: ImageBuilder,
    specs: dict[str, ImageSpec],
    builds: dict[str, BuildResult],
    tmp_path: Path,
) -> None:
    assert builds
    listed = cli("images", "list", "--format", "json", cwd=tmp_path, timeout=None)
    assert listed.returncode == 0, listed.stderr
    tags = {row["tag"] for row in json.loads(listed.stdout)}
    assert {spec.tag for spec in specs.values()} <= tags
    pruned = cli("images", "prune", "--cudnn", BACKEND, cwd=tmp_path, timeout=None)
    assert pruned.returncode == 0, pruned.stderr
    for spec in specs.values():
        assert f"removed {spec.tag}" in pruned.stdout
        assert not builder.image_exists(spec.tag)
        assert not builder.image_exists(spec.backend_tag)
