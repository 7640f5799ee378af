"""Shared fixtures: the real-wheel wheelhouse every install test reuses."""

from __future__ import annotations

import logging
import os
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
# user's ~/.local/state; subprocesses of the tests inherit it.
os.environ.setdefault("CUDNN_MATRIX_STATE_DIR", tempfile.mkdtemp(prefix="cudnn-matrix-state-"))

#: Git-ignored, shared by the env, validate, repro and docker tests: each wheel downloads once.
WHEELHOUSE = Path(__file__).resolve().parents[1] / ".cache" / "wheelhouse"
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
