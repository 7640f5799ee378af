"""Tests that end the whole pytest process: each must be the `crash` of its own id."""

import ctypes
import os


def test_before_crashes():
    assert True


def test_segfault():
    ctypes.string_at(0)


def test_abort():
    os.abort()


def test_cuda_exit():
    # what the frontend's conftest does on a CUDA error: print it, then os._exit(EX_SOFTWARE)
    print("CUDA error: an illegal memory access was encountered", flush=True)
    os._exit(70)


def test_after_crashes():
    assert True
