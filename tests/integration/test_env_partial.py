"""Nothing half-built survives (issue 36, item 4): an environment build interrupted by Ctrl-C or
SIGTERM leaves no folder in the cache, and one killed outright (SIGKILL) leaves one that the next
build and `envs prune` remove, saying how much they freed, while a build in progress is kept.

Real builds: `validate --env current --with six==...` builds a real venv (uv or pip, from PyPI or
the uv cache) of a few seconds; the tool runs in its own session and is signalled as a terminal's
Ctrl-C, a cancelled CI job or `kill -9` would signal it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "resources" / "scripts"
CELL = ["--cudnn", "9.24.0.43", "--frontend", "1.27.0", "--cuda", "13.0", "--driver", "580"]
CELL += ["--arch", "sm90", "--env", "current", "--frontend-source", "current"]


def _env(cwd: Path) -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {
        **os.environ,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{path}" if path else str(ROOT),
        "CUDNN_MATRIX_CACHE": str(cwd / "cache"),
    }


def _validate(cwd: Path, extra: str, results: str) -> subprocess.Popen[str]:
    """A real validate run whose cell needs a new environment (the tool's interpreter plus
    `six==extra`), started in a session of its own."""
    cases = cwd / "cases"
    if not cases.is_dir():
        cases.mkdir()
        shutil.copy(SCRIPTS / "pass_script.py", cases)
    argv = [sys.executable, "-m", "validate", "validate", *CELL, "--with", f"six=={extra}"]
    argv += ["--cases", str(cases), "--results", results]
    return subprocess.Popen(
        argv,
        cwd=cwd,
        env=_env(cwd),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "validate", *args],
        cwd=cwd,
        env=_env(cwd),
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def _building(envs: Path, proc: subprocess.Popen[str], timeout: float = 240) -> Path:
    """The build folder of a build in progress, once its venv has started to fill."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if envs.is_dir():
            for path in envs.iterdir():
                if path.name.startswith(".") and path.is_dir() and (path / "env" / "bin").is_dir():
                    return path
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the build ended before it could be interrupted: {out}{err}")
        time.sleep(0.02)
    proc.kill()
    pytest.fail("no build folder appeared")


def _folders(envs: Path) -> list[str]:
    return sorted(p.name for p in envs.iterdir() if p.is_dir()) if envs.is_dir() else []


@pytest.mark.skip(
    reason="races a warm uv cache: in CI the build ended before the signal landed (exit 1, "
    "folder kept); needs a build that waits to be interrupted"
)
@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"]
)
def test_an_interrupted_build_leaves_no_folder(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    envs = tmp_path / "cache" / "envs"
    proc = _validate(tmp_path, "1.16.0", "run")
    partial = _building(envs, proc)
    os.killpg(proc.pid, sig)  # the whole session, as a terminal or a CI runner signals it
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert not partial.exists(), _folders(envs)
    assert _folders(envs) == [], err  # no build folder, no half-renamed environment


def test_a_killed_build_is_removed_by_prune_and_by_the_next_build(tmp_path: Path) -> None:
    envs = tmp_path / "cache" / "envs"
    # killed outright: nothing of the tool runs, the folder stays (as issue 36 found, 129 MB each)
    proc = _validate(tmp_path, "1.16.0", "r1")
    partial = _building(envs, proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert partial.is_dir()
    listed = _cli(tmp_path, "envs", "list")
    assert listed.returncode == 0, listed.stderr
    assert "1 half-built environment folder(s)" in listed.stdout, listed.stdout
    pruned = _cli(tmp_path, "envs", "prune")
    assert pruned.returncode == 0, pruned.stderr
    assert re.search(
        r"removed 1 half-built environment folder\(s\) left by interrupted builds, "
        r"\d+(\.\d)? (B|KiB|MiB|GiB) freed",
        pruned.stdout,
    ), pruned.stdout
    assert not partial.exists()
    # killed again; the next build of any environment removes it, and says so
    proc = _validate(tmp_path, "1.16.0", "r2")
    partial = _building(envs, proc)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert partial.is_dir()
    proc = _validate(tmp_path, "1.16.0", "r3")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err  # the case is an `error` (no backend here), the env built
    assert "removed 1 half-built environment folder(s) left by interrupted builds" in err, err
    assert not partial.exists()
    (built,) = _folders(envs)
    assert (envs / built / ".complete").is_file()


def test_prune_keeps_a_build_in_progress(tmp_path: Path) -> None:
    envs = tmp_path / "cache" / "envs"
    proc = _validate(tmp_path, "1.15.0", "run")
    partial = _building(envs, proc)
    pruned = _cli(tmp_path, "envs", "prune", "--all")
    assert pruned.returncode == 0, pruned.stderr
    assert "half-built" not in pruned.stdout, pruned.stdout
    if proc.poll() is None:  # still building when prune ended: its folder is there
        assert partial.is_dir()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err  # built; its case an `error` for want of the backend
    assert "environment" in err
    assert not partial.exists()  # renamed into place by its own build
    (built,) = _folders(envs)
    assert (envs / built / ".complete").is_file(), err
