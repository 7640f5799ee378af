"""A pytest suite as cases (issue 27), on a suite written for these tests that crashes on purpose
(tests/resources/pytest_suite): every test id gets exactly one verdict, each crash, poisoned
context and hang is attributed to the test that caused it, and a kill -9 of the tool followed by
`--resume` completes the run with no result lost or counted twice. Real pytest processes, real
signals; the GPU is the only thing faked (tests/resources/pytest_gpu_suite's conftest)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from proctags import kill_tagged, stop_while, tagged, tagged_env
from resultlines import whole_result_lines
from usercli import cli, start

from validate.env.target import ExecTarget
from validate.execute.collection import Suite, collect
from validate.execute.resources.shares import split
from validate.execute.runner import RunOptions
from validate.execute.suite import SuiteRun
from validate.model.results import ResultStore
from validate.plan.requirements import SkipKind, skip_kind

if TYPE_CHECKING:
    from collections.abc import Iterator

RESOURCES = Path(__file__).resolve().parents[1] / "resources"
SUITE = RESOURCES / "pytest_suite"
GPU_SUITE = RESOURCES / "pytest_gpu_suite"
UNEVEN_SUITE = RESOURCES / "pytest_uneven_suite"  # its second share collects 40 of the 50 ids


def _cli(*args: str, cwd: Path, path: str | None = None) -> subprocess.CompletedProcess[str]:
    """`cudnn-matrix ARGS` started in `cwd`, as a user runs it (`path`: PATH's front)."""
    env = dict(os.environ)
    if path is not None:
        env["PATH"] = f"{path}:{os.environ['PATH']}"
    return cli(*args, cwd=cwd, env=env, timeout=120)


#: The verdict of every test of the suite that does not simply pass, and why.
EXPECTED = {
    "test_broken_import.py": ("error", "ModuleNotFoundError"),
    "test_module_skip.py": (
        "skip",
        "test_module_skip.py skipped at import: torch has no float4_e2m1fn_x2 here",
    ),
    "test_crashes.py::test_segfault": ("crash", "killed by SIGSEGV"),
    "test_crashes.py::test_abort": ("crash", "killed by SIGABRT"),
    "test_crashes.py::test_cuda_exit": ("crash", "exited with status 70"),
    "test_hang.py::test_hang": ("timeout", "timed out after 3s"),
    "test_fixtures.py::test_setup_error": ("error", "setup failed: RuntimeError"),
    "test_fixtures.py::test_teardown_error": ("error", "teardown failed: RuntimeError"),
    "test_fixtures.py::test_plain_failure": ("fail", "AssertionError: arithmetic is broken"),
    "test_poison.py::test_poisoner": ("crash", "CUDA context poisoned"),
    "test_marks.py::test_strict_xfail": ("xfail", "known bug 123"),
    "test_marks.py::test_strict_xpass": ("fail", "[XPASS(strict)] fixed already?"),
    "test_marks.py::test_xpass": ("xpass", "maybe fixed"),
    "test_marks.py::test_skip_marker": ("skip", "needs a Blackwell GPU"),
    "test_marks.py::test_skipif": ("skip", "backend too old"),
    "test_marks.py::test_skip_inside": ("skip", "graph not supported here"),
}
#: Tests that pass only where each crash, poison and hang was contained to its own test.
PASS_AFTER = [
    "test_crashes.py::test_before_crashes",
    "test_crashes.py::test_after_crashes",
    "test_hang.py::test_after_hang",
    "test_poison.py::test_victim",
    "test_marks.py::test_exclusive",
]
TOTAL = 2000 + 19 + 2  # collected tests + the module that fails to collect + the one skipped


def _tool(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """`cudnn-matrix run --tests SUITE ARGS` started in `cwd`, its output on one pipe."""
    return start(
        "run",
        "--tests",
        str(SUITE),
        *args,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _check_verdicts(rows: list[dict[str, Any]]) -> None:
    keys = Counter(r["case"] for r in rows)
    assert [k for k, n in keys.items() if n > 1] == []  # none counted twice
    assert len(keys) == TOTAL  # none lost
    got = {r["case"]: r for r in rows}
    for test_id, (outcome, why) in EXPECTED.items():
        assert (test_id, got[test_id]["outcome"]) == (test_id, outcome), got[test_id]["reason"]
        assert why in got[test_id]["reason"], got[test_id]
    for test_id in PASS_AFTER:
        assert got[test_id]["outcome"] == "pass", got[test_id]
    quick = [r for r in rows if r["case"].startswith("test_many.py::test_quick[")]
    assert len(quick) == 2000
    assert {r["outcome"] for r in quick} == {"pass"}


@pytest.fixture
def tag() -> Iterator[tuple[str, dict[str, str]]]:
    found = tagged_env()
    yield found
    kill_tagged(found[0])


def test_every_test_id_gets_one_verdict_with_two_jobs(tmp_path: Path) -> None:
    """--jobs 2 over the whole suite: a segfault, an abort and os._exit(70) after a CUDA error
    line are the crash of their own test (its signal or status, its last output line), the
    hang is a timeout, and the tests after each one still run and pass."""
    proc = _tool("--jobs", "2", "--timeout", "3", "--results", "run", cwd=tmp_path)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 1, out  # the suite has failures
    rows = whole_result_lines(tmp_path / "run")
    _check_verdicts(rows)
    cuda = next(r for r in rows if r["case"] == "test_crashes.py::test_cuda_exit")
    assert cuda["exit_code"] == 70
    assert "CUDA error: an illegal memory access was encountered" in cuda["tail"]
    assert "CUDA context poisoned" in cuda["reason"]
    segv = next(r for r in rows if r["case"] == "test_crashes.py::test_segfault")
    assert segv["signal"] == "SIGSEGV"
    assert "test_segfault" in segv["tail"]  # faulthandler's stack of the dead test, not another's
    broken = next(r for r in rows if r["case"] == "test_broken_import.py")
    assert "synthetic_suite_module_that_does_not_exist" in broken["reason"]


def test_plain_pytest_fails_the_test_after_the_poisoned_one() -> None:
    """The suite's poison pair fails under plain pytest (one process): the victim passes under
    the tool only because the process was replaced after the poison report."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_poison.py"],
        cwd=SUITE,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert "FAILED test_poison.py::test_victim" in proc.stdout


def test_poisoned_test_replaces_the_process(tmp_path: Path) -> None:
    """One slot, the poison pair: the poisoner's process ends after it (the plugin's exit 75) and
    the victim runs in a second process."""
    proc = _tool(
        "--tests-select", "test_poison.py", "--jobs", "1", "--results", "run", cwd=tmp_path
    )
    out, _ = proc.communicate(timeout=120)
    got = {r["case"]: r["outcome"] for r in whole_result_lines(tmp_path / "run")}
    assert got == {"test_poison.py::test_poisoner": "crash", "test_poison.py::test_victim": "pass"}
    outputs = sorted((tmp_path / "run" / "cases" / "local" / "pytest").glob("share-*/output.*.log"))
    assert len(outputs) == 2, out


@pytest.mark.slow
def test_kill_9_of_the_tool_then_resume_loses_nothing(
    tmp_path: Path, tag: tuple[str, dict[str, str]]
) -> None:
    """kill -9 of the tool mid-run (the hang holds one slot, so the run cannot have ended): its
    pytest processes die with it, and --resume runs exactly the ids without a stored result."""
    name, env = tag
    run_dir = tmp_path / "run"
    first = _tool("--jobs", "2", "--timeout", "60", "--results", "run", cwd=tmp_path, env=env)
    deadline = time.monotonic() + 120
    while len(whole_result_lines(run_dir)) < 500 and time.monotonic() < deadline:
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=30)
    before = whole_result_lines(run_dir)
    assert 500 <= len(before) < TOTAL
    for _ in range(100):  # the suite's processes die with the tool (PDEATHSIG)
        if not tagged(name, "pytest"):
            break
        time.sleep(0.05)
    assert tagged(name, "pytest") == []
    again = ["--jobs", "2", "--timeout", "3", "--results", "run", "--resume"]
    second = _tool(*again, cwd=tmp_path, env=env)
    out, _ = second.communicate(timeout=300)
    assert second.returncode == 1, out
    after = whole_result_lines(run_dir)
    assert after[: len(before)] == before  # nothing stored twice, nothing rewritten
    _check_verdicts(after)


def _target(*, has_gpu: bool) -> ExecTarget:
    return ExecTarget(python=Path(sys.executable), has_gpu=has_gpu)


def test_a_suite_that_needs_a_gpu_to_collect_is_one_skip_without_one(tmp_path: Path) -> None:
    """The conftest asserts CUDA at configure time: without a GPU that is one `skip` for the
    suite; the same failure on a GPU host is an `error` (nothing there says "no GPU")."""
    suite = Suite.from_flags(GPU_SUITE, None)
    no_gpu = collect(suite, _target(has_gpu=False), tmp_path / "a", 60)
    assert no_gpu.tests == ()
    ((name, outcome, reason),) = no_gpu.problems
    assert (name, str(outcome)) == ("pytest:pytest_gpu_suite", "skip")
    assert "needs a GPU" in reason
    assert skip_kind(reason) is SkipKind.NO_GPU  # the sign-off counts it as a GPU case not run
    assert "torch.cuda.is_available" in reason
    with_gpu = collect(suite, _target(has_gpu=True), tmp_path / "b", 60)
    assert [str(p[1]) for p in with_gpu.problems] == ["error"]


def test_run_of_a_suite_that_needs_a_gpu_is_one_skip(tmp_path: Path) -> None:
    """Through `run --tests` (two shares, both unable to collect): one `skip` for the suite,
    nothing else, exit 0."""
    proc = _cli("run", "--tests", str(GPU_SUITE), "--jobs", "2", "--results", "run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    (row,) = whole_result_lines(tmp_path / "run")
    assert (row["case"], row["outcome"]) == ("pytest:pytest_gpu_suite", "skip")
    assert "needs a GPU: the suite cannot collect" in row["reason"]
    assert skip_kind(row["reason"]) is SkipKind.NO_GPU
    assert row["case_path"] == str(GPU_SUITE)


def test_run_case_runs_only_the_named_pytest_node_ids(tmp_path: Path) -> None:
    """`run --tests SUITE --case NODEID` (repeatable): pytest selects those ids, parametrized
    ones included, and nothing else runs; each is its one result, named as pytest names it (the
    way `bisect --tests --case` probes one id)."""
    ids = ["test_marks.py::test_xpass", "test_many.py::test_quick[7]"]
    proc = _cli(
        "run", "--tests", str(SUITE), *(f"--case={i}" for i in ids), "--results", "run",
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    got = {r["case"]: r["outcome"] for r in whole_result_lines(tmp_path / "run")}
    assert got == {"test_marks.py::test_xpass": "xpass", "test_many.py::test_quick[7]": "pass"}


def test_a_suite_that_finds_its_gpu_collects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SYNTHETIC_CUDA", "1")  # the fake GPU the suite's conftest asks for
    monkeypatch.setenv("SYNTHETIC_DRIVER", "1")  # and the one test_driver.py's import asks for
    found = collect(Suite.from_flags(GPU_SUITE, None), _target(has_gpu=True), tmp_path, 60)
    ids = ["test_driver.py::test_launch", "test_gpu.py::test_kernel"]
    assert (found.problems, [t.id for t in found.tests]) == ((), ids)


def test_a_module_that_needs_the_driver_is_a_skip_only_without_a_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The conftest finds its (fake) GPU, one module's import asks for the driver: without a GPU
    that module is one `skip`; with one it is an `error` naming the module and the exception."""
    monkeypatch.setenv("SYNTHETIC_CUDA", "1")
    suite = Suite.from_flags(GPU_SUITE, None)
    without = collect(suite, _target(has_gpu=False), tmp_path / "a", 60)
    assert [t.id for t in without.tests] == ["test_gpu.py::test_kernel"]
    ((name, outcome, reason),) = without.problems
    assert (name, str(outcome)) == ("test_driver.py", "skip")
    assert "Found no NVIDIA driver" in reason
    ((name, outcome, reason),) = collect(suite, _target(has_gpu=True), tmp_path / "b", 60).problems
    assert (name, str(outcome)) == ("test_driver.py", "error")
    assert reason == (
        "test_driver.py failed to collect: RuntimeError: Found no NVIDIA driver on your system."
    )


def test_gpu_exclusive_tests_run_alone_after_the_shares_on_a_gpu_host(tmp_path: Path) -> None:
    """One job per slot; on a GPU host (faked: the flag) share 1's job hands the `gpu_exclusive`
    test to one exclusive follow-up job, and no share runs it."""
    options = RunOptions(results_dir=tmp_path, timeout_s=60)
    suite = Suite.from_flags(SUITE, "test_marks.py")
    store = ResultStore(tmp_path / "r.jsonl")
    run = SuiteRun(suite, _target(has_gpu=True), options, store, slots=2)
    first, second = run.jobs()
    follow = first.run()
    assert [(j.cases, j.exclusive) for j in follow] == [(1, True)]
    assert second.run() == ()
    assert "test_marks.py::test_exclusive" not in {r.case for r in store}
    (job,) = follow
    job.run()
    got = {r.case: str(r.outcome) for r in store}
    assert got["test_marks.py::test_exclusive"] == "pass"
    assert len(got) == 7


def test_a_slow_family_is_spread_over_the_shares_where_no_duration_is_known() -> None:
    """A first run knows no durations. A family of slow parametrized tests sits together in
    collection order (the H200's test_mhas, the fuzzers), so equal-count contiguous shares gave
    it to one process: each share now holds its part of it, every id once, in collection order."""
    ids = [f"a.py::fast[{i}]" for i in range(3000)] + [f"b.py::slow[{i}]" for i in range(800)]
    parts = split(ids, {}, 16)
    assert len(parts) == 16
    assert sorted(i for part in parts for i in part) == sorted(ids)
    order = {test: n for n, test in enumerate(ids)}
    assert all(part == sorted(part, key=order.__getitem__) for part in parts)
    slow = [sum(i.startswith("b.py") for i in part) for part in parts]
    assert 30 <= min(slow) <= max(slow) <= 70, slow  # 800 / 16 = 50 each, give or take a block


def test_ids_no_share_ran_run_after_the_shares_and_a_repeat_is_kept_only_if_worse(
    tmp_path: Path,
) -> None:
    """Each share cuts its part from its own collection: where that differs (as pytest-xdist's
    workers' may), ids 40-49 fall to no share and 20-24 to two. The ids no share ran run after
    the shares; a repeat is stored only if worse (test_case[22] fails only in share 2)."""
    run = tmp_path / "run"
    proc = _cli(
        "run", "--tests", str(UNEVEN_SUITE), "--jobs", "2", "--results", "run", cwd=tmp_path
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr  # test_case[22] fails
    lines: dict[str, list[str]] = {}
    for row in whole_result_lines(run):
        lines.setdefault(row["case"], []).append(row["outcome"])
    assert sorted(lines) == sorted(f"test_uneven.py::test_case[{i}]" for i in range(50))
    assert {case for case, got in lines.items() if len(got) > 1} <= {
        "test_uneven.py::test_case[22]"
    }
    assert lines["test_uneven.py::test_case[22]"][-1] == "fail"  # the later line is the worse
    assert (run / "cases" / "local" / "pytest" / "leftover").is_dir()  # 40-49 ran there
    assert "got no result from the shares" in proc.stderr
    assert "(fail after pass): stored, it is worse" in proc.stderr or (
        "(pass after fail): not stored" in proc.stderr
    )
    assert "50 tests, 1 failing" in proc.stdout + proc.stderr
    report = _cli("report", "--results", "run", "--format", "json", cwd=tmp_path)
    got = {r["case"]: r["outcome"] for r in json.loads(report.stdout)["results"]}
    assert len(got) == 50  # one verdict per id
    assert got["test_uneven.py::test_case[22]"] == "fail"


def test_shares_are_contiguous_and_balanced_by_the_history() -> None:
    ids = [f"t.py::t{i}" for i in range(6)]
    durations = {"t.py::t0": 10.0, "t.py::t1": 10.0}  # the others unknown: the mean, 10 s
    assert split(ids, durations, 3) == [ids[0:2], ids[2:4], ids[4:6]]
    lopsided = dict.fromkeys(ids, 1.0) | {"t.py::t0": 100.0}
    assert split(ids, lopsided, 2) == [ids[:1], ids[1:]]
    assert split(ids[:2], {}, 4) == [ids[:1], ids[1:2]]


def test_validate_runs_the_suite_in_the_cell_environment(tmp_path: Path) -> None:
    """`validate --tests`: the suite is collected and run with the cell's interpreter (here the
    ensure hook hands this one back, no install), its results carry the cell, the cell's
    environment spec pins pytest, and the pin check every case gets holds: this interpreter has
    no cuDNN while the cell pins 9.24, so every test is an `error` that still names how the test
    itself ended (each crash attributed to its own id)."""
    from validate.config import ValidateConfig
    from validate.execute.cases import cases_for
    from validate.execute.local import LocalExecutor
    from validate.model.matrix import Cell
    from validate.plan.host import HostFacts
    from validate.plan.rules import Plan
    from validate.workflow import run_cells

    specs: list[Any] = []

    def ensure(spec: Any) -> ExecTarget:
        specs.append(spec)
        return ExecTarget(python=Path(sys.executable))

    cell = Cell(cudnn="9.24.0.43", frontend="1.27.0", cuda="13.0", driver="580", arch="sm90")
    config = ValidateConfig(
        tests=SUITE,
        tests_select="test_crashes.py test_poison.py",
        jobs=2,
        timeout_s=30,
        cache_dir=tmp_path / "cache",
        results_dir=tmp_path / "run",
    )
    cases = cases_for(config)
    assert [(c.name, c.kind) for c in cases] == [("pytest:pytest_suite", "pytest")]
    store = ResultStore(tmp_path / "run" / "results.jsonl")
    plan = Plan(planned=[cell], pruned=[])
    run_cells(config, plan, cases, HostFacts(), store, "R", executor=LocalExecutor(ensure=ensure))
    got = {r.case: r for r in store}
    own = {
        "test_crashes.py::test_before_crashes": "pass",
        "test_crashes.py::test_segfault": "crash",
        "test_crashes.py::test_abort": "crash",
        "test_crashes.py::test_cuda_exit": "crash",
        "test_crashes.py::test_after_crashes": "pass",
        "test_poison.py::test_poisoner": "crash",
        "test_poison.py::test_victim": "pass",
    }
    assert set(got) == set(own)
    for test_id, ended in own.items():
        result = got[test_id]
        assert (result.cell_id, str(result.outcome)) == (cell.id, "error")
        assert result.reason.startswith("pin not honoured: no backend loaded"), result.reason
        assert f"the test ended {ended}" in result.reason
    env = sorted((tmp_path / "run" / "cases" / cell.id / "pytest").glob("share-*/env.*.json"))
    assert env  # what each process loaded, kept as evidence
    assert [e for s in specs for e in s.extras if e.startswith("pytest")] == [
        f"pytest=={pytest.__version__}"
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tests", "/no/such/suite"], "--tests /no/such/suite: not a folder"),
        (["--tests-select", "-m L0"], "--tests-select needs --tests PATH"),
        (["--tests-startup-timeout", "5"], "--tests-startup-timeout needs --tests PATH"),
        (["--tests", str(SUITE), "--tests-startup-timeout", "0"], "--tests-startup-timeout"),
        (["--tests", str(SUITE), "--tests-select", '-k "unclosed'], "--tests-select"),
        (["--tests", str(SUITE), "--case", "x.py::t"], "--case x.py::t: no x.py in "),
        (["--tests", str(SUITE), "--case", "test_m*.py::t"], "a pytest node id is exact"),
    ],
)
def test_bad_suite_flags_are_one_line_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    proc = _cli("validate", "--cudnn", "9.24.0.43", *args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("named", ["path", "command"])
def test_an_interpreter_without_pytest_is_bad_input_before_the_run(
    tmp_path: Path, named: str
) -> None:
    """A real venv without pytest, given to `run --tests`: the interpreter is the caller's, so
    this is bad input (issue 36): one line naming the interpreter and the fix, exit 2, nothing
    written (it was one stored `error` behind "1 tests, 1 failing"). The interpreter given by
    path, or as a command that PATH finds (`--interpreter python3`, as a shell would).
    (`validate --tests` builds the cell environment itself: there a missing pytest stays the
    suite's `error`.)"""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "v")], check=True)
    bin_dir = tmp_path / "v" / "bin"
    interpreter = str(bin_dir / "python3") if named == "path" else "python3"
    argv = ["run", "--tests", str(SUITE), "--jobs", "2", "--interpreter", interpreter]
    proc = _cli(*argv, "--results", "run", cwd=tmp_path, path=str(bin_dir))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert f"{bin_dir / 'python3'} has no pytest" in proc.stderr
    assert "-m pip install pytest" in proc.stderr
    assert not (tmp_path / "run").exists()


def _batch(tmp_path: Path, root: Path, ids: list[str]) -> list[Any]:
    from validate.execute.batches import BatchRun

    ends: list[Any] = []
    BatchRun(
        ids=ids,
        argv=Suite.from_flags(root, None).argv(Path(sys.executable)),
        env=dict(os.environ),
        cwd=root,
        folder=tmp_path / "batch",
        limit_s=lambda _id: 60.0,
        on_ends=ends.extend,
    ).run()
    return ends


def test_an_id_the_batch_process_does_not_collect_is_an_error(tmp_path: Path) -> None:
    ends = _batch(
        tmp_path, SUITE, ["test_crashes.py::test_before_crashes", "test_crashes.py::nope"]
    )
    assert [(e.id, str(e.outcome)) for e in ends] == [
        ("test_crashes.py::nope", "error"),
        ("test_crashes.py::test_before_crashes", "pass"),
    ]
    assert "not collected by the batch's pytest process" in ends[0].reason


def test_a_process_that_dies_before_its_first_test_errors_each_id_once(tmp_path: Path) -> None:
    """The conftest fails at configure time (no fake GPU): no test started, so no test is the
    crash; every id is one `error` naming the process's end, and no second process is tried."""
    ends = _batch(tmp_path, GPU_SUITE, ["test_gpu.py::test_kernel", "test_driver.py::test_launch"])
    assert [(e.id, str(e.outcome)) for e in ends] == [
        ("test_gpu.py::test_kernel", "error"),
        ("test_driver.py::test_launch", "error"),
    ]
    assert ends[0].reason.startswith("its pytest process exited with status 3 before running it")
    assert len(list((tmp_path / "batch").glob("output.*.log"))) == 1


def test_an_environment_layered_on_a_base_with_pytest_installs_none(tmp_path: Path) -> None:
    """Layered on a base interpreter (`--env current`), the base's own pytest serves: the cell
    environment asks for none (uv does not count the base's packages as installed and, offline
    with a wheelhouse that has no pytest, could not resolve one: seen on the H200). A base
    without pytest gets `pytest`; an isolated environment the tool's own version."""
    from validate.execute.suite import pytest_requirement

    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    assert pytest_requirement(isolated=False, base=sys.executable) is None
    assert pytest_requirement(isolated=False, base=str(bare / "bin" / "python")) == "pytest"
    assert pytest_requirement(isolated=True, base=sys.executable) == f"pytest=={pytest.__version__}"


def test_an_interpreter_that_is_neither_a_file_nor_a_command_is_one_line_exit_2(
    tmp_path: Path,
) -> None:
    proc = _cli("run", "--tests", str(SUITE), "--interpreter", "no-such-python-3f9", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert (
        proc.stderr.strip()
        .splitlines()[-1]
        .endswith("--interpreter no-such-python-3f9: no such file (nor a command on PATH)")
    )
    assert "Traceback" not in proc.stderr


def test_a_collection_the_stop_killed_is_no_verdict(tmp_path: Path) -> None:
    """A stop (Ctrl-C, SIGTERM: the supervisor's kill_all) while share 1 is still collecting kills
    its pytest process; that is the tool's stop, not the suite's failure, so no suite `error` is
    stored (a `--resume` finds nothing for the suite and collects it again). In the tool's own
    process, so nothing races it (test_cpp_kind.py has the C++ build's case)."""
    suite_dir = tmp_path / "slow_suite"
    suite_dir.mkdir()
    started = tmp_path / "collecting"
    (suite_dir / "conftest.py").write_text(
        "import pathlib, time\n"
        f"pathlib.Path({str(started)!r}).write_text('yes')\n"
        "time.sleep(1234.5)\n"
    )
    (suite_dir / "test_one.py").write_text("def test_one():\n    pass\n")
    options = RunOptions(results_dir=tmp_path / "run", timeout_s=600)
    store = ResultStore(tmp_path / "run" / "results.jsonl")
    run = SuiteRun(
        Suite.from_flags(suite_dir, None), _target(has_gpu=False), options, store, slots=1
    )
    (job,) = run.jobs()
    stop_while(job, started.exists, within_s=120)
    assert list(store) == [], [(r.case, str(r.outcome), r.reason) for r in store]
