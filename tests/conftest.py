"""Shared fixtures: the real-wheel wheelhouse every install test reuses; the session's own cache
and state folders, and the check that the user's ~/.cache/cudnn-matrix is left as it was.

The tests run the installed tool, not the checkout (issue #36: an editable install hid a wheel
that lacked two packages): `pip install .` first, not editable, as nox and .ci/run do. Here the
checkout that Python itself puts first on sys.path (`python -m pytest` started in it) is taken
off, so `import validate` finds the installed package; the session stops at once where none is
installed. A checkout that the configuration names (pytest's `pythonpath`, PYTHONPATH) is left
where it is: tests/unit/test_installed.py fails on it. An editable install of this checkout is
left alone (it is the checkout).
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from installedtool import CHECKOUT, editable_from, installed_dist, is_checkout

if TYPE_CHECKING:
    from collections.abc import Iterator


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Before any test module is imported: the installed tool, never the checkout's folder that
    `python -m pytest` put on sys.path; stop where the tool is not installed."""
    dist = installed_dist()
    if dist is None:
        pytest.exit(
            f"cudnn-matrix is not installed for {sys.executable}: `pip install .` first (not "
            "editable; the tests run the installed tool, as a user has it)",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )
    editable = editable_from(dist)
    if editable is not None:
        if editable != CHECKOUT:
            pytest.exit(
                f"cudnn-matrix is installed editable from {editable}, not from this checkout "
                f"{CHECKOUT}: `pip install .` here first",
                returncode=pytest.ExitCode.USAGE_ERROR,
            )
        return  # the installed package is the checkout's folder
    named = [str(p) for p in config.getini("pythonpath")]
    named += os.environ.get("PYTHONPATH", "").split(os.pathsep)
    keep = sum(1 for entry in named if entry and is_checkout(entry))
    found = [i for i, entry in enumerate(sys.path) if is_checkout(entry)]
    for i in reversed(found[keep:]):
        del sys.path[i]


#: tests/resources holds suites written for the tests (pytest_suite/ has a conftest of its own
#: and tests that crash on purpose): run by the tool under test, never collected here.
collect_ignore = ["resources"]

#: This test session's own folder, gone when the session ends (the CI machine keeps /tmp from run
#: to run). Subprocesses of the tests inherit the variables that point into it.
SESSION = Path(tempfile.mkdtemp(prefix="cudnn-matrix-session-"))
atexit.register(shutil.rmtree, SESSION, True)
# Unsealed run keys (validate.model.results.RunKey) go here, not to the user's ~/.local/state.
os.environ.setdefault("CUDNN_MATRIX_STATE_DIR", str(SESSION / "state"))
# The tool's cache (envs/, durations.json) is the session's, never the user's ~/.cache/cudnn-matrix
# (issue #36: a test without --cache-dir built two venvs there, and the fixtures' case names in its
# durations.json set the order and minimum timeout of the user's real runs). Always this session's,
# even where the caller's shell names a cache of its own: a test run must not write into it.
os.environ["CUDNN_MATRIX_CACHE"] = str(SESSION / "cache")
# Whatever else caches under XDG_CACHE_HOME (the tool's children: jupyter, ipykernel, pip where
# PIP_CACHE_DIR is unset) writes into the session, not the user's ~/.cache.
os.environ["XDG_CACHE_HOME"] = str(SESSION / "xdg-cache")
#: The user's own cache folder of the tool, as the tool picks it with no setting: it must be the
#: same at the end of the session as at its start (pytest_sessionfinish).
USER_CACHE = Path.home() / ".cache" / "cudnn-matrix"

_CACHE = Path(__file__).resolve().parents[1] / ".cache"
#: Git-ignored, shared by the env, validate, repro and docker tests: each wheel downloads once.
WHEELHOUSE = _CACHE / "wheelhouse"
# uv keys its cache of a local wheel by the wheel's path, and each clean clone has a new one: in
# the user's ~/.cache/uv every CI run left the two backends unpacked again (0.9 GB a run, until the
# CI machine's disk was full). The tests' uv cache lives beside the wheelhouse and goes with the
# clone; a developer's own runs still reuse it.
os.environ.setdefault("UV_CACHE_DIR", str(_CACHE / "uv"))
# pip's cache likewise (XDG_CACHE_HOME, above, is the session's: pip would download again in every
# session): beside the wheelhouse, with the clone.
os.environ.setdefault("PIP_CACHE_DIR", str(_CACHE / "pip"))
_PY = f"cp{sys.version_info.major}{sys.version_info.minor}"
#: glob -> `pip download` arguments. The backends are the smallest cu13 wheels on PyPI.
_WANTED = {
    "nvidia_cudnn_cu13-9.12.0.46-*.whl": ["nvidia-cudnn-cu13==9.12.0.46", "--no-deps"],
    "nvidia_cudnn_cu13-9.13.0.50-*.whl": ["nvidia-cudnn-cu13==9.13.0.50", "--no-deps"],
    f"nvidia_cudnn_frontend-1.26.0-{_PY}-*.whl": ["nvidia-cudnn-frontend==1.26.0"],
    f"nvidia_cudnn_frontend-1.27.0-{_PY}-*.whl": ["nvidia-cudnn-frontend==1.27.0"],
    "nbclient-*.whl": ["nbclient", "nbformat", "ipykernel", "nvidia-ml-py"],
    "flit_core-*.whl": ["flit_core"],  # build backend of the packages tests build from git
    # a `validate --tests` cell gets the tests' own pytest (bisect of a pytest node id)
    f"pytest-{pytest.__version__}-*.whl": [f"pytest=={pytest.__version__}"],
}


@pytest.fixture(scope="session")
def wheelhouse() -> Path:
    """The shared wheelhouse; downloads only what is missing, once."""
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    for pattern, args in _WANTED.items():
        if not any(WHEELHOUSE.glob(pattern)):
            argv = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:"]
            subprocess.run([*argv, "-d", str(WHEELHOUSE), *args], check=True)
    return WHEELHOUSE


@pytest.fixture(autouse=True)
def _drop_cli_log_handler() -> Iterator[None]:
    """A test that ran the CLI leaves its stderr handler on the `validate` logger, bound to that
    test's captured stderr, which pytest closes: later tests' log lines would hit a closed file
    ("--- Logging error ---"). Each test starts without it; the CLI installs it again."""
    yield
    logger = logging.getLogger("validate")
    for handler in list(logger.handlers):
        if handler.get_name() == "cudnn-matrix":
            logger.removeHandler(handler)
            logger.propagate = True


def _snapshot(root: Path) -> dict[str, int]:
    """Names and mtimes two levels deep (envs/<key>, wheelhouse/<wheel>, durations.json): an entry
    added, removed or written there changes it, without a walk through every venv's files."""
    if not root.exists():
        return {}
    seen = {".": root.stat().st_mtime_ns}
    for top in root.iterdir():
        seen[top.name] = top.lstat().st_mtime_ns
        if top.is_dir() and not top.is_symlink():
            for entry in top.iterdir():
                seen[f"{top.name}/{entry.name}"] = entry.lstat().st_mtime_ns
    return seen


_USER_CACHE_AT_START = _snapshot(USER_CACHE)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:  # noqa: ARG001
    """Fail the session if the user's ~/.cache/cudnn-matrix changed while it ran."""
    now = _snapshot(USER_CACHE)
    if now == _USER_CACHE_AT_START:
        return
    was = _USER_CACHE_AT_START
    changed = sorted(k for k in was.keys() | now.keys() if was.get(k) != now.get(k))
    shown = ", ".join(
        f"{name} ({'added' if name not in was else 'removed' if name not in now else 'written'})"
        for name in changed[:10]
    )
    more = f" and {len(changed) - 10} more" if len(changed) > 10 else ""
    session.config.get_terminal_writer().line(
        f"FAILED: the tests changed the user's cache {USER_CACHE}: {shown}{more} (a test ran the "
        "tool without --cache-dir and without the session's CUDNN_MATRIX_CACHE; or the tool ran "
        "in that folder beside the tests)",
        red=True,
    )
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked `uv` (it runs uv itself) skips where uv is not on PATH, with that reason;
    before any of its fixtures is set up (a session fixture may build with uv)."""
    if item.get_closest_marker("uv") is not None and shutil.which("uv") is None:
        pytest.skip("needs uv, which is not on PATH (python3 -m pip install uv)")
