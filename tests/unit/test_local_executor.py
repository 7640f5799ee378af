"""LocalExecutor: what `pick_executor("local")` returns, running real script cases here."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from validate.errors import ConfigError
from validate.execute import ExecRequest, Executor, pick_executor
from validate.execute.local import LocalExecutor
from validate.model.matrix import Cell
from validate.model.results import load_results

SCRIPTS = Path(__file__).resolve().parents[1] / "resources" / "scripts"
CELL = Cell(cudnn="9.12.0.46", frontend="1.27.0", cuda="13.0", driver="580", arch="sm90")


def test_pick_local_gives_a_local_executor() -> None:
    executor = pick_executor("local")
    assert isinstance(executor, LocalExecutor)
    assert isinstance(executor, Executor)
    assert executor.name == "local"
    assert executor.available()


def test_runs_cases_and_writes_results(tmp_path: Path) -> None:
    request = ExecRequest(
        cell=CELL,
        cases=(SCRIPTS / "pass_script.py", SCRIPTS / "fail_exit1.py"),
        results_dir=tmp_path / "out",
        python=Path(sys.executable),
        runner_args=("--jobs", "2", "--timeout", "60", "--no-api-logs"),
    )
    ran = LocalExecutor().run(request)
    assert ran.returncode == 1  # one case failed
    assert "2 cases, 1 failing" in ran.tail
    by_case = {r.case: r for r in load_results([tmp_path / "out"])}
    assert by_case["pass_script.py"].outcome == "pass"
    assert by_case["fail_exit1.py"].outcome == "fail"
    assert {r.cell_id for r in by_case.values()} == {CELL.id}


def test_unknown_runner_flag_is_a_config_error(tmp_path: Path) -> None:
    request = ExecRequest(
        cell=CELL, cases=(), results_dir=tmp_path, runner_args=("--frobnicate", "1")
    )
    with pytest.raises(ConfigError, match="--frobnicate"):
        LocalExecutor().run(request)
