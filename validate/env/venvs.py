"""Pinned per-cell virtual environments: built once from their pins' hash, reused after."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import logging
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from packaging.utils import parse_wheel_filename
from packaging.version import Version

from validate import __version__, scratch
from validate.env.frontend_build import build_frontend_wheel
from validate.env.pipcli import pip_version, progress_args, raw_progress
from validate.env.progress import Activity, activity, pip_line, uv_line
from validate.env.sources import (
    BackendSource,
    FrontendSource,
    decode_backend_version,
    missing_sublibraries,
    read_libdir_version,
    short_version,
)
from validate.env.streamed import run_streamed
from validate.env.target import ExecTarget
from validate.errors import EnvBuildError
from validate.model.results import write_json

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

__all__ = [
    "TOOLING",
    "EnvSpec",
    "Installer",
    "cache_root",
    "current_env",
    "ensure_env",
    "env_dirs",
    "human_size",
    "partial_builds",
    "probe_backend",
    "read_manifest",
    "remove_partial_builds",
    "tree_usage",
]

log = logging.getLogger(__name__)

Installer = Literal["auto", "uv", "pip"]
#: Installed in every environment: the runner's notebook driver and NVML bindings.
TOOLING = ("nbclient", "nbformat", "ipykernel", "nvidia-ml-py")
_MANIFEST = "manifest.json"
_COMPLETE = ".complete"
_PROBE = """
import json, cudnn
version = cudnn.backend_version()
with open("/proc/self/maps") as maps:
    paths = [line.split()[-1] for line in maps if "/libcudnn.so" in line]
print(json.dumps({"version": version, "paths": list(dict.fromkeys(paths))}))
"""
_FACTS = """
import importlib.metadata as md, json, sysconfig
try:
    reqs = md.requires("torch") or []
except md.PackageNotFoundError:
    torch = None
else:
    pins = [r for r in reqs if r.startswith("nvidia-cudnn-cu") and "==" in r]
    torch = pins[0].split("==")[1].split(";")[0].strip() if pins else "unpinned"
import os, sys
# The backend a layered environment sees "as it is": the first nvidia/cudnn/lib on sys.path.
libs = [os.path.join(p, "nvidia", "cudnn", "lib") for p in sys.path if p]
cudnn_lib = next((d for d in libs if os.path.isfile(os.path.join(d, "libcudnn.so.9"))), None)
print(json.dumps({"purelib": sysconfig.get_paths()["purelib"], "torch_cudnn": torch,
                  "cudnn_lib": cudnn_lib}))
"""


def cache_root(override: Path | None = None) -> Path:
    """Cache folder: the argument, else $CUDNN_MATRIX_CACHE, else ~/.cache/cudnn-matrix."""
    if override is not None:
        return override
    env = os.environ.get("CUDNN_MATRIX_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "cudnn-matrix"


@dataclass(frozen=True, kw_only=True)
class EnvSpec:
    """Every pin of one environment; equal specs share one cached environment."""

    backend: BackendSource
    frontend: FrontendSource
    cuda_major: int = 13
    python: str = sys.executable  # interpreter (or uv version request) the venv is made from
    #: The cell's python axis ("3.12"): the venv is made with that CPython, wherever it is found
    #: (`uv python find`, or python3.12 on PATH for pip); None: from `python`, as before.
    python_version: str | None = None
    extras: tuple[str, ...] = ()  # further pins, e.g. ("torch==2.11.0",)
    base: str = "isolated"  # "isolated" | "system-site-packages" | path of a base env's python
    backend_deps: bool = True  # install the backend wheel's own deps (nvidia-cublas)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "tool": __version__,
            "backend": self.backend.pin(),
            "frontend": self.frontend.pin(),
            "cuda_major": self.cuda_major,
            "python": self._python_pin(),
            "extras": sorted(self.extras),
            "base": self.base,
            "backend_deps": self.backend_deps,
            "tooling": list(TOOLING),
        }
        if self.python_version:  # only when set: the envs of cells without one keep their hash
            data["python_version"] = self.python_version
        return data

    def _python_pin(self) -> str:
        """The interpreter the environment runs on, not the path of the one that asked for it.

        A venv is made on the base interpreter behind `python` (`uv venv --python` and
        `python -m venv` alike), so the tool run from nox's venv (uv) and from a pip-installed
        venv (pip) over one CPython build the same environment and share one cache entry. A
        layered environment keeps its base's path in `base` (its packages are part of the pins)."""
        return _interpreter(self.python)

    @property
    def hash(self) -> str:
        """sha256 of all pins and the tool version: the cache key. The installer (uv or pip)
        is not a pin: either one reuses the other's environments (the manifest names the one
        that built it). Keys made before issue #30 hashed the tool's interpreter path: such an
        entry is not found under its new key and is built once more (`envs prune` removes it)."""
        text = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.cache
def _interpreter(python: str) -> str:
    """`implementation version base-prefix` of the interpreter a venv made from `python` runs
    on (a venv's python stands for its base); `python` as given where it cannot be asked (a
    version request such as "3.12", a path that is gone)."""
    code = (
        "import os, platform, sys; print(sys.implementation.name, platform.python_version(),"
        " os.path.realpath(sys.base_prefix))"
    )
    if python == sys.executable:
        return f"{sys.implementation.name} {platform.python_version()} {os.path.realpath(sys.base_prefix)}"
    if os.sep not in python:
        return python
    try:
        proc = subprocess.run(
            [python, "-c", code], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return python
    lines = proc.stdout.strip().splitlines()
    return lines[-1] if proc.returncode == 0 and lines else python


def current_env(expected_backend: str | None = None, python: Path | None = None) -> ExecTarget:
    """`--env current`: the interpreter as it is (e.g. an NGC container), nothing installed."""
    return ExecTarget(
        python=python or Path(sys.executable),
        expected_backend=short_version(expected_backend) if expected_backend else None,
    )


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def read_manifest(root: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads((root / _MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    return data


def env_dirs(cache_dir: Path | None = None) -> list[Path]:
    """Finished environments in the cache, oldest use first."""
    envs = cache_root(cache_dir) / "envs"
    found = [p for p in envs.glob("*") if (p / _COMPLETE).is_file()] if envs.is_dir() else []
    return sorted(found, key=lambda p: str(read_manifest(p).get("last_used", "")))


def partial_builds(cache_dir: Path | None = None) -> list[Path]:
    """Half-built environments in the cache: build folders (`.<hash>.<random>`) and renamed ones
    that never got `.complete`, whether or not a builder still works on them."""
    envs = cache_root(cache_dir) / "envs"
    if not envs.is_dir():
        return []
    found = []
    for path in sorted(envs.iterdir()):
        if not path.is_dir() or path.is_symlink():
            continue
        if path.name.startswith(".") or not (path / _COMPLETE).is_file():
            found.append(path)
    return found


def _hash_of(path: Path) -> str:
    """`.e570...bccc6.38gt5kvf` and `e570...bccc6` -> `e570...bccc6`: whose lock guards it."""
    return path.name.lstrip(".").split(".")[0]


def remove_partial_builds(cache_dir: Path | None = None) -> tuple[list[Path], int]:
    """Remove the half-built environments no builder works on any more (an interrupted or killed
    build's); (what went, bytes freed). A build in progress holds its environment's lock for the
    whole build (ensure_env), so a folder whose lock is held is left alone."""
    envs = cache_root(cache_dir) / "envs"
    removed, freed = [], 0
    for path in partial_builds(cache_dir):
        lock = envs / f".{_hash_of(path)}.lock"
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a builder holds it: a build in progress
            if not path.exists():  # its builder finished (renamed or removed it) meanwhile
                continue
            if not path.name.startswith(".") and (path / _COMPLETE).is_file():
                continue
            freed += tree_usage(path)[1]
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        finally:
            os.close(fd)
    return removed, freed


def human_size(num: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if num < 1024 or unit == "TiB":
            return f"{num:.0f} {unit}" if unit == "B" else f"{num:.1f} {unit}"
        num /= 1024
    return f"{num:.1f} TiB"


def backend_env(backend_dir: str | None) -> dict[str, str]:
    """The case environment that binds every consumer in the process to the pinned backend:
    the pinned folder first on LD_LIBRARY_PATH (the frontend's loader looks there first, and
    sub-libraries resolve from it) and its dispatcher preloaded, so that a consumer that loads
    its own copy by full path (torch's wheel copy, ../shared/ENGINES.md) gets the pinned one.
    ExecTarget.process_env puts both in front of the caller's own values."""
    if not backend_dir:
        return {}
    return {
        "LD_LIBRARY_PATH": backend_dir,
        "LD_PRELOAD": str(Path(backend_dir) / "libcudnn.so.9"),
    }


def _handle_from(root: Path, manifest: Mapping[str, Any], *, reused: bool) -> ExecTarget:
    backend_dir = manifest.get("backend_dir")
    return ExecTarget(
        python=root / "bin" / "python",
        env=backend_env(backend_dir),
        backend_dir=Path(backend_dir) if backend_dir else None,
        expected_backend=manifest.get("expected_backend"),
        expected_frontend=manifest.get("expected_frontend"),
        reused=reused,
        root=root,
    )


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_env(
    spec: EnvSpec,
    cache_dir: Path | None = None,
    wheelhouse: Path | None = None,
    installer: Installer = "auto",
) -> ExecTarget:
    """Return the environment for `spec`, building it once into `<cache>/envs/<hash>/`."""
    if spec.backend.kind == "current" and spec.frontend.kind == "current" and not spec.extras:
        if spec.python_version:
            _check_version(spec.python, spec.python_version, "the current environment")
        return current_env(spec.backend.version, python=Path(spec.python))
    cache = cache_root(cache_dir).resolve()
    wheelhouse = wheelhouse.resolve() if wheelhouse else None
    root = cache / "envs" / spec.hash
    gone, freed = remove_partial_builds(cache)  # interrupted builds' (one in progress stays)
    if gone:
        log.info(
            "removed %d half-built environment folder(s) left by interrupted builds in %s: "
            "%s freed",
            len(gone),
            cache / "envs",
            human_size(freed),
        )
    with _locked(cache / "envs" / f".{spec.hash}.lock"):
        if (root / _COMPLETE).is_file() and (root / "bin" / "python").exists():
            manifest = read_manifest(root)
            backend_dir = manifest.get("backend_dir")
            if backend_dir is None or Path(backend_dir).is_dir():
                manifest["last_used"] = _now()
                write_json(root / _MANIFEST, manifest)
                log.info("reusing environment %s", root)
                return _handle_from(root, manifest, reused=True)
        if root.exists():  # half-built or broken: never reused
            shutil.rmtree(root)
        manifest = _build(spec, root, cache, wheelhouse, _pick_installer(installer))
        return _handle_from(root, manifest, reused=False)


def _pick_installer(installer: Installer) -> Literal["uv", "pip"]:
    match installer:
        case "auto":
            return "uv" if shutil.which("uv") else "pip"
        case "uv" | "pip":
            if installer == "uv" and not shutil.which("uv"):
                msg = "installer 'uv' requested but uv is not on PATH; install uv or use pip"
                raise EnvBuildError(msg)
            return installer


def _run(argv: Sequence[str], what: str) -> str:
    log.debug("+ %s", shlex.join(argv))
    proc = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-12:])
        msg = f"{what} failed (exit {proc.returncode}): {shlex.join(argv)}\n{tail}"
        raise EnvBuildError(msg, signalled=proc.returncode < 0)
    return proc.stdout


def _python_version(python: str) -> str:
    code = "import platform; print(platform.python_version())"
    return _run([python, "-c", code], f"asking {python} for its version").strip()


def _check_version(python: str, wanted: str, what: str) -> None:
    """A cell that asks for Python `wanted` cannot run on an interpreter of another version."""
    found = _python_version(python)
    if Version(found).release[: len(Version(wanted).release)] != Version(wanted).release:
        msg = f"the cell asks for python {wanted} but {what} runs python {found} ({python})"
        raise EnvBuildError(msg)


def _find_python(version: str, tool: Literal["uv", "pip"]) -> str:
    """The interpreter of CPython `version` on this host, without downloading one; a missing
    one is an EnvBuildError in one line (the cell's cases become `error` with it)."""
    hint = f"install it (e.g. `uv python install {version}`) or drop it from the python axis"
    if tool == "uv":
        argv = ["uv", "python", "find", version]
        log.debug("+ %s", shlex.join(argv))
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode == 0 and proc.stdout.strip():
            return proc.stdout.strip().splitlines()[-1]
        lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
        why = next((ln for ln in lines if ln.startswith("error:")), lines[0] if lines else "")
        msg = f"python {version} is not available on this host (uv python find: {why.removeprefix('error: ') or f'exit {proc.returncode}'}); {hint}"
        raise EnvBuildError(msg)
    found = shutil.which(f"python{version}")
    if found is None:
        msg = f"python {version} is not available on this host (no python{version} on PATH); {hint}"
        raise EnvBuildError(msg)
    return found


def _create_venv(spec: EnvSpec, where: Path, tool: Literal["uv", "pip"]) -> None:
    match spec.base:
        case "isolated" | "system-site-packages":
            python, site = spec.python, spec.base == "system-site-packages"
            if spec.python_version:
                python = _find_python(spec.python_version, tool)
        case _:  # an explicit base environment's python: layer on its packages
            python, site = spec.base, True
            if spec.python_version:
                _check_version(python, spec.python_version, "the base environment")
    flags = ["--system-site-packages"] if site else []
    if tool == "uv":
        _run(["uv", "venv", "--quiet", "--python", python, *flags, str(where)], "uv venv")
    else:
        interpreter = python if os.sep in python else (shutil.which(f"python{python}") or python)
        _run([interpreter, "-m", "venv", "--without-pip", *flags, str(where)], "python -m venv")


def _layer_on_base(base_python: str, python: Path) -> None:
    """Make a base *venv*'s packages visible: --system-site-packages only reaches its interpreter."""
    code = "import json, site; print(json.dumps(site.getsitepackages()))"
    base_sites = json.loads(_run([base_python, "-c", code], "reading the base environment"))
    own = json.loads(_run([str(python), "-c", code], "reading the new environment"))
    extra = [p for p in base_sites if p not in own]
    if extra:  # a .pth line is appended after the env's own site-packages, so its pins win
        (Path(own[0]) / "_cudnn_matrix_base.pth").write_text("\n".join(extra) + "\n")


def _install(
    tool: Literal["uv", "pip"],
    python: Path,
    reqs: Sequence[str],
    wheelhouse: Path | None,
    act: Activity,
    *,
    no_deps: bool = False,
) -> None:
    """Install `reqs`, packages (uv) or bytes (pip) shown as they arrive; pip gets only the
    options its version has (validate/env/pipcli.py)."""
    if not reqs:
        return
    index = ["--no-index", "--find-links", str(wheelhouse)] if wheelhouse else []
    deps = ["--no-deps"] if no_deps else []
    env = {**os.environ, "NO_COLOR": "1"}
    with contextlib.ExitStack() as stack:
        grow = None
        if tool == "uv":
            argv = ["uv", "pip", "install", "--python", str(python), *index, *deps, *reqs]
            parse = uv_line
        else:
            pip = [sys.executable, "-m", "pip", "--python", str(python)]
            argv = [*pip, "--disable-pip-version-check", "install", *progress_args(pip_version())]
            argv += [*index, *deps, *reqs]
            parse = pip_line
            if not raw_progress(pip_version()):  # its downloads' bytes: the files in its TMPDIR
                grow = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cm-pip-")))
                env["TMPDIR"] = str(grow)
        names = [Path(req).name if os.sep in req else req for req in reqs]
        plural = "s" if len(reqs) > 1 else ""
        act.update(f"installing {len(reqs)} requirement{plural}", done=0, total=0)
        act.milestone(f"installing {', '.join(names)}")
        proc = run_streamed(argv, act, parse, env=env, grow=grow, pty_stderr=tool == "uv")
    if proc.returncode != 0:
        msg = f"installing {' '.join(names)} failed (exit {proc.returncode}): {shlex.join(argv)}\n{proc.tail()}"
        raise EnvBuildError(msg, signalled=proc.returncode < 0)


def _fix_shebangs(bin_dir: Path, old: Path, new: Path) -> None:
    """Point console scripts at the final folder after the temp build folder is renamed."""
    old_b, new_b = str(old).encode(), str(new).encode()
    for script in bin_dir.iterdir():
        if script.is_file() and not script.is_symlink():
            data = script.read_bytes()
            if data.startswith(b"#!") and old_b in data[:512]:
                script.write_bytes(data.replace(old_b, new_b))


def _backend_dir(spec: EnvSpec, purelib: Path, seen: str | None) -> Path | None:
    """Where the pinned libcudnn.so.9 must come from. For `current` that is the base
    environment's own wheel copy when there is one (e.g. the one torch pins): the frontend's
    loader only looks in the env's purelib, so a layered env is pointed at it explicitly."""
    match spec.backend.kind:
        case "libdir":
            return spec.backend.libdir()
        case "current":
            return Path(seen) if seen else None
        case "pypi" | "wheel":
            return purelib / "nvidia" / "cudnn" / "lib"


def _build(
    spec: EnvSpec, root: Path, cache: Path, wheelhouse: Path | None, tool: Literal["uv", "pip"]
) -> dict[str, Any]:
    started = time.monotonic()
    root.parent.mkdir(parents=True, exist_ok=True)
    log.info("building environment %s (%s)", root.name, tool)
    # the build folder goes on every way out: an error, Ctrl-C, SIGTERM (scratch.py); one left by
    # a killed tool goes in the next build or `envs prune` (remove_partial_builds)
    tmp = Path(tempfile.mkdtemp(dir=root.parent, prefix=f".{spec.hash}."))
    with scratch.building(tmp), activity(f"environment {root.name}") as act:
        work = tmp / "env"
        act.update("creating the venv")
        _create_venv(spec, work, tool)
        python = work / "bin" / "python"
        if spec.base not in ("isolated", "system-site-packages"):
            _layer_on_base(spec.base, python)
        wheel = None
        if spec.frontend.kind == "git":
            act.update(f"building the frontend at {(spec.frontend.commit or '')[:12]}")
            wheel = build_frontend_wheel(
                spec.frontend, cache, wheelhouse=wheelhouse, backend=spec.backend
            )
        frontend_req = spec.frontend.requirement(wheel)
        reqs = [*TOOLING, *spec.extras, *([frontend_req] if frontend_req else [])]
        _install(tool, python, reqs, wheelhouse, act)
        # Last and alone, so the pinned backend wins over any copy an extra (torch) pulled in.
        backend_req = spec.backend.requirement(spec.cuda_major)
        if backend_req:
            _install(tool, python, [backend_req], wheelhouse, act, no_deps=not spec.backend_deps)
        act.update("reading the new environment", done=0, total=0)
        facts = json.loads(_run([str(python), "-c", _FACTS], "reading the new environment"))
        backend_dir = _backend_dir(spec, Path(facts["purelib"]), facts.get("cudnn_lib"))
        if backend_dir is not None and not (backend_dir / "libcudnn.so.9").is_file():
            msg = f"{spec.backend.describe()} left no libcudnn.so.9 in {backend_dir}"
            raise EnvBuildError(msg)
        missing = missing_sublibraries(backend_dir) if backend_dir is not None else []
        if missing:  # not an error for the cell: only the cases that reach one break (`error`)
            log.warning(
                "backend folder %s lacks sub-libraries %s: cases that load them will be errors",
                backend_dir,
                ", ".join(missing),
            )
        expected = spec.backend.version
        if spec.backend.kind == "libdir" and backend_dir and not expected:
            expected = read_libdir_version(backend_dir)
        fe_version = spec.frontend.version
        if wheel is not None:
            fe_version = str(parse_wheel_filename(wheel.name)[1])
        work.rename(root)
    with scratch.building(root, keep=True):  # renamed, not complete yet: half-built all the same
        _fix_shebangs(root / "bin", work, root)
        if backend_dir is not None and backend_dir.is_relative_to(work):
            backend_dir = root / backend_dir.relative_to(work)
        now = _now()
        manifest: dict[str, Any] = {
            "hash": spec.hash,
            "pins": spec.to_dict(),
            "backend": spec.backend.describe(),
            "frontend": spec.frontend.describe(),
            "created": now,
            "last_used": now,
            "installer": tool,
            "wheelhouse": str(wheelhouse) if wheelhouse else None,
            "backend_dir": str(backend_dir) if backend_dir else None,
            "missing_sublibraries": missing,
            "expected_backend": short_version(expected) if expected else None,
            "expected_frontend": fe_version,
            "torch_cudnn": facts["torch_cudnn"],
            "build_s": round(time.monotonic() - started, 2),
            "size_bytes": tree_usage(root)[0],
        }
        write_json(root / _MANIFEST, manifest)
        (root / _COMPLETE).write_text(now + "\n")
    return manifest


def tree_usage(root: Path, seen: set[tuple[int, int]] | None = None) -> tuple[int, int]:
    """(bytes, allocated bytes on disk) of the files under `root`, each file counted once:
    hard links inside the tree, and any file already in `seen` (shared across several trees,
    as uv links environments from its cache) are not counted again."""
    seen = set() if seen is None else seen
    size = disk = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            try:
                st = os.lstat(os.path.join(dirpath, name))  # noqa: PTH118 - os.walk hot loop
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if key not in seen:
                seen.add(key)
                size += st.st_size
                disk += st.st_blocks * 512
    return size, disk


def probe_backend(handle: ExecTarget, timeout: float = 120) -> tuple[int, str]:
    """(cudnn.backend_version(), mapped libcudnn.so.9 path) as seen by a process in the env."""
    argv = [str(handle.python), "-c", _PROBE]
    proc = subprocess.run(
        argv, capture_output=True, text=True, env=handle.process_env(), timeout=timeout, check=False
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        msg = f"probing the backend in {handle.python} failed: {tail[0]}"
        raise EnvBuildError(msg)
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    paths = [p for p in data["paths"] if Path(p).name.startswith("libcudnn.so")] or data["paths"]
    log.debug("backend %s from %s", decode_backend_version(data["version"]), paths)
    return int(data["version"]), (paths[0] if paths else "")
