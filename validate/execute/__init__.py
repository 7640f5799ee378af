"""Executors run the in-environment runner for one cell: locally or inside the cell's container."""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Literal, Protocol, runtime_checkable

from validate.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

    from validate.model.matrix import Cell

__all__ = [
    "EXECUTORS",
    "ExecRequest",
    "ExecResult",
    "Executor",
    "ExecutorName",
    "docker_gpu_ready",
    "pick_executor",
]

logger = logging.getLogger(__name__)

ExecutorName = Literal["auto", "local", "docker"]


@dataclass(frozen=True, kw_only=True)
class ExecRequest:
    """Run these cases for one cell; the runner writes its results into `results_dir`."""

    cell: Cell
    cases: tuple[Path, ...]  # case files/folders on the host
    results_dir: Path  # host folder, written by the runner (mounted rw in a container)
    expect_backend: str | None = None  # the backend pin the runner verifies in each case process
    samples: Path | None = None  # a cudnn-frontend checkout (mounted read-only in a container)
    image: str | None = None  # docker: the cell image tag (ImageBuilder.ensure); local: unused
    python: Path | None = None  # local: the cell environment's interpreter; docker: unused
    env: Mapping[str, str] = field(default_factory=dict)  # extra environment for the runner
    runner_args: tuple[str, ...] = ()  # extra `validate run` flags (e.g. ("--timeout", "600"))
    gpus: tuple[int, ...] | None = None  # None: all GPUs; a tuple: only these device ids
    timeout_s: float | None = None  # wall clock for the whole runner invocation
    log_path: Path | None = None  # full runner output; defaults to results_dir/runner.log


@dataclass(frozen=True, kw_only=True)
class ExecResult:
    """How the runner process ended; the case results are in the runner's files, not here."""

    returncode: int
    timed_out: bool
    duration_s: float
    log_path: Path | None
    tail: str
    results_dir: Path
    gpu: bool = False  # whether GPUs were made visible to the runner


@runtime_checkable
class Executor(Protocol):
    """Runs `python -m validate run CASES --results DIR --json` in a cell's environment."""

    name: str

    def available(self) -> bool:
        """Whether this executor can run here (e.g. a docker daemon answers)."""
        ...

    def run(self, request: ExecRequest) -> ExecResult:
        """Run the runner once; infra failures raise ValidateError subclasses, never a result."""
        ...


def _load(module: str, attr: str) -> Callable[[], Executor]:
    def factory() -> Executor:
        cls: Callable[[], Executor] = getattr(importlib.import_module(module), attr)
        return cls()

    return factory


#: Executor factories by name; the docker SDK is only imported when the docker one is built.
EXECUTORS: Final[Mapping[str, Callable[[], Executor]]] = {
    "local": _load("validate.execute.local", "LocalExecutor"),
    "docker": _load("validate.execute.docker", "DockerExecutor"),
}


def docker_gpu_ready() -> bool:
    """True when a docker daemon answers and offers an NVIDIA runtime (container toolkit)."""
    from validate.execute.docker import daemon_info

    info = daemon_info()
    return info is not None and info.nvidia


def pick_executor(name: str) -> Executor:
    """`auto`: docker when a daemon with an NVIDIA runtime answers, else local."""
    match name:
        case "auto":
            chosen = "docker" if docker_gpu_ready() else "local"
            logger.info("executor auto -> %s", chosen)
            return EXECUTORS[chosen]()
        case "local" | "docker":
            return EXECUTORS[name]()
        case _:
            msg = f"--executor: unknown executor {name!r}; expected auto, local or docker"
            raise ConfigError(msg)
