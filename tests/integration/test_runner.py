"""The runner on real kernels and real processes: every resource case gets its verdict."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from usercli import cli, start

from validate.env.target import ExecTarget
from validate.execute.cases import discover_cases
from validate.execute.launch import DEFAULT_CAPTURE_CAP
from validate.execute.runner import RunOptions, run_cases
from validate.model.outcome import Outcome
from validate.model.results import CaseResult, ResultStore, load_results

RES = Path(__file__).resolve().parents[1] / "resources"

EXPECTED = {
    "pass.ipynb": (Outcome.PASS, ""),
    "exception.ipynb": (Outcome.FAIL, "ValueError: boom in cell 1 (cell 1)"),
    "failed_assert.ipynb": (Outcome.FAIL, "AssertionError: wrong numbers: 4"),
    "abort.ipynb": (Outcome.CRASH, "killed by SIGABRT"),
    "segfault.ipynb": (Outcome.CRASH, "killed by SIGSEGV"),
    "exit3.ipynb": (Outcome.CRASH, "exited with status 3"),
    "hang.ipynb": (Outcome.TIMEOUT, "cell timed out"),
    "flood.ipynb": (Outcome.PASS, ""),
    "dies_between_cells.ipynb": (Outcome.CRASH, "kernel died (cell 1): killed by SIGKILL"),
    "cuda_illegal_access.ipynb": (Outcome.CRASH, "illegal memory access"),
    "graph_not_supported.ipynb": (Outcome.SKIP, "graph not supported by this backend"),
    "backend_floor.ipynb": (Outcome.SKIP, "backend floor not met"),
    "module_missing.ipynb": (Outcome.ERROR, "ModuleNotFoundError"),
    "sublibrary_missing.ipynb": (Outcome.ERROR, "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED"),
    "pass_script.py": (Outcome.PASS, ""),
    "fail_exit1.py": (Outcome.FAIL, "exit status 1"),
    "raise_assert.py": (Outcome.FAIL, "AssertionError: wrong numbers"),
    "abort.py": (Outcome.CRASH, "SIGABRT"),
    "segfault.py": (Outcome.CRASH, "SIGSEGV"),
    "exit3.py": (Outcome.ERROR, "status 3"),
    "hang.py": (Outcome.TIMEOUT, "timed out after"),
    "flood.py": (Outcome.PASS, ""),
    "verdict_skip.py": (Outcome.SKIP, "engine not available on this arch"),
    "result_file.py": (Outcome.FAIL, "second graph differs"),
    "cuda_launch_failure.py": (Outcome.CRASH, "unspecified launch failure"),
    "module_missing.py": (Outcome.ERROR, "ModuleNotFoundError"),
    "slow_pass.py": (Outcome.PASS, ""),
}


@pytest.fixture(scope="module")
def all_results(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[CaseResult], Path]:
    out = tmp_path_factory.mktemp("run")
    cases = discover_cases([RES / "notebooks", RES / "scripts"])
    target = ExecTarget(python=Path(sys.executable))
    options = RunOptions(timeout_s=4, jobs=2, results_dir=out, api_logs=False)
    return run_cases(cases, target, options, ResultStore(out / "results.jsonl")), out


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_case_gets_its_verdict(all_results: tuple[list[CaseResult], Path], name: str) -> None:
    results = {r.case: r for r in all_results[0]}
    outcome, reason = EXPECTED[name]
    assert results[name].outcome is outcome, results[name].reason
    assert reason in results[name].reason


def test_every_result_is_stored_with_evidence(all_results: tuple[list[CaseResult], Path]) -> None:
    results, out = all_results
    stored = load_results([out])
    assert sorted(r.case for r in stored) == sorted(EXPECTED)
    flood = next(r for r in results if r.case == "flood.py")
    # its head and tail up to the cap (execute/launch.py), the full size in the log and the note
    log = Path(flood.log_path).read_bytes()
    assert len(log) <= DEFAULT_CAPTURE_CAP + 1024
    assert b"the process wrote 104,857,6" in log
    assert "output capped: the process wrote 104,857,6" in flood.reason
    assert len(flood.tail) <= 8192  # bounded tail in the result
    seg = next(r for r in results if r.case == "segfault.ipynb")
    assert seg.signal == "SIGSEGV"
    exc = next(r for r in results if r.case == "exception.ipynb")
    assert exc.exception is not None
    assert exc.exception["cell_index"] == 1
    assert exc.exception["ename"] == "ValueError"
    assert exc.env["python_executable"] == sys.executable  # captured inside the kernel
    assert (Path(exc.log_path).parent / "result.json").exists()


def test_hang_kills_the_whole_group(all_results: tuple[list[CaseResult], Path]) -> None:
    del all_results
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    assert "time.sleep(3600)" not in ps


def test_failures_rerun_with_api_logs_and_reruns(tmp_path: Path) -> None:
    cases = discover_cases([RES / "scripts" / "fail_exit1.py", RES / "scripts" / "pass_script.py"])
    options = RunOptions(timeout_s=20, jobs=2, results_dir=tmp_path, reruns=1)
    results = run_cases(
        cases, ExecTarget(python=Path(sys.executable)), options, ResultStore(tmp_path / "r.jsonl")
    )
    by = {r.case: r for r in results}
    assert by["fail_exit1.py"].attempts == ("fail", "fail", "fail")
    assert not by["fail_exit1.py"].flaky
    assert by["pass_script.py"].attempts == ("pass",)
    log2 = Path(by["fail_exit1.py"].log_path).with_name("output.2.log")
    assert log2.exists()


def test_pin_not_honoured_is_an_error(tmp_path: Path) -> None:
    cases = discover_cases([RES / "scripts" / "pass_script.py"])
    target = ExecTarget(python=Path(sys.executable), expected_backend="9.24.0")
    options = RunOptions(timeout_s=20, results_dir=tmp_path, api_logs=False)
    [result] = run_cases(cases, target, options, ResultStore(tmp_path / "r.jsonl"))
    assert result.outcome is Outcome.ERROR
    assert result.reason.startswith("pin not honoured: no backend loaded")


def test_kill_9_keeps_results_and_resume_completes(tmp_path: Path) -> None:
    slow = tmp_path / "cases"
    slow.mkdir()
    for i in range(5):
        (slow / f"slow_{i}.py").write_text("import time\ntime.sleep(1.0)\n", encoding="utf-8")
    out = tmp_path / "run"
    argv = ["run", "cases", "--jobs", "1", "--results", "run"]
    tool = start(*argv, cwd=tmp_path, stderr=subprocess.DEVNULL)
    jsonl = out / "results.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if jsonl.exists() and len(jsonl.read_text(encoding="utf-8").splitlines()) >= 2:
            break
        time.sleep(0.05)
    tool.send_signal(signal.SIGKILL)
    tool.wait()
    lines = jsonl.read_text(encoding="utf-8").splitlines()
    assert 2 <= len(lines) < 5
    first = [json.loads(line) for line in lines]  # every recorded line is intact JSON
    assert all(r["outcome"] == "pass" for r in first)
    done = cli(*argv, "--resume", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    final = json.loads(done.stdout)
    assert sorted(r["case"] for r in final) == [f"slow_{i}.py" for i in range(5)]
    after = jsonl.read_text(encoding="utf-8").splitlines()
    assert after[: len(lines)] == lines
    assert len(after) == 5  # only the rest ran: no case recorded twice


def test_cli_bad_flag_is_one_line(tmp_path: Path) -> None:
    proc = cli("run", ".", "--jobs", "0", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert "--jobs" in proc.stderr
