"""Ctrl-C or kill -9 of the tool: finished results kept, running cases and their children ended."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from proctags import ctrl_c_when, quick_and_hanging, still_running, tagged, tagged_tool

SCRIPTS = Path(__file__).resolve().parents[1] / "resources" / "scripts"
KERNEL = "kernelapp.launch_new_instance"  # in the argv of every kernel the notebook runner starts


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupt_ends_running_cases_and_keeps_finished_ones(
    tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    """Ctrl-C, or SIGTERM (a cancelled CI job, scancel), taken the same way."""
    cases = tmp_path / "cases"
    hang = quick_and_hanging(cases)
    results = tmp_path / "run"
    argv = ["run", "cases", "--jobs", "2", "--timeout", "300", "--results", results.name]
    store = results / "results.jsonl"
    with tagged_tool(*argv, cwd=tmp_path) as (tool, tag):
        err = ctrl_c_when(
            tool,
            lambda: (
                store.exists() and bool(store.read_text().strip()) and bool(tagged(tag, hang.name))
            ),
            what="the quick case never finished or the hang never started",
            end_s=30,
            sig=sig,
        )
        assert tool.returncode == code, err
        assert b"Traceback" not in err
        recorded = [json.loads(line) for line in store.read_text().splitlines()]
        assert [(r["case"], r["outcome"]) for r in recorded] == [("a_quick.py", "pass")]
        assert still_running(tag) == []  # the script, the child it started: everything the tool ran


def test_cases_die_with_a_killed_tool(tmp_path: Path) -> None:
    """kill -9 gives the tool no chance to clean up: resources/guard.py makes the cases follow."""
    cases = tmp_path / "cases"
    cases.mkdir()
    hang = cases / f"orphan_{os.getpid()}.py"
    shutil.copy(SCRIPTS / "hang.py", hang)
    notebook = cases / f"orphan_{os.getpid()}.ipynb"
    shutil.copy(SCRIPTS.parent / "notebooks" / "hang.ipynb", notebook)
    argv = ["run", "cases", "--jobs", "2", "--timeout", "300", "--results", "run"]
    with tagged_tool(*argv, cwd=tmp_path, output=subprocess.DEVNULL) as (tool, tag):
        _wait_then_kill(tool, tag)
        still_running(tag)
        assert tagged(tag, f"orphan_{os.getpid()}") == []
        assert tagged(tag, "time.sleep(3600)") == []  # the script's own child
        assert tagged(tag, KERNEL) == []  # and the kernel


def _wait_then_kill(tool: subprocess.Popen[bytes], tag: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(tagged(tag, f"orphan_{os.getpid()}")) < 2:
        time.sleep(0.2)
    while time.monotonic() < deadline and not tagged(tag, KERNEL):
        time.sleep(0.2)  # the notebook's kernel runs in a session of its own: wait until it is up
    assert tagged(tag, KERNEL), "the kernel never started"
    tool.kill()
    tool.wait(timeout=10)
