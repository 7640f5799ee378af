"""ExecTarget: where a cell's cases run, built by the env stage and consumed by an executor.

One value for what used to be three (the venv's EnvHandle, the runner's RunTarget and the
executors' ExecRequest): the environment (an interpreter with an env overlay, or an image),
the pins a case process must load, and, once `for_cell` stamped them, the cell and host facts
the runner checks requirements against.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from validate.model.matrix import Cell
    from validate.plan.host import HostFacts

__all__ = ["ExecTarget"]


@dataclass(frozen=True, kw_only=True)
class ExecTarget:
    """A ready environment for one step's cells: run `python` with `process_env()`, or `image`."""

    python: Path = field(default_factory=lambda: Path(sys.executable))  # the case interpreter
    image: str | None = None  # docker: the cell image tag; None: `python` on this host
    #: Overlay onto the caller's environment; LD_LIBRARY_PATH, LD_PRELOAD and PATH go in front
    #: of the caller's own value, the rest replace it.
    env: Mapping[str, str] = field(default_factory=dict)
    gpus: tuple[int, ...] | None = None  # docker: None = all GPUs; a tuple: only these ids
    backend_dir: Path | None = None  # the folder the pinned libcudnn.so.9 must come from
    expected_backend: str | None = None  # "9.24.0": what cudnn.backend_version() must say
    expected_frontend: str | None = None  # "1.27.0": what cudnn.__version__ must say
    reused: bool = False  # the environment was in the cache already
    root: Path | None = None  # the cached env folder; None for the current environment
    # stamped by `for_cell`: which cell runs here, and what this host offers
    cell_id: str = ""
    cell: Mapping[str, str] = field(default_factory=dict)
    backend_version: str | None = None  # the cell's declared backend, for requirement checks
    host_arch: str | None = None  # "sm90"; None = no GPU
    has_gpu: bool = False

    def for_cell(self, cell: Cell, host: HostFacts) -> ExecTarget:
        """This environment running `cell` on `host`."""
        return replace(
            self,
            cell_id=cell.id,
            cell=cell.pins(),
            backend_version=cell.cudnn,
            host_arch=host.arch,
            has_gpu=host.has_gpu,
        )

    def process_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """Full environment for a case process: `base` plus the overlay (paths prepended)."""
        out = dict(os.environ if base is None else base)
        for key, value in self.env.items():
            if key in ("LD_LIBRARY_PATH", "LD_PRELOAD", "PATH") and out.get(key):
                out[key] = f"{value}{os.pathsep}{out[key]}"
            else:
                out[key] = value
        return out
