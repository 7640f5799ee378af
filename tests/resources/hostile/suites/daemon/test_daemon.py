"""A test that leaves a daemon: double fork, setsid, the grandchild sleeps ten minutes."""

import os
import sys


def test_daemonizes():
    child = os.fork()
    if child == 0:
        os.setsid()  # out of the test's process group and session
        if os.fork() == 0:
            # the name is what the test looks for among the tagged processes
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", "hostile_daemon"])
        os._exit(0)
    os.waitpid(child, 0)


def test_after():
    assert True
