"""Fixtures of the synthetic suite: one that fails in setup, one that fails in teardown."""

import pytest


@pytest.fixture
def broken_setup():
    raise RuntimeError("fixture broke in setup")


@pytest.fixture
def broken_teardown():
    yield 1
    raise RuntimeError("fixture broke in teardown")
