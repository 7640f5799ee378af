"""Real offline builds of a frontend-shaped checkout: cmake, ninja, pybind11 from the wheelhouse,
dlpack from an installed CMake package, cuDNN headers from the backend wheel, nothing fetched.

The checkout is a small CMake project written here with the same switches as cudnn-frontend's
python/CMakeLists.txt (its fetch branch names GitHub, which this tool must never reach) and a
setup.py that drives CMake as upstream's does. `CUDNN_MATRIX_FRONTEND_CHECKOUT=/path/to/cudnn-frontend`
also builds a real checkout (minutes of C++).
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from typing import TYPE_CHECKING

import pytest

from validate.env.frontend_build import build_frontend_wheel, plan_build
from validate.env.sources import parse_frontend_source
from validate.errors import EnvBuildError

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow

#: What pip's build isolation installs for the frontend (its pyproject's [build-system]).
BUILD_WHEELS = {
    "setuptools-*.whl": "setuptools>=64",
    "cmake-*.whl": "cmake>=3.18",
    "ninja-1.11.1.1-*.whl": "ninja==1.11.1.1",
    "pybind11_global-2.*.whl": "pybind11[global]>=2.13,<3",
}

SETUP_PY = """
import os, subprocess, sys
from pathlib import Path
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

class CMakeExtension(Extension):
    def __init__(self, name, sourcedir=""):
        super().__init__(name, sources=[])
        self.sourcedir = os.fspath(Path(sourcedir).resolve())

class CMakeBuild(build_ext):
    def build_extension(self, ext):
        extdir = (Path.cwd() / self.get_ext_fullpath(ext.name)).parent.resolve()
        import ninja
        args = [f"-DPython_EXECUTABLE={sys.executable}", f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={extdir}{os.sep}",
                "-DCUDNN_FRONTEND_FETCH_PYBINDS_IN_CMAKE=OFF", "-GNinja",
                f"-DCMAKE_MAKE_PROGRAM:FILEPATH={Path(ninja.BIN_DIR) / 'ninja'}"]
        if "CUDA_PATH" in os.environ:
            args.append(f"-DCUDAToolkit_ROOT={os.environ['CUDA_PATH']}")
        if "CUDNN_PATH" in os.environ:
            args.append(f"-DCUDNN_PATH={os.environ['CUDNN_PATH']}")
        build = Path(self.build_temp) / ext.name
        build.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cmake", ext.sourcedir, *args], cwd=build, check=True)
        subprocess.run(["cmake", "--build", "."], cwd=build, check=True)

setup(ext_modules=[CMakeExtension("mimic_fe._compiled_module")], cmdclass={"build_ext": CMakeBuild})
"""
TOP_CMAKE = """cmake_minimum_required(VERSION 3.18)
project(mimic_fe LANGUAGES CXX)
find_package(CUDAToolkit REQUIRED)
add_subdirectory(python)
"""
PYTHON_CMAKE = """Include(FetchContent)
set(CMAKE_POLICY_DEFAULT_CMP0077 NEW)
option(CUDNN_FRONTEND_USE_SYSTEM_DLPACK "Whether dlpack should use the system version or fetched." OFF)
IF(CUDNN_FRONTEND_USE_SYSTEM_DLPACK)
  find_package(dlpack REQUIRED)
else()
  file(READ ${PROJECT_SOURCE_DIR}/dlpack_version.txt DLPACK_VERSION)
  string(STRIP "${DLPACK_VERSION}" DLPACK_VERSION)
  FetchContent_Declare(
    dlpack
    GIT_REPOSITORY https://github.com/dmlc/dlpack
    GIT_TAG        v${DLPACK_VERSION}
  )
  FetchContent_MakeAvailable(dlpack)
endif()
find_package(Python 3.8 COMPONENTS Interpreter Development.Module REQUIRED)
find_path(CUDNN_INCLUDE_DIR cudnn_version.h HINTS $ENV{CUDNN_PATH} ${CUDNN_PATH} PATH_SUFFIXES include REQUIRED)
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
python_add_library(_compiled_module MODULE mod.cpp WITH_SOABI)
target_include_directories(_compiled_module PRIVATE ${CUDNN_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(_compiled_module PRIVATE pybind11::headers)
if(CUDNN_FRONTEND_USE_SYSTEM_DLPACK)
  target_link_libraries(_compiled_module PRIVATE dlpack::dlpack)
else()
  target_link_libraries(_compiled_module PRIVATE dlpack)
endif()
"""
MOD_CPP = """#include <pybind11/pybind11.h>
#include <cuda_runtime_api.h>
#include <cudnn_version.h>
#include "dlpack/dlpack.h"
PYBIND11_MODULE(_compiled_module, m) {
    m.attr("dlpack") = std::to_string(DLPACK_MAJOR_VERSION) + "." + std::to_string(DLPACK_MINOR_VERSION);
    m.attr("cudnn_major") = CUDNN_MAJOR;
    m.attr("cudart") = CUDART_VERSION;
    m.attr("bool_code") = static_cast<int>(kDLBool);
}
"""


@pytest.fixture(scope="session")
def build_wheelhouse(wheelhouse: Path) -> Path:
    """The shared wheelhouse plus the frontend's build requirements (downloaded once)."""
    for pattern, req in BUILD_WHEELS.items():
        if not any(wheelhouse.glob(pattern)):
            argv = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:"]
            subprocess.run([*argv, "-d", str(wheelhouse), req], check=True)
    return wheelhouse


def _dlpack(prefix: Path) -> Path:
    """An installed dlpack 1.1 (the version upstream pins): header and CMake package."""
    (prefix / "include" / "dlpack").mkdir(parents=True)
    (prefix / "include" / "dlpack" / "dlpack.h").write_text(
        "#pragma once\n#define DLPACK_MAJOR_VERSION 1\n#define DLPACK_MINOR_VERSION 1\n"
        "typedef enum { kDLInt = 0U, kDLBool = 6U } DLDataTypeCode;\n"
    )
    config = prefix / "lib" / "cmake" / "dlpack"
    config.mkdir(parents=True)
    (config / "dlpackConfig.cmake").write_text(
        "add_library(dlpack::dlpack INTERFACE IMPORTED)\n"
        "set_target_properties(dlpack::dlpack PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "
        f'"{prefix / "include"}")\n'
    )
    (config / "dlpackConfigVersion.cmake").write_text('set(PACKAGE_VERSION "1.1")\n')
    return config


def _mimic(root: Path) -> Path:
    files = {
        "pyproject.toml": (
            "[build-system]\n"
            'requires = ["setuptools>=64", "cmake>=3.18", "ninja==1.11.1.1", '
            '"pybind11[global]>=2.13,<3"]\nbuild-backend = "setuptools.build_meta"\n'
            '[project]\nname = "mimic-fe"\nversion = "0.1"\n'
            "[tool.setuptools]\npackages = ['mimic_fe']\npackage-dir = {'' = 'python'}\n"
        ),
        "setup.py": SETUP_PY,
        "CMakeLists.txt": TOP_CMAKE,
        "dlpack_version.txt": "1.1\n",
        "python/CMakeLists.txt": PYTHON_CMAKE,
        "python/mod.cpp": MOD_CPP,
        "python/mimic_fe/__init__.py": "from ._compiled_module import *  # noqa\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "--quiet"], ["add", "."], ["commit", "--quiet", "-m", "mimic"]):
        subprocess.run([*git, *args], check=True)
    return root


def _skip_without_host_pieces(source: Path, commit: str, wheelhouse: Path, cache: Path) -> None:
    """CUDA headers and a compiler are the host's: where absent, the plan's own line says so."""
    plan = plan_build(source, commit=commit, cache=cache, wheelhouse=wheelhouse)
    host = [ln for ln in plan.missing if ln.startswith(("CUDA", "nvcc", "C++"))]
    if host:
        pytest.skip("; ".join(host))


def test_a_frontend_shaped_checkout_builds_offline_with_installed_pieces(
    build_wheelhouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _dlpack(tmp_path / "dlpack")
    monkeypatch.setenv("dlpack_DIR", str(config))
    monkeypatch.delenv("CUDNN_PATH", raising=False)
    source = parse_frontend_source(f"{_mimic(tmp_path / 'checkout')}@HEAD")
    assert source.path is not None
    assert source.commit is not None
    _skip_without_host_pieces(source.path, source.commit, build_wheelhouse, tmp_path / "plan")
    wheel = build_frontend_wheel(source, tmp_path / "cache", wheelhouse=build_wheelhouse)
    assert wheel.name.startswith("mimic_fe-0.1-cp")
    unpacked = tmp_path / "site"
    with zipfile.ZipFile(wheel) as whl:
        whl.extractall(unpacked)
    code = "import mimic_fe as m; print(m.dlpack, m.cudnn_major, m.bool_code, m.cudart // 1000)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(unpacked)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    # dlpack from the installed package (not a fetched one), cuDNN 9 headers from the wheel
    assert out[:3] == ["1.1", "9", "6"]
    log = (tmp_path / "cache" / "frontend-wheels" / f"{source.commit}.log").read_text()
    assert "--no-index" in log
    assert "github.com" not in log.lower()


def test_an_installed_dlpack_older_than_the_pin_stops_before_compiling(
    build_wheelhouse: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _dlpack(tmp_path / "dlpack")
    (config.parents[2] / "include" / "dlpack" / "dlpack.h").write_text(
        "#define DLPACK_VERSION 60\n"
    )
    monkeypatch.setenv("dlpack_DIR", str(config))
    source = parse_frontend_source(f"{_mimic(tmp_path / 'checkout')}@HEAD")
    assert source.commit is not None
    wheelhouse = tmp_path / "wheels"  # the build wheels, without any that ships dlpack.h
    wheelhouse.mkdir()
    for wheel in build_wheelhouse.glob("*.whl"):
        if wheel.name.startswith(("setuptools", "cmake", "ninja", "pybind11", "nvidia_cudnn")):
            os.link(wheel, wheelhouse / wheel.name)
    with pytest.raises(EnvBuildError) as caught:
        build_frontend_wheel(source, tmp_path / "cache", wheelhouse=wheelhouse)
    lines = str(caught.value).splitlines()
    assert lines[0].startswith(f"cannot build the frontend at {source.commit[:12]} without network")
    dlpack = [ln for ln in lines[1:] if ln.startswith("dlpack:")]
    assert len(dlpack) == 1
    assert f"needs dlpack >= 1.1 headers (found only 0.6 in {config}" in dlpack[0]
    assert not (tmp_path / "cache" / "frontend-wheels" / source.commit).exists()


@pytest.mark.skipif(
    not os.environ.get("CUDNN_MATRIX_FRONTEND_CHECKOUT"),
    reason="set CUDNN_MATRIX_FRONTEND_CHECKOUT to a cudnn-frontend checkout to build it",
)
def test_a_real_cudnn_frontend_checkout_builds_offline(
    build_wheelhouse: Path, tmp_path: Path
) -> None:
    source = parse_frontend_source(os.environ["CUDNN_MATRIX_FRONTEND_CHECKOUT"])
    assert source.path is not None
    assert source.commit is not None
    plan = plan_build(
        source.path, commit=source.commit, cache=tmp_path, wheelhouse=build_wheelhouse
    )
    if plan.missing:
        pytest.skip(plan.error(source.commit))
    wheel = build_frontend_wheel(source, tmp_path / "cache", wheelhouse=build_wheelhouse)
    with zipfile.ZipFile(wheel) as whl:
        assert any(n.startswith("cudnn/_compiled_module") for n in whl.namelist())
