"""Where the pieces of a frontend build are on this host (or in the wheelhouse): a dlpack CMake
package, cuDNN headers and libraries, the CUDA toolkit (headers, cudart, nvcc), a C++ compiler.

Each probe answers what it found and where it looked; `plan_build` (env/frontend_plan.py) turns a
missing piece into its one line. Pieces that come out of a wheel (dlpack.h from apache-tvm-ffi,
cuDNN's headers from the backend wheel, CUDA component headers) are unpacked once into the cache.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Final

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

if TYPE_CHECKING:
    from collections.abc import Sequence

    from validate.env.sources import BackendSource

__all__ = [
    "CUDA_ROOTS",
    "DLPACK_DIRS",
    "compiler",
    "cuda_header_wheels",
    "cuda_includes",
    "cuda_major",
    "cuda_root",
    "find_cudnn",
    "find_dlpack",
    "has_cuda_tool",
    "has_cudart",
    "read_or_empty",
    "version_tuple",
]

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


def read_or_empty(path: Path) -> str:
    """The file's text (undecodable bytes replaced); "" where it cannot be read."""
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _dlpack_packages(patterns: Sequence[str]) -> list[Path]:
    """Folders holding dlpack's CMake package (dlpackConfig.cmake): $dlpack_DIR, then system ones."""
    own = os.environ.get("dlpack_DIR")  # noqa: SIM112 - CMake's <Package>_DIR, case and all
    candidates = [Path(own)] if own else []
    for pattern in patterns:
        candidates += sorted(Path("/").glob(pattern.lstrip("/")))
    return [folder for folder in candidates if (folder / "dlpackConfig.cmake").is_file()]


def version_tuple(text: str) -> tuple[int, ...]:
    """The first three numbers of a version text, for comparing: "1.0rc1" -> (1, 0, 1)."""
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def _package_version(config_dir: Path) -> str:
    """The dlpack a CMake package serves: its dlpack.h's own version (Debian's 0.6 package says
    0.1.0 in dlpackConfigVersion.cmake), else what that file says."""
    for prefix in list(config_dir.parents)[:4]:
        header = prefix / "include" / "dlpack" / "dlpack.h"
        if header.is_file() and (version := _header_version(read_or_empty(header))):
            return version
    match = _PACKAGE_VERSION_RE.search(read_or_empty(config_dir / "dlpackConfigVersion.cmake"))
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
        if version and (best is None or version_tuple(version) > best[0]):
            best = (version_tuple(version), version, wheel.name, data)
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


def find_dlpack(
    wanted: str | None, wheelhouse: Path | None, cache: Path, patterns: Sequence[str]
) -> tuple[Path | None, str, list[str]]:
    """(CMake package folder, what it is, the ones found but too old)."""
    floor = version_tuple(wanted or "0")
    too_old: list[str] = []
    for folder in _dlpack_packages(patterns):
        version = _package_version(folder)
        if version_tuple(version) >= floor:
            return folder, f"dlpack {version} ({folder})", too_old
        too_old.append(f"{version} in {folder}")
    if made := _headers_package(wheelhouse, cache):
        folder, version, name = made
        if version_tuple(version) >= floor:
            return folder, f"dlpack {version} headers from {name}", too_old
        too_old.append(f"{version} in {name}")
    return None, "", too_old


def cuda_root(fallbacks: Sequence[Path]) -> tuple[Path | None, list[str]]:
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
        if cuda_includes(root):
            return root, looked
    return None, looked


def cuda_includes(root: Path) -> list[Path]:
    """The include folders of a CUDA toolkit that hold cuda_runtime.h (targets/* too)."""
    dirs = [root / "include", *sorted(root.glob("targets/*/include"))]
    return [d for d in dirs if (d / "cuda_runtime.h").is_file()]


def cuda_major(includes: Sequence[Path]) -> int | None:
    """The CUDA major version cuda.h names (CUDA_VERSION 12080 -> 12); None where none does."""
    for folder in includes:
        if match := _CUDA_VERSION_RE.search(read_or_empty(folder / "cuda.h")):
            return int(match.group(1)) // 1000
    return None


def has_cuda_tool(root: Path) -> bool:
    """FindCUDAToolkit wants nvcc or the toolkit's version file, besides headers and cudart."""
    return (root / "bin" / "nvcc").exists() or any(
        (root / name).is_file() for name in ("version.json", "version.txt")
    )


def has_cudart(root: Path) -> bool:
    """Whether the toolkit has a libcudart.so* in lib64, lib or targets/*/lib."""
    dirs = [root / "lib64", root / "lib", *root.glob("targets/*/lib")]
    return any(next(d.glob("libcudart.so*"), None) for d in dirs if d.is_dir())


def _cudnn_tree(folder: Path) -> bool:
    return (folder / "include" / "cudnn.h").is_file() and any(
        (folder / sub / "libcudnn.so.9").exists() for sub in ("lib", "lib64")
    )


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


def find_cudnn(
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


def cuda_header_wheels(wheelhouse: Path | None, major: int | None, cache: Path) -> list[Path]:
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


def compiler() -> str | None:
    """A C++ compiler: $CXX, else the first of c++, g++, clang++ on PATH; None where none is."""
    for name in (os.environ.get("CXX", ""), "c++", "g++", "clang++"):
        if name and (found := shutil.which(name)):
            return found
    return None
