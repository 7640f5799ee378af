"""ImageSpec: what goes into a cell's container image, and its content-addressed tag and labels.

`spec_for` decides every input of a cell's image (pins, wheels, base, forward compatibility);
env/builder.py builds what it decides.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, Literal, Protocol

from packaging.version import Version

from validate import __version__
from validate.errors import ConfigError
from validate.model.matrix import Driver, env_pins

if TYPE_CHECKING:
    from collections.abc import Mapping

    from validate.env.sources import BackendSource, FrontendSource
    from validate.env.wheelhouse import Wheelhouse
    from validate.model.matrix import Cell

__all__ = [
    "BACKEND_REPO",
    "DEFAULT_BASE_IMAGE",
    "IMAGE_DEFAULTS",
    "IMAGE_PYTHON",
    "IMAGE_REPO",
    "LABEL_PREFIX",
    "LOCAL_BASE_IMAGE",
    "HoldsImages",
    "ImageSpec",
    "base_image_for",
    "compat_for",
    "dockerfile_path",
    "repo_root",
    "spec_for",
]

#: Repository part of every cell image tag; `images list|prune` only ever touch this repository.
IMAGE_REPO: Final = "cudnn-matrix/cell"
#: The lower half of cell images (base, Python, runner deps, backend, torch, compat), shared by cells.
BACKEND_REPO: Final = "cudnn-matrix/backend"
#: Prefix of the labels that name a cell image's pins.
LABEL_PREFIX: Final = "io.cudnn-matrix"
#: Where a registry is reachable: NVIDIA's CUDA runtime image for the cell's CUDA (formatted).
DEFAULT_BASE_IMAGE: Final = "nvidia/cuda:{cuda}.0-runtime-ubuntu24.04"
#: Built by `nox -s base_image` from Debian packages, for hosts with no registry.
LOCAL_BASE_IMAGE: Final = "cudnn-matrix/base:bookworm-py3"

BackendKind = Literal["wheel", "libdir"]

#: The Python of a cell image whose cell has no python axis value (the local base image's).
IMAGE_PYTHON: Final = "3.11"
#: An image is always made for some Python: `env_pins(cell, IMAGE_DEFAULTS)` are an image's pins,
#: for `images build` and `validate --executor docker` alike (ImageSpec.for_cell, docker env_key).
IMAGE_DEFAULTS: Final[Mapping[str, str]] = MappingProxyType({"python": IMAGE_PYTHON})


def repo_root() -> Path:
    """The checkout this package runs from (images/ and matrix/ live beside validate/)."""
    return Path(__file__).resolve().parents[2]


def dockerfile_path(name: str = "Dockerfile") -> Path:
    """images/<name> of the checkout, else the copy an installed wheel carries as
    `validate/_images` (pyproject's package-dir maps it from `images/`); a clear error when
    neither is there."""
    path = repo_root() / "images" / name
    if path.is_file():
        return path
    packaged = Path(__file__).resolve().parents[1] / "_images" / name
    if packaged.is_file():
        return packaged
    msg = f"images/{name} not found at {path} nor {packaged}; reinstall cudnn-matrix"
    raise ConfigError(msg)


def compat_for(cell: Cell) -> str | None:
    """'13-0' (cuda-compat-13-0) for a forward-compatibility driver pin, else None."""
    if not Driver.parse(cell.driver).forward_compat:
        return None
    release = Version(cell.cuda).release
    return f"{release[0]}-{(*release, 0)[1]}"


def _libdir_fingerprint(libdir: Path) -> str:
    """Names and sizes of a library folder's files: cheap, and changes when the libraries do."""
    items = sorted(
        (p.relative_to(libdir).as_posix(), p.stat().st_size)
        for p in libdir.rglob("*")
        if p.is_file()
    )
    return hashlib.sha256(json.dumps(items).encode()).hexdigest()[:16]


@dataclass(frozen=True, kw_only=True)
class ImageSpec:
    """The pins of one cell image; `tag` hashes them together with the Dockerfile's text.

    Driver and GPU arch are not pins of an image (the host provides them), so cells that differ
    only there share one image; forward compatibility (`compat`) is the one driver-side pin.
    """

    cudnn: str
    frontend: str
    cuda: str
    base_image: str
    python: str  # "3.11": the base image's Python, which the runner wheels are fetched for
    backend_source: BackendKind
    backend_wheel: str | None = (
        None  # wheel file name (in the wheelhouse) when backend_source=wheel
    )
    backend_libdir: Path | None = None  # library folder when backend_source=libdir
    frontend_wheel: str  # wheel file name in the wheelhouse
    torch: str | None = None  # torch version for the optional torch layer
    compat: str | None = None  # "13-0" -> cuda-compat-13-0; only where the rules allow it
    runner: tuple[str, ...] = field(
        default=(
            "nbclient",
            "nbformat",
            "ipykernel",
            "packaging",
            "tabulate",
            "rich",
            "nvidia-ml-py",
            # a --tests suite runs inside as on the host, one process per share (execute/suite.py)
            "pytest",
        )
    )
    dockerfile: Path = field(default_factory=dockerfile_path)
    backend_dockerfile: Path = field(default_factory=lambda: dockerfile_path("Dockerfile.backend"))

    def __post_init__(self) -> None:
        match self.backend_source:
            case "wheel" if not self.backend_wheel:
                msg = f"image for cudnn {self.cudnn}: backend_source=wheel needs backend_wheel"
                raise ConfigError(msg)
            case "libdir" if self.backend_libdir is None or not self.backend_libdir.is_dir():
                msg = (
                    f"image for cudnn {self.cudnn}: library folder {self.backend_libdir} not found"
                )
                raise ConfigError(msg)

    @classmethod
    def for_cell(
        cls,
        cell: Cell,
        *,
        frontend_wheel: str,
        backend_wheel: str | None = None,
        backend_libdir: Path | None = None,
        base_image: str | None = None,
        torch: str | None = None,
        compat: str | None = None,
    ) -> ImageSpec:
        """Spec for a planned cell; the backend is a wheel file name or a library folder. The
        image's pins are the cell's env pins, with IMAGE_PYTHON where the cell has no Python."""
        pins = env_pins(cell, IMAGE_DEFAULTS)
        cudnn, frontend, cuda, python = (
            pins.pop(a) for a in ("cudnn", "frontend", "cuda", "python")
        )
        if (
            pins
        ):  # an axis marked `env` that no ImageSpec field installs: cells would share an image
            msg = f"ImageSpec.for_cell: env axes {', '.join(pins)} do not reach the image"
            raise NotImplementedError(msg)
        base = base_image or DEFAULT_BASE_IMAGE.format(cuda=cuda)
        return cls(
            cudnn=cudnn,
            frontend=frontend,
            cuda=cuda,
            base_image=base,
            python=python,
            backend_source="libdir" if backend_libdir is not None else "wheel",
            backend_wheel=backend_wheel,
            backend_libdir=backend_libdir,
            frontend_wheel=frontend_wheel,
            torch=torch,
            compat=compat,
        )

    def pins(self) -> dict[str, str]:
        """Everything that decides the image's content, as strings (the tag's hash input)."""
        raw = asdict(self)
        raw.pop("dockerfile")
        raw.pop("backend_dockerfile")
        if self.backend_libdir is not None:
            raw["backend_libdir"] = _libdir_fingerprint(self.backend_libdir)
        return {key: json.dumps(value, default=str) for key, value in sorted(raw.items())}

    def backend_pins(self) -> dict[str, str]:
        """The pins of the lower half: everything but the frontend."""
        pins = self.pins()
        for key in ("frontend", "frontend_wheel"):
            pins.pop(key)
        return pins

    @property
    def backend_digest(self) -> str:
        """sha256 over the backend pins and images/Dockerfile.backend (16 hex digits)."""
        text = json.dumps(self.backend_pins(), sort_keys=True) + self.backend_dockerfile.read_text()
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def digest(self) -> str:
        """sha256 over all pins and both Dockerfiles' text (16 hex digits)."""
        text = json.dumps(self.pins(), sort_keys=True) + self.backend_dockerfile.read_text()
        return hashlib.sha256((text + self.dockerfile.read_text()).encode()).hexdigest()[:16]

    @property
    def tag(self) -> str:
        return f"{IMAGE_REPO}:{self.digest}"

    @property
    def backend_tag(self) -> str:
        return f"{BACKEND_REPO}:{self.backend_digest}"

    @property
    def compat_libdir(self) -> str:
        """Prefix for LD_LIBRARY_PATH when forward compatibility is on, else empty."""
        return "/usr/local/cuda/compat:" if self.compat else ""

    def backend_build_args(self) -> dict[str, str]:
        """Values for images/Dockerfile.backend's ARGs."""
        return {
            "BASE_IMAGE": self.base_image,
            "BACKEND_SOURCE": self.backend_source,
            "CUDA_COMPAT": self.compat or "",
            "COMPAT_LIBDIR": self.compat_libdir,
        }

    def build_args(self) -> dict[str, str]:
        """Values for images/Dockerfile's ARGs."""
        return {"BACKEND_IMAGE": self.backend_tag, "FRONTEND_WHEEL": self.frontend_wheel}

    def backend_labels(self) -> dict[str, str]:
        """Labels of the backend image: the cell labels without the frontend ones."""
        labels = {k: v for k, v in self.labels().items() if "frontend" not in k}
        labels |= {
            f"{LABEL_PREFIX}.kind": "backend",
            f"{LABEL_PREFIX}.digest": self.backend_digest,
            "org.opencontainers.image.title": f"cudnn-matrix backend cudnn {self.cudnn}",
            "org.opencontainers.image.description": f"cuDNN backend {self.cudnn}, CUDA {self.cuda}",
            "org.opencontainers.image.version": self.backend_digest,
        }
        return labels

    def labels(self) -> dict[str, str]:
        """OCI labels plus io.cudnn-matrix.* labels naming every pin."""
        p = LABEL_PREFIX
        return {
            "org.opencontainers.image.title": f"cudnn-matrix cell cudnn {self.cudnn} fe {self.frontend}",
            "org.opencontainers.image.description": (
                f"cuDNN backend {self.cudnn} + frontend {self.frontend}, CUDA {self.cuda}"
            ),
            "org.opencontainers.image.version": self.digest,
            "org.opencontainers.image.vendor": "cudnn-matrix",
            "org.opencontainers.image.base.name": self.base_image,
            f"{p}.tool-version": __version__,
            f"{p}.kind": "cell",
            f"{p}.backend-image": self.backend_tag,
            f"{p}.cudnn": self.cudnn,
            f"{p}.frontend": self.frontend,
            f"{p}.cuda": self.cuda,
            f"{p}.driver": f"compat {self.compat}" if self.compat else "host",
            f"{p}.arch": "any",
            f"{p}.python": self.python,
            f"{p}.backend-source": self.backend_source,
            f"{p}.backend-wheel": self.backend_wheel or "",
            f"{p}.frontend-wheel": self.frontend_wheel,
            f"{p}.torch": self.torch or "",
            f"{p}.compat": self.compat or "",
            f"{p}.digest": self.digest,
        }


class HoldsImages(Protocol):
    """What base_image_for asks of the daemon (ImageBuilder)."""

    def image_exists(self, tag: str) -> bool: ...


def base_image_for(cell: Cell, base_image: str | None, builder: HoldsImages) -> str:
    """The base of a cell's image, for `images build` and `validate --executor docker` alike.

    `base_image` (--base-image) when given; else NVIDIA's CUDA image when the daemon holds it or
    holds no local base; else the local base (`nox -s base_image`, a host with no registry).
    """
    if base_image:
        return base_image
    nvidia = DEFAULT_BASE_IMAGE.format(cuda=cell.cuda)
    if builder.image_exists(nvidia) or not builder.image_exists(LOCAL_BASE_IMAGE):
        return nvidia
    return LOCAL_BASE_IMAGE


def spec_for(
    cell: Cell,
    wheels: Wheelhouse,
    daemon: HoldsImages,
    *,
    backend: BackendSource | None = None,
    frontend: FrontendSource | None = None,
    base_image: str | None = None,
    torch: str | None = None,
) -> ImageSpec:
    """The ImageSpec of a cell: the one place that decides each of its inputs.

    `images build` and `validate --executor docker` both call it (through ImageBuilder.spec_for)
    with their flags, so a cell gets one tag from either. The pins are the cell's env pins
    (`env_pins(cell, IMAGE_DEFAULTS)`: its python axis picks the wheels' Python), the wheels
    come from the wheelhouse (fetched when missing), the base from `base_image_for` (`base_image`
    is --base-image, None to choose; `daemon` says which images it holds), forward compatibility
    (cuda-compat-<major>-<minor>) from the cell's driver pin.
    """
    python = env_pins(cell, IMAGE_DEFAULTS)["python"]
    libdir = backend.libdir() if backend is not None and backend.kind == "libdir" else None
    backend_wheel = None
    if libdir is None:
        if backend is not None and backend.kind == "wheel" and backend.path is not None:
            backend_wheel = wheels.add_wheel(backend.path)
        elif backend is None or backend.kind == "pypi":
            backend_wheel = wheels.fetch_backend(cell.cudnn, cell.cuda)
        else:
            msg = f"backend source {backend.describe()} cannot go into an image; use a wheel or folder"
            raise ConfigError(msg)
    if frontend is not None and frontend.kind == "wheel" and frontend.path is not None:
        frontend_wheel = wheels.add_wheel(frontend.path)
    elif frontend is None or frontend.kind == "pypi":
        frontend_wheel = wheels.fetch_frontend(cell.frontend, python)
    else:
        msg = f"frontend source {frontend.describe()} cannot go into an image; build a wheel first"
        raise ConfigError(msg)
    return ImageSpec.for_cell(
        cell,
        frontend_wheel=frontend_wheel,
        backend_wheel=backend_wheel,
        backend_libdir=libdir,
        base_image=base_image_for(cell, base_image, daemon),
        torch=torch,
        compat=compat_for(cell),
    )
