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
requirements. The host probes (where each piece is) live in env/host_probes.py; `CUDA_ROOTS`
and `DLPACK_DIRS` are re-exported here, where they were first.
"""

from __future__ import annotations

import email.parser
import re
import zipfile
from dataclasses import dataclass, field
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
from validate.env.host_probes import (
    CUDA_ROOTS,
    DLPACK_DIRS,
    compiler,
    cuda_header_wheels,
    cuda_includes,
    cuda_major,
    cuda_root,
    find_cudnn,
    find_dlpack,
    has_cuda_tool,
    has_cudart,
    read_or_empty,
    version_tuple,
)
from validate.errors import EnvBuildError

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from pathlib import Path

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


def _build_requires(checkout: Path, commit: str) -> list[str]:
    pyproject = checkout / "pyproject.toml"
    if not pyproject.is_file():
        return list(_DEFAULT_REQUIRES)
    try:
        data = tomllib.loads(read_or_empty(pyproject))
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


def _wanted_dlpack(checkout: Path, cmake_text: str) -> str | None:
    """The dlpack release the checkout pins: dlpack_version.txt (>= 1.16) or its GIT_TAG."""
    if (pinned := read_or_empty(checkout / "dlpack_version.txt").strip()) and version_tuple(pinned):
        return pinned
    block = re.search(
        r"FetchContent_Declare\(\s*dlpack\b(.*?)\)", cmake_text, re.DOTALL | re.IGNORECASE
    )
    tag = re.search(r"GIT_TAG\s+v?(\d[\w.]*)", block.group(1)) if block else None
    return tag.group(1) if tag else None


def _required_cudnn_libs(checkout: Path) -> set[str]:
    """Libraries the checkout's cmake/cuDNN.cmake requires (find_cudnn_library without
    OPTIONAL), e.g. {'cudnn', 'cudnn_graph', 'cudnn_engines_runtime_compiled'}."""
    text = read_or_empty(checkout / "cmake" / "cuDNN.cmake")
    return {"cudnn", *re.findall(r"find_cudnn_library\(\s*(\w+)\s*\)", text)}


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
    cmake_text = read_or_empty(checkout / "python" / "CMakeLists.txt")
    fetched = {name.lower() for name in _FETCH_RE.findall(cmake_text)}
    for name in sorted(fetched - {"dlpack", "pybind11"}):
        plan.missing.append(
            f"{name}: python/CMakeLists.txt at {short} fetches {name} with FetchContent and has "
            "no switch to use an installed copy"
        )
    toolchain = plan.toolchain
    if "dlpack" in fetched:
        wanted = _wanted_dlpack(checkout, cmake_text)
        dlpack, what, too_old = find_dlpack(wanted, wheelhouse, cache, dlpack_dirs)
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
    cudnn, where = find_cudnn(backend, wheelhouse, cache, _required_cudnn_libs(checkout))
    if cudnn is None:
        plan.missing.append(
            "cuDNN headers: no include/cudnn.h with lib/libcudnn.so.9 in $CUDNN_PATH, the backend "
            "source, an nvidia-cudnn-cu* wheel in the wheelhouse or this interpreter; set "
            "CUDNN_PATH or give --wheelhouse with a backend wheel"
        )
    else:
        plan.env["CUDNN_PATH"] = str(cudnn)
        plan.notes.append(f"cuDNN headers from {where}")
    root, looked = cuda_root(cuda_roots)
    if root is None:
        plan.missing.append(
            f"CUDA toolkit headers: no include/cuda_runtime.h in {', '.join(looked)}; install "
            "the CUDA toolkit (headers, cudart, nvcc) and set CUDA_PATH to it"
        )
    else:
        plan.cuda_include = cuda_includes(root)
        plan.cuda_major = cuda_major(plan.cuda_include)
        if not has_cudart(root):
            plan.missing.append(
                f"CUDA runtime library: no libcudart.so* in {root}/lib64, lib or targets/*/lib"
            )
        if not has_cuda_tool(root):
            plan.missing.append(
                f"nvcc: CMake's FindCUDAToolkit needs {root}/bin/nvcc or {root}/version.json"
            )
        plan.env["CUDA_PATH"] = str(root)
        plan.include_dirs = cuda_header_wheels(wheelhouse, plan.cuda_major, cache)
        extra = f" and {len(plan.include_dirs)} CUDA header wheels" if plan.include_dirs else ""
        plan.notes.append(f"CUDA {plan.cuda_major or '?'} toolkit {root}{extra}")
    if compiler() is None:
        plan.missing.append(
            "C++ compiler: none of $CXX, c++, g++, clang++ on PATH; install g++ (apt-get install g++)"
        )
    return plan
