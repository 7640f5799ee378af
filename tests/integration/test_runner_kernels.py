"""Kernels started side by side must not share anything: each talks over its own Unix sockets.

On the H200 host, 24+ kernels started at once over TCP sometimes lost a port race ("Kernel didn't
respond"); the notebook runner now uses the ipc transport in a private folder.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from validate.env.target import ExecTarget
from validate.execute.cases import discover_cases
from validate.execute.pool import YIELD_NICE
from validate.execute.runner import RunOptions, run_cases
from validate.model.outcome import Outcome
from validate.model.results import ResultStore

NOTEBOOK = Path(__file__).resolve().parents[1] / "resources" / "kernel" / "transport.ipynb"


def test_parallel_kernels_use_private_ipc_sockets(tmp_path: Path) -> None:
    folder = tmp_path / "nbs"
    folder.mkdir()
    for i in range(8):
        shutil.copy(NOTEBOOK, folder / f"transport_{i}.ipynb")
    folder.chmod(0o555)  # nothing may be written beside the notebooks (samples can be read-only)
    try:
        cases = discover_cases([folder])
        options = RunOptions(results_dir=tmp_path / "run", jobs=8, timeout_s=120, api_logs=False)
        store = ResultStore(tmp_path / "run" / "results.jsonl")
        results = run_cases(cases, ExecTarget(python=Path(sys.executable)), options, store)
    finally:
        folder.chmod(0o755)
    assert [r.outcome for r in results] == [Outcome.PASS] * 8, [r.reason for r in results]
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        f"transport_{i}.ipynb" for i in range(8)
    )


def test_a_notebook_beside_a_critical_case_runs_its_kernel_at_lower_priority(
    tmp_path: Path,
) -> None:
    """The kernel runs in a session of its own: beside a critical-path case (the history says so)
    both its nice and, where CPU time is grouped by session, its session's share are lowered.
    long.py stays until the notebook has written what its kernel sees."""
    seen = tmp_path / "kernel.json"
    source = (
        "import json, os, pathlib\n"
        "try:  # empty in the root session's group (a process that never called setsid)\n"
        "    group = (pathlib.Path('/proc/self/autogroup').read_text().split() or ['none'])[-1]\n"
        "except OSError:  # no autogroup in this kernel\n"
        "    group = 'none'\n"
        f"pathlib.Path({str(seen)!r}).write_text(json.dumps([os.nice(0), group]))\n"
    )
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    nb["cells"][0]["source"] = source
    (tmp_path / "priority.ipynb").write_text(json.dumps(nb), encoding="utf-8")
    (tmp_path / "long.py").write_text(
        "import pathlib, time\n"
        "deadline = time.monotonic() + 60\n"
        f"while not pathlib.Path({str(seen)!r}).exists() and time.monotonic() < deadline:\n"
        "    time.sleep(0.05)\n"
    )
    history = tmp_path / "durations.json"
    history.write_text('{"long.py": 60, "priority.ipynb": 1}')
    options = RunOptions(
        results_dir=tmp_path / "run", jobs=2, timeout_s=120, api_logs=False, history=history
    )
    store = ResultStore(tmp_path / "run" / "results.jsonl")
    cases = discover_cases([tmp_path / "priority.ipynb", tmp_path / "long.py"])
    results = run_cases(cases, ExecTarget(python=Path(sys.executable)), options, store)
    assert {r.case: r.outcome for r in results}["priority.ipynb"] == Outcome.PASS, results
    nice, group = json.loads(seen.read_text())
    want = min(19, os.nice(0) + YIELD_NICE)
    assert nice == want
    if group != "none":  # the kernel's session has a CPU-time group of its own
        assert group == str(want)
