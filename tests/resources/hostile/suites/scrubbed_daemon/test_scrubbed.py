"""A test that leaves a daemon with an empty environment: double fork, setsid, then exec with no
variable at all, so no token (nor any tag) is left to find it by; only its command line names
it: the marker the test passes in HOSTILE_MARK."""

import os
import sys


def test_daemonizes_scrubbed():
    mark = os.environ["HOSTILE_MARK"]
    child = os.fork()
    if child == 0:
        os.setsid()  # out of the test's process group and session
        if os.fork() == 0:
            code = "import time; time.sleep(600)"
            os.execve(sys.executable, [sys.executable, "-c", code, mark], {})
        os._exit(0)
    os.waitpid(child, 0)


def test_after():
    assert True
