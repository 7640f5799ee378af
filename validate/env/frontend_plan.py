"""What building a frontend checkout into a wheel needs, found before anything is compiled.

cudnn-frontend's `python/CMakeLists.txt` fetches dlpack (and, unless told otherwise, pybind11)
from GitHub at configure time. It has switches to use installed copies instead
(`CUDNN_FRONTEND_USE_SYSTEM_DLPACK`, `CUDNN_FRONTEND_FETCH_PYBINDS_IN_CMAKE`); its `setup.py`
passes none of them through, so the plan sets them in the lines of a CMake toolchain file that
the build (env/frontend_build.py) names by the `CMAKE_TOOLCHAIN_FILE` environment variable
(read by CMake >= 3.21 for a new build folder).

`plan_build` looks at the checkout and the host and names every missing piece in one line:
system dlpack (Debian's libdlpack-dev), the `[build-system]` requirements (pybind11, cmake,
ninja, setuptools ...) in the wheelhouse, cuDNN headers, CUDA toolkit headers, a C++ compiler.
A checkout without `python/CMakeLists.txt` (any other Python package) needs only its build
requirements.
"""

from __future__ import annotations

import email.parser
import hashlib
import os
import re
import shutil
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from packaging.requirements import InvalidRequirement, Requirement
from packaging.tags import Tag, sys_tags
from packaging.utils import (
    InvalidWheelFilename,
    NormalizedName,
    canonicalize_name,
    parse_wheel_filename,
)

from validate._compat import tomllib
from validate.errors import EnvBuildError

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from packaging.version import Version

    from validate.env.sources import BackendSource

__all__ = [
    "CUDA_ROOTS",
    "DLPACK_DIRS",
    "BuildPlan",
    "missing_requirements",
    "plan_build",
]

#: pip's build requirements for a project without [build-system] (PEP 518's default).
_DEFAULT_REQUIRES: Final = ("setuptools>=40.8.0",)
_SYSTEM_DLPACK: Final = "CUDNN_FRONTEND_USE_SYSTEM_DLPACK"
_FETCH_PYBINDS: Final = "CUDNN_FRONTEND_FETCH_PYBINDS_IN_CMAKE"
_FETCH_RE: Final = re.compile(r"FetchContent_Declare\(\s*(\w+)", re.IGNORECASE)
#: Where Debian (any multiarch) and a `make install` put dlpack's CMake package.
DLPACK_DIRS: Final = (
    "/usr/lib/*/cmake/dlpack",
    "/usr/lib/cmake/dlpack",
    "/usr/share/cmake/dlpack",
    "/usr/local/lib/cmake/dlpack",
    "/usr/local/lib/*/cmake/dlpack",
    "/usr/local/share/cmake/dlpack",
)
_PACKAGE_VERSION_RE: Final = re.compile(r'set\(PACKAGE_VERSION "([^"]+)"\)')
#: Where a CUDA toolkit is looked for after $CUDAToolkit_ROOT, $CUDA_PATH, $CUDA_HOME and nvcc.
CUDA_ROOTS: Final = (Path("/usr/local/cuda"),)
_CUDA_ENV: Final = ("CUDAToolkit_ROOT", "CUDA_PATH", "CUDA_HOME")
_CUDA_VERSION_RE: Final = re.compile(r"^#define\s+CUDA_VERSION\s+(\d+)", re.MULTILINE)


@dataclass(kw_only=True)
class BuildPlan:
    """What building one checkout needs: the `pip wheel` flags and environment, or what is missing."""

    frontend: bool  # a cudnn-frontend layout (python/CMakeLists.txt), not a plain Python package
    offline: bool
    pip_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    toolchain: list[str] = field(default_factory=list)  # lines of the CMake toolchain file
    include_dirs: list[Path] = field(default_factory=list)  # extra CUDA headers (CPATH)
    missing: list[str] = field(default_factory=list)  # one line per missing piece
    notes: list[str] = field(default_factory=list)  # where each piece comes from, for the log
    cuda_include: list[Path] = field(default_factory=list)
    cuda_major: int | None = None

    def error(self, commit: str) -> str:
        """The EnvBuildError text: a first line naming every missing piece, then one line each."""
        names = ", ".join(line.split(":", 1)[0] for line in self.missing)
        how = "without network" if self.offline else "here"
        return "\n".join(
            [f"cannot build the frontend at {commit[:12]} {how}: missing {names}", *self.missing]
        )


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _build_requires(checkout: Path, commit: str) -> list[str]:
    pyproject = checkout / "pyproject.toml"
    if not pyproject.is_file():
        return list(_DEFAULT_REQUIRES)
    try:
        data = tomllib.loads(_read(pyproject))
    except tomllib.TOMLDecodeError as exc:
        msg = f"building the frontend at {commit[:12]} failed: pyproject.toml is not valid TOML ({exc})"
        raise EnvBuildError(msg) from exc
    system = data.get("build-system")
    if not isinstance(system, dict) or "requires" not in system:
        return list(_DEFAULT_REQUIRES)
    return [str(req) for req in system["requires"]]


@dataclass(frozen=True)
class _Wheel:
    path: Path
    version: Version
    tags: frozenset[Tag]


def _wheel_index(wheelhouse: Path) -> dict[NormalizedName, list[_Wheel]]:
    index: dict[NormalizedName, list[_Wheel]] = {}
    for path in sorted(wheelhouse.glob("*.whl")):  # --find-links reads the folder, not below
        try:
            name, version, _build, tags = parse_wheel_filename(path.name)
        except InvalidWheelFilename:
            continue
        index.setdefault(name, []).append(_Wheel(path, version, frozenset(tags)))
    return index


def _requires_dist(wheel: Path) -> list[str]:
    """Requires-Dist of a wheel's METADATA."""
    try:
        with zipfile.ZipFile(wheel) as whl:
            meta = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
            text = whl.read(meta).decode(errors="replace")
    except (OSError, zipfile.BadZipFile, StopIteration):
        return []
    return email.parser.Parser().parsestr(text).get_all("Requires-Dist") or []


def missing_requirements(
    requires: Sequence[str], wheelhouse: Path, tags: Iterable[Tag] | None = None
) -> list[str]:
    """One line per build requirement (or a dependency of one) that no wheel in `wheelhouse`
    serves for this interpreter: what pip's build isolation would fail on with --no-index."""
    supported = frozenset(tags if tags is not None else sys_tags())
    index = _wheel_index(wheelhouse)
    missing: list[str] = []
    seen: set[tuple[str, str]] = set()
    todo: list[tuple[str, str | None]] = [(req, None) for req in reversed(requires)]
    while todo:
        text, parent = todo.pop()
        try:
            req = Requirement(text)
        except InvalidRequirement:
            missing.append(f"{text!r}: not a valid build requirement")
            continue
        key = (canonicalize_name(req.name), str(req))
        if key in seen:
            continue
        seen.add(key)
        fits = [
            w
            for w in index.get(canonicalize_name(req.name), [])
            if req.specifier.contains(w.version, prereleases=True) and w.tags & supported
        ]
        if not fits:
            needed = f" of {parent}" if parent else ""
            missing.append(
                f"{req}: a build requirement{needed}, with no matching wheel in {wheelhouse}"
            )
            continue
        best = max(fits, key=lambda w: w.version)
        for dep_text in _requires_dist(best.path):
            try:
                dep = Requirement(dep_text)
            except InvalidRequirement:
                continue
            extras = [*sorted(req.extras), ""]
            if dep.marker is None or any(dep.marker.evaluate({"extra": e}) for e in extras):
                dep.marker = None
                todo.append((str(dep), f"{req.name} {best.version}"))
    return missing


def _dlpack_packages(patterns: Sequence[str]) -> list[Path]:
    """Folders holding dlpack's CMake package (dlpackConfig.cmake): $dlpack_DIR, then system ones."""
    own = os.environ.get("dlpack_DIR")  # noqa: SIM112 - CMake's <Package>_DIR, case and all
    candidates = [Path(own)] if own else []
    for pattern in patterns:
        candidates += sorted(Path("/").glob(pattern.lstrip("/")))
    return [folder for folder in candidates if (folder / "dlpackConfig.cmake").is_file()]


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def _package_version(config_dir: Path) -> str:
    """The dlpack a CMake package serves: its dlpack.h's own version (Debian's 0.6 package says
    0.1.0 in dlpackConfigVersion.cmake), else what that file says."""
    for prefix in list(config_dir.parents)[:4]:
        header = prefix / "include" / "dlpack" / "dlpack.h"
        if header.is_file() and (version := _header_version(_read(header))):
            return version
    match = _PACKAGE_VERSION_RE.search(_read(config_dir / "dlpackConfigVersion.cmake"))
    return match.group(1) if match else "0"


def _header_version(text: str) -> str | None:
    """dlpack.h's version: DLPACK_MAJOR/MINOR_VERSION (>= 1.0) or DLPACK_VERSION (60 = 0.6)."""
    major = re.search(r"#define\s+DLPACK_MAJOR_VERSION\s+(\d+)", text)
    minor = re.search(r"#define\s+DLPACK_MINOR_VERSION\s+(\d+)", text)
    if major and minor:
        return f"{major.group(1)}.{minor.group(1)}"
    if old := re.search(r"#define\s+DLPACK_VERSION\s+(\d+)", text):
        value = int(old.group(1))
        return f"{value // 100}.{value % 100 // 10}"
    return None


def _wanted_dlpack(checkout: Path, cmake_text: str) -> str | None:
    """The dlpack release the checkout pins: dlpack_version.txt (>= 1.16) or its GIT_TAG."""
    if (pinned := _read(checkout / "dlpack_version.txt").strip()) and _version_tuple(pinned):
        return pinned
    block = re.search(
        r"FetchContent_Declare\(\s*dlpack\b(.*?)\)", cmake_text, re.DOTALL | re.IGNORECASE
    )
    tag = re.search(r"GIT_TAG\s+v?(\d[\w.]*)", block.group(1)) if block else None
    return tag.group(1) if tag else None


def _headers_package(wheelhouse: Path | None, cache: Path) -> tuple[Path, str, str] | None:
    """A dlpack CMake package made from the newest include/dlpack/dlpack.h a wheel in the
    wheelhouse ships (apache-tvm-ffi does): (config folder, version, wheel name)."""
    if wheelhouse is None:
        return None
    best: tuple[tuple[int, ...], str, str, bytes] | None = None
    for wheel in sorted(wheelhouse.glob("*.whl")):
        try:
            with zipfile.ZipFile(wheel) as whl:
                members = [n for n in whl.namelist() if n.endswith("include/dlpack/dlpack.h")]
                data = whl.read(members[0]) if members else b""
        except (OSError, zipfile.BadZipFile):
            continue
        version = _header_version(data.decode(errors="replace")) if data else None
        if version and (best is None or _version_tuple(version) > best[0]):
            best = (_version_tuple(version), version, wheel.name, data)
    if best is None:
        return None
    _key, version, name, data = best
    root = cache / "dlpack" / f"{version}-{hashlib.sha256(data).hexdigest()[:12]}"
    config = root / "lib" / "cmake" / "dlpack"
    if not (config / "dlpackConfig.cmake").is_file():
        (root / "include" / "dlpack").mkdir(parents=True, exist_ok=True)
        (root / "include" / "dlpack" / "dlpack.h").write_bytes(data)
        config.mkdir(parents=True, exist_ok=True)
        (config / "dlpackConfigVersion.cmake").write_text(
            f'set(PACKAGE_VERSION "{version}")\n'
            "if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)\n"
            "  set(PACKAGE_VERSION_COMPATIBLE FALSE)\nelse()\n"
            "  set(PACKAGE_VERSION_COMPATIBLE TRUE)\nendif()\n"
        )
        (config / "dlpackConfig.cmake").write_text(
            f"# dlpack {version}, header only, from the wheel {name} (written by cudnn-matrix)\n"
            "if(NOT TARGET dlpack::dlpack)\n"
            "  add_library(dlpack::dlpack INTERFACE IMPORTED)\n"
            "  set_target_properties(dlpack::dlpack PROPERTIES INTERFACE_INCLUDE_DIRECTORIES\n"
            '    "${CMAKE_CURRENT_LIST_DIR}/../../../include")\n'
            "endif()\n"
        )
    return config, version, name


def _find_dlpack(
    wanted: str | None, wheelhouse: Path | None, cache: Path, patterns: Sequence[str]
) -> tuple[Path | None, str, list[str]]:
    """(CMake package folder, what it is, the ones found but too old)."""
    floor = _version_tuple(wanted or "0")
    too_old: list[str] = []
    for folder in _dlpack_packages(patterns):
        version = _package_version(folder)
        if _version_tuple(version) >= floor:
            return folder, f"dlpack {version} ({folder})", too_old
        too_old.append(f"{version} in {folder}")
    if made := _headers_package(wheelhouse, cache):
        folder, version, name = made
        if _version_tuple(version) >= floor:
            return folder, f"dlpack {version} headers from {name}", too_old
        too_old.append(f"{version} in {name}")
    return None, "", too_old


def _cuda_root(fallbacks: Sequence[Path]) -> tuple[Path | None, list[str]]:
    """The CUDA toolkit folder (holding include/cuda_runtime.h) and where it was looked for."""
    looked: list[str] = []
    candidates: list[Path] = []
    for name in _CUDA_ENV:
        if value := os.environ.get(name):
            candidates.append(Path(value))
            looked.append(f"${name}={value}")
    if nvcc := shutil.which("nvcc"):
        candidates.append(Path(nvcc).resolve().parent.parent)
        looked.append(f"nvcc's prefix {Path(nvcc).resolve().parent.parent}")
    candidates += fallbacks
    looked += [str(root) for root in fallbacks]
    for root in candidates:
        if _cuda_includes(root):
            return root, looked
    return None, looked


def _cuda_includes(root: Path) -> list[Path]:
    dirs = [root / "include", *sorted(root.glob("targets/*/include"))]
    return [d for d in dirs if (d / "cuda_runtime.h").is_file()]


def _cuda_major(includes: Sequence[Path]) -> int | None:
    for folder in includes:
        if match := _CUDA_VERSION_RE.search(_read(folder / "cuda.h")):
            return int(match.group(1)) // 1000
    return None


def _has_cuda_tool(root: Path) -> bool:
    """FindCUDAToolkit wants nvcc or the toolkit's version file, besides headers and cudart."""
    return (root / "bin" / "nvcc").exists() or any(
        (root / name).is_file() for name in ("version.json", "version.txt")
    )


def _has_cudart(root: Path) -> bool:
    dirs = [root / "lib64", root / "lib", *root.glob("targets/*/lib")]
    return any(next(d.glob("libcudart.so*"), None) for d in dirs if d.is_dir())


def _cudnn_tree(folder: Path) -> bool:
    return (folder / "include" / "cudnn.h").is_file() and any(
        (folder / sub / "libcudnn.so.9").exists() for sub in ("lib", "lib64")
    )


def _required_cudnn_libs(checkout: Path) -> set[str]:
    """Libraries the checkout's cmake/cuDNN.cmake requires (find_cudnn_library without
    OPTIONAL), e.g. {'cudnn', 'cudnn_graph', 'cudnn_engines_runtime_compiled'}."""
    text = _read(checkout / "cmake" / "cuDNN.cmake")
    return {"cudnn", *re.findall(r"find_cudnn_library\(\s*(\w+)\s*\)", text)}


def _unpack_cudnn(wheel: Path, cache: Path, libs: set[str]) -> Path:
    """include/ and the libraries `libs` of a backend wheel, once: what the frontend's
    cmake/cuDNN.cmake looks for (the module loads cuDNN at run time, so any 9.x serves)."""
    members = {f"nvidia/cudnn/lib/lib{name}.so.9" for name in libs}
    tag = hashlib.sha256(" ".join(sorted(libs)).encode()).hexdigest()[:8]
    target = cache / "cudnn-headers" / f"{wheel.name.removesuffix('.whl')}-{tag}"
    if _cudnn_tree(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(dir=target.parent, prefix=".unpack-"))
    with zipfile.ZipFile(wheel) as whl:
        for member in whl.namelist():
            head, _, name = member.rpartition("/")
            if name and (head == "nvidia/cudnn/include" or member in members):
                dest = staged / head.rsplit("/", 1)[1] / name
                dest.parent.mkdir(parents=True, exist_ok=True)
                with whl.open(member) as src, dest.open("wb") as out:
                    shutil.copyfileobj(src, out)
    try:
        staged.rename(target)
    except OSError:  # another build unpacked it first
        shutil.rmtree(staged, ignore_errors=True)
    return target


def _find_cudnn(
    backend: BackendSource | None, wheelhouse: Path | None, cache: Path, libs: set[str]
) -> tuple[Path | None, str]:
    """A cuDNN folder with include/cudnn.h and lib/libcudnn.so.9, and where it came from."""
    if (value := os.environ.get("CUDNN_PATH")) and _cudnn_tree(Path(value)):
        return Path(value), f"$CUDNN_PATH {value}"
    libdir = backend.libdir() if backend is not None else None
    if libdir is not None and _cudnn_tree(libdir.parent):
        return libdir.parent, f"the backend folder {libdir.parent}"
    wheels: list[Path] = []
    if backend is not None and backend.kind == "wheel" and backend.path is not None:
        wheels.append(backend.path)
    if wheelhouse is not None:
        wheels += sorted(wheelhouse.glob("nvidia_cudnn_cu*.whl"), reverse=True)
    for wheel in wheels:
        tree = _unpack_cudnn(wheel, cache, libs)
        if _cudnn_tree(tree):
            return tree, f"the headers of {wheel.name}"
    import sysconfig

    own = Path(sysconfig.get_paths()["platlib"]) / "nvidia" / "cudnn"
    if _cudnn_tree(own):
        return own, f"this interpreter's {own}"
    return None, ""


def _cuda_header_wheels(wheelhouse: Path | None, major: int | None, cache: Path) -> list[Path]:
    """include/ folders of the CUDA component wheels (nvidia-cuda-nvrtc, ...) of the toolkit's
    major in the wheelhouse: headers a pip-assembled toolkit may lack, added through CPATH."""
    if wheelhouse is None or major is None:
        return []
    found: list[Path] = []
    for wheel in sorted(wheelhouse.glob("nvidia_cuda_*.whl")):
        try:
            _name, version, _b, _t = parse_wheel_filename(wheel.name)
        except InvalidWheelFilename:
            continue
        if version.release[0] != major:
            continue
        target = cache / "cuda-headers" / wheel.name.removesuffix(".whl")
        if not target.is_dir():
            staged = Path(tempfile.mkdtemp(dir=cache, prefix=".cuda-headers-"))
            with zipfile.ZipFile(wheel) as whl:
                for member in whl.namelist():
                    parts = member.split("/")
                    if "include" in parts[:-1] and parts[-1]:
                        rel = parts[parts.index("include") + 1 :]
                        dest = staged.joinpath(*rel)
                        dest.parent.mkdir(parents=True, exist_ok=True)
                        dest.write_bytes(whl.read(member))
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                staged.rename(target)
            except OSError:  # another build unpacked it first
                shutil.rmtree(staged, ignore_errors=True)
        if any(target.iterdir()):
            found.append(target)
    return found


def _compiler() -> str | None:
    for name in (os.environ.get("CXX", ""), "c++", "g++", "clang++"):
        if name and (found := shutil.which(name)):
            return found
    return None


def plan_build(
    checkout: Path,
    *,
    commit: str,
    cache: Path,
    wheelhouse: Path | None = None,
    backend: BackendSource | None = None,
    tags: Iterable[Tag] | None = None,
    dlpack_dirs: Sequence[str] = DLPACK_DIRS,
    cuda_roots: Sequence[Path] = CUDA_ROOTS,
) -> BuildPlan:
    """What `pip wheel` of this checkout needs, found on the host or named as missing.

    Offline (a wheelhouse given: --wheelhouse means install from here only) every piece must be
    here; online the build requirements come from the index and, without a system dlpack,
    CMake fetches dlpack as upstream does.
    """
    plan = BuildPlan(
        frontend=(checkout / "python" / "CMakeLists.txt").is_file(), offline=bool(wheelhouse)
    )
    requires = _build_requires(checkout, commit)
    if wheelhouse is not None:
        plan.pip_args = ["--no-index", "--find-links", str(wheelhouse)]
        plan.missing += missing_requirements(requires, wheelhouse, tags)
        plan.notes.append(f"build requirements from {wheelhouse}")
    if not plan.frontend:
        return plan
    short = commit[:12]
    cmake_text = _read(checkout / "python" / "CMakeLists.txt")
    fetched = {name.lower() for name in _FETCH_RE.findall(cmake_text)}
    for name in sorted(fetched - {"dlpack", "pybind11"}):
        plan.missing.append(
            f"{name}: python/CMakeLists.txt at {short} fetches {name} with FetchContent and has "
            "no switch to use an installed copy"
        )
    toolchain = plan.toolchain
    if "dlpack" in fetched:
        wanted = _wanted_dlpack(checkout, cmake_text)
        dlpack, what, too_old = _find_dlpack(wanted, wheelhouse, cache, dlpack_dirs)
        need = f"dlpack >= {wanted}" if wanted else "dlpack"
        if _SYSTEM_DLPACK not in cmake_text:
            if plan.offline:
                plan.missing.append(
                    f"dlpack: python/CMakeLists.txt at {short} has no {_SYSTEM_DLPACK} option "
                    "(frontend < 1.14), so it fetches dlpack from GitHub"
                )
        elif dlpack is None:
            found = f" (found only {'; '.join(too_old)})" if too_old else ""
            line = (
                f"dlpack: {short} needs {need} headers{found}; install Debian's libdlpack-dev "
                "where it is new enough, set dlpack_DIR to a dlpack CMake package, or put a "
                "wheel that ships include/dlpack/dlpack.h (e.g. apache-tvm-ffi) in the wheelhouse"
            )
            if plan.offline:
                plan.missing.append(line)
            else:
                plan.notes.append(f"dlpack fetched by CMake ({line.split('; ', 1)[0]})")
        else:
            toolchain += [
                f'set({_SYSTEM_DLPACK} ON CACHE BOOL "" FORCE)',
                f'set(dlpack_DIR "{dlpack}" CACHE PATH "" FORCE)',
            ]
            plan.notes.append(what)
    if "pybind11" in fetched:
        if _FETCH_PYBINDS in cmake_text:
            toolchain.append(f'set({_FETCH_PYBINDS} OFF CACHE BOOL "" FORCE)')
            plan.notes.append("pybind11 from the build requirements")
        elif plan.offline:
            plan.missing.append(
                f"pybind11: python/CMakeLists.txt at {short} has no {_FETCH_PYBINDS} option, "
                "so it fetches pybind11 from GitHub"
            )
    if plan.offline:
        toolchain.append('set(FETCHCONTENT_FULLY_DISCONNECTED ON CACHE BOOL "" FORCE)')
    cudnn, where = _find_cudnn(backend, wheelhouse, cache, _required_cudnn_libs(checkout))
    if cudnn is None:
        plan.missing.append(
            "cuDNN headers: no include/cudnn.h with lib/libcudnn.so.9 in $CUDNN_PATH, the backend "
            "source, an nvidia-cudnn-cu* wheel in the wheelhouse or this interpreter; set "
            "CUDNN_PATH or give --wheelhouse with a backend wheel"
        )
    else:
        plan.env["CUDNN_PATH"] = str(cudnn)
        plan.notes.append(f"cuDNN headers from {where}")
    root, looked = _cuda_root(cuda_roots)
    if root is None:
        plan.missing.append(
            f"CUDA toolkit headers: no include/cuda_runtime.h in {', '.join(looked)}; install "
            "the CUDA toolkit (headers, cudart, nvcc) and set CUDA_PATH to it"
        )
    else:
        plan.cuda_include = _cuda_includes(root)
        plan.cuda_major = _cuda_major(plan.cuda_include)
        if not _has_cudart(root):
            plan.missing.append(
                f"CUDA runtime library: no libcudart.so* in {root}/lib64, lib or targets/*/lib"
            )
        if not _has_cuda_tool(root):
            plan.missing.append(
                f"nvcc: CMake's FindCUDAToolkit needs {root}/bin/nvcc or {root}/version.json"
            )
        plan.env["CUDA_PATH"] = str(root)
        plan.include_dirs = _cuda_header_wheels(wheelhouse, plan.cuda_major, cache)
        extra = f" and {len(plan.include_dirs)} CUDA header wheels" if plan.include_dirs else ""
        plan.notes.append(f"CUDA {plan.cuda_major or '?'} toolkit {root}{extra}")
    if _compiler() is None:
        plan.missing.append(
            "C++ compiler: none of $CXX, c++, g++, clang++ on PATH; install g++ (apt-get install g++)"
        )
    return plan
