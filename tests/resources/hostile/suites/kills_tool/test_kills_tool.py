"""A test that leaves a daemon, then one that SIGKILLs its parent (the tool) and its grandparent
(whatever started the tool): the daemon is still running when the tool dies. With --jobs 2 the
ids are cut into two contiguous halves of 7 (resources/shares.py): test_a_before's 5, then these
two, in one process; test_z_after's 7 in the other."""

import os
import signal
import sys

import pytest


def test_leaves_a_daemon():
    child = os.fork()
    if child == 0:
        os.setsid()
        if os.fork() == 0:
            sleep = [sys.executable, "-c", "import time; time.sleep(600)", "hostile_daemon"]
            os.execv(sys.executable, sleep)
        os._exit(0)
    os.waitpid(child, 0)


def test_kills_the_tool():
    if not os.environ.get("HOSTILE_GRANDPARENT_PID"):
        pytest.skip("only under tests/hostile/test_launcher.py: it kills its parent")
    parent = os.getppid()
    with open(f"/proc/{parent}/stat") as fh:
        grandparent = int(fh.read().rsplit(")", 1)[1].split()[1])
    # the grandparent first (this process dies with its parent), and only the one the test
    # that runs this suite named (a shell of its own around the tool): never a test runner
    if os.environ.get("HOSTILE_GRANDPARENT_PID") == str(grandparent):
        os.kill(grandparent, signal.SIGKILL)
    os.kill(parent, signal.SIGKILL)
    signal.pause()  # the tool's death ends this process too (it dies with its parent)
