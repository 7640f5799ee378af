"""DockerExecutor: the runner inside the cell's container; the only docker-SDK run code."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any, Final

from validate.errors import DockerError
from validate.execute import ExecRequest, ExecResult

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["CONTAINER_UID", "DaemonInfo", "DockerExecutor", "container_kwargs", "daemon_info"]

logger = logging.getLogger(__name__)

#: The image's non-root user; used when the host caller is root (never run cases as root).
CONTAINER_UID: Final = 1000
_RESULTS: Final = "/results"
_CASES: Final = PurePosixPath("/cases")
_SAMPLES: Final = "/samples"
_TAIL_CHARS: Final = 4000


@dataclass(frozen=True, kw_only=True)
class DaemonInfo:
    """What the daemon says about itself that decides how cells run."""

    server_version: str
    runtimes: tuple[str, ...]
    nvidia: bool  # an NVIDIA runtime is configured: GPUs can be requested


def daemon_info(client: Any = None) -> DaemonInfo | None:
    """The daemon's facts, or None when no daemon answers (auto then picks local)."""
    from validate.env.builder import docker_client

    try:
        own = client is None
        client = client or docker_client(timeout=10)
    except DockerError as exc:
        logger.info("no docker daemon: %s", exc)
        return None
    try:
        info = client.info()
    finally:
        if own:
            client.close()
    runtimes = tuple(sorted(info.get("Runtimes") or {}))
    nvidia = "nvidia" in runtimes or info.get("DefaultRuntime") == "nvidia"
    return DaemonInfo(
        server_version=str(info.get("ServerVersion", "")), runtimes=runtimes, nvidia=nvidia
    )


def _user() -> str:
    uid, gid = os.getuid(), os.getgid()
    return f"{CONTAINER_UID}:{CONTAINER_UID}" if uid == 0 else f"{uid}:{gid}"


def _case_mounts(request: ExecRequest) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Each case path is mounted read-only under /cases/<n>/; returns binds and container paths."""
    binds: dict[str, dict[str, str]] = {}
    paths: list[str] = []
    for index, case in enumerate(request.cases):
        host = case.resolve()
        target = _CASES / str(index) / host.name
        binds[str(host)] = {"bind": str(target), "mode": "ro"}
        paths.append(str(target))
    return binds, paths


def container_kwargs(request: ExecRequest, *, gpu: bool) -> dict[str, Any]:
    """Arguments for `containers.create`: non-root, unprivileged, no network, GPUs only if asked."""
    from docker.types import DeviceRequest

    binds, case_paths = _case_mounts(request)
    binds[str(request.results_dir.resolve())] = {"bind": _RESULTS, "mode": "rw"}
    command = ["python", "-m", "validate", "run", *case_paths, "--results", _RESULTS, "--json"]
    if request.expect_backend:
        command += ["--expect-backend", request.expect_backend]
    if request.samples is not None:
        binds[str(request.samples.resolve())] = {"bind": _SAMPLES, "mode": "ro"}
        command += ["--samples", _SAMPLES]
    command += list(request.runner_args)
    devices: list[DeviceRequest] = []
    if gpu:
        devices = [
            DeviceRequest(count=-1, capabilities=[["gpu"]])
            if request.gpus is None
            else DeviceRequest(device_ids=[str(i) for i in request.gpus], capabilities=[["gpu"]])
        ]
    environment = {"HOME": "/tmp", **dict(request.env)}
    return {
        "image": request.image,
        "command": command,
        "user": _user(),
        "privileged": False,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "network_mode": "none",
        "volumes": binds,
        "environment": environment,
        "working_dir": "/tmp",
        "device_requests": devices,
        "init": True,  # reaps orphaned kernel processes
        "shm_size": "2g",  # torch and NCCL want more than docker's 64 MB default
        "labels": {"io.cudnn-matrix.cell": request.cell.id},
    }


class _Container(contextlib.AbstractContextManager["_Container"]):
    """A created container that is always removed on exit, whatever happened inside."""

    def __init__(self, client: Any, kwargs: dict[str, Any]) -> None:
        self.client = client
        self.kwargs = kwargs
        self.obj: Any = None

    def __enter__(self) -> _Container:  # noqa: PYI034 - Self needs 3.11 or typing_extensions
        import docker

        try:
            self.obj = self.client.containers.create(**self.kwargs)
        except docker.errors.ImageNotFound as exc:
            msg = (
                f"image {self.kwargs['image']} not found; build it with `cudnn-matrix images build`"
            )
            raise DockerError(msg) from exc
        except docker.errors.DockerException as exc:
            msg = f"cannot create a container from {self.kwargs['image']}: {exc}"
            raise DockerError(msg) from exc
        return self

    def __exit__(self, *exc_info: object) -> None:
        import docker

        if self.obj is not None:
            with contextlib.suppress(docker.errors.DockerException):
                self.obj.remove(force=True)


class DockerExecutor:
    """Runs the cell's runner in its image (ExecRequest.image) with the container rules above."""

    name = "docker"

    def __init__(self, *, client: Any = None, gpu: bool | None = None) -> None:
        self._client = client
        self._gpu = gpu  # None: ask the daemon for an NVIDIA runtime

    @property
    def client(self) -> Any:
        if self._client is None:
            from validate.env.builder import docker_client

            self._client = docker_client()
        return self._client

    def available(self) -> bool:
        return daemon_info(self._client) is not None

    def close(self) -> None:
        """Close the SDK client (its HTTP connection pool)."""
        if self._client is not None:
            self._client.close()

    @property
    def gpu(self) -> bool:
        """Whether GPUs are requested: only when the daemon has an NVIDIA runtime."""
        if self._gpu is None:
            info = daemon_info(self.client)
            self._gpu = bool(info and info.nvidia)
            if not self._gpu:
                logger.warning("docker daemon has no NVIDIA runtime: cells run CPU-only")
        return self._gpu

    def container(self, request: ExecRequest) -> _Container:
        """The cell's container as a context manager (created on enter, removed on exit)."""
        if not request.image:
            msg = f"cell {request.cell.id}: the docker executor needs an image tag (ExecRequest.image)"
            raise DockerError(msg)
        return _Container(self.client, container_kwargs(request, gpu=self.gpu))

    def run(self, request: ExecRequest) -> ExecResult:
        """Start, wait (kill on timeout), keep the full log on disk and a tail in the result."""
        import docker
        import requests

        request.results_dir.mkdir(parents=True, exist_ok=True)
        if os.getuid() == 0:  # the container's user must be able to write the results
            request.results_dir.chmod(0o777)
        log_path = request.log_path or request.results_dir / "runner.log"
        start = time.monotonic()
        timed_out = False
        with self.container(request) as box:
            try:
                box.obj.start()
                status = box.obj.wait(timeout=request.timeout_s)
                returncode = int(status.get("StatusCode", -1))
            except requests.exceptions.ConnectionError:  # read timeout while waiting
                timed_out, returncode = True, -9
                with contextlib.suppress(docker.errors.DockerException):
                    box.obj.kill()
            except docker.errors.DockerException as exc:
                msg = f"cell {request.cell.id}: container in {request.image} failed to run: {exc}"
                raise DockerError(msg) from exc
            text = _decode(box.obj.logs(stdout=True, stderr=True))
        log_path.write_text(text, encoding="utf-8")
        return ExecResult(
            returncode=returncode,
            timed_out=timed_out,
            duration_s=time.monotonic() - start,
            log_path=log_path,
            tail=text[-_TAIL_CHARS:],
            results_dir=request.results_dir,
            gpu=self.gpu,
        )


def _decode(data: bytes | Iterator[bytes]) -> str:
    raw = data if isinstance(data, bytes) else b"".join(data)
    return raw.decode("utf-8", errors="replace")
