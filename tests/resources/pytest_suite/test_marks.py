"""xfail (strict and not), xpass, skips with reasons, an exclusive test."""

import sys

import pytest


@pytest.mark.xfail(reason="known bug 123", strict=True)
def test_strict_xfail():
    assert False


@pytest.mark.xfail(reason="fixed already?", strict=True)
def test_strict_xpass():
    assert True


@pytest.mark.xfail(reason="maybe fixed", strict=False)
def test_xpass():
    assert True


@pytest.mark.skip(reason="needs a Blackwell GPU")
def test_skip_marker():
    assert False


@pytest.mark.skipif(sys.version_info > (1,), reason="backend too old")
def test_skipif():
    assert False


def test_skip_inside():
    pytest.skip("graph not supported here")


@pytest.mark.gpu_exclusive
def test_exclusive():
    assert True
