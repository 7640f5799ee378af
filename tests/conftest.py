"""Shared fixtures: the real-wheel wheelhouse every install test reuses."""

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

if TYPE_CHECKING:
    from collections.abc import Iterator

#: tests/resources holds suites written for the tests (pytest_suite/ has a conftest of its own
#: and tests that crash on purpose): run by the tool under test, never collected here.
collect_ignore = ["resources"]

# Unsealed run keys (validate.model.results.RunKey) go to a folder of this test session, not the
# user's ~/.local/state; subprocesses of the tests inherit it. It goes when the session ends: the
# CI machine keeps /tmp from run to run.
if "CUDNN_MATRIX_STATE_DIR" not in os.environ:
    os.environ["CUDNN_MATRIX_STATE_DIR"] = _STATE = tempfile.mkdtemp(prefix="cudnn-matrix-state-")
    atexit.register(shutil.rmtree, _STATE, True)

_CACHE = Path(__file__).resolve().parents[1] / ".cache"
#: Git-ignored, shared by the env, validate, repro and docker tests: each wheel downloads once.
WHEELHOUSE = _CACHE / "wheelhouse"
# uv keys its cache of a local wheel by the wheel's path, and each clean clone has a new one: in
# the user's ~/.cache/uv every CI run left the two backends unpacked again (0.9 GB a run, until the
# CI machine's disk was full). The tests' uv cache lives beside the wheelhouse and goes with the
# clone; a developer's own runs still reuse it.
os.environ.setdefault("UV_CACHE_DIR", str(_CACHE / "uv"))
_PY = f"cp{sys.version_info.major}{sys.version_info.minor}"
#: glob -> `pip download` arguments. The backends are the smallest cu13 wheels on PyPI.
_WANTED = {
    "nvidia_cudnn_cu13-9.12.0.46-*.whl": ["nvidia-cudnn-cu13==9.12.0.46", "--no-deps"],
    "nvidia_cudnn_cu13-9.13.0.50-*.whl": ["nvidia-cudnn-cu13==9.13.0.50", "--no-deps"],
    f"nvidia_cudnn_frontend-1.26.0-{_PY}-*.whl": ["nvidia-cudnn-frontend==1.26.0"],
    f"nvidia_cudnn_frontend-1.27.0-{_PY}-*.whl": ["nvidia-cudnn-frontend==1.27.0"],
    "nbclient-*.whl": ["nbclient", "nbformat", "ipykernel", "nvidia-ml-py"],
    "flit_core-*.whl": ["flit_core"],  # build backend of the packages tests build from git
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
