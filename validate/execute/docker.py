"""DockerExecutor: each step's cell image built (or reused), each cell's cases in a container.

The only docker-SDK run code. The container gets the run's config as one JSON object
(`<run>/cells/<cell id>/config.json`, mounted with the results as /results/config.json) and
runs `python -m validate run --config /results/config.json` (validate.execute.incontainer):
the cases the config names and selects (--case), nothing else. Its results are stamped with
the cell and run, then appended to the run's store (judged against the known issues at the
run's end). A failed image build is an `error` for that step's cases, with the build log's tail,
never a product failure.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import glob
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Final

from validate.env.images import IMAGE_DEFAULTS, compat_for
from validate.env.sources import short_version
from validate.env.target import ExecTarget
from validate.errors import ConfigError, DockerError, EnvBuildError, ImageBuildError
from validate.execute.cases import SHIPPED_CASES
from validate.execute.cases.kinds import KINDS
from validate.execute.classify import ExecResult
from validate.execute.incontainer import CONFIG_FILE, payload
from validate.execute.launch import placement_now
from validate.execute.limits import container_limit
from validate.execute.pool import Job
from validate.execute.records import record_all
from validate.log import step as log_step
from validate.model.matrix import env_pins
from validate.model.outcome import Outcome
from validate.model.results import RUN_KEY_ENV, RunKey, read_results

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from validate.config import ValidateConfig
    from validate.env.builder import ImageBuilder
    from validate.execute import RunContext
    from validate.execute.cases import Case
    from validate.model.matrix import Cell
    from validate.model.results import CaseResult, ResultStore
    from validate.plan.steps import Step

__all__ = [
    "CONTAINER_UID",
    "DaemonInfo",
    "DockerExecutor",
    "container_config",
    "container_kwargs",
    "daemon_info",
]

logger = logging.getLogger(__name__)

#: The image's non-root user; used when the host caller is root (never run cases as root).
CONTAINER_UID: Final = 1000
_RESULTS: Final = "/results"
_CASES: Final = PurePosixPath("/cases")
_SAMPLES: Final = "/samples"
_TESTS: Final = PurePosixPath("/tests")  # a --tests suite's root, read-only
_TAIL_CHARS: Final = 4000
_REASON_LINES: Final = 12  # of the build log's tail, in an error result's reason


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


def _case_roots(config: ValidateConfig) -> tuple[Path, ...]:
    """The case files/folders on the host: the config's, else the shipped ones (not with samples)."""
    return tuple(config.cases) or (() if config.samples or config.tests else (SHIPPED_CASES,))


def _case_mounts(config: ValidateConfig) -> tuple[dict[str, dict[str, str]], list[Path]]:
    """Each case path is mounted read-only under /cases/<n>/; returns binds and container paths."""
    binds: dict[str, dict[str, str]] = {}
    paths: list[Path] = []
    for index, case in enumerate(_case_roots(config)):
        host = case.resolve()
        target = _CASES / str(index) / host.name
        binds[str(host)] = {"bind": str(target), "mode": "ro"}
        paths.append(Path(target))
    return binds, paths


def container_config(config: ValidateConfig) -> ValidateConfig:
    """The run's config as the container sees it: its mounts' paths, this host's job count, and
    resume on (the cell folder may hold some results already)."""
    _, case_paths = _case_mounts(config)
    return dataclasses.replace(
        config,
        cases=tuple(case_paths),
        samples=Path(_SAMPLES) if config.samples is not None else None,
        tests=Path(_TESTS / config.tests.name) if config.tests is not None else None,
        results_dir=Path(_RESULTS),
        backend_store=None,  # a host folder: the cell's backend is in its image already
        jobs=config.jobs or os.cpu_count() or 1,
        resume=True,
    )


def container_kwargs(
    cell: Cell,
    target: ExecTarget,
    config: ValidateConfig,
    results_dir: Path,
    *,
    gpu: bool,
    key: RunKey | None = None,
) -> dict[str, Any]:
    """Arguments for `containers.create`: non-root, unprivileged, no network, GPUs only if asked.
    `key` signs the runner's results lines (handed in the environment, which the runner's store
    pops before any case starts); it is never in a folder the container can read."""
    from docker.types import DeviceRequest

    binds, _ = _case_mounts(config)
    binds[str(results_dir.resolve())] = {"bind": _RESULTS, "mode": "rw"}
    if config.samples is not None:
        binds[str(config.samples.resolve())] = {"bind": _SAMPLES, "mode": "ro"}
    if config.tests is not None:  # the suite runs inside as on the host (execute/jobs.py)
        binds[str(config.tests.resolve())] = {"bind": str(_TESTS / config.tests.name), "mode": "ro"}
    command = ["python", "-m", "validate", "run", "--config", f"{_RESULTS}/{CONFIG_FILE}"]
    # the pool job's placement (execute/launch.py `placed`: the ledger's GPUs and CPUs) maps to
    # the container's devices and cpuset, as the launcher applies it to a process
    placement = placement_now()
    gpus = placement.gpus if placement.gpus is not None else target.gpus
    devices: list[DeviceRequest] = []
    if gpu:
        devices = [
            DeviceRequest(count=-1, capabilities=[["gpu"]])
            if gpus is None
            else DeviceRequest(device_ids=[str(i) for i in gpus], capabilities=[["gpu"]])
        ]
    placed: dict[str, Any] = {}
    if placement.cpus is not None:
        placed["cpuset_cpus"] = ",".join(str(c) for c in sorted(placement.cpus))
    environment = {"HOME": "/tmp", **dict(target.env)}
    if key is not None:
        environment[RUN_KEY_ENV] = key.secret.hex()
    return {
        "image": target.image,
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
        "labels": {"io.cudnn-matrix.cell": cell.id},
        **placed,
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
    """One image per distinct pin set (ImageBuilder), then each cell's cases in a container."""

    name = "docker"

    def __init__(
        self, *, client: Any = None, gpu: bool | None = None, builder: ImageBuilder | None = None
    ) -> None:
        self._client = client
        self._gpu = gpu  # None: ask the daemon for an NVIDIA runtime
        self._builder = builder  # None: one on the run's wheelhouse, sharing this client
        self._images: dict[str, str | ImageBuildError] = {}  # spec tag -> built tag, or why not

    @property
    def client(self) -> Any:
        if self._client is None:
            from validate.env.builder import docker_client

            self._client = docker_client()  # DockerError: no daemon
        return self._client

    def available(self) -> bool:
        return daemon_info(self._client) is not None

    def close(self) -> None:
        """Close the SDK client (its HTTP connection pool)."""
        if self._client is not None:
            self._client.close()

    def check(self, config: ValidateConfig) -> None:
        """A cell's image holds its pins: no layering on this host's Python, no extra pins; a
        C++ project is built on the host's toolchain (not in a cell's image yet)."""
        if config.cpp is not None:
            msg = (
                "--executor docker: --cpp is not supported: a cell's image has no C++ toolchain "
                "(cmake, ninja, a compiler, the CUDA toolkit's headers) and the project is not "
                "mounted into it; use --executor local (or auto), which builds it on this host "
                "against each cell's own backend wheel"
            )
            raise ConfigError(msg)
        if config.env_mode != "isolated" or config.extras:
            flag = f"--env {config.env_mode}" if config.env_mode != "isolated" else "--with"
            msg = f"--executor docker: {flag} is not supported (a cell's image holds its pins)"
            raise ConfigError(msg)

    @property
    def gpu(self) -> bool:
        """Whether GPUs are requested: only when the daemon has an NVIDIA runtime."""
        if self._gpu is None:
            info = daemon_info(self.client)
            self._gpu = bool(info and info.nvidia)
            if not self._gpu:
                logger.warning("docker daemon has no NVIDIA runtime: cells run CPU-only")
        return self._gpu

    def _builder_for(self, config: ValidateConfig) -> ImageBuilder:
        if self._builder is None:
            from validate.env.builder import ImageBuilder

            self._builder = ImageBuilder(wheelhouse=config.wheelhouse, client=self.client)
        return self._builder

    def env_key(self, cell: Cell, run: RunContext) -> str:  # noqa: ARG002 - the protocol's
        """The pins an image is made of: the cell's env pins with the image's default Python
        (as ImageSpec.for_cell takes them), and forward compatibility, the one pin of an image
        the driver decides (arch never)."""
        try:
            compat = compat_for(cell)
        except ValueError:  # a driver specifier (">=575") is never forward compatibility
            compat = None
        pins = {**env_pins(cell, IMAGE_DEFAULTS), "compat": str(compat)}
        return ";".join(f"{axis}={value}" for axis, value in pins.items())

    def prepare(self, step: Step, run: RunContext) -> ExecTarget | str:
        """The step's image, built or refreshed (cached layers); a build failure is the reason."""
        cell = step.first
        builder = self._builder_for(run.config)
        if why := run.sources.unavailable(cell.cudnn, cell.cuda):
            logger.error("%s", why)
            return why  # a version the --backend-store lacks: `error` for the step's cases
        backend, frontend = run.sources.backend(cell.cudnn, cell.cuda), run.sources.frontend()
        try:
            spec = builder.spec_for(
                cell,
                backend=backend,
                frontend=frontend,
                base_image=run.config.base_image,  # None: env.builder.base_image_for chooses
            )
        except EnvBuildError as exc:  # a wheel the wheelhouse could not provide
            return f"image inputs: {exc}".splitlines()[0]
        cell_dir = run.results_dir / "cells" / cell.id
        cell_dir.mkdir(parents=True, exist_ok=True)
        if spec.tag not in self._images:
            with log_step(f"image for {cell.label}"):
                try:
                    self._images[spec.tag] = builder.ensure(spec, log_path=cell_dir / "build.log")
                except ImageBuildError as exc:
                    self._images[spec.tag] = exc
        image = self._images[spec.tag]
        if not isinstance(image, str):
            lines = str(image).strip().splitlines()
            return "image build failed: " + "\n".join([lines[0], *lines[1:][-_REASON_LINES:]])
        return ExecTarget(image=image, expected_backend=short_version(cell.cudnn))

    def run(
        self, step: Step, target: ExecTarget, cases: Sequence[Case], run: RunContext
    ) -> list[Job]:
        """One pool job per cell: its own container from the step's image, holding as many slots
        as the container runs cases at once; its results are collected when it ends. A shard's
        container runs the cases given here, the shard's part of the step."""
        config = run.config
        if config.shard is not None:  # this shard's cases of the step, named exactly
            names = tuple(glob.escape(c.name) for c in cases)
            config = dataclasses.replace(config, case_names=names)
        slots = max(1, min(run.slots, len(cases)))
        config = dataclasses.replace(config, jobs=slots)
        limit = container_limit(config.timeout_s, len(cases), config.reruns)
        estimates = [run.history.estimate(c.name) for c in cases] if run.history else [None]
        known = [e for e in estimates if e is not None]
        estimate = (
            max(max(known), sum(known) / slots) if known and len(known) == len(estimates) else None
        )
        return [
            Job(
                name=f"cell {cell.id}",
                run=functools.partial(self._run_cell_job, cell, target, cases, config, run, limit),
                estimate_s=estimate,
                slots=slots,
                cases=len(cases),
            )
            for cell in step.cells
        ]

    def _run_cell_job(
        self,
        cell: Cell,
        target: ExecTarget,
        cases: Sequence[Case],
        config: ValidateConfig,
        run: RunContext,
        limit: float,
    ) -> tuple[Job, ...]:
        cell_dir = run.results_dir / "cells" / cell.id
        placed = (
            placement_now()
        )  # the GPU the ledger booked the cell on: the container sees it only
        if placed.gpus is not None:
            target = dataclasses.replace(target, gpus=placed.gpus)
        title = f"cell {cell.id}: {cell.label} in {target.image} ({len(cases)} cases)"
        with log_step(title):
            try:
                ended = self.run_cell(
                    cell, target, config, cell_dir, timeout_s=limit, run_id=run.run_id
                )
            except DockerError as exc:
                reason = f"container: {exc}".splitlines()[0]
                record_all(run.store, cell, cases, Outcome.ERROR, reason, run.run_id)
                return ()
        if ended.timed_out:
            logger.warning("cell %s: the container ran out of time and was killed", cell.id)
        collected = _collect(run.store, cell, cases, cell_dir, run.run_id, ended.tail)
        run.store.check()  # the disk filled or the run folder went: ResultsLost, no new cell
        RunKey.for_run(cell_dir).seal(cell_dir)  # the cell folder verifies on its own
        if run.history is not None:  # the durations the container measured, for the next run
            for result in collected:
                if result.outcome is not Outcome.SKIP and result.duration_s:
                    run.history.record(result.case, result.duration_s)
        return ()

    def container(
        self,
        cell: Cell,
        target: ExecTarget,
        config: ValidateConfig,
        results_dir: Path,
        *,
        key: RunKey | None = None,
    ) -> _Container:
        """The cell's container as a context manager (created on enter, removed on exit)."""
        if not target.image:
            msg = f"cell {cell.id}: the docker executor needs an image tag (ExecTarget.image)"
            raise DockerError(msg)
        kwargs = container_kwargs(cell, target, config, results_dir, gpu=self.gpu, key=key)
        return _Container(self.client, kwargs)

    def run_cell(
        self,
        cell: Cell,
        target: ExecTarget,
        config: ValidateConfig,
        results_dir: Path,
        *,
        timeout_s: float | None = None,
        run_id: str = "",
        key: RunKey | None = None,
    ) -> ExecResult:
        """One cell's container: the run's config goes in as `results_dir/config.json`, and
        its lines are signed with `key` (default: the cell folder's own, kept on this host; the
        run's key never leaves this process)."""
        results_dir.mkdir(parents=True, exist_ok=True)
        if os.getuid() == 0:  # the container's user must be able to write the results
            results_dir.chmod(0o777)
        inner = payload(container_config(config), target.expected_backend, run_id)
        (results_dir / CONFIG_FILE).write_text(inner, encoding="utf-8")
        key = key or RunKey.for_run(results_dir, create=True)
        return self.run_container(cell, target, config, results_dir, timeout_s=timeout_s, key=key)

    def run_container(
        self,
        cell: Cell,
        target: ExecTarget,
        config: ValidateConfig,
        results_dir: Path,
        *,
        timeout_s: float | None = None,
        key: RunKey | None = None,
    ) -> ExecResult:
        """Start, wait (kill on timeout), keep the full log on disk (results_dir/runner.log)
        and a tail in the result."""
        import docker
        import requests

        log_path = results_dir / "runner.log"
        start = time.monotonic()
        timed_out = False
        with self.container(cell, target, config, results_dir, key=key) as box:
            try:
                box.obj.start()
                status = box.obj.wait(timeout=timeout_s)
                returncode = int(status.get("StatusCode", -1))
            except requests.exceptions.ConnectionError:  # read timeout while waiting
                timed_out, returncode = True, -9
                with contextlib.suppress(docker.errors.DockerException):
                    box.obj.kill()
            except docker.errors.DockerException as exc:
                msg = f"cell {cell.id}: container in {target.image} failed to run: {exc}"
                raise DockerError(msg) from exc
            text = _decode(box.obj.logs(stdout=True, stderr=True))
        log_path.write_text(text, encoding="utf-8")
        return ExecResult(
            kind="runner",
            returncode=returncode,
            timed_out=timed_out,
            timeout_s=timeout_s or 0.0,
            duration_s=time.monotonic() - start,
            log_path=log_path,
            tail=text[-_TAIL_CHARS:],
        )


def _host_path(path: str, cell_dir: Path) -> str:
    """A container path under /results as the same file on the host."""
    if path and (path == _RESULTS or path.startswith(_RESULTS + "/")):
        return str(cell_dir) + path[len(_RESULTS) :]
    return path


def _collect(
    store: ResultStore, cell: Cell, cases: Sequence[Case], cell_dir: Path, run_id: str, tail: str
) -> list[CaseResult]:
    """Stamp the container's results with cell and run, append them; missing cases are errors.
    Only lines signed with the cell's key count (one a case wrote itself is skipped, and named).
    Returns the results the container recorded."""
    done = store.done_keys()
    seen: set[str] = set()
    collected: list[CaseResult] = []
    read = read_results(cell_dir / "results.jsonl", RunKey.for_run(cell_dir))
    for line in read.skipped:
        logger.warning("cell %s: skipped %s", cell.id, line)
    for result in read.results:
        stamped: CaseResult = result.with_(
            cell_id=cell.id,
            cell=cell.pins(),
            run_id=run_id,
            log_path=_host_path(result.log_path, cell_dir),
        )
        seen.add(stamped.case)
        collected.append(stamped)
        if stamped.key not in done:
            store.append(stamped)
            done.add(stamped.key)
    missing = [case for case in cases if not _recorded(case, seen, {c.name for c in cases})]
    if missing:
        last = tail.strip().splitlines()[-1:] or ["no output"]
        reason = f"runner in the container recorded no result: {last[0][:200]}"
        record_all(store, cell, missing, Outcome.ERROR, reason, run_id)
    return collected


def _recorded(case: Case, seen: set[str], names: set[str]) -> bool:
    """Whether the container recorded `case`: by its name, or, for a batched kind (a `--tests`
    suite), by any result its kind owns that is not another case's (one per test id)."""
    if case.name in seen:
        return True
    kind = KINDS.get(case.kind)
    if kind is None or not kind.batched:
        return False
    return any(kind.owns(str(case.path), name) for name in seen - names)


def _decode(data: bytes | Iterator[bytes]) -> str:
    raw = data if isinstance(data, bytes) else b"".join(data)
    return raw.decode("utf-8", errors="replace")
