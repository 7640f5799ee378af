"""A CMake project with Catch2 tests, built once per content against a cell's pinned backend.

The build is a stage of the C++ kind (execute/cases/catch2.py), cached beside the environments:
`<cache>/cpp/<key>/`, where the key is the content of everything that goes into the binaries:

- every file of the project (a frontend checkout: its headers, samples and tests), less `.git`
  and build trees (a folder holding a CMakeCache.txt), and where it lies: the binaries hold
  their sources' absolute paths, by which each TEST_CASE's file is named, so two checkouts of
  one ref are two builds;
- the pinned backend: its version and the content of its headers (`include/`), which fix the
  62 `#if CUDNN_VERSION` guards of the frontend's samples (DOMAIN.md §11), and its library names;
- CUDA: `nvcc --version` of the toolkit and the names and sizes of the CUDA libraries the cell
  environment's wheels hold (cublasLt, nvrtc);
- the arch list, the compiler (`c++ --version`), CMake's version, the Catch2 source given, and
  the targets asked for.

It compiles against the cell's own backend wheel (`nvidia/cudnn/include` and `lib`, as
`CUDNN_PATH`), never the host's: after the configure step the folders CMake found are checked
to lie in it. CUDA comes from the host's toolkit (`nvcc` on PATH, or `CUDAToolkit_ROOT`); the
libraries the toolkit lacks (cublasLt, nvrtc: the wheels `nvidia-cublas`, `nvidia-cuda-nvrtc`
that the backend wheel depends on) from the cell environment's `nvidia/cu*/`. Catch2: a source
folder or archive the user names, unpacked into the cache and built there once per source,
compiler, CMake and generator (`<cache>/cpp/catch2/built-<key>/`, C++17, installed; a unity
build: its ~100 sources in 16 compiles, 14 s against 40 s on 2 CPUs, bench/cpp_catch2_bench.py
--unity; `CUDNN_MATRIX_CATCH2_UNITY=0` builds it one source at a time), shared by
every cell's build: the project's `find_package(Catch2)` finds it (`Catch2_DIR`), and a project
that fetches Catch2 without asking `find_package` first compiles the given source itself
(`FETCHCONTENT_SOURCE_DIR_CATCH2`), as does every build under `CUDNN_MATRIX_CATCH2_ONCE=0` (a
project that sets Catch2's own CMake options; bench/cpp_catch2_bench.py compares the two);
without one, the project's own `find_package` or FetchContent.

A build folder is half-built until its `.complete` file is written: it is removed on any way
out before that (scratch.building), and a stale one is removed before the next build. The log
goes to the caller's file (the run folder) and is kept whether the build worked or not. A failed
build raises `CppBuildError` naming the first compiler error line.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from validate import scratch
from validate.errors import EnvBuildError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from validate.env.target import ExecTarget

__all__ = [
    "BUILTIN_TARGETS",
    "CppBuild",
    "CppBuildError",
    "CppBuildTimeout",
    "CppProject",
    "declared_targets",
    "ensure_build",
    "first_error",
    "parallel",
    "tool",
]

log = logging.getLogger(__name__)

_COMPLETE: Final = ".complete"
#: Set to 0 to build the Catch2 of `--cpp-catch2` one source at a time (a compiler that cannot
#: take its unity build; bench/cpp_catch2_bench.py --unity compares the two).
CATCH2_UNITY_ENV: Final = "CUDNN_MATRIX_CATCH2_UNITY"
_MANIFEST: Final = "manifest.json"
_TERM_GRACE_S: Final = 5.0  # a step past its limit: from TERM to KILL
#: Variables of the caller's that would steer cmake/cuDNN.cmake away from the pinned backend.
_STEERING: Final = ("CUDNN_PATH", "CUDNN_INCLUDE_PATH", "CUDNN_LIBRARY_PATH", "CUDNN_HOME")
#: Error lines of a build log, most telling first: the compiler's (gcc, clang, nvcc), the
#: linker's, CMake's, then the build tool's own (which only names the failed step).
_ERROR_LINES: Final = (
    re.compile(r": (fatal )?error[: ]"),
    re.compile(r"undefined reference to|ld returned|cannot find -l"),
    re.compile(r"^CMake Error"),
    re.compile(r"^FAILED: |^ninja: error|^make(\[\d+\])?: \*\*\*"),
)


class CppBuildError(EnvBuildError):
    """The project did not build; `first` is the first error line, `log` the whole log."""

    def __init__(self, message: str, *, first: str, log_path: Path) -> None:
        super().__init__(message)
        self.first = first
        self.log_path = log_path


@dataclass(frozen=True, kw_only=True)
class CppProject:
    """A CMake project with Catch2 tests (`--cpp DIR`), the targets to build (none: all), and
    the Catch2 source to build it with (None: the project's find_package or FetchContent)."""

    root: Path
    targets: tuple[str, ...] = ()
    catch2: Path | None = None


@dataclass(frozen=True, kw_only=True)
class CppBuild:
    """A finished build: its folder, the Catch2 test binaries in it, whether it was cached."""

    folder: Path
    binaries: tuple[Path, ...] = ()
    reused: bool = False
    seconds: float = 0.0
    facts: dict[str, Any] = field(default_factory=dict)


def tool(name: str) -> str | None:
    """`cmake`/`ninja`: on PATH, else beside the tool's interpreter (pip's `cmake`, `ninja`)."""
    found = shutil.which(name)
    if found:
        return found
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else None


def first_error(text: str) -> str:
    """The first error line of a build log, of the most telling kind it has (a compiler's
    before the build tool's "FAILED: step"); "" when none is named."""
    lines = text.splitlines()
    for pattern in _ERROR_LINES:
        for line in lines:
            if pattern.search(line):
                return line.strip()[:400]
    return ""


def parallel(cpus: int) -> int:
    """Compiles at once on `cpus` CPUs (the ledger's booking): Ninja's own default for that many
    (2 -> 3, more -> CPUs + 2; a compile waits on its files part of the time), so the tool's
    build keeps pace with `cmake --build` run by hand on the same machine."""
    cpus = max(1, cpus)
    return cpus + 1 if cpus <= 2 else cpus + 2


def _tree_digest(root: Path, digest: Any) -> None:
    """Every file under `root` (names relative, content), less .git and CMake build trees."""
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if "CMakeCache.txt" in filenames and here != root:
            dirnames[:] = []
            continue
        dirnames[:] = sorted(d for d in dirnames if d not in (".git", "__pycache__"))
        for name in sorted(filenames):
            path = here / name
            digest.update(str(path.relative_to(root)).encode("utf-8", "surrogateescape") + b"\0")
            with contextlib.suppress(OSError):
                digest.update(hashlib.sha256(path.read_bytes()).digest())


#: A command that defines a target: add_executable, add_library, add_custom_target and the
#: wrappers named after them (python_add_library, pybind11_add_module, cuda_add_executable).
_DEFINING: Final = re.compile(r"add_(executable|library|custom_target|module)$")
_DEFINES: Final = re.compile(r"(?im)^\s*(\w*add_\w+)\s*\(([^()]*)")
_COMMENT: Final = re.compile(r"#[^\n]*")
#: What every generator makes, whatever the project declares.
BUILTIN_TARGETS: Final = frozenset({"all", "clean", "install", "test", "help"})


def declared_targets(root: Path) -> tuple[frozenset[str], bool]:
    """The targets the project's own CMake files build, by their literal names (the first
    argument of an `add_*` command, IMPORTED and ALIAS names left out; build trees and .git not
    read), and whether some such name is made from a variable (`${...}`), which only configuring
    can tell. A dependency's targets (Catch2 through
    FetchContent) are not among them."""
    names: set[str] = set(BUILTIN_TARGETS)
    variable = False
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if "CMakeCache.txt" in filenames and here != root:
            dirnames[:] = []
            continue
        dirnames[:] = [d for d in dirnames if d not in (".git", "__pycache__", "_deps")]
        for name in filenames:
            if name != "CMakeLists.txt" and not name.endswith(".cmake"):
                continue
            try:
                text = (here / name).read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            for command, body in _DEFINES.findall(text):
                words = _COMMENT.sub("", body).split()
                if not words or not _DEFINING.search(command.lower()):
                    continue  # add_subdirectory, add_test, add_compile_options, ...
                if "IMPORTED" in words or "ALIAS" in words:
                    continue  # not built: a name for something else
                first = words[0]
                if "${" in first:
                    variable = True
                else:
                    names.add(first.strip("\"'"))
    return frozenset(names), variable


def _output(argv: Sequence[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable: {exc}"
    return (done.stdout + done.stderr).strip()


@dataclass(frozen=True, kw_only=True)
class _Inputs:
    """Where each piece of the build comes from, for one cell."""

    cudnn_root: Path  # the wheel's nvidia/cudnn: include/ and lib/
    cuda_root: Path | None  # the host toolkit (nvcc's folder's parent)
    cuda_libs: dict[str, Path]  # CMake cache variable -> library the toolkit lacks (the wheels)
    cuda_include: Path | None  # the wheels' headers (cublasLt.h, nvrtc.h)
    arch: str  # CMAKE_CUDA_ARCHITECTURES ("" where the host has no GPU: CMake's default)
    cmake: str
    ninja: str | None


def _inputs(target: ExecTarget) -> _Inputs:
    if target.backend_dir is None or not (target.backend_dir / "libcudnn.so.9").is_file():
        msg = "the C++ build needs a pinned backend folder with libcudnn.so.9 (a pypi or wheel backend)"
        raise EnvBuildError(msg)
    cudnn_root = target.backend_dir.parent
    if not (cudnn_root / "include" / "cudnn.h").is_file():
        msg = (
            f"the pinned backend {cudnn_root} has no include/cudnn.h: its wheel carries no headers"
        )
        raise EnvBuildError(msg)
    cmake = tool("cmake")
    if cmake is None:
        msg = "the C++ build needs cmake: none on PATH (pip install cmake ninja)"
        raise EnvBuildError(msg)
    nvcc = shutil.which("nvcc")
    given = os.environ.get("CUDAToolkit_ROOT")  # noqa: SIM112 - CMake's own spelling
    cuda_root = Path(given) if given else None
    if cuda_root is None and nvcc:
        cuda_root = Path(nvcc).resolve().parent.parent
        if not (cuda_root / "include" / "cuda_runtime.h").is_file():  # a wrapper script
            cuda_root = Path("/usr/local/cuda") if Path("/usr/local/cuda").is_dir() else None
    libs: dict[str, Path] = {}
    include: Path | None = None
    nvidia = cudnn_root.parent
    for folder in sorted(nvidia.glob("cu[0-9]*")) + sorted(nvidia.glob("cu*blas")):
        for var, stem in (
            ("CUDA_cublasLt_LIBRARY", "libcublasLt.so"),
            ("CUDA_nvrtc_LIBRARY", "libnvrtc.so"),
        ):
            found = sorted((folder / "lib").glob(f"{stem}*"))
            if found and var not in libs:
                libs[var] = found[0]
        if (folder / "include").is_dir() and include is None:
            include = folder / "include"
    arch = (target.host_arch or "").removeprefix("sm")
    return _Inputs(
        cudnn_root=cudnn_root,
        cuda_root=cuda_root,
        cuda_libs=libs,
        cuda_include=include,
        arch=arch,
        cmake=cmake,
        ninja=tool("ninja"),
    )


def _key(project: CppProject, inputs: _Inputs, catch2: Path | None) -> tuple[str, dict[str, Any]]:
    digest = hashlib.sha256()
    _tree_digest(project.root, digest)
    backend = hashlib.sha256()
    _tree_digest(inputs.cudnn_root / "include", backend)
    libs = sorted(p.name for p in (inputs.cudnn_root / "lib").glob("libcudnn*"))
    nvcc = str(inputs.cuda_root / "bin" / "nvcc") if inputs.cuda_root else "nvcc"
    facts: dict[str, Any] = {
        "project": digest.hexdigest(),
        # the binaries hold their sources' absolute paths (Catch2's __FILE__, which names each
        # TEST_CASE's file, and the debug info): a copy of the project elsewhere is its own
        # build, or its cases would be named by the other copy's files
        "source": str(project.root.resolve()),
        "backend_headers": backend.hexdigest(),
        "backend_libs": libs,
        "cuda": _output([nvcc, "--version"]).splitlines()[-1:],
        "cuda_libs": {k: f"{v.name}:{v.stat().st_size}" for k, v in inputs.cuda_libs.items()},
        "arch": inputs.arch,
        "compiler": _output(["c++", "--version"]).splitlines()[:1],
        "cmake": _output([inputs.cmake, "--version"]).splitlines()[:1],
        "generator": "Ninja" if inputs.ninja else "Unix Makefiles",
        "targets": list(project.targets),
        "catch2": None,
    }
    if catch2 is not None:
        tree = hashlib.sha256()
        _tree_digest(catch2, tree)
        facts["catch2"] = tree.hexdigest()
    key = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]
    return key, facts


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _catch2_source(given: Path | None, cache: Path) -> Path | None:
    """A Catch2 source folder: the one given, or the archive given unpacked into the cache."""
    if given is None or given.is_dir():
        return given
    digest = hashlib.sha256(given.read_bytes()).hexdigest()[:16]
    where = cache / "catch2" / digest
    if (where / _COMPLETE).is_file():
        return _only_child(where)
    with _locked(cache / "catch2" / f".{digest}.lock"):
        if (where / _COMPLETE).is_file():
            return _only_child(where)
        shutil.rmtree(where, ignore_errors=True)
        with scratch.building(where, keep=True):
            where.mkdir(parents=True)
            try:
                with tarfile.open(given) as archive:
                    archive.extractall(where, filter="data")
            except (tarfile.TarError, OSError) as exc:
                msg = f"--cpp-catch2 {given}: not a Catch2 source archive ({exc})"
                raise EnvBuildError(msg) from exc
            (where / _COMPLETE).write_text("")
    return _only_child(where)


def _only_child(where: Path) -> Path:
    children = [p for p in where.iterdir() if p.is_dir()]
    return children[0] if len(children) == 1 else where


def _generator(inputs: _Inputs) -> list[str]:
    """Ninja where the cell has one (the frontend's own CI builds with it), else CMake's default."""
    return ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={inputs.ninja}"] if inputs.ninja else []


def _configure_argv(
    project: CppProject,
    inputs: _Inputs,
    folder: Path,
    catch2: Path | None,
    catch2_config: Path | None = None,
) -> list[str]:
    argv = [inputs.cmake, "-S", str(project.root), "-B", str(folder), *_generator(inputs)]
    argv += [
        f"-DCUDNN_PATH={inputs.cudnn_root}",
        f"-DCUDNN_INCLUDE_PATH={inputs.cudnn_root / 'include'}",
        f"-DCUDNN_LIBRARY_PATH={inputs.cudnn_root / 'lib'}",
    ]
    if inputs.cuda_root is not None:
        argv.append(f"-DCUDAToolkit_ROOT={inputs.cuda_root}")
    argv += [f"-D{var}={path}" for var, path in sorted(inputs.cuda_libs.items())]
    if inputs.cuda_include is not None:
        argv.append(f"-DCMAKE_CXX_FLAGS=-isystem {inputs.cuda_include}")
    if inputs.arch:
        argv.append(f"-DCMAKE_CUDA_ARCHITECTURES={inputs.arch}")
    if catch2 is not None:  # the given source, never a host Catch2 (Debian's is v2)
        argv.append(f"-DFETCHCONTENT_SOURCE_DIR_CATCH2={catch2}")
        if catch2_config is None:
            argv.append("-DCMAKE_DISABLE_FIND_PACKAGE_Catch2=ON")
        else:  # built once (_catch2_built): find_package(Catch2) takes it
            argv.append(f"-DCatch2_DIR={catch2_config}")
    return argv


class CppBuildTimeout(CppBuildError):
    """The build ran past its limit (execute/limits.py `cpp_build_limit`) and was killed."""


def _children() -> dict[int, list[int]]:
    """Parent pid -> its children's pids, of every process on the host (/proc)."""
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text(encoding="utf-8", errors="replace")
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _end_tree(proc: subprocess.Popen[bytes]) -> None:
    """End a build step that ran past its limit, and everything under it: ninja runs each
    command in a process group of its own and ends them on SIGTERM, so the step's group gets
    TERM first; after a grace, every process still under the step (found through /proc) and the
    step's group get KILL."""
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=_TERM_GRACE_S)
    except subprocess.TimeoutExpired:
        tree, found, todo = _children(), [], [proc.pid]
        while todo:
            pid = todo.pop()
            found.append(pid)
            todo.extend(tree.get(pid, ()))
        for pid in found:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _run_logged(
    argv: Sequence[str],
    log_fh: Any,
    env: dict[str, str],
    *,
    deadline: float | None = None,
    track: Callable[[int, bool], object] | None = None,
) -> int | None:
    """One step of the build, its output in the log; None where it ran past `deadline`
    (time.monotonic()): its whole process group (cmake, ninja, the compilers) is killed.
    `track(pgid, running)`: its process group started (True) or ended (False), for the caller
    to end on an interrupt (it runs in a session of its own)."""
    log_fh.write(f"+ {' '.join(argv)}\n")
    log_fh.flush()
    proc = subprocess.Popen(
        list(argv), stdout=log_fh, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    if track is not None:
        track(proc.pid, True)
    status: int | None = None
    try:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        status = proc.wait(timeout=left)
    except subprocess.TimeoutExpired:
        status = None
    finally:
        if proc.returncode is None:
            _end_tree(proc)
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)  # what the step left running in its group
        if track is not None:
            track(proc.pid, False)
    log_fh.flush()
    return status


def _check_pinned(folder: Path, cudnn_root: Path) -> None:
    """The cuDNN folders CMake found lie in the pinned backend (never the host's)."""
    try:
        cache = (folder / "CMakeCache.txt").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    pinned = str(cudnn_root.resolve())
    for line in cache.splitlines():
        name, _, value = line.partition("=")
        var = name.split(":", 1)[0]
        found = var in ("CUDNN_INCLUDE_DIR", "cudnn_LIBRARY") and value and "NOTFOUND" not in value
        if found and not str(Path(value).resolve()).startswith(pinned):
            msg = f"the C++ build found {var}={value}, not the pinned backend {pinned}"
            raise EnvBuildError(msg)


def _test_binaries(folder: Path, targets: Sequence[str]) -> tuple[Path, ...]:
    """The executables the build made that link Catch2 (CMake's file API codemodel): only
    those of `targets` where some are named."""
    reply = folder / ".cmake" / "api" / "v1" / "reply"
    index = sorted(reply.glob("index-*.json"))
    if not index:
        return ()
    data = json.loads(index[-1].read_text(encoding="utf-8"))
    model = next((o for o in data.get("objects", ()) if o.get("kind") == "codemodel"), None)
    if model is None:
        return ()
    codemodel = json.loads((reply / model["jsonFile"]).read_text(encoding="utf-8"))
    found: list[Path] = []
    for config in codemodel.get("configurations", ())[:1]:
        for ref in config.get("targets", ()):
            info = json.loads((reply / ref["jsonFile"]).read_text(encoding="utf-8"))
            if info.get("type") != "EXECUTABLE" or (targets and info.get("name") not in targets):
                continue
            if not _links_catch2(info):
                continue
            for artifact in info.get("artifacts", ()):
                path = Path(artifact["path"])
                found.append(path if path.is_absolute() else folder / path)
    return tuple(sorted(p for p in found if p.is_file()))


#: Catch2's own libraries on a link line (an imported Catch2: the one built once, or a host's).
_CATCH2_LIB: Final = re.compile(r"(^|[/\s])libCatch2[^/\s]*\.(a|so)\b")


def _links_catch2(info: dict[str, Any]) -> bool:
    """A target of the codemodel links Catch2: one of its dependencies is a Catch2 target built
    in the tree (FetchContent), or its link line names Catch2's library (find_package)."""
    deps = [str(d.get("id", "")) for d in info.get("dependencies", ())]
    if any(d.startswith(("Catch2WithMain::", "Catch2::")) for d in deps):
        return True
    fragments = info.get("link", {}).get("commandFragments", ())
    return any(_CATCH2_LIB.search(str(f.get("fragment", ""))) for f in fragments)


class _Timeout(Exception):
    """The Catch2 build ran past the cell build's deadline."""


def _catch2_built(
    source: Path,
    facts: dict[str, Any],
    root: Path,
    *,
    inputs: _Inputs,
    jobs: int,
    log_fh: Any,
    env: dict[str, str],
    deadline: float | None,
    track: Callable[[int, bool], object] | None,
) -> Path:
    """The folder of `Catch2Config.cmake` of `source` built and installed once per source,
    compiler, CMake and generator (`root/catch2/built-<key>/`), so each cell's build compiles
    only the project: built here where it is not yet (its log in `log_fh`, within `deadline`;
    past it: `_Timeout`; a failure: CppBuildError). C++17, so every `StringMaker` a C++14, 17 or
    20 project may ask for is in the library; no build type, as FetchContent builds it."""
    unity = os.environ.get(CATCH2_UNITY_ENV) != "0"
    picked = {k: facts[k] for k in ("catch2", "compiler", "cmake", "generator")}
    if not unity:  # (a unity build keeps the key it had before the setting)
        picked["unity"] = False
    key = hashlib.sha256(json.dumps(picked, sort_keys=True).encode()).hexdigest()[:16]
    where = root / "catch2" / f"built-{key}"

    def config() -> Path | None:
        found = sorted((where / "prefix").glob("lib*/cmake/Catch2/Catch2Config.cmake"))
        return found[0].parent if found and (where / _COMPLETE).is_file() else None

    with _locked(root / "catch2" / f".built-{key}.lock"):
        done = config()
        if done is not None:
            log_fh.write(f"cudnn-matrix: Catch2 built once, reused: {where}\n")
            return done
        shutil.rmtree(where, ignore_errors=True)
        with scratch.building(where, keep=True):
            build = where / "build"
            steps = [
                [
                    inputs.cmake,
                    *("-S", str(source), "-B", str(build)),
                    *_generator(inputs),
                    "-DCMAKE_CXX_STANDARD=17",
                    "-DCMAKE_CXX_STANDARD_REQUIRED=ON",
                    "-DCMAKE_POSITION_INDEPENDENT_CODE=ON",
                    "-DCATCH_INSTALL_DOCS=OFF",
                    "-DCATCH_INSTALL_EXTRAS=OFF",
                    "-DBUILD_TESTING=OFF",
                    # its sources compiled a few at a time as one (2.8x less on 2 CPUs): Catch2's
                    # library only, never the project's own build
                    f"-DCMAKE_UNITY_BUILD={'ON' if unity else 'OFF'}",
                    f"-DCMAKE_INSTALL_PREFIX={where / 'prefix'}",
                ],
                [inputs.cmake, "--build", str(build), "-j", str(parallel(jobs))],
                [inputs.cmake, "--install", str(build)],
            ]
            log_fh.write(f"cudnn-matrix: building Catch2 {source} once, into {where}\n")
            for argv in steps:
                status = _run_logged(argv, log_fh, env, deadline=deadline, track=track)
                if status is None:
                    raise _Timeout
                if status != 0:
                    log_fh.flush()
                    first = first_error(Path(log_fh.name).read_text(errors="replace"))
                    first = first or f"the Catch2 build exited with status {status}"
                    msg = f"Catch2 {source} did not build: {first}"
                    raise CppBuildError(msg, first=first, log_path=Path(log_fh.name))
            shutil.rmtree(build, ignore_errors=True)
            (where / _COMPLETE).write_text("")
        done = config()
        if done is None:
            msg = f"Catch2 {source} installed no Catch2Config.cmake under {where / 'prefix'}"
            raise CppBuildError(msg, first=msg, log_path=Path(log_fh.name))
        return done


def ensure_build(
    project: CppProject,
    target: ExecTarget,
    *,
    cache: Path,
    jobs: int,
    log_path: Path,
    timeout_s: float | None = None,
    track: Callable[[int, bool], object] | None = None,
) -> CppBuild:
    """The project built for the cell `target` runs (see the module doc): reused from
    `<cache>/cpp/<key>` where a complete build is there, else built with `jobs` parallel
    compiles, its log in `log_path`. `timeout_s`: the limit of the configure and compile
    together (past it: CppBuildTimeout, the half-built folder removed); `track`: as
    `_run_logged`'s."""
    inputs = _inputs(target)
    catch2 = _catch2_source(project.catch2, cache / "cpp")
    key, facts = _key(project, inputs, catch2)
    root = cache / "cpp"
    folder = root / key
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(root / f".{key}.lock"):
        if (folder / _COMPLETE).is_file():
            manifest = json.loads((folder / _MANIFEST).read_text(encoding="utf-8"))
            binaries = tuple(Path(p) for p in manifest.get("binaries", ()))
            if all(p.is_file() for p in binaries):
                log_path.write_text(
                    f"reused the build {folder} (key {key}); its own log: {folder / 'build.log'}\n",
                    encoding="utf-8",
                )
                log.info("reusing the C++ build %s", folder)
                return CppBuild(folder=folder, binaries=binaries, reused=True, facts=facts)
        shutil.rmtree(folder, ignore_errors=True)  # half-built (a killed tool's): never reused
        started = time.monotonic()
        deadline = None if timeout_s is None else started + timeout_s
        env = {k: v for k, v in os.environ.items() if k not in _STEERING}
        if inputs.cuda_root is not None:
            env["PATH"] = f"{inputs.cuda_root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        with scratch.building(folder, keep=True), log_path.open("w", encoding="utf-8") as fh:
            query = folder / ".cmake" / "api" / "v1" / "query" / "codemodel-v2"
            query.parent.mkdir(parents=True)
            query.touch()
            log.info("building the C++ project %s into %s (-j %d)", project.root, folder, jobs)
            status: int | None = 0
            step = "the Catch2 build"
            catch2_config = None
            if catch2 is not None and os.environ.get("CUDNN_MATRIX_CATCH2_ONCE") != "0":
                try:
                    catch2_config = _catch2_built(
                        catch2, facts, root, inputs=inputs, jobs=jobs, log_fh=fh, env=env,
                        deadline=deadline, track=track,
                    )  # fmt: skip
                except _Timeout:
                    status = None
            if status == 0:
                configure = _configure_argv(project, inputs, folder, catch2, catch2_config)
                status = _run_logged(configure, fh, env, deadline=deadline, track=track)
                step = "the configure step"
            if status == 0:
                _check_pinned(folder, inputs.cudnn_root)
                build = [inputs.cmake, "--build", str(folder), "-j", str(parallel(jobs))]
                if project.targets:
                    build += ["--target", *project.targets]
                status = _run_logged(build, fh, env, deadline=deadline, track=track)
                step = "cmake --build"
            if status is None:
                took = time.monotonic() - started
                first = f"it ran past its time limit of {timeout_s:g}s and was killed during {step}"
                fh.write(f"cudnn-matrix: {first} (after {took:.1f}s)\n")
                fh.flush()
                msg = f"the C++ build of {project.root}: {first}"
                raise CppBuildTimeout(msg, first=first, log_path=log_path)
            if status != 0:
                fh.flush()
                text = log_path.read_text(encoding="utf-8", errors="replace")
                first = first_error(text) or f"the build exited with status {status}"
                msg = f"the C++ build of {project.root} failed: {first}"
                raise CppBuildError(msg, first=first, log_path=log_path)
            binaries = _test_binaries(folder, project.targets)
            seconds = round(time.monotonic() - started, 2)
            manifest = {
                "key": key,
                "facts": facts,
                "project": str(project.root),
                "binaries": [str(p) for p in binaries],
                "build_s": seconds,
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            (folder / _MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
            fh.flush()
            shutil.copyfile(log_path, folder / "build.log")
            (folder / _COMPLETE).write_text("")
    return CppBuild(folder=folder, binaries=binaries, seconds=seconds, facts=facts)
