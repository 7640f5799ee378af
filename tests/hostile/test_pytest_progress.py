"""The progress line of a pytest suite moves with its stored results (issue 27). Shares are
long pool jobs: the whole L0 suite on the H200 is 16 jobs of ten minutes each, so a line that
moved only when a job started or ended said nothing for the whole run in a CI log."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from validate.env.target import ExecTarget
from validate.execute.cases import suite_case
from validate.execute.jobs import run_jobs
from validate.execute.runner import RunOptions
from validate.model.results import ResultStore

if TYPE_CHECKING:
    from validate.execute.pool import PoolStats

SUITE = Path(__file__).resolve().parents[1] / "resources" / "pytest_suite"


def test_the_line_moves_while_every_share_is_still_running(tmp_path: Path) -> None:
    seen: list[PoolStats] = []
    results = run_jobs(
        [suite_case(SUITE, "test_many.py")],  # 2,000 quick tests
        ExecTarget(python=Path(sys.executable), has_gpu=False),
        RunOptions(results_dir=tmp_path, timeout_s=60, jobs=2),
        ResultStore(tmp_path / "results.jsonl"),
        on_change=seen.append,
    )
    assert len(results) == 2000
    both = [s.done for s in seen if s.running == 2 and not s.stopped]
    assert any(0 < done < 2000 for done in both), [(s.done, s.running) for s in seen]
    assert seen[-1].done == 2000
