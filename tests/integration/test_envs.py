"""Real pinned environments from real cuDNN wheels: PyPI version, wheel file, library folder.

Wheels are downloaded once into the shared, git-ignored wheelhouse `.cache/wheelhouse/` (cold:
~670 MB; warm: no download). Environments are built in a fresh per-session cache, so every run
really builds them; uv's own cache keeps that to seconds.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from validate.cli import main
from validate.env.frontend_build import build_frontend_wheel
from validate.env.sources import (
    parse_backend_source,
    parse_frontend_source,
    same_backend,
)
from validate.env.venvs import EnvSpec, ensure_env, probe_backend, read_manifest
from validate.errors import EnvBuildError

if TYPE_CHECKING:
    from validate.env.target import ExecTarget

pytestmark = pytest.mark.slow

#: The smallest backend wheels on PyPI (cu13 9.12.0.46: 313 MB; 9.13.0.50: 348 MB); the shared
#: `wheelhouse` fixture (tests/conftest.py) downloads them once.
BACKEND, OTHER_BACKEND, FRONTEND = "9.12.0.46", "9.13.0.50", "1.26.0"
_PY = f"cp{sys.version_info.major}{sys.version_info.minor}"


def _wheel(wheelhouse: Path, pattern: str) -> Path:
    return min(wheelhouse.glob(pattern))


@pytest.fixture(scope="session")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cm-cache")


@pytest.fixture(scope="session")
def other_libdir(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tarball-like folder (lib/ + include/) unpacked from the 9.13 wheel."""
    root = tmp_path_factory.mktemp("cudnn-9.13-archive")
    with zipfile.ZipFile(_wheel(wheelhouse, f"nvidia_cudnn_cu13-{OTHER_BACKEND}-*.whl")) as whl:
        for member in whl.namelist():
            head, _, name = member.rpartition("/")
            if head in ("nvidia/cudnn/lib", "nvidia/cudnn/include") and name:
                target = root / head.rsplit("/", 1)[1] / name
                target.parent.mkdir(exist_ok=True)
                target.write_bytes(whl.read(member))
    return root


@pytest.fixture(scope="session")
def wheel_spec(wheelhouse: Path) -> EnvSpec:
    backend = parse_backend_source(
        str(_wheel(wheelhouse, f"nvidia_cudnn_cu13-{BACKEND}-*.whl")), declared=BACKEND
    )
    frontend = parse_frontend_source(
        str(_wheel(wheelhouse, f"nvidia_cudnn_frontend-{FRONTEND}-{_PY}-*.whl"))
    )
    return EnvSpec(backend=backend, frontend=frontend, cuda_major=13, backend_deps=False)


@pytest.fixture(scope="session")
def wheel_env(wheel_spec: EnvSpec, cache: Path, wheelhouse: Path) -> ExecTarget:
    """Backend and frontend from wheel files, installed offline from the wheelhouse with uv."""
    return ensure_env(wheel_spec, cache, wheelhouse=wheelhouse, installer="uv")


def _in_env(handle: ExecTarget, code: str) -> str:
    argv = [str(handle.python), "-c", code]
    proc = subprocess.run(
        argv, env=handle.process_env(), capture_output=True, text=True, check=True
    )
    return proc.stdout.strip()


@pytest.mark.uv  # builds with uv itself
def test_wheel_files_offline_load_the_pinned_backend(wheel_env: ExecTarget) -> None:
    assert not wheel_env.reused
    assert wheel_env.expected_backend == "9.12.0"
    assert wheel_env.expected_frontend == FRONTEND
    assert wheel_env.backend_dir is not None
    version, path = probe_backend(wheel_env)
    assert version == 91200
    assert Path(path).parent == wheel_env.backend_dir
    out = _in_env(wheel_env, "import cudnn, nbclient, ipykernel, pynvml; print(cudnn.__version__)")
    assert out == FRONTEND
    manifest = read_manifest(wheel_env.root or Path())
    assert manifest["installer"] == "uv"
    assert manifest["size_bytes"] > 300_000_000


@pytest.mark.uv  # builds with uv itself
def test_env_is_reused(wheel_env: ExecTarget, wheel_spec: EnvSpec, cache: Path) -> None:
    start = time.monotonic()
    again = ensure_env(wheel_spec, cache, installer="uv")
    elapsed = time.monotonic() - start
    assert again.reused
    assert again.python == wheel_env.python
    assert again.backend_dir == wheel_env.backend_dir
    print(f"reused in {elapsed:.3f}s")


@pytest.mark.uv  # builds with uv itself
def test_dishonoured_pin_is_detected(wheel_env: ExecTarget, other_libdir: Path) -> None:
    """Another backend first on LD_LIBRARY_PATH wins over the pin: the probe shows it."""
    hijacked = dataclasses.replace(wheel_env, env={"LD_LIBRARY_PATH": str(other_libdir / "lib")})
    version, path = probe_backend(hijacked)
    assert version == 91300
    assert Path(path).parent == other_libdir / "lib"
    assert wheel_env.expected_backend is not None
    assert not same_backend(wheel_env.expected_backend, version)


def test_backend_from_pypi_version(wheelhouse: Path, cache: Path, wheel_spec: EnvSpec) -> None:
    """'9.12.0.46' + CUDA 13 -> nvidia-cudnn-cu13==9.12.0.46, resolved by a real installer."""
    spec = dataclasses.replace(wheel_spec, backend=parse_backend_source(BACKEND))
    handle = ensure_env(spec, cache, wheelhouse=wheelhouse)
    assert probe_backend(handle)[0] == 91200
    assert handle.python != ensure_env(wheel_spec, cache).python


def test_backend_from_library_folder_and_frontend_from_pypi(
    other_libdir: Path, cache: Path
) -> None:
    """A tarball folder is used in place; the frontend comes from PyPI (online, 3.6 MB)."""
    backend = parse_backend_source(str(other_libdir), declared=OTHER_BACKEND)
    spec = EnvSpec(backend=backend, frontend=parse_frontend_source(FRONTEND))
    handle = ensure_env(spec, cache)
    assert handle.backend_dir == other_libdir / "lib"
    assert handle.expected_backend == "9.13.0"
    version, path = probe_backend(handle)
    assert (version, Path(path).parent) == (91300, other_libdir / "lib")


def test_library_folder_version_read_by_loading_it(wheelhouse: Path, tmp_path: Path) -> None:
    """No header: cudnnGetVersion() of the real libraries, in a subprocess, with no GPU.

    The dispatcher alone cannot answer (it forwards to libcudnn_graph): a partial copy is an
    environment error, as DOMAIN §2 says.
    """
    with zipfile.ZipFile(_wheel(wheelhouse, f"nvidia_cudnn_cu13-{BACKEND}-*.whl")) as whl:
        (tmp_path / "libcudnn.so.9").write_bytes(whl.read("nvidia/cudnn/lib/libcudnn.so.9"))
        with pytest.raises(EnvBuildError, match="Cannot load symbol cudnnGetVersion"):
            parse_backend_source(str(tmp_path))
        graph = whl.read("nvidia/cudnn/lib/libcudnn_graph.so.9")
    (tmp_path / "libcudnn_graph.so.9").write_bytes(graph)
    assert parse_backend_source(str(tmp_path)).version == "9.12.0"
    with pytest.raises(EnvBuildError, match=r"is cuDNN 9\.12\.0, but the cell declares 9\.24"):
        parse_backend_source(str(tmp_path), declared="9.24.0.43")


def test_pip_installer_builds_the_same_env(
    wheel_spec: EnvSpec, wheelhouse: Path, tmp_path: Path
) -> None:
    handle = ensure_env(wheel_spec, tmp_path, wheelhouse=wheelhouse, installer="pip")
    assert read_manifest(handle.root or Path())["installer"] == "pip"
    assert probe_backend(handle)[0] == 91200
    head = (handle.python.parent / "jupyter-kernel").read_text().splitlines()[0]
    assert head == f"#!{handle.python}"  # shebangs point at the final folder, not the build one


@pytest.mark.parametrize("installer", [pytest.param("uv", marks=pytest.mark.uv), "pip"])
def test_an_env_build_logs_what_it_does_without_commands_or_scripts(
    wheel_spec: EnvSpec,
    wheelhouse: Path,
    tmp_path: Path,
    installer: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Off a terminal (CI) an environment build says what it installs, one line each, and
    nothing of the command lines or of the inline scripts it runs in the new env."""
    monkeypatch.setenv("CI", "true")
    caplog.set_level(logging.INFO, logger="validate")
    handle = ensure_env(wheel_spec, tmp_path, wheelhouse=wheelhouse, installer=installer)  # type: ignore[arg-type]
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    env = f"environment {handle.root.name if handle.root else '?'}"
    assert lines[0] == f"building environment {env.split()[1]} ({installer})"
    backend = Path(wheel_spec.backend.requirement(13) or "").name  # the wheel file's name
    assert f"  {env}: installing {backend}" in lines
    assert not [ln for ln in lines if ln.startswith("+ ") or "\n" in ln or "import " in ln]
    assert len(lines) <= 8, lines


def test_half_built_env_is_rebuilt(wheelhouse: Path, tmp_path: Path) -> None:
    frontend = parse_frontend_source(
        str(_wheel(wheelhouse, f"nvidia_cudnn_frontend-{FRONTEND}-{_PY}-*.whl"))
    )
    spec = EnvSpec(backend=parse_backend_source("current"), frontend=frontend)
    root = tmp_path / "envs" / spec.hash
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").write_text("a crashed build left this\n")
    handle = ensure_env(spec, tmp_path, wheelhouse=wheelhouse)
    assert not handle.reused
    assert handle.backend_dir is None
    assert _in_env(handle, "import cudnn; print(cudnn.__version__)") == FRONTEND


def test_offline_install_of_a_missing_pin_fails(wheelhouse: Path, tmp_path: Path) -> None:
    spec = EnvSpec(
        backend=parse_backend_source("9.1.0.70"), frontend=parse_frontend_source("1.26.0")
    )
    with pytest.raises(EnvBuildError, match=r"nvidia-cudnn-cu13==9\.1\.0\.70"):
        ensure_env(spec, tmp_path, wheelhouse=wheelhouse)
    assert not (tmp_path / "envs" / spec.hash).exists()


def test_envs_list_and_prune(
    wheelhouse: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    frontend = parse_frontend_source(
        str(_wheel(wheelhouse, f"nvidia_cudnn_frontend-{FRONTEND}-{_PY}-*.whl"))
    )
    spec = EnvSpec(backend=parse_backend_source("current"), frontend=frontend)
    handle = ensure_env(spec, tmp_path, wheelhouse=wheelhouse)
    assert main(["envs", "--cache-dir", str(tmp_path), "list"]) == 0
    listed = capsys.readouterr().out
    assert spec.hash in listed
    assert f"wheel {FRONTEND}" in listed
    assert main(["envs", "--cache-dir", str(tmp_path), "prune", "--older-than", "1"]) == 0
    assert "removed 0 of 1" in capsys.readouterr().out
    manifest = json.loads((handle.root or Path()).joinpath("manifest.json").read_text())
    assert manifest["last_used"]
    assert main(["envs", "--cache-dir", str(tmp_path), "prune", "--all"]) == 0
    assert "removed 1 of 1" in capsys.readouterr().out
    assert not handle.python.exists()


@pytest.mark.uv  # builds with uv itself
def test_layered_on_a_base_env(wheelhouse: Path, wheel_spec: EnvSpec, tmp_path: Path) -> None:
    """Base python given: its packages are visible (like an NGC container's), the backend pin wins."""
    base = tmp_path / "base"
    subprocess.run(["uv", "venv", "--quiet", str(base)], check=True)
    fe27 = _wheel(wheelhouse, f"nvidia_cudnn_frontend-1.27.0-{_PY}-*.whl")
    install = ["uv", "pip", "install", "--quiet", "--python", str(base / "bin" / "python")]
    subprocess.run([*install, "--no-index", str(fe27)], check=True)
    spec = dataclasses.replace(
        wheel_spec, frontend=parse_frontend_source("current"), base=str(base / "bin" / "python")
    )
    handle = ensure_env(spec, tmp_path / "cache", wheelhouse=wheelhouse)
    assert _in_env(handle, "import cudnn; print(cudnn.__version__)") == "1.27.0"
    assert probe_backend(handle)[0] == 91200


def test_frontend_from_a_git_checkout_is_built_once(tmp_path: Path) -> None:
    """A tiny pure-Python project stands in for the C++ frontend checkout (same pip wheel path)."""
    repo = tmp_path / "checkout"
    (repo / "demo_fe").mkdir(parents=True)
    (repo / "demo_fe" / "__init__.py").write_text("__version__ = '0.1'\n")
    (repo / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "demo-fe"\nversion = "0.1"\n'
    )
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "--quiet"], ["add", "."], ["commit", "--quiet", "-m", "x"]):
        subprocess.run([*git, *args], check=True)
    source = parse_frontend_source(f"{repo}@HEAD")
    first = build_frontend_wheel(source, tmp_path / "cache")
    assert first.name == "demo_fe-0.1-py3-none-any.whl"
    assert first.parent.name == source.commit
    mtime = first.stat().st_mtime_ns
    assert build_frontend_wheel(source, tmp_path / "cache").stat().st_mtime_ns == mtime
