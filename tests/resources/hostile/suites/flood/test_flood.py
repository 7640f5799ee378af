"""A test that prints 300 MB (straight to its stdout: pytest's capture would keep a copy)."""

import os

LINE = b"flood " + b"x" * 1017 + b"\n"  # 1 KiB
CHUNK = LINE * 1024  # 1 MiB


def test_floods():
    for _ in range(300):
        os.write(1, CHUNK)


def test_after():
    assert True
