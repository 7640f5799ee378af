"""ImageBuilder: the only docker-SDK build code. Stages a small context, builds, lists and prunes.

What goes into an image (ImageSpec, `spec_for`, `base_image_for`) is decided in env/images.py;
`base_image_for` and `HoldsImages` are re-exported here, where they were first.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shutil
import socket
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

from validate.env.images import (
    BACKEND_REPO,
    DEFAULT_BASE_IMAGE,
    IMAGE_REPO,
    LABEL_PREFIX,
    HoldsImages,
    ImageSpec,
    base_image_for,
    repo_root,
    spec_for,
)
from validate.env.progress import Activity, activity
from validate.env.wheelhouse import Wheelhouse, default_wheelhouse, link
from validate.errors import DockerError, ImageBuildError

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

    from validate.env.sources import BackendSource, FrontendSource
    from validate.model.matrix import Cell

__all__ = [
    "BuildResult",
    "BuildStep",
    "HoldsImages",
    "ImageBuilder",
    "ImageInfo",
    "base_image_for",
    "default_wheelhouse",
    "docker_client",
]

logger = logging.getLogger(__name__)

_TAIL_LINES: Final = 40
_CLIENT_TIMEOUT_S: Final = 3600  # a backend layer's pip install is silent for minutes
_STEP_RE: Final = re.compile(r"^Step (\d+)/\d+ : (.*)$")
_STEP_OF_RE: Final = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
_LAYER_RE: Final = re.compile(r"^ ---> ([0-9a-f]{12,})$")
_TOOL_PARTS: Final = ("validate", "matrix")
_IGNORE: Final = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".mypy_cache")
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
class BuildStep:
    """One Dockerfile instruction as the classic builder reported it."""

    index: int
    instruction: str
    cached: bool
    layer: str | None


@dataclass(frozen=True, kw_only=True)
class BuildResult:
    """A built (or fully cached) cell image."""

    tag: str
    image_id: str
    steps: tuple[BuildStep, ...]
    duration_s: float
    log_path: Path | None
    backend_built: bool = False  # False: the backend image existed and was reused as it is

    @property
    def rebuilt(self) -> tuple[BuildStep, ...]:
        """Steps that ran (not taken from the cache)."""
        return tuple(step for step in self.steps if not step.cached)


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


def _parse_steps(lines: Iterable[str]) -> tuple[BuildStep, ...]:
    steps: list[BuildStep] = []
    current: tuple[int, str] | None = None
    cached = False
    for line in lines:
        if match := _STEP_RE.match(line):  # FROM does no work: count it as cached
            current, cached = (int(match[1]), match[2]), match[2].upper().startswith("FROM ")
        elif current and line.strip() == "---> Using cache":
            cached = True
        elif current and (match := _LAYER_RE.match(line)):
            steps.append(
                BuildStep(index=current[0], instruction=current[1], cached=cached, layer=match[1])
            )
            current = None
    return tuple(steps)


class ImageBuilder:
    """Builds cell images from ImageSpecs with wheels from one shared wheelhouse."""

    def __init__(
        self,
        *,
        wheelhouse: Path | None = None,
        cache_dir: Path | None = None,
        network: str | None = None,
        client: Any = None,
        cache_epoch: str = "",
    ) -> None:
        self.wheels = Wheelhouse(wheelhouse)
        # A value of your own makes the backend layers cold by construction (the daemon's build
        # cache cannot serve them, whatever an earlier, interrupted run left there); "" = normal.
        self.cache_epoch = cache_epoch
        self.wheelhouse = self.wheels.root
        self.cache_dir = (cache_dir or Path.home() / ".cache" / "cudnn-matrix").resolve()
        self.network = network  # build-time network: None = daemon default, "none" = offline
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

    # -- wheelhouse -------------------------------------------------------------------------
    def fetch_backend(self, version: str, cuda: str) -> str:
        """File name of the pinned backend wheel in the wheelhouse (downloaded on first use)."""
        return self.wheels.fetch_backend(version, cuda)

    def fetch_frontend(self, version: str, python: str) -> str:
        """File name of the frontend wheel for the image's Python (downloaded on first use)."""
        return self.wheels.fetch_frontend(version, python)

    def spec_for(
        self,
        cell: Cell,
        *,
        backend: BackendSource | None = None,
        frontend: FrontendSource | None = None,
        base_image: str | None = None,
        torch: str | None = None,
    ) -> ImageSpec:
        """The ImageSpec of a cell (env.images.spec_for), with this builder's wheelhouse and
        daemon: `images build` and `validate --executor docker` both ask here."""
        return spec_for(
            cell,
            self.wheels,
            self,
            backend=backend,
            frontend=frontend,
            base_image=base_image,
            torch=torch,
        )

    # -- context and build ------------------------------------------------------------------
    def _context(self, name: str, dockerfile: Path, labels: Mapping[str, str]) -> Path:
        ctx = self.cache_dir / "contexts" / name
        shutil.rmtree(ctx, ignore_errors=True)
        ctx.mkdir(parents=True)
        label_text = " ".join(f"{key}={json.dumps(value)}" for key, value in labels.items())
        # one LABEL instruction (the SDK's labels= adds one build step per label)
        text = f"{dockerfile.read_text().rstrip()}\nLABEL {label_text}\n"
        (ctx / "Dockerfile").write_text(text)
        if (ignore := dockerfile.with_name(".dockerignore")).is_file():
            shutil.copy2(ignore, ctx / ".dockerignore")
        return ctx

    def stage_backend(self, spec: ImageSpec) -> Path:
        """Context of the backend image: runner deps, the backend, optional torch wheels."""
        ctx = self._context(
            f"backend-{spec.backend_digest}", spec.backend_dockerfile, spec.backend_labels()
        )
        for wheel in self.wheels.runner_dir(spec.python, spec.runner).iterdir():
            link(wheel, ctx / "runner" / wheel.name)
        if spec.backend_libdir is not None:
            shutil.copytree(
                spec.backend_libdir, ctx / "backend" / "lib", copy_function=_copy_or_link
            )
        else:
            assert spec.backend_wheel is not None
            wheel = self.wheelhouse / spec.backend_wheel
            link(wheel, ctx / "backend" / "wheels" / spec.backend_wheel)
        (ctx / "torch").mkdir()
        if spec.torch:
            for wheel in self.wheels.torch_dir(spec.python, spec.torch).iterdir():
                if not wheel.name.startswith("nvidia_cudnn_"):  # our backend pin must win
                    link(wheel, ctx / "torch" / wheel.name)
        return ctx

    def stage(self, spec: ImageSpec) -> Path:
        """Context of the cell image (a few MB): the frontend wheel and the tool."""
        ctx = self._context(f"cell-{spec.digest}", spec.dockerfile, spec.labels())
        link(self.wheelhouse / spec.frontend_wheel, ctx / "frontend" / spec.frontend_wheel)
        root = repo_root()
        for part in _TOOL_PARTS:
            if (root / part).is_dir():
                shutil.copytree(root / part, ctx / "tool" / part, ignore=_IGNORE)
        return ctx

    def build(self, spec: ImageSpec, *, log_path: Path | None = None) -> BuildResult:
        """Build the backend image when missing, then the cell image on top (cached layers reused)."""
        start = time.monotonic()
        backend_missing = not self.image_exists(spec.backend_tag)
        if backend_missing:
            self.check_base(spec)
        sink = log_path.open("w", encoding="utf-8") if log_path else None
        try:
            lower: BuildResult | None = None
            if backend_missing:
                ctx = self.stage_backend(spec)
                args = spec.backend_build_args()
                if self.cache_epoch:
                    args = {**args, "CACHE_EPOCH": self.cache_epoch}
                lower = self._build(spec, ctx, spec.backend_tag, args, sink)
            upper = self._build(spec, self.stage(spec), spec.tag, spec.build_args(), sink)
        finally:
            if sink:
                sink.close()
        return BuildResult(
            tag=spec.tag,
            image_id=upper.image_id,
            steps=(lower.steps if lower else ()) + upper.steps,
            duration_s=time.monotonic() - start,
            log_path=log_path,
            backend_built=lower is not None,
        )

    def _build(
        self, spec: ImageSpec, ctx: Path, tag: str, buildargs: dict[str, str], sink: IO[str] | None
    ) -> BuildResult:
        import docker

        lines: list[str] = []
        image_id = error = ""
        start = time.monotonic()
        try:
            stream = self.client.api.build(
                path=str(ctx),
                tag=tag,
                buildargs=buildargs,
                rm=True,
                forcerm=True,
                pull=False,
                decode=True,
                network_mode=self.network,
            )
            with activity(f"image {tag}") as act:
                for chunk in stream:
                    for line in _chunk_lines(chunk):
                        lines.append(line)
                        if sink:
                            sink.write(line + "\n")
                        _show_build_line(line, act)
                    # read the stream to its end even after an error: it frees the connection
                    error = error or chunk.get("error", "")
                    if aux := chunk.get("aux"):
                        image_id = aux.get("ID", image_id)
        except docker.errors.DockerException as exc:
            raise ImageBuildError(_failure(spec, tag, str(exc), lines)) from exc
        if error:
            raise ImageBuildError(_failure(spec, tag, error, lines))
        if not image_id:
            image_id = self.client.images.get(tag).id
        shutil.rmtree(ctx, ignore_errors=True)
        return BuildResult(
            tag=tag,
            image_id=image_id,
            steps=_parse_steps(lines),
            duration_s=time.monotonic() - start,
            log_path=None,
        )

    def check_base(self, spec: ImageSpec) -> None:
        """Before building a backend image: a one-line ImageBuildError where its base cannot serve.

        The base must be on the daemon (pulled here when a registry answers), and where the cell
        needs forward compatibility it must carry NVIDIA's CUDA apt repository (the local Debian
        base does not), which the cuda-compat-<major>-<minor> layer installs from.
        """
        self.require_image(spec.base_image)
        if spec.compat and not self.has_cuda_apt_repo(spec.base_image):
            nvidia = DEFAULT_BASE_IMAGE.format(cuda=spec.cuda)
            msg = (
                f"the cell (cudnn {spec.cudnn}, CUDA {spec.cuda}, forward compat) needs "
                f"cuda-compat-{spec.compat} from NVIDIA's CUDA apt repository, which base image "
                f"{spec.base_image} does not have; use an nvidia/cuda base (--base-image {nvidia})"
            )
            raise ImageBuildError(msg)

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

    def ensure(self, spec: ImageSpec, *, log_path: Path | None = None) -> str:
        """The tag of the cell's image, built or refreshed (cached layers) first."""
        return self.build(spec, log_path=log_path).tag

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
        shutil.rmtree(self.cache_dir / "contexts", ignore_errors=True)
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


def _copy_or_link(src: str, dst: str) -> str:
    link(Path(src), Path(dst))
    return dst


def _show_build_line(line: str, act: Activity) -> None:
    """A docker build step is a milestone (one plain line each); other output running state."""
    if match := _STEP_OF_RE.match(line):
        act.update(done=int(match[1]) - 1, total=int(match[2]))
        act.milestone(f"step {match[1]}/{match[2]}: {match[3][:80]}")
    elif line.strip() and not line.startswith(" ---> "):
        act.update(line.strip()[:100])


def _chunk_lines(chunk: Mapping[str, Any]) -> Iterator[str]:
    text = chunk.get("stream") or chunk.get("status") or chunk.get("error") or ""
    yield from (line.rstrip() for line in str(text).splitlines() if line.strip())


def _failure(spec: ImageSpec, tag: str, error: str, lines: list[str]) -> str:
    tail = "\n".join(lines[-_TAIL_LINES:])
    return f"building {tag} (cudnn {spec.cudnn}, frontend {spec.frontend}) failed: {error}\n{tail}"
