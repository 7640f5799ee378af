"""A test that poisons shared process state, as a CUDA error poisons the CUDA context, and a
test that fails only when it runs in the same process after it (plain pytest fails it; the
tool replaces the process after the poison report, so it passes)."""

import os


def test_poisoner():
    os.environ["SYNTHETIC_CUDA_CONTEXT"] = "poisoned"
    raise RuntimeError("CUDA error: an illegal memory access was encountered")


def test_victim():
    assert os.environ.get("SYNTHETIC_CUDA_CONTEXT") != "poisoned", "context poisoned earlier"
