"""A test that never ends: killed from outside after its timeout, the rest still runs."""

import time


def test_hang():
    time.sleep(3600)


def test_after_hang():
    assert True
