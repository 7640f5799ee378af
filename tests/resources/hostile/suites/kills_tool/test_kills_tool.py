"""A test that SIGKILLs its parent (the tool) and its grandparent (whatever started the tool)."""

import os
import signal

import pytest


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
