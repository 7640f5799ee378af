"""What building a frontend checkout without network needs, and the one line per missing piece.

Each test lays out a checkout the way cudnn-frontend does (python/CMakeLists.txt with its
CUDNN_FRONTEND_USE_SYSTEM_DLPACK / CUDNN_FRONTEND_FETCH_PYBINDS_IN_CMAKE switches, pyproject's
[build-system], dlpack_version.txt, cmake/cuDNN.cmake), a wheelhouse of wheel files, a dlpack
CMake package and a CUDA folder, then asks `plan_build` what it would do. Nothing is compiled
here except one real compiler error (tests/integration/test_frontend_offline_build.py builds).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from testwheels import make_wheel

from validate.env.frontend_build import BuildPlan, compile_causes, missing_requirements, plan_build
from validate.errors import EnvBuildError

HOST_PATH = os.environ.get("PATH", "")  # before the `host` fixture narrows it
COMMIT = "3929da2ef4c1dba1bb8acb68727b9134f26f40c0"
REQUIRES = '["setuptools>=64", "cmake>=3.18", "ninja==1.11.1.1", "pybind11[global]>=2.13,<3"]'
#: The switches as upstream's python/CMakeLists.txt (1.14 and later) spells them.
CMAKE = """
option(CUDNN_FRONTEND_USE_SYSTEM_DLPACK "Whether dlpack should use the system version or fetched." OFF)
IF(CUDNN_FRONTEND_USE_SYSTEM_DLPACK)
  find_package(dlpack REQUIRED)
else()
  file(READ ${PROJECT_SOURCE_DIR}/dlpack_version.txt DLPACK_VERSION)
  FetchContent_Declare(
    dlpack
    GIT_REPOSITORY https://github.com/dmlc/dlpack
    GIT_TAG        v${DLPACK_VERSION}
  )
  FetchContent_MakeAvailable(dlpack)
endif()
option(CUDNN_FRONTEND_FETCH_PYBINDS_IN_CMAKE "Whether cmake build system should fetch pybinds." ON)
if(CUDNN_FRONTEND_FETCH_PYBINDS_IN_CMAKE)
    FetchContent_Declare(
        pybind11
        GIT_REPOSITORY https://github.com/pybind/pybind11
        GIT_TAG        v2.13.6
    )
    FetchContent_MakeAvailable(pybind11)
else()
    find_package(pybind11 CONFIG REQUIRED)
endif()
"""
#: Before 1.14: dlpack v0.8 always fetched, no switch.
OLD_CMAKE = """
FetchContent_Declare(
  dlpack
  GIT_REPOSITORY https://github.com/dmlc/dlpack
  GIT_TAG        v0.8
)
FetchContent_MakeAvailable(dlpack)
"""


def dlpack_header(major: int, minor: int) -> bytes:
    if major == 0:  # 0.x spells its version as one number: 60 is 0.6
        return f"#define DLPACK_VERSION {minor * 10}\n".encode()
    return f"#define DLPACK_MAJOR_VERSION {major}\n#define DLPACK_MINOR_VERSION {minor}\n".encode()


def dlpack_package(prefix: Path, major: int, minor: int) -> Path:
    """An installed dlpack: include/dlpack/dlpack.h and lib/cmake/dlpack/dlpackConfig.cmake,
    with the version file saying 0.1.0 as Debian's 0.6 package does."""
    (prefix / "include" / "dlpack").mkdir(parents=True)
    (prefix / "include" / "dlpack" / "dlpack.h").write_bytes(dlpack_header(major, minor))
    config = prefix / "lib" / "cmake" / "dlpack"
    config.mkdir(parents=True)
    (config / "dlpackConfig.cmake").write_text("add_library(dlpack::dlpack INTERFACE IMPORTED)\n")
    (config / "dlpackConfigVersion.cmake").write_text('set(PACKAGE_VERSION "0.1.0")\n')
    return config


def cuda_toolkit(root: Path, *, nvcc: bool = True, cudart: bool = True) -> Path:
    """The parts of a CUDA 13.0 toolkit that CMake's FindCUDAToolkit asks for."""
    include = root / "targets" / "x86_64-linux" / "include"
    include.mkdir(parents=True)
    (include / "cuda_runtime.h").write_text("#pragma once\n")
    (include / "cuda.h").write_text("#define CUDA_VERSION 13000\n")
    if cudart:
        (root / "lib64").mkdir()
        (root / "lib64" / "libcudart.so.13").write_bytes(b"")
    if nvcc:
        (root / "bin").mkdir()
        (root / "bin" / "nvcc").write_text("#!/bin/sh\n")
    return root


def checkout(root: Path, cmake: str = CMAKE, *, dlpack_version: str | None = "1.1") -> Path:
    (root / "python").mkdir(parents=True)
    (root / "python" / "CMakeLists.txt").write_text(cmake)
    (root / "cmake").mkdir()
    (root / "cmake" / "cuDNN.cmake").write_text(
        "find_cudnn_library(cudnn)\nfind_cudnn_library(cudnn_graph)\n"
        "find_cudnn_library(cudnn_ops OPTIONAL)\n"
    )
    (root / "pyproject.toml").write_text(
        f'[build-system]\nrequires = {REQUIRES}\nbuild-backend = "setuptools.build_meta"\n'
    )
    if dlpack_version:
        (root / "dlpack_version.txt").write_text(dlpack_version + "\n")
    return root


def full_wheelhouse(folder: Path) -> Path:
    """The build requirements, pybind11[global]'s pybind11-global among them, and a backend."""
    make_wheel(folder, "setuptools", "80.0.0")
    make_wheel(folder, "cmake", "4.1.0")
    make_wheel(folder, "ninja", "1.11.1.1")
    make_wheel(
        folder, "pybind11", "2.13.6", requires=('pybind11-global==2.13.6; extra == "global"',)
    )
    make_wheel(folder, "pybind11-global", "2.13.6")
    headers = {
        "nvidia/cudnn/include/cudnn.h": b"#pragma once\n",
        "nvidia/cudnn/lib/libcudnn.so.9": b"\x7fELF",
        "nvidia/cudnn/lib/libcudnn_graph.so.9": b"\x7fELF",
        "nvidia/cudnn/lib/libcudnn_ops.so.9": b"\x7fELF",
    }
    make_wheel(folder, "nvidia-cudnn-cu13", "9.12.0.46", files=headers)
    return folder


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No CUDA/cuDNN/dlpack from the environment: each test says where its pieces are."""
    for name in ("CUDAToolkit_ROOT", "CUDA_PATH", "CUDA_HOME", "CUDNN_PATH", "dlpack_DIR", "CXX"):
        monkeypatch.delenv(name, raising=False)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if cxx := shutil.which("c++") or shutil.which("g++"):
        (bin_dir / "c++").symlink_to(cxx)
    monkeypatch.setenv("PATH", str(bin_dir))  # no nvcc on PATH
    return tmp_path


def plan(tmp: Path, source: Path, wheelhouse: Path | None, **kw: object) -> BuildPlan:
    kw.setdefault("dlpack_dirs", (str(tmp / "system" / "lib" / "cmake" / "dlpack"),))
    kw.setdefault("cuda_roots", ())
    return plan_build(source, commit=COMMIT, cache=tmp / "cache", wheelhouse=wheelhouse, **kw)  # type: ignore[arg-type]


def test_everything_present_sets_the_switches_and_stays_offline(host: Path) -> None:
    if not shutil.which("c++", path=str(host / "bin")):
        pytest.skip("no C++ compiler on this host")
    source = checkout(host / "fe")
    wheelhouse = full_wheelhouse(host / "wheels")
    config = dlpack_package(host / "system", 1, 1)
    cuda = cuda_toolkit(host / "cuda")
    got = plan(host, source, wheelhouse, cuda_roots=(cuda,))
    assert got.missing == []
    assert got.pip_args == ["--no-index", "--find-links", str(wheelhouse)]
    assert got.toolchain == [
        'set(CUDNN_FRONTEND_USE_SYSTEM_DLPACK ON CACHE BOOL "" FORCE)',
        f'set(dlpack_DIR "{config}" CACHE PATH "" FORCE)',
        'set(CUDNN_FRONTEND_FETCH_PYBINDS_IN_CMAKE OFF CACHE BOOL "" FORCE)',
        'set(FETCHCONTENT_FULLY_DISCONNECTED ON CACHE BOOL "" FORCE)',
    ]
    assert got.env["CUDA_PATH"] == str(cuda)
    assert got.cuda_major == 13
    cudnn = Path(got.env["CUDNN_PATH"])  # unpacked from the backend wheel: headers + required libs
    assert sorted(p.name for p in (cudnn / "lib").iterdir()) == [
        "libcudnn.so.9",
        "libcudnn_graph.so.9",
    ]
    assert (cudnn / "include" / "cudnn.h").is_file()
    assert f"dlpack 1.1 ({config})" in got.notes


def test_each_missing_piece_is_one_line_and_the_first_line_names_them_all(host: Path) -> None:
    source = checkout(host / "fe")
    wheelhouse = host / "wheels"
    make_wheel(wheelhouse, "setuptools", "80.0.0")
    make_wheel(
        wheelhouse, "pybind11", "2.13.6", requires=('pybind11-global==2.13.6; extra == "global"',)
    )
    dlpack_package(host / "system", 0, 6)  # Debian bookworm's libdlpack-dev
    (host / "bin" / "c++").unlink(missing_ok=True)
    got = plan(host, source, wheelhouse)
    system = host / "system" / "lib" / "cmake" / "dlpack"
    assert got.missing == [
        f"cmake>=3.18: a build requirement, with no matching wheel in {wheelhouse}",
        f"ninja==1.11.1.1: a build requirement, with no matching wheel in {wheelhouse}",
        f"pybind11-global==2.13.6: a build requirement of pybind11 2.13.6, with no matching wheel in {wheelhouse}",
        (
            f"dlpack: {COMMIT[:12]} needs dlpack >= 1.1 headers (found only 0.6 in {system}); install "
            "Debian's libdlpack-dev where it is new enough, set dlpack_DIR to a dlpack CMake package, "
            "or put a wheel that ships include/dlpack/dlpack.h (e.g. apache-tvm-ffi) in the wheelhouse"
        ),
        (
            "cuDNN headers: no include/cudnn.h with lib/libcudnn.so.9 in $CUDNN_PATH, the backend "
            "source, an nvidia-cudnn-cu* wheel in the wheelhouse or this interpreter; set CUDNN_PATH "
            "or give --wheelhouse with a backend wheel"
        ),
        (
            "CUDA toolkit headers: no include/cuda_runtime.h in ; install the CUDA toolkit (headers, "
            "cudart, nvcc) and set CUDA_PATH to it"
        ),
        "C++ compiler: none of $CXX, c++, g++, clang++ on PATH; install g++ (apt-get install g++)",
    ]
    first = got.error(COMMIT).splitlines()[0]
    assert first == (
        f"cannot build the frontend at {COMMIT[:12]} without network: missing cmake>=3.18, "
        "ninja==1.11.1.1, pybind11-global==2.13.6, dlpack, cuDNN headers, CUDA toolkit headers, "
        "C++ compiler"
    )


def test_cuda_folder_without_cudart_or_nvcc_is_named(
    host: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = checkout(host / "fe")
    cuda = cuda_toolkit(host / "cuda", nvcc=False, cudart=False)
    monkeypatch.setenv("CUDA_PATH", str(cuda))
    got = plan(host, source, full_wheelhouse(host / "wheels"))
    lines = [line for line in got.missing if not line.startswith("dlpack")]
    assert lines[:2] == [
        f"CUDA runtime library: no libcudart.so* in {cuda}/lib64, lib or targets/*/lib",
        f"nvcc: CMake's FindCUDAToolkit needs {cuda}/bin/nvcc or {cuda}/version.json",
    ]


def test_dlpack_headers_from_a_wheel_become_a_cmake_package(host: Path) -> None:
    """apache-tvm-ffi ships include/dlpack/dlpack.h 1.3: newer than the 1.1 pinned, so it serves."""
    source = checkout(host / "fe")
    wheelhouse = full_wheelhouse(host / "wheels")
    make_wheel(
        wheelhouse,
        "apache-tvm-ffi",
        "0.1.15",
        files={"tvm_ffi/include/dlpack/dlpack.h": dlpack_header(1, 3)},
    )
    dlpack_package(host / "system", 0, 6)
    got = plan(host, source, wheelhouse, cuda_roots=(cuda_toolkit(host / "cuda"),))
    assert not [line for line in got.missing if line.startswith("dlpack")]
    made = Path(got.toolchain[1].split('"')[1])
    assert (made.parents[2] / "include" / "dlpack" / "dlpack.h").read_bytes() == dlpack_header(1, 3)
    cmake = shutil.which("cmake", path=HOST_PATH)
    if cmake is None:
        pytest.skip("no cmake on this host to load the made package with")
    project = host / "probe"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(probe LANGUAGES NONE)\n"
        "find_package(dlpack 1.1 REQUIRED)\n"
        "get_target_property(inc dlpack::dlpack INTERFACE_INCLUDE_DIRECTORIES)\n"
        'get_filename_component(inc "${inc}" REALPATH)\nmessage(STATUS "INC=${inc}")\n'
    )
    proc = subprocess.run(
        [cmake, "-S", str(project), "-B", str(project / "build"), f"-Ddlpack_DIR={made}"],
        env={**os.environ, "PATH": HOST_PATH},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"INC={made.parents[2].resolve() / 'include'}" in proc.stdout
    assert "dlpack 1.3 headers from apache_tvm_ffi-0.1.15-py3-none-any.whl" in got.notes


def test_a_checkout_before_the_switch_says_it_fetches(host: Path) -> None:
    source = checkout(host / "fe", OLD_CMAKE, dlpack_version=None)
    dlpack_package(host / "system", 1, 1)
    got = plan(
        host, source, full_wheelhouse(host / "wheels"), cuda_roots=(cuda_toolkit(host / "cuda"),)
    )
    assert [line for line in got.missing if line.startswith("dlpack")] == [
        (
            f"dlpack: python/CMakeLists.txt at {COMMIT[:12]} has no CUDNN_FRONTEND_USE_SYSTEM_DLPACK "
            "option (frontend < 1.14), so it fetches dlpack from GitHub"
        )
    ]
    assert not [line for line in got.toolchain if "DLPACK" in line]


def test_online_without_dlpack_lets_cmake_fetch_it(host: Path) -> None:
    """No wheelhouse: the index serves the build requirements and CMake fetches dlpack, as upstream."""
    source = checkout(host / "fe")
    got = plan(host, source, None, cuda_roots=(cuda_toolkit(host / "cuda"),))
    assert not [line for line in got.missing if line.startswith(("dlpack", "cmake"))]
    assert got.pip_args == []
    assert "FETCHCONTENT_FULLY_DISCONNECTED" not in " ".join(got.toolchain)
    assert any(note.startswith("dlpack fetched by CMake") for note in got.notes)


def test_a_plain_python_checkout_needs_only_its_build_requirements(host: Path) -> None:
    source = host / "pkg"
    source.mkdir()
    (source / "pyproject.toml").write_text('[build-system]\nrequires = ["flit_core>=3.2"]\n')
    empty = host / "empty"
    empty.mkdir()
    got = plan(host, source, empty)
    assert not got.frontend
    assert got.missing == [
        f"flit_core>=3.2: a build requirement, with no matching wheel in {empty}"
    ]
    make_wheel(empty, "flit-core", "3.9.0")
    assert plan(host, source, empty).missing == []


def test_requirement_resolution_follows_extras_and_versions(tmp_path: Path) -> None:
    wheels = tmp_path / "w"
    make_wheel(wheels, "pybind11", "3.0.1", requires=('pybind11-global==3.0.1; extra == "global"',))
    # 3.0.1 does not fit <3; without the extra, pybind11-global is not needed
    assert missing_requirements(["pybind11>=2.13,<3"], wheels) == [
        f"pybind11<3,>=2.13: a build requirement, with no matching wheel in {wheels}"
    ]
    assert missing_requirements(["pybind11"], wheels) == []
    assert missing_requirements(["pybind11[global]"], wheels) == [
        f"pybind11-global==3.0.1: a build requirement of pybind11 3.0.1, with no matching wheel in {wheels}"
    ]


def test_a_real_missing_header_error_is_one_line(host: Path) -> None:
    """The compiler's own message for a header the toolkit lacks (nvrtc.h, as on this project's
    pip-assembled CUDA 13 toolkit) becomes one line naming it, who includes it and the wheel."""
    cxx = shutil.which("c++", path=str(host / "bin"))
    if cxx is None:
        pytest.skip("no C++ compiler on this host")
    work = host / "src"
    (work / "include").mkdir(parents=True)
    (work / "include" / "shim.h").write_text("#pragma once\n#include <nvrtc.h>\n")
    (work / "mod.cpp").write_text('#include "include/shim.h"\nint main() { return 0; }\n')
    proc = subprocess.run(
        [cxx, "-fsyntax-only", str(work / "mod.cpp")], capture_output=True, text=True, check=False
    )
    assert proc.returncode != 0
    built = BuildPlan(
        frontend=True, offline=True, cuda_major=13, cuda_include=[host / "cuda" / "include"]
    )
    assert compile_causes(proc.stderr, work, built) == [
        (
            f"CUDA header nvrtc.h: not found (included from include/shim.h:2; looked in "
            f"{host / 'cuda' / 'include'}); put the nvidia-cuda-nvrtc wheel for CUDA 13 in the "
            "wheelhouse or install the toolkit's nvrtc headers"
        )
    ]


@pytest.mark.skipif(
    not os.environ.get("CUDNN_MATRIX_FRONTEND_CHECKOUT"),
    reason="set CUDNN_MATRIX_FRONTEND_CHECKOUT to a cudnn-frontend checkout[@ref] to read its layout",
)
def test_a_real_checkout_layout_with_an_empty_wheelhouse(host: Path) -> None:
    """The real python/CMakeLists.txt, pyproject.toml and dlpack_version.txt of a checkout: its
    switches are seen, and every build requirement it names is missing from an empty folder."""
    from validate.env.sources import parse_frontend_source

    git = shutil.which("git", path=HOST_PATH) or "git"
    source = parse_frontend_source(os.environ["CUDNN_MATRIX_FRONTEND_CHECKOUT"], git=git)
    assert source.path is not None
    assert source.commit is not None
    empty = host / "empty"
    empty.mkdir()
    got = plan_build(
        source.path,
        commit=source.commit,
        cache=host / "cache",
        wheelhouse=empty,
        dlpack_dirs=(),
        cuda_roots=(),
    )
    names = [line.split(":", 1)[0] for line in got.missing]
    assert [n for n in names if n.startswith(("setuptools", "cmake", "ninja", "pybind11"))]
    dlpack = [line for line in got.missing if line.startswith("dlpack:")]
    pinned = (source.path / "dlpack_version.txt").read_text().strip()
    assert dlpack == [
        (
            f"dlpack: {source.commit[:12]} needs dlpack >= {pinned} headers; install Debian's "
            "libdlpack-dev where it is new enough, set dlpack_DIR to a dlpack CMake package, or put "
            "a wheel that ships include/dlpack/dlpack.h (e.g. apache-tvm-ffi) in the wheelhouse"
        )
    ]
    assert 'set(CUDNN_FRONTEND_FETCH_PYBINDS_IN_CMAKE OFF CACHE BOOL "" FORCE)' in got.toolchain


def test_an_unreadable_pyproject_is_one_line_naming_the_commit(host: Path) -> None:
    source = checkout(host / "fe")
    (source / "pyproject.toml").write_text("[build-system\n")
    with pytest.raises(EnvBuildError) as caught:
        plan(host, source, full_wheelhouse(host / "wheels"))
    assert str(caught.value).startswith(
        f"building the frontend at {COMMIT[:12]} failed: pyproject.toml is not valid TOML ("
    )
    assert "\n" not in str(caught.value)
