"""Where a cell's backend and frontend come from: PyPI, a wheel file, a library folder, a git checkout."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from validate.errors import ConfigError, EnvBuildError
from validate.model.axes import axis_named

__all__ = [
    "BackendKind",
    "BackendSource",
    "BackendStore",
    "FrontendKind",
    "FrontendSource",
    "Sources",
    "backend_package",
    "decode_backend_version",
    "find_backend_libdir",
    "missing_sublibraries",
    "parse_backend_source",
    "parse_frontend_source",
    "read_libdir_version",
    "same_backend",
    "short_version",
]

log = logging.getLogger(__name__)

BackendKind = Literal["pypi", "wheel", "libdir", "current"]
FrontendKind = Literal["pypi", "wheel", "git", "current"]

#: Dispatcher library every cuDNN 9 layout holds; its cudnnGetVersion() needs no GPU (DOMAIN §2).
_DISPATCHER = "libcudnn.so.9"
_FRONTEND_PACKAGE = "nvidia-cudnn-frontend"
#: Sub-libraries every cuDNN 9 backend has (DOMAIN.md §2); newer ones (_engines_tensor_ir,
#: _ext) count where the dispatcher or libcudnn_graph names them (they dlopen them by name).
_SUBLIBRARIES: Final = (
    "libcudnn_graph",
    "libcudnn_heuristic",
    "libcudnn_engines_precompiled",
    "libcudnn_engines_runtime_compiled",
    "libcudnn_ops",
    "libcudnn_cnn",
    "libcudnn_adv",
)
_SUBLIB_NAME = re.compile(rb"(libcudnn_[a-z_]+)\.so")
#: NVIDIA's redist archive folder: cudnn-linux-x86_64-9.24.0.43_cuda13-archive (version, CUDA major).
_REDIST_RE = re.compile(r"^cudnn-linux-[A-Za-z0-9_]+-(\d+(?:\.\d+)+)_cuda(\d+)-archive$")
_HEADER_RE = re.compile(r"^#define\s+CUDNN_(MAJOR|MINOR|PATCHLEVEL)\s+(\d+)", re.MULTILINE)
_GET_VERSION = (
    "import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); "
    "lib.cudnnGetVersion.restype = ctypes.c_size_t; print(lib.cudnnGetVersion())"
)


def backend_package(cuda_major: int) -> str:
    """PyPI name of the backend wheel for a CUDA major: nvidia-cudnn-cu12 or nvidia-cudnn-cu13."""
    if cuda_major not in (12, 13):
        msg = f"no nvidia-cudnn wheel for CUDA {cuda_major}; expected CUDA 12 or 13"
        raise ConfigError(msg)
    return f"nvidia-cudnn-cu{cuda_major}"


def short_version(version: str) -> str:
    """'9.24.0.43' -> '9.24.0': the part a loaded library can report (no build number)."""
    release = Version(version).release
    return ".".join(str(part) for part in (*release, 0, 0)[:3])


def decode_backend_version(value: int) -> str:
    """cudnnGetVersion() int -> 'M.m.p' (9.x: M*10000+m*100+p; 8.x: M*1000+m*100+p)."""
    if value >= 90000:
        return f"{value // 10000}.{value % 10000 // 100}.{value % 100}"
    return f"{value // 1000}.{value % 1000 // 100}.{value % 100}"


def same_backend(declared: str, loaded: str | int) -> bool:
    """True when a loaded backend ('9.12.0' or 91200) is the declared one ('9.12.0.46')."""
    text = decode_backend_version(loaded) if isinstance(loaded, int) else loaded
    return short_version(declared) == short_version(text)


@dataclass(frozen=True, kw_only=True)
class BackendSource:
    """A cuDNN backend: a PyPI version, a wheel file, a library folder, or what is installed."""

    kind: BackendKind
    version: str | None = None  # declared/known version, e.g. "9.24.0.43"; None when unknown
    path: Path | None = None  # wheel file or library folder

    def requirement(self, cuda_major: int) -> str | None:
        """The pip/uv requirement that installs it, or None when nothing is installed."""
        match self.kind:
            case "pypi":
                return f"{backend_package(cuda_major)}=={self.version}"
            case "wheel":
                return str(self.path)
            case "libdir" | "current":
                return None

    def pin(self) -> str:
        """Stable text for the environment hash."""
        match self.kind:
            case "pypi" | "current":
                return f"{self.kind}:{self.version or ''}"
            case "wheel":  # name and size, so a copied wheelhouse keeps the hash
                assert self.path is not None
                return f"wheel:{self.path.name}:{self.path.stat().st_size}"
            case "libdir":  # used in place, so its path is part of the pin
                return f"libdir:{self.version or ''}:{self.path}"

    def libdir(self) -> Path | None:
        """For a library folder, the directory that holds libcudnn.so.9."""
        return find_backend_libdir(self.path) if self.kind == "libdir" and self.path else None

    def describe(self) -> str:
        return f"{self.kind} {self.version or '?'}" + (f" ({self.path})" if self.path else "")


@dataclass(frozen=True, kw_only=True)
class FrontendSource:
    """The cuDNN frontend: a PyPI version, a wheel file, a git checkout at a commit, or installed."""

    kind: FrontendKind
    version: str | None = None
    path: Path | None = None  # wheel file or checkout
    ref: str | None = None  # git: the ref the user named
    commit: str | None = None  # git: the resolved commit (the cache key)

    def requirement(self, built_wheel: Path | None = None) -> str | None:
        match self.kind:
            case "pypi":
                return f"{_FRONTEND_PACKAGE}=={self.version}"
            case "wheel":
                return str(self.path)
            case "git":
                return str(built_wheel) if built_wheel else None
            case "current":
                return None

    def pin(self) -> str:
        match self.kind:
            case "pypi" | "current":
                return f"{self.kind}:{self.version or ''}"
            case "wheel":
                assert self.path is not None
                return f"wheel:{self.path.name}:{self.path.stat().st_size}"
            case "git":
                return f"git:{self.commit}"

    def describe(self) -> str:
        if self.kind == "git":
            return f"git {self.path}@{self.ref} ({(self.commit or '')[:12]})"
        return f"{self.kind} {self.version or '?'}" + (f" ({self.path})" if self.path else "")


def _is_version(text: str) -> bool:
    try:
        Version(text)
    except InvalidVersion:
        return False
    return text[:1].isdigit()


def _wheel_version(path: Path, flag: str) -> tuple[str, str]:
    try:
        name, version, _build, _tags = parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        msg = f"{flag}: {path.name!r} is not a wheel file name ({exc})"
        raise ConfigError(msg) from exc
    return str(name), str(version)


def _check_declared(declared: str | None, found: str, what: str) -> None:
    if declared and not same_backend(declared, found):
        msg = (
            f"{what} is cuDNN {found}, but the cell declares {declared}; fix the pin or the source"
        )
        raise EnvBuildError(msg)


def parse_backend_source(
    text: str, *, declared: str | None = None, flag: str = "--backend-source"
) -> BackendSource:
    """'9.24.0.43' | '/x/nvidia_cudnn_cu13-...whl' | '/x/cudnn-archive' | 'current' -> BackendSource.

    `declared` is the cell's cudnn version; a wheel or library folder must match it.
    """
    text = text.strip()
    if text == "current":
        return BackendSource(kind="current", version=declared)
    if _is_version(text):
        if declared and not same_backend(declared, text):
            msg = f"{flag}: {text} contradicts the cell's cudnn {declared}"
            raise ConfigError(msg)
        return BackendSource(kind="pypi", version=text)
    path = Path(text).expanduser()
    if path.suffix == ".whl":
        if not path.is_file():
            msg = f"{flag}: wheel {text!r} does not exist"
            raise ConfigError(msg)
        name, version = _wheel_version(path, flag)
        if not name.startswith("nvidia-cudnn-cu"):
            msg = f"{flag}: {path.name!r} is not an nvidia-cudnn-cu12/-cu13 wheel"
            raise ConfigError(msg)
        _check_declared(declared, version, f"wheel {path.name}")
        return BackendSource(kind="wheel", version=version, path=path.resolve())
    if text and path.is_dir():
        libdir = find_backend_libdir(path)
        if libdir is None:
            msg = f"{flag}: {text!r} holds no {_DISPATCHER} (looked in it and in lib/, lib64/)"
            raise ConfigError(msg)
        found = read_libdir_version(libdir)
        _check_declared(declared, found, f"library folder {libdir}")
        return BackendSource(kind="libdir", version=declared or found, path=path.resolve())
    msg = f"{flag}: {text!r} is neither a version, a .whl file, a library folder nor 'current'"
    raise ConfigError(msg)


def parse_frontend_source(
    text: str, *, flag: str = "--frontend-source", git: str = "git"
) -> FrontendSource:
    """'1.27.0' | '/x/nvidia_cudnn_frontend-...whl' | '/x/cudnn-frontend[@ref]' | 'current'."""
    text = text.strip()
    if text == "current":
        return FrontendSource(kind="current")
    if _is_version(text):
        return FrontendSource(kind="pypi", version=text)
    if text.endswith(".whl"):
        path = Path(text).expanduser()
        if not path.is_file():
            msg = f"{flag}: wheel {text!r} does not exist"
            raise ConfigError(msg)
        name, version = _wheel_version(path, flag)
        if name != _FRONTEND_PACKAGE:
            msg = f"{flag}: {path.name!r} is not an {_FRONTEND_PACKAGE} wheel"
            raise ConfigError(msg)
        return FrontendSource(kind="wheel", version=version, path=path.resolve())
    where, _, ref = text.partition("@")
    checkout = Path(where).expanduser()
    # a work tree (.git inside) or a bare clone/mirror (HEAD + objects/): both can be cloned from
    is_repo = (checkout / ".git").exists() or (
        (checkout / "HEAD").is_file() and (checkout / "objects").is_dir()
    )
    if not where or not is_repo:
        msg = f"{flag}: {text!r} is neither a version, a .whl file, a git checkout[@ref] nor 'current'"
        raise ConfigError(msg)
    ref = ref or "HEAD"
    proc = subprocess.run(
        [git, "-C", str(checkout), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        msg = f"{flag}: ref {ref!r} not found in {checkout}{_nearest_tags(checkout, ref, git)}"
        raise ConfigError(msg)
    return FrontendSource(kind="git", path=checkout.resolve(), ref=ref, commit=proc.stdout.strip())


def _nearest_tags(checkout: Path, ref: str, git: str) -> str:
    """' (nearest tags: v1.26.0, v1.27.0)' for a ref that reads as a version, else ''."""
    wanted = ref.removeprefix("v")
    if not _is_version(wanted):
        return ""
    proc = subprocess.run(
        [git, "-C", str(checkout), "tag", "--list"],
        capture_output=True,
        text=True,
        check=False,
    )
    tags = {
        Version(t.removeprefix("v")): t
        for t in proc.stdout.split()
        if _is_version(t.removeprefix("v"))
    }
    ordered = sorted(tags)
    at = sum(v < Version(wanted) for v in ordered)
    near = [tags[v] for v in ordered[max(0, at - 2) : at + 2]]
    return f" (nearest tags: {', '.join(near)})" if near else " (it has no version tags)"


@dataclass(frozen=True, kw_only=True)
class _StoreEntry:
    version: str  # from the folder name: "9.24.0.43"
    cuda_major: int | None  # redist layout names it; a wheel tree does not
    folder: Path  # the subfolder of the store
    libdir: Path  # the folder in it that holds libcudnn.so.9


class BackendStore:
    """`--backend-store DIR`: unpacked backends, one subfolder per version, either a wheel's
    `nvidia/cudnn` tree named by its version (`DIR/9.24.0.43/lib/libcudnn.so.9`) or NVIDIA's
    redist archive (`DIR/cudnn-linux-x86_64-9.24.0.43_cuda13-archive/lib/...`).

    A subfolder whose name is neither, or that holds no libcudnn.so.9, is skipped with a
    warning; a store with no backend at all (or not a folder) is a ConfigError.
    """

    flag = "--backend-store"

    def __init__(self, root: Path) -> None:
        self.root = root.expanduser()
        if not self.root.is_dir():
            msg = f"{self.flag} {root}: not a folder"
            raise ConfigError(msg)
        self.root = self.root.resolve()
        entries: list[_StoreEntry] = []
        skipped: list[str] = []
        for folder in sorted(p for p in self.root.iterdir() if p.is_dir()):
            version, cuda = _store_name(folder.name)
            libdir = find_backend_libdir(folder) if version else None
            if version is None or libdir is None:
                why = "not <version> or cudnn-linux-<arch>-<version>_cuda<N>-archive"
                skipped.append(f"{folder.name} ({why if version is None else 'no ' + _DISPATCHER})")
                continue
            entries.append(
                _StoreEntry(version=version, cuda_major=cuda, folder=folder, libdir=libdir)
            )
        if skipped:
            log.warning("%s %s: skipped %s", self.flag, self.root, "; ".join(skipped))
        if not entries:
            found = f" (skipped: {'; '.join(skipped)})" if skipped else " (it is empty)"
            msg = f"{self.flag} {root}: holds no backend folder{found}"
            raise ConfigError(msg)
        entries.sort(key=lambda e: (Version(e.version), e.cuda_major or 0))
        self.entries: tuple[_StoreEntry, ...] = tuple(entries)

    def versions(self) -> list[str]:
        """What the store holds, e.g. ['9.12.0.46', '9.13.0.50 (cuda13)']."""
        return [
            e.version + (f" (cuda{e.cuda_major})" if e.cuda_major else "") for e in self.entries
        ]

    def find(self, declared: str, cuda: str | None = None) -> Path | None:
        """The library folder of backend `declared` (axis equality: 9.24.0.43 == 9.24.0.43.0);
        a redist folder of another CUDA major than the cell's is not it."""
        same = axis_named("cudnn").same
        major = int(Version(cuda).release[0]) if cuda else None
        fits = [e for e in self.entries if same(e.version, declared)]
        fits = [e for e in fits if e.cuda_major in (None, major) or major is None]
        fits.sort(key=lambda e: e.cuda_major is None)  # the one naming the cell's CUDA first
        return fits[0].libdir if fits else None

    def missing(self, declared: str, cuda: str | None = None) -> str:
        """One line: why the store has no backend for this cell."""
        where = f" for CUDA {cuda}" if cuda else ""
        return (
            f"backend {declared}{where} is not in {self.flag} {self.root} "
            f"(it has {', '.join(self.versions())})"
        )


def _store_name(name: str) -> tuple[str | None, int | None]:
    """'9.24.0.43' -> ('9.24.0.43', None); 'cudnn-linux-x86_64-9.24.0.43_cuda13-archive' ->
    ('9.24.0.43', 13); anything else -> (None, None)."""
    if match := _REDIST_RE.match(name):
        return match.group(1), int(match.group(2))
    return (name, None) if _is_version(name) else (None, None)


class Sources:
    """--backend-source / --backend-store / --frontend-source of one run, parsed once on use.

    A backend source is checked against the cell's declared cudnn, so it is parsed once per
    declared version (one for most runs); the frontend source once. Every executor asks here.
    With a store, each cell's backend is the store's folder of its version; a version the
    store lacks is `unavailable` (the executor turns it into an `error` for that cell).
    """

    def __init__(
        self,
        backend: str | None = None,
        frontend: str | None = None,
        *,
        store: Path | None = None,
    ) -> None:
        if backend and store is not None:
            msg = "--backend-source and --backend-store: give one of them"
            raise ConfigError(msg)
        self._backend_text = backend
        self._frontend_text = frontend
        self._store = BackendStore(store) if store is not None else None
        self._backends: dict[tuple[str, str | None], BackendSource] = {}
        self._unavailable: dict[tuple[str, str | None], str] = {}
        self._frontend: FrontendSource | None = None

    def unavailable(self, declared: str, cuda: str | None = None) -> str | None:
        """Why this cell cannot have its backend (a version missing from the store, a store
        folder that is not what its name says); None when it can. Only a store has reasons:
        a bad --backend-source is bad input for the whole run."""
        if self._store is None:
            return None
        key = (declared, cuda)
        if key not in self._backends and key not in self._unavailable:
            libdir = self._store.find(declared, cuda)
            if libdir is None:
                self._unavailable[key] = self._store.missing(declared, cuda)
            else:
                try:
                    self._backends[key] = parse_backend_source(
                        str(libdir), declared=declared, flag=BackendStore.flag
                    )
                except (ConfigError, EnvBuildError) as exc:
                    self._unavailable[key] = f"{BackendStore.flag}: {exc}".splitlines()[0]
        return self._unavailable.get(key)

    def backend(self, declared: str, cuda: str | None = None) -> BackendSource | None:
        """The cell's backend source: from the store (by version), else the parsed
        --backend-source; None when neither is given. A cell the store cannot serve
        (see `unavailable`) raises EnvBuildError with the reason."""
        if self._store is not None:
            if why := self.unavailable(declared, cuda):
                raise EnvBuildError(why)
            return self._backends[(declared, cuda)]
        if not self._backend_text:
            return None
        key = (declared, None)
        if key not in self._backends:
            self._backends[key] = parse_backend_source(self._backend_text, declared=declared)
        return self._backends[key]

    def frontend(self) -> FrontendSource | None:
        """The parsed --frontend-source; None when not given."""
        if self._frontend_text and self._frontend is None:
            self._frontend = parse_frontend_source(self._frontend_text)
        return self._frontend


def find_backend_libdir(path: Path) -> Path | None:
    """The folder holding libcudnn.so.9: the path itself, or lib/ / lib64/ of a tarball layout."""
    for candidate in (path, path / "lib", path / "lib64", path / "nvidia" / "cudnn" / "lib"):
        if (candidate / _DISPATCHER).is_file():
            return candidate
    return None


def missing_sublibraries(libdir: Path) -> list[str]:
    """The sub-libraries a backend folder lacks (['libcudnn_ops', ...]; [] when complete): the
    fixed cuDNN 9 set plus any the dispatcher or libcudnn_graph names. The frontend loads them
    lazily, so a partial folder breaks only the cases that reach a missing one, and the loader
    may then map another copy from the system (../shared/ENGINES.md)."""
    wanted = dict.fromkeys(_SUBLIBRARIES)
    for loader in (_DISPATCHER, "libcudnn_graph.so.9"):
        try:
            data = (libdir / loader).read_bytes()
        except OSError:
            continue
        for name in _SUBLIB_NAME.findall(data):
            wanted.setdefault(name.decode(), None)
    present = {p.name.split(".so", 1)[0] for p in libdir.glob("libcudnn_*.so*")}
    return [name for name in wanted if name not in present]


def read_libdir_version(libdir: Path) -> str:
    """'M.m.p' of a library folder: include/cudnn_version.h beside it, else cudnnGetVersion()."""
    for header in (libdir.parent / "include" / "cudnn_version.h", libdir / "cudnn_version.h"):
        if header.is_file():
            fields = dict(_HEADER_RE.findall(header.read_text(errors="replace")))
            if len(fields) == 3:
                return f"{fields['MAJOR']}.{fields['MINOR']}.{fields['PATCHLEVEL']}"
    # A subprocess, so the library never maps into this process (and a crash cannot kill it).
    argv = [sys.executable, "-c", _GET_VERSION, str(libdir / _DISPATCHER)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    if proc.returncode != 0 or not proc.stdout.strip().isdigit():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        msg = f"cannot read the cuDNN version of {libdir / _DISPATCHER}: {tail[0]}"
        raise EnvBuildError(msg)
    return decode_backend_version(int(proc.stdout.strip()))
