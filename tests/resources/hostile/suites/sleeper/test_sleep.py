"""A test that runs long enough to be interrupted (Ctrl-C of the tool), and a quick one."""

import time


def test_quick():
    assert True


def test_sleeps():
    time.sleep(60)
