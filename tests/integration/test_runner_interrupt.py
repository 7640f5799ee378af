"""Ctrl-C or kill -9 of the tool: finished results kept, running cases and their children ended."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "resources" / "scripts"
KERNEL = "kernelapp.launch_new_instance"  # in the argv of every kernel the notebook runner starts


def _alive(marker: str) -> list[str]:
    out = subprocess.run(
        ["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True, check=True
    )
    return [line for line in out.stdout.splitlines() if marker in line and "ps -ww" not in line]


def test_interrupt_ends_running_cases_and_keeps_finished_ones(tmp_path: Path) -> None:
    cases = tmp_path / "cases"
    cases.mkdir()
    shutil.copy(SCRIPTS / "pass_script.py", cases / "a_quick.py")
    hang = cases / f"hang_{os.getpid()}.py"  # a unique name to find its processes by
    shutil.copy(SCRIPTS / "hang.py", hang)
    results = tmp_path / "run"
    argv = [sys.executable, "-m", "validate", "run", str(cases), "--jobs", "2"]
    tool = subprocess.Popen(
        [*argv, "--timeout", "300", "--results", str(results)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        store = results / "results.jsonl"
        if store.exists() and store.read_text().strip() and _alive(hang.name):
            break
        time.sleep(0.2)
    else:
        tool.kill()
        msg = f"the quick case never finished or the hang never started: {tool.communicate()}"
        raise AssertionError(msg)
    tool.send_signal(signal.SIGINT)
    _, err = tool.communicate(timeout=30)
    assert tool.returncode == 130, err
    assert b"Traceback" not in err
    recorded = [json.loads(line) for line in (results / "results.jsonl").read_text().splitlines()]
    assert [(r["case"], r["outcome"]) for r in recorded] == [("a_quick.py", "pass")]
    time.sleep(0.5)
    assert _alive(hang.name) == []  # the script and the child it started are gone


def test_cases_die_with_a_killed_tool(tmp_path: Path) -> None:
    """kill -9 gives the tool no chance to clean up: resources/guard.py makes the cases follow."""
    cases = tmp_path / "cases"
    cases.mkdir()
    hang = cases / f"orphan_{os.getpid()}.py"
    shutil.copy(SCRIPTS / "hang.py", hang)
    notebook = cases / f"orphan_{os.getpid()}.ipynb"
    shutil.copy(SCRIPTS.parent / "notebooks" / "hang.ipynb", notebook)
    kernels_before = set(_alive(KERNEL))
    argv = [sys.executable, "-m", "validate", "run", str(cases), "--jobs", "2"]
    tool = subprocess.Popen(
        [*argv, "--timeout", "300", "--results", str(tmp_path / "run")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_then_kill(tool, kernels_before)
    finally:
        tool.kill()

    def survivors() -> list[str]:
        left = _alive(f"orphan_{os.getpid()}") + _alive("time.sleep(3600)")
        return left + sorted(set(_alive(KERNEL)) - kernels_before)

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and survivors():
        time.sleep(0.2)
    assert _alive(f"orphan_{os.getpid()}") == []
    assert _alive("time.sleep(3600)") == []  # the script's own child
    assert set(_alive(KERNEL)) - kernels_before == set()  # and the kernel


def _wait_then_kill(tool: subprocess.Popen[bytes], kernels_before: set[str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(_alive(f"orphan_{os.getpid()}")) < 2:
        time.sleep(0.2)
    while time.monotonic() < deadline and not set(_alive(KERNEL)) - kernels_before:
        time.sleep(0.2)  # the notebook's kernel runs in a session of its own: wait until it is up
    assert set(_alive(KERNEL)) - kernels_before, "the kernel never started"
    tool.kill()
    tool.wait(timeout=10)
