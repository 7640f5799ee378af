"""ImageBuilder: the only docker-SDK build code. Stages a small context and builds.

What goes into an image (ImageSpec, `spec_for`, `base_image_for`) is decided in env/images.py;
`base_image_for` and `HoldsImages` are re-exported here, where they were first. What the daemon
holds (list, prune, pull a base, import) is env/daemon.py's `DaemonImages`, which ImageBuilder
extends; `docker_client` and `ImageInfo` are re-exported here too.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

from validate import scratch
from validate.env.daemon import DaemonImages, ImageInfo, docker_client
from validate.env.images import (
    DEFAULT_BASE_IMAGE,
    HoldsImages,
    ImageSpec,
    base_image_for,
    repo_root,
    spec_for,
)
from validate.env.progress import Activity, activity
from validate.env.venvs import cache_root
from validate.env.wheelhouse import Wheelhouse, default_wheelhouse, link
from validate.errors import ImageBuildError

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

_TAIL_LINES: Final = 40
_STEP_RE: Final = re.compile(r"^Step (\d+)/\d+ : (.*)$")
_STEP_OF_RE: Final = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
_LAYER_RE: Final = re.compile(r"^ ---> ([0-9a-f]{12,})$")
_TOOL_PARTS: Final = ("validate", "matrix")
_IGNORE: Final = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".mypy_cache")


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


class ImageBuilder(DaemonImages):
    """Builds cell images from ImageSpecs with wheels from one shared wheelhouse; what the daemon
    holds (exists, list, prune, pull, import) comes from DaemonImages (env/daemon.py)."""

    def __init__(
        self,
        *,
        wheelhouse: Path | None = None,
        cache_dir: Path | None = None,
        network: str | None = None,
        client: Any = None,
        cache_epoch: str = "",
    ) -> None:
        super().__init__(client=client)
        self.wheels = Wheelhouse(wheelhouse)
        # A value of your own makes the backend layers cold by construction (the daemon's build
        # cache cannot serve them, whatever an earlier, interrupted run left there); "" = normal.
        self.cache_epoch = cache_epoch
        self.wheelhouse = self.wheels.root
        self.cache_dir = cache_root(cache_dir).resolve()  # build contexts: <cache>/contexts
        self.network = network  # build-time network: None = daemon default, "none" = offline

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
        # the staged context goes however the build ends: an error, Ctrl-C, SIGTERM (scratch.py)
        with scratch.building(ctx):
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

    def ensure(self, spec: ImageSpec, *, log_path: Path | None = None) -> str:
        """The tag of the cell's image, built or refreshed (cached layers) first."""
        return self.build(spec, log_path=log_path).tag

    def prune(self, images: Iterable[ImageInfo]) -> list[str]:
        """Remove the given cell images (and their now-unused build layers) and the staged build
        contexts; returns the tags."""
        removed = super().prune(images)
        shutil.rmtree(self.cache_dir / "contexts", ignore_errors=True)
        return removed


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
