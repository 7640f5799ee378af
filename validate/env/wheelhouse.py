"""Wheelhouse: wheels fetched once per host (pip download for the image's Python), reused by builds."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Final

from validate.env.pipcli import pip_version, progress_args, raw_progress
from validate.env.progress import activity, pip_line
from validate.env.sources import backend_package
from validate.env.streamed import run_streamed
from validate.env.venvs import cache_root
from validate.errors import ConfigError, EnvBuildError

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = ["Wheelhouse", "default_wheelhouse", "link"]

logger = logging.getLogger(__name__)

_TAIL_LINES: Final = 40
_MANYLINUX: Final = tuple(f"manylinux_2_{minor}_x86_64" for minor in range(17, 40))


def default_wheelhouse() -> Path:
    """<cache>/wheelhouse ($CUDNN_MATRIX_CACHE, else ~/.cache/cudnn-matrix): wheels fetched once
    per host, reused by every build."""
    return cache_root() / "wheelhouse"


def link(src: Path, dest: Path) -> None:
    """Hard-link (same file system, no copy of a 550 MB wheel) or fall back to a copy."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


class Wheelhouse:
    """A flat folder of wheels (backend, frontend) plus per-Python folders (runner deps, torch)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = (root or default_wheelhouse()).resolve()

    def pip_download(
        self, dest: Path, requirements: Iterable[str], *, python: str, deps: bool
    ) -> None:
        """`pip download` for the image's Python (not this interpreter's) into dest."""
        abi = "cp" + python.replace(".", "")
        argv = [sys.executable, "-m", "pip", "download", "--dest", str(dest), "--only-binary=:all:"]
        argv += ["--python-version", python, "--implementation", "cp"]
        argv += [f"--abi={tag}" for tag in (abi, "abi3", "none")]
        argv += [
            f"--platform={tag}" for tag in (*_MANYLINUX, "manylinux2014_x86_64", "linux_x86_64")
        ]
        argv += [] if deps else ["--no-deps"]
        argv += [*progress_args(pip_version()), *requirements]
        dest.mkdir(parents=True, exist_ok=True)
        what = " ".join(requirements)
        logger.info("downloading %s for Python %s into %s", what, python, dest)
        with (
            activity(f"download {what if len(what) <= 60 else what[:57] + '...'}") as act,
            tempfile.TemporaryDirectory(prefix="cm-pip-") as tmp,
        ):
            # a pip without `raw`: its downloads' bytes are the files in its TMPDIR
            grow = None if raw_progress(pip_version()) else Path(tmp)
            env = {**os.environ, "TMPDIR": tmp} if grow else None
            proc = run_streamed(argv, act, pip_line, env=env, grow=grow)
        if proc.returncode != 0:
            msg = f"pip download {what} into {dest} failed:\n{proc.tail(_TAIL_LINES)}"
            raise EnvBuildError(msg, signalled=proc.returncode < 0)

    def find(self, pattern: str) -> Path | None:
        found = sorted(self.root.glob(pattern))
        return found[0] if found else None

    def fetch_backend(self, version: str, cuda: str) -> str:
        """File name of the pinned backend wheel in the wheelhouse (downloaded on first use)."""
        package = backend_package(int(cuda.split(".")[0]))
        pattern = f"{package.replace('-', '_')}-{version}-*.whl"
        if (wheel := self.find(pattern)) is None:
            self.pip_download(self.root, [f"{package}=={version}"], python="3.11", deps=False)
            wheel = self.find(pattern)
        if wheel is None:
            msg = f"no {pattern} in {self.root} after pip download"
            raise EnvBuildError(msg)
        return wheel.name

    def fetch_frontend(self, version: str, python: str) -> str:
        """File name of the frontend wheel for the image's Python (downloaded on first use)."""
        pattern = f"nvidia_cudnn_frontend-{version}-cp{python.replace('.', '')}-*.whl"
        if (wheel := self.find(pattern)) is None:
            req = [f"nvidia-cudnn-frontend=={version}"]
            self.pip_download(self.root, req, python=python, deps=False)
            wheel = self.find(pattern)
        if wheel is None:
            msg = f"no {pattern} in {self.root} after pip download"
            raise EnvBuildError(msg)
        return wheel.name

    def add_wheel(self, wheel: Path) -> str:
        """Put a local wheel file into the wheelhouse; returns its file name."""
        if not wheel.is_file():
            msg = f"wheel {wheel} not found"
            raise ConfigError(msg)
        dest = self.root / wheel.name
        if not dest.exists():
            link(wheel, dest)
        return wheel.name

    def runner_dir(self, python: str, requirements: Sequence[str]) -> Path:
        """root/runner-cpXY: the in-container runner's dependencies for the image's Python."""
        folder = self.root / f"runner-cp{python.replace('.', '')}"
        wanted = "\n".join(requirements) + "\n"
        req = folder / "requirements.txt"
        if not req.is_file() or req.read_text() != wanted:
            self.pip_download(folder, requirements, python=python, deps=True)
            req.write_text(wanted)
        return folder

    def torch_dir(self, python: str, torch: str) -> Path:
        """root/torch-V-cpXY: torch and its dependencies for the image's Python."""
        folder = self.root / f"torch-{torch}-cp{python.replace('.', '')}"
        if not (folder / "requirements.txt").is_file():
            self.pip_download(folder, [f"torch=={torch}"], python=python, deps=True)
            (folder / "requirements.txt").write_text(f"torch=={torch}\n")
        return folder
