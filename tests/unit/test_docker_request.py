"""What the docker executor sends to the daemon, captured at the SDK's HTTP layer (no GPU, no daemon).

This machine has no GPU and no NVIDIA runtime, so the GPU path cannot run here; the request body
of `POST /containers/create` is the part we own, and it is asserted exactly.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker
import pytest

from validate.config import ValidateConfig
from validate.env.builder import ImageBuilder
from validate.env.sources import Sources
from validate.execute import ExecTarget, RunContext
from validate.execute.docker import DockerExecutor, container_config
from validate.execute.incontainer import payload, read_payload
from validate.execute.launch import placed
from validate.execute.placement import Placement
from validate.model.matrix import Cell
from validate.model.results import ResultStore
from validate.plan.host import HostFacts
from validate.plan.steps import Step

if TYPE_CHECKING:
    from validate.env.images import ImageSpec

CELL = Cell(cudnn="9.24.0.43", frontend="1.27.0", cuda="13.0", driver="580", arch="sm100")


class _Sent(Exception):
    """Raised by the capturing transport instead of talking to a daemon."""


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[dict[str, Any]]]:
    """A real DockerClient (API version pinned, so no daemon is asked) whose POSTs are recorded."""
    client = docker.DockerClient(base_url="unix:///nonexistent/docker.sock", version="1.41")
    bodies: list[dict[str, Any]] = []

    def post_json(url: str, data: dict[str, Any], **_: Any) -> None:
        assert url.endswith("/containers/create")
        bodies.append(data)
        raise _Sent

    monkeypatch.setattr(client.api, "_post_json", post_json)
    return client, bodies


@dataclass(frozen=True, kw_only=True)
class _Request:
    """What one cell's container is made from: the step's target and the run's config."""

    target: ExecTarget
    config: ValidateConfig
    results_dir: Path


def _request(tmp_path: Path, gpus: tuple[int, ...] | None = None) -> _Request:
    case = tmp_path / "cases" / "pin_check.py"
    case.parent.mkdir()
    case.write_text("print('hi')\n")
    (tmp_path / "samples").mkdir()
    return _Request(
        target=ExecTarget(
            image="cudnn-matrix/cell:0123456789abcdef", expected_backend="9.24.0.43", gpus=gpus
        ),
        config=ValidateConfig(cases=(case,), samples=tmp_path / "samples", timeout_s=600),
        results_dir=tmp_path / "results",
    )


def _send(
    client: Any, request: _Request, *, gpu: bool, executor: DockerExecutor | None = None
) -> dict[str, Any]:
    bodies: list[dict[str, Any]] = client.bodies
    executor = executor or DockerExecutor(client=client, gpu=gpu)
    with (
        pytest.raises(_Sent),
        executor.container(CELL, request.target, request.config, request.results_dir),
    ):
        pass
    return bodies[-1]


@pytest.fixture
def client(captured: tuple[Any, list[dict[str, Any]]]) -> Any:
    real, bodies = captured
    real.bodies = bodies
    return real


def test_all_gpus_requested_with_device_request(client: Any, tmp_path: Path) -> None:
    body = _send(client, _request(tmp_path), gpu=True)
    assert body["HostConfig"]["DeviceRequests"] == [
        {"Driver": "", "Count": -1, "DeviceIDs": [], "Capabilities": [["gpu"]], "Options": {}}
    ]


def test_one_device_per_cell_when_parallel(client: Any, tmp_path: Path) -> None:
    body = _send(client, _request(tmp_path, gpus=(3,)), gpu=True)
    assert body["HostConfig"]["DeviceRequests"] == [
        {"Driver": "", "Count": 0, "DeviceIDs": ["3"], "Capabilities": [["gpu"]], "Options": {}}
    ]


def test_a_jobs_placement_is_the_containers_devices_and_cpuset(client: Any, tmp_path: Path) -> None:
    """The pool job's placement (launch.placed, as the pool runs a job) maps to the container:
    --gpus device=N and --cpuset-cpus, over the step's own GPU choice."""
    with placed(Placement(gpus=(2,), cpus=frozenset({0, 1, 5}))):
        body = _send(client, _request(tmp_path, gpus=(3,)), gpu=True)
    assert body["HostConfig"]["DeviceRequests"] == [
        {"Driver": "", "Count": 0, "DeviceIDs": ["2"], "Capabilities": [["gpu"]], "Options": {}}
    ]
    assert body["HostConfig"]["CpusetCpus"] == "0,1,5"
    (tmp_path / "unplaced").mkdir()
    unplaced = _send(client, _request(tmp_path / "unplaced"), gpu=True)
    assert "CpusetCpus" not in unplaced["HostConfig"]


def test_no_nvidia_runtime_means_no_device_request(client: Any, tmp_path: Path) -> None:
    body = _send(client, _request(tmp_path), gpu=False)
    assert not body["HostConfig"].get("DeviceRequests")


def test_container_is_locked_down_and_mounts_are_right(client: Any, tmp_path: Path) -> None:
    request = _request(tmp_path)
    body = _send(client, request, gpu=True)
    host = body["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert not host.get("Privileged")  # the SDK omits False: never privileged
    assert host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["Init"] is True
    uid = os.getuid()
    assert body["User"] == ("1000:1000" if uid == 0 else f"{uid}:{os.getgid()}")
    assert not body["User"].startswith("0:")
    assert sorted(host["Binds"]) == sorted(
        [
            f"{request.config.cases[0].resolve()}:/cases/0/pin_check.py:ro",
            f"{request.results_dir.resolve()}:/results:rw",
            f"{(tmp_path / 'samples').resolve()}:/samples:ro",
        ]
    )
    assert body["Image"] == "cudnn-matrix/cell:0123456789abcdef"
    assert body["Cmd"] == ["python", "-m", "validate", "run", "--config", "/results/config.json"]
    assert body["Labels"] == {"io.cudnn-matrix.cell": CELL.id}


def test_the_container_gets_the_config_not_an_argv(tmp_path: Path) -> None:
    """One JSON object: the run's config with the container's paths, the pin and the run id."""
    request = _request(tmp_path)
    inner = container_config(request.config)
    path = tmp_path / "config.json"
    path.write_text(payload(inner, request.target.expected_backend, "RUN1"))
    config, expected, run_id = read_payload(path)
    assert config == inner
    assert config.cases == (Path("/cases/0/pin_check.py"),)
    assert config.samples == Path("/samples")
    assert config.results_dir == Path("/results")
    assert config.timeout_s == 600
    assert config.resume  # the cell folder may hold some results already
    assert config.jobs == (os.cpu_count() or 1)
    assert (expected, run_id) == ("9.24.0.43", "RUN1")


class _NoBuild(ImageBuilder):
    """FAKE build step only (no daemon): the spec is real, `ensure` returns its tag."""

    def ensure(self, spec: ImageSpec, *, log_path: Path | None = None) -> str:  # noqa: ARG002
        return spec.tag


@pytest.mark.parametrize(("python", "wheel_python"), [("3.12", "cp312"), ("", "cp311")])
def test_python_picks_the_image_the_container_runs(
    client: Any, tmp_path: Path, python: str, wheel_python: str
) -> None:
    """`--python 3.12`: the step's image is the one made for Python 3.12 (its frontend wheel for
    cp312), and that is the image the container is created from; a cell without a Python gets
    the image default (3.11). The docker path once built every image for 3.11."""
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    for name in (
        "nvidia_cudnn_cu13-9.24.0.43-py3-none-manylinux_2_27_x86_64.whl",
        "nvidia_cudnn_frontend-1.27.0-cp311-cp311-manylinux_2_28_x86_64.whl",
        "nvidia_cudnn_frontend-1.27.0-cp312-cp312-manylinux_2_28_x86_64.whl",
    ):
        (wheelhouse / name).write_bytes(b"")
    builder = _NoBuild(wheelhouse=wheelhouse, cache_dir=tmp_path / "ctx")
    executor = DockerExecutor(client=client, gpu=False, builder=builder)
    request = _request(tmp_path)
    config = dataclasses.replace(
        request.config, base_image="nvidia/cuda:13.0.0-runtime-ubuntu24.04", wheelhouse=wheelhouse
    )
    run = RunContext(
        config=config,
        host=HostFacts(),
        run_id="R",
        sources=Sources(),
        store=ResultStore(request.results_dir / "results.jsonl"),
    )
    cell = dataclasses.replace(CELL, python=python)
    target = executor.prepare(Step(key=executor.env_key(cell, run), cells=(cell,)), run)
    assert isinstance(target, ExecTarget), target
    spec = builder.spec_for(cell, base_image=config.base_image)
    assert spec.python == (python or "3.11")
    assert spec.frontend_wheel.startswith(f"nvidia_cudnn_frontend-1.27.0-{wheel_python}-")
    body = _send(client, dataclasses.replace(request, target=target), gpu=False, executor=executor)
    assert body["Image"] == target.image == spec.tag
