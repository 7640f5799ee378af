"""What the docker daemon holds, as the tool sees it: the SDK client, the cell and backend images
there (exists, list, prune, import a root file system) and the checks of a base image before a
build sits on it (pulled when missing; NVIDIA's CUDA apt repository read out of it).

`DaemonImages` is the part of ImageBuilder (env/builder.py, which builds) that only asks the
daemon; `docker_client` and `ImageInfo` are re-exported there, where they were first.
"""

from __future__ import annotations

import io
import logging
import os
import re
import socket
import tarfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from validate.env.images import BACKEND_REPO, IMAGE_REPO, LABEL_PREFIX
from validate.env.progress import activity
from validate.errors import DockerError, ImageBuildError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from pathlib import Path

__all__ = ["DaemonImages", "ImageInfo", "docker_client"]

logger = logging.getLogger(__name__)

_CLIENT_TIMEOUT_S: Final = 3600  # a backend layer's pip install is silent for minutes
#: Path part of NVIDIA's CUDA apt repository (and of its mirrors), where cuda-compat-* lives.
_CUDA_APT_REPO: Final = b"/compute/cuda/repos/"
_LOOKUP: Final = re.compile(r"\blookup (\S+?):? ")
_NO_REGISTRY: Final = re.compile(
    r"dial tcp|no such host|i/o timeout|connection refused|network is unreachable"
    r"|TLS handshake timeout",
    re.IGNORECASE,
)
_FIX_BASE: Final = (
    "build the local one with `python -m validate.cli.base_image` (in a checkout: `nox -s base_image`)"
    " or pass --base-image with an image the daemon holds"
)


def docker_client(timeout: int = _CLIENT_TIMEOUT_S) -> Any:
    """A docker SDK client for the daemon of DOCKER_HOST, or DockerError naming the next step."""
    import docker

    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if host.startswith("unix://"):
        # docker-py's unix transport leaks its socket when connect() fails (a ResourceWarning in
        # every caller); a plain connect here, closed either way, answers "is a daemon there".
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(min(timeout, 10))
            try:
                probe.connect(host.removeprefix("unix://"))
            except OSError as exc:
                msg = f"docker daemon not reachable at {host} ({exc.strerror or exc}); start dockerd or set DOCKER_HOST"
                raise DockerError(msg) from exc
    client = None
    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except docker.errors.DockerException as exc:
        if client is not None:
            client.close()  # its connection pool holds a socket: no ResourceWarning on this path
        msg = f"docker daemon not reachable at {host} ({exc}); start dockerd or set DOCKER_HOST"
        raise DockerError(msg) from exc
    return client


def _first_line(exc: Exception) -> str:
    """The daemon's own explanation of a failed request, first line, at most 160 characters."""
    text = str(getattr(exc, "explanation", None) or exc).strip()
    return (text.splitlines() or [type(exc).__name__])[0][:160]


def _pull_cause(exc: Exception) -> str:
    """docker's pull error as a few words: no registry reachable, or its first line."""
    first = _first_line(exc)
    if match := _LOOKUP.search(first):
        return f"no registry is reachable: lookup {match[1]} failed"
    if match := _NO_REGISTRY.search(first):
        return f"no registry is reachable: {match[0]}"
    return f"pull failed: {first}"


def _names_cuda_repo(etc_apt: bytes) -> bool:
    """Whether a tar of /etc/apt has an apt source (.list, .sources) naming NVIDIA's CUDA repo."""
    with tarfile.open(fileobj=io.BytesIO(etc_apt)) as tar:
        for member in tar:
            if member.isfile() and member.name.endswith((".list", ".sources")):
                handle = tar.extractfile(member)
                if handle is not None and _CUDA_APT_REPO in handle.read():
                    return True
    return False


@dataclass(frozen=True, kw_only=True)
class ImageInfo:
    """A cell image found on the daemon."""

    tag: str
    image_id: str
    size_mb: float
    labels: Mapping[str, str]

    @property
    def kind(self) -> str:
        """'cell' or 'backend'."""
        return self.label("kind") or "cell"

    def label(self, name: str) -> str:
        return self.labels.get(f"{LABEL_PREFIX}.{name}", "")


class DaemonImages:
    """The images on one docker daemon: what it holds, pulls of a missing base, removals."""

    def __init__(self, *, client: Any = None) -> None:
        self._client = client
        self._pull_failures: dict[str, str] = {}  # image -> the one-line error of its failed pull
        self._apt_repo: dict[str, bool] = {}  # image -> whether it carries NVIDIA's CUDA repo

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = docker_client()
        return self._client

    def close(self) -> None:
        """Close the SDK client (its HTTP connection pool)."""
        if self._client is not None:
            self._client.close()

    # -- a base image -----------------------------------------------------------------------
    def require_image(self, image: str) -> None:
        """Pull `image` unless the daemon holds it; a failed pull is one line naming the fix."""
        import docker

        if self.image_exists(image):
            return
        if image not in self._pull_failures:
            logger.info("pulling %s", image)
            try:
                self._pull(image)
                return
            except docker.errors.DockerException as exc:
                self._pull_failures[image] = (
                    f"base image {image} is not on the docker daemon and cannot be pulled "
                    f"({_pull_cause(exc)}); {_FIX_BASE}"
                )
        raise ImageBuildError(self._pull_failures[image])

    def _pull(self, image: str) -> None:
        """Pull with the bytes of its layers shown as they arrive; an error the daemon reports
        inside the stream (not only one before it) is an APIError, as images.pull would raise."""
        import docker

        layers: dict[str, tuple[float, float]] = {}
        error = ""
        with activity(f"pull {image}", unit="bytes") as act:
            act.update("waiting for the registry")
            for event in self.client.api.pull(image, stream=True, decode=True):
                error = error or str(event.get("error") or "")
                status, layer = str(event.get("status", "")), str(event.get("id", ""))
                detail = event.get("progressDetail") or {}
                if status == "Downloading" and detail.get("total"):
                    layers[layer] = (float(detail.get("current", 0)), float(detail["total"]))
                elif status in ("Download complete", "Pull complete") and layer in layers:
                    layers[layer] = (layers[layer][1], layers[layer][1])
                elif status.startswith("Status:"):
                    act.milestone(status.removeprefix("Status: "))
                if layers:
                    done = sum(current for current, _ in layers.values())
                    total = sum(size for _, size in layers.values())
                    act.update(f"{len(layers)} layers", done=done, total=total)
        if error:
            raise docker.errors.APIError(error)

    def has_cuda_apt_repo(self, image: str) -> bool:
        """Whether the image's apt sources name NVIDIA's CUDA repository.

        Reads /etc/apt out of a created (never started) container: no shell or network needed.
        """
        import docker

        if image in self._apt_repo:
            return self._apt_repo[image]
        try:
            container = self.client.containers.create(
                image, command=["true"], network_disabled=True
            )
        except docker.errors.DockerException as exc:
            msg = f"cannot read the apt sources of base image {image}: {_first_line(exc)}"
            raise ImageBuildError(msg) from exc
        try:
            stream, _ = container.get_archive("/etc/apt")
            data = b"".join(stream)
        except docker.errors.NotFound:  # no apt at all
            data = b""
        finally:
            container.remove(force=True)
        self._apt_repo[image] = found = bool(data) and _names_cuda_repo(data)
        return found

    # -- inventory --------------------------------------------------------------------------
    def image_exists(self, tag: str) -> bool:
        """Whether the daemon holds an image with this tag."""
        import docker

        try:
            self.client.images.get(tag)
        except docker.errors.ImageNotFound:
            return False
        return True

    def list_images(self) -> list[ImageInfo]:
        """Cell images, then backend images, on the daemon (by the io.cudnn-matrix.digest label)."""
        out: list[ImageInfo] = []
        for image in self.client.images.list(filters={"label": f"{LABEL_PREFIX}.digest"}):
            repos = (IMAGE_REPO + ":", BACKEND_REPO + ":")
            tags = [tag for tag in image.tags if tag.startswith(repos)] or ["<none>"]
            size = float(image.attrs.get("Size", 0)) / 1e6
            labels = image.labels or {}
            out.extend(
                ImageInfo(tag=t, image_id=image.short_id, size_mb=size, labels=labels) for t in tags
            )
        return sorted(out, key=_order)

    def prune(self, images: Iterable[ImageInfo]) -> list[str]:
        """Remove the given cell images (and their now-unused build layers); returns the tags."""
        import docker

        removed: list[str] = []
        for info in sorted(images, key=_order):  # cells before the backend images they sit on
            ref = info.tag if info.tag != "<none>" else info.image_id
            try:
                self.client.images.remove(ref, noprune=False)
            except docker.errors.ImageNotFound:
                continue
            except docker.errors.APIError as exc:
                msg = f"cannot remove image {ref}: {exc.explanation or exc}"
                raise DockerError(msg) from exc
            removed.append(ref)
        return removed

    def import_rootfs(self, tarball: Path, tag: str, changes: Iterable[str] = ()) -> str:
        """`docker import` a root file system tarball as an image (the local base image)."""
        import docker

        repository, _, version = tag.partition(":")
        try:
            self.client.api.import_image_from_file(
                str(tarball), repository=repository, tag=version or "latest", changes=list(changes)
            )
            image_id: str = self.client.images.get(tag).id
        except docker.errors.DockerException as exc:
            msg = f"docker import of {tarball} as {tag} failed: {exc}"
            raise DockerError(msg) from exc
        return image_id


def _order(info: ImageInfo) -> tuple[bool, str]:
    return info.tag.startswith(BACKEND_REPO), info.tag
