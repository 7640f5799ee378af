"""Kernels started side by side must not share anything: each talks over its own Unix sockets.

On the H200 host, 24+ kernels started at once over TCP sometimes lost a port race ("Kernel didn't
respond"); the notebook runner now uses the ipc transport in a private folder.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from validate.env.target import ExecTarget
from validate.execute.cases import discover_cases
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
