"""Local Python base image from Debian packages (debootstrap/mmdebstrap + docker import).

For hosts with no registry: `nox -s base_image` (or `python -m validate.env.base_image`) builds
`cudnn-matrix/base:bookworm-py3`, usable as `images build --base-image`. Needs root and a Debian
mirror (or a local apt proxy/mirror named with --mirror).
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import tempfile
import time
from pathlib import Path
from typing import Final, Literal

from validate.env.images import LOCAL_BASE_IMAGE
from validate.env.progress import Activity, activity
from validate.env.streamed import run_streamed
from validate.errors import ConfigError, DockerError

__all__ = ["BOOTSTRAP_TOOLS", "DEBIAN_MIRROR", "base_image_exists", "build_base_image"]

logger = logging.getLogger(__name__)

Tool = Literal["auto", "mmdebstrap", "debootstrap"]
BOOTSTRAP_TOOLS: Final = ("mmdebstrap", "debootstrap")
_PACKAGES: Final = ("python3", "python3-venv")
DEBIAN_MIRROR: Final = os.environ.get("CUDNN_MATRIX_DEBIAN_MIRROR", "http://deb.debian.org/debian")
_CHANGES: Final = ("ENV LANG=C.UTF-8", 'CMD ["python3"]')
_SLIM: Final = ("usr/share/doc", "usr/share/man", "usr/share/locale", "var/cache/apt/archives")


def _pick(tool: Tool) -> str:
    names = BOOTSTRAP_TOOLS if tool == "auto" else (tool,)
    for name in names:
        if shutil.which(name):
            return name
    msg = (
        f"no {' or '.join(names)} on PATH; install it (apt-get install {names[-1]}) or pass --tool"
    )
    raise ConfigError(msg)


_PACKAGE_STEP = re.compile(r"^I: (Retrieving|Validating|Extracting|Unpacking|Configuring) (\S+)")


def _bootstrap_line(line: str, act: Activity) -> None:
    """debootstrap/mmdebstrap: a phase ("I: Installing core packages...") is a milestone, each
    package retrieved or unpacked counts as it arrives."""
    if match := _PACKAGE_STEP.match(line):
        act.update(f"{match[1].lower()} {match[2]}", done=act.done + 1)
    elif line.startswith("I: ") and (line.endswith("...") or "successfully" in line):
        act.milestone(line.removeprefix("I: ").rstrip("."))


def _run(argv: list[str]) -> None:
    with activity(argv[0]) as act:
        proc = run_streamed(argv, act, _bootstrap_line)
    if proc.returncode != 0:
        msg = f"{argv[0]} failed (exit {proc.returncode}): {shlex.join(argv)}\n{proc.tail(30)}"
        raise DockerError(msg)


def _rootfs_tarball(tool: str, suite: str, mirror: str, work: Path) -> Path:
    """Bootstrap a minimal Debian with Python into work/rootfs.tar."""
    tarball = work / "rootfs.tar"
    include = "--include=" + ",".join(_PACKAGES)
    if tool == "mmdebstrap":
        _run(
            [
                "mmdebstrap",
                "--variant=minbase",
                "--mode=root",
                include,
                "--aptopt=APT::Install-Recommends false",
                *(f"--dpkgopt=path-exclude=/{part}/*" for part in _SLIM[:3]),
                suite,
                str(tarball),
                mirror,
            ]
        )
        return tarball
    root = work / "rootfs"
    _run(["debootstrap", "--variant=minbase", include, suite, str(root), mirror])
    for part in _SLIM:
        shutil.rmtree(root / part, ignore_errors=True)
    _run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(tarball), "."])
    shutil.rmtree(root, ignore_errors=True)
    return tarball


def base_image_exists(tag: str = LOCAL_BASE_IMAGE) -> bool:
    """Whether the daemon already holds the base image."""
    from validate.env.builder import ImageBuilder

    return ImageBuilder().image_exists(tag)


def build_base_image(
    *,
    tag: str = LOCAL_BASE_IMAGE,
    suite: str = "bookworm",
    mirror: str = DEBIAN_MIRROR,
    tool: Tool = "auto",
    work_dir: Path | None = None,
) -> str:
    """Bootstrap Debian `suite` with python3 + venv and `docker import` it as `tag`; returns the id."""
    from validate.env.builder import ImageBuilder

    chosen = _pick(tool)
    if os.geteuid() != 0:
        msg = (
            f"{chosen} needs root to build a root file system; run as root (or in CI's root shell)"
        )
        raise ConfigError(msg)
    start = time.monotonic()
    logger.info("bootstrapping Debian %s from %s with %s", suite, mirror, chosen)
    with tempfile.TemporaryDirectory(prefix="cudnn-matrix-base-", dir=work_dir) as tmp:
        tarball = _rootfs_tarball(chosen, suite, mirror, Path(tmp))
        image_id = ImageBuilder().import_rootfs(tarball, tag, _CHANGES)
    logger.info("base image %s (%s) built in %.0fs", tag, image_id[:19], time.monotonic() - start)
    return image_id
