"""A module whose import needs the driver (as torch's does on a host without one)."""

import os

if os.environ.get("SYNTHETIC_DRIVER") != "1":
    raise RuntimeError("Found no NVIDIA driver on your system.")


def test_launch():
    assert True
