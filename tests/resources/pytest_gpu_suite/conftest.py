"""Imitates the frontend's conftest: collection itself needs CUDA (faked by SYNTHETIC_CUDA=1)."""

import os


def _cuda_is_available():
    return os.environ.get("SYNTHETIC_CUDA") == "1"


def pytest_configure(config):
    assert _cuda_is_available(), "torch.cuda.is_available() is False"
