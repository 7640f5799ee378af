"""`validate --cpp`: a real CMake project with Catch2 tests, built with the real toolchain (cmake,
ninja, the host's compiler) against a real backend wheel's headers and libraries, each TEST_CASE
one result (tests/resources/cpp/catch2_project). Only the GPU is absent: the cell runs on a host
without one, so a TEST_CASE that says it wanted a device is the no-GPU skip.

Catch2 v3.3.2 comes from the shared third-party folder (no network); the test skips where it or
cmake is missing. The frontend's own samples build where a checkout is named
(CUDNN_MATRIX_FRONTEND_CHECKOUT): a stated subset of them, `test_frontend_samples_subset`.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from proctags import ctrl_c_when, still_running, stop_while, tagged, tagged_tool
from usercli import cli

from validate.env.target import ExecTarget
from validate.execute.catch2_suite import Catch2Project
from validate.execute.runner import RunOptions
from validate.execute.suite import SuiteRun
from validate.model.results import ResultStore
from validate.plan.requirements import SkipKind, skip_kind

pytestmark = pytest.mark.slow

BACKEND = "9.13.0.50"  # in the shared wheelhouse (conftest.py)
CELL = ["--cudnn", BACKEND, "--frontend", "1.27.0", "--cuda", "13.0", "--driver", "580"]
CELL += ["--arch", "sm90", "--no-backend-deps"]
PROJECT = Path(__file__).resolve().parents[1] / "resources" / "cpp" / "catch2_project"
_CATCH2_TGZ = Path("shared") / "third_party" / "Catch2-3.3.2.tar.gz"
#: CUDNN_MATRIX_CATCH2_SOURCE, else the shared third-party folder beside some folder above this
#: clone (../shared/third_party of a worktree; /work/shared/third_party on the CI machine).
CATCH2 = Path(
    os.environ.get("CUDNN_MATRIX_CATCH2_SOURCE")
    or next(
        (p / _CATCH2_TGZ for p in Path(__file__).resolve().parents if (p / _CATCH2_TGZ).is_file()),
        _CATCH2_TGZ,
    )
)
TIMEOUT_S = 5  # the hang's limit: --timeout


def _validate(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return cli("validate", *args, cwd=cwd, env=env, timeout=900)


def _results(run_dir: Path) -> dict[str, dict[str, Any]]:
    """The last line per case (a judged line follows its raw one)."""
    out: dict[str, dict[str, Any]] = {}
    for line in (run_dir / "results.jsonl").read_text().splitlines():
        row = json.loads(line)
        out[row["case"]] = row
    return out


@pytest.fixture(scope="module")
def toolchain() -> None:
    # CI demands this tier (CUDNN_MATRIX_REQUIRE_CPP=1): a missing source or toolchain fails
    miss = pytest.fail if os.environ.get("CUDNN_MATRIX_REQUIRE_CPP") == "1" else pytest.skip
    if not CATCH2.exists():
        miss(f"no Catch2 source at {CATCH2} (CUDNN_MATRIX_CATCH2_SOURCE names one)")
    if shutil.which("cmake") is None or shutil.which("c++") is None:
        miss("no cmake or c++ on PATH (pip install cmake ninja; a host compiler)")


@pytest.fixture(scope="module")
def env_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cpp-envs")


@pytest.fixture(scope="module")
def fixture_run(
    toolchain: None,  # noqa: ARG001 - skips without one
    wheelhouse: Path,
    env_cache: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One `validate --cpp` of the fixture project, its results judged by every test below."""
    run_dir = tmp_path_factory.mktemp("cpp-run") / "run"
    proc = _validate(
        *CELL,
        *["--wheelhouse", str(wheelhouse), "--cache-dir", str(env_cache)],
        *["--cpp", str(PROJECT), "--cpp-catch2", str(CATCH2), "--timeout", str(TIMEOUT_S)],
        *["--jobs", "2", "--results", str(run_dir)],
        cwd=run_dir.parent,
    )
    return proc, run_dir


def _listed(binary: Path) -> set[str]:
    out = subprocess.run(
        [str(binary), "--list-tests", "-v", "quiet"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return {line.strip() for line in out.stdout.splitlines() if line.strip()}


def test_every_test_case_is_one_result(fixture_run: tuple[Any, Path]) -> None:
    """Each TEST_CASE the built binaries list (`--list-tests -v quiet`) is exactly one result,
    named `FILE::NAME`; the helper executable (no Catch2) is built and not run."""
    proc, run_dir = fixture_run
    assert proc.returncode == 1, proc.stdout + proc.stderr  # a fail and crashes: regressions
    rows = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    binaries = {Path(r["case_path"]) for r in rows}
    assert {b.name for b in binaries} <= {"outcomes", "cudnn_link"}
    listed = set().union(*(_listed(b) for b in binaries))
    names = {r["case"].split("::", 1)[1] for r in rows}
    assert names == listed
    assert len({r["case"] for r in rows}) == len(listed)  # judged lines repeat none here
    assert {r["case"].split("::")[0] for r in rows} <= {
        "outcomes.cpp",
        "crashes.cpp",
        "cudnn_link.cpp",
    }


@pytest.mark.parametrize(
    ("case", "outcome", "reason"),
    [
        ("outcomes.cpp::passes", "pass", ""),
        ("outcomes.cpp::fails an assertion", "fail", "REQUIRE( got == 5 ) failed: 4 == 5"),
        ("outcomes.cpp::skips with a reason", "skip", "Catch2 SKIP: needs sm100 or newer"),
        ("outcomes.cpp::stderr noise, exit 0", "pass", ""),
        ("outcomes.cpp::name, with [odd] * chars \\ here", "pass", ""),
        ("crashes.cpp::aborts", "crash", "the test binary killed by SIGABRT during this test"),
        ("crashes.cpp::segfaults", "crash", "the test binary killed by SIGSEGV during this test"),
        (
            "crashes.cpp::hangs",
            "timeout",
            f"timed out after {TIMEOUT_S}s; its test binary was killed",
        ),
        ("crashes.cpp::after abort passes", "pass", ""),
        ("crashes.cpp::after segfault passes", "pass", ""),
        ("crashes.cpp::after hang passes", "pass", ""),
        ("crashes.cpp::kills the tool when asked", "pass", ""),  # not asked here
    ],
)
def test_each_test_case_outcome(
    fixture_run: tuple[Any, Path], case: str, outcome: str, reason: str
) -> None:
    _, run_dir = fixture_run
    row = _results(run_dir)[case]
    assert (row["outcome"], row.get("reason", "")[: len(reason)]) == (outcome, reason), row


def test_a_crash_names_its_own_test_case_and_the_rest_runs_in_a_fresh_process(
    fixture_run: tuple[Any, Path],
) -> None:
    """Each crash's tail is its own TEST_CASE's (Catch2's fatal condition and signal), its signal
    is stored, and the TEST_CASE after it ran in another process (another output file)."""
    _, run_dir = fixture_run
    rows = _results(run_dir)
    for name, sig in (("aborts", "SIGABRT"), ("segfaults", "SIGSEGV")):
        crash, after = rows[f"crashes.cpp::{name}"], rows[f"crashes.cpp::after {name[:-1]} passes"]
        assert crash["signal"] == sig
        assert f"TEST_CASE '{name}' killed by {sig}" in crash["tail"]
        assert f"fatal error: {sig}" in crash["tail"]
        assert "crashes.cpp" in crash["tail"]
        assert crash["log_path"] != after.get("log_path")  # the rest went on in a fresh process
        assert after["outcome"] == "pass"
    hang = rows["crashes.cpp::hangs"]
    assert "outlived" not in hang["reason"]  # the test case's process ended with its batch


def test_a_failure_runs_once_more_with_the_frontends_log_for_the_evidence(
    fixture_run: tuple[Any, Path],
) -> None:
    """The verdict is the first run's; the logged re-run's output is in the failure's text."""
    _, run_dir = fixture_run
    row = _results(run_dir)["outcomes.cpp::fails an assertion"]
    assert row["outcome"] == "fail"
    assert "'fails an assertion' failed: once more with the frontend's log" in row["tail"]
    passed = _results(run_dir)["outcomes.cpp::passes"]
    assert not passed.get("tail")  # a pass runs once


def test_a_test_case_that_wants_a_device_is_the_no_gpu_skip_the_sign_off_counts(
    fixture_run: tuple[Any, Path],
) -> None:
    proc, run_dir = fixture_run
    row = _results(run_dir)["outcomes.cpp::wants a device"]
    if shutil.which("nvidia-smi") is not None:  # a GPU host: nothing there says "no GPU"
        assert row["outcome"] == "fail", row
        return
    assert row["outcome"] == "skip"
    assert "CUDA driver version is insufficient" in row["reason"]
    assert skip_kind(row["reason"]) is SkipKind.NO_GPU
    assert "no GPU: " in proc.stdout


def test_the_build_links_the_pinned_backend(fixture_run: tuple[Any, Path]) -> None:
    """cudnn_link.cpp includes the wheel's cudnn.h and calls cudnnGetVersion from its libcudnn
    (no GPU needed): built where the host has a CUDA toolkit (cudnn.h includes its headers)."""
    _, run_dir = fixture_run
    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/include").is_dir():
        pytest.skip("no CUDA toolkit headers on this host: cudnn_link is not built")
    row = _results(run_dir)["cudnn_link.cpp::cudnnGetVersion matches the headers"]
    assert row["outcome"] == "pass", row["reason"]
    build_log = next(run_dir.glob("cases/*/cpp/build.log")).read_text()
    pinned = [ln for ln in build_log.splitlines() if ln.startswith("+ ") and "-DCUDNN_PATH=" in ln]
    assert pinned, build_log[-2000:]
    assert "/envs/" in pinned[0].split("-DCUDNN_PATH=", 1)[1].split()[0]  # the cell's wheel


def _cudnn_link_built() -> None:
    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/include").is_dir():
        pytest.skip("no CUDA toolkit headers on this host: cudnn_link is not built")


def test_only_a_test_case_that_called_cudnn_verifies_the_pin(
    fixture_run: tuple[Any, Path], tmp_path: Path
) -> None:
    """Each test case's process says which libcudnn it mapped and whether it called cuDNN (the
    loader's debug output, resources/run_catch2.py): one that called it from the cell's backend
    is pin evidence, one that only mapped it (its binary links libcudnn) is kept as "loaded"
    and verifies nothing, as does one whose binary does not link it (the cell's preload maps it
    there). The report counts the one environment, and each stored line stays small whatever the loader wrote."""
    _cudnn_link_built()
    _, run_dir = fixture_run
    rows = _results(run_dir)
    called = rows["cudnn_link.cpp::cudnnGetVersion matches the headers"]
    env = called["env"]
    assert env["captured_in"] == "case", env
    assert "cudnnGetVersion" in env["cudnn_called"]
    backend = Path(env["backend_dir"])
    assert "/envs/" in str(backend)  # the cell's wheel
    assert env["cudnn_libs"]
    assert all(Path(p).resolve().parent == backend for p in env["cudnn_libs"]), env
    mapped = rows["cudnn_link.cpp::links cuDNN and does not call it"]
    assert mapped["outcome"] == "pass"
    assert mapped["env"]["captured_in"] == "loaded"
    assert mapped["env"]["cudnn_libs"]
    assert mapped["env"]["cudnn_called"] == []
    # the cell environment preloads the pinned libcudnn into every process: a test case of a
    # binary that does not link it maps it too, and calls nothing
    unlinked = rows["outcomes.cpp::passes"]["env"]
    assert (unlinked["captured_in"], unlinked["cudnn_called"]) == ("loaded", [])
    out = tmp_path / "report.json"
    proc = cli("report", "--results", str(run_dir), "--format", "json", "--out", str(out),
               cwd=tmp_path, timeout=120)  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    assert json.loads(out.read_text())["verdict"]["pins_verified"] == 1
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    traced = [ln for ln in lines if '"ld_debug"' in ln]
    raw = [json.loads(ln)["env"]["ld_debug"]["raw_bytes"] for ln in traced]
    assert traced
    assert min(raw) > 100_000  # what the loader wrote per test case (about 480 kB here) ...
    assert max(len(ln) for ln in traced) < 16_000  # ... of which a bounded part is stored
    assert all(len(json.loads(ln)["env"]["ld_debug"]["lines"]) <= 24 for ln in traced)
    assert not list(run_dir.rglob("*.ld.*"))  # the raw files are removed


def test_a_test_case_that_loaded_another_libcudnn_is_an_error_naming_both_folders(
    fixture_run: tuple[Any, Path], wheelhouse: Path, env_cache: Path, tmp_path: Path
) -> None:
    """A TEST_CASE that maps and calls a copy of libcudnn outside the cell's backend (dlopen by
    path, CPP_FIXTURE_STRAY_CUDNN) passed by its own account: it is an `error` whose one-line
    reason names the copy's folder and the pinned one; the other test cases are judged as ever."""
    _cudnn_link_built()
    _, run_dir = fixture_run
    pinned = Path(
        _results(run_dir)["cudnn_link.cpp::cudnnGetVersion matches the headers"]["env"][
            "backend_dir"
        ]
    )
    stray = tmp_path / "stray"
    stray.mkdir()
    shutil.copy2(pinned / "libcudnn.so.9", stray / "libcudnn.so.9")
    again = tmp_path / "again"
    proc = _validate(
        *CELL,
        *["--wheelhouse", str(wheelhouse), "--cache-dir", str(env_cache)],
        *["--cpp", str(PROJECT), "--cpp-catch2", str(CATCH2), "--timeout", str(TIMEOUT_S)],
        *["--results", str(again)],
        cwd=tmp_path,
        env={**os.environ, "CPP_FIXTURE_STRAY_CUDNN": str(stray / "libcudnn.so.9")},
    )
    rows = _results(again)
    row = rows["cudnn_link.cpp::calls the cuDNN it is told to"]
    assert row["outcome"] == "error", (row, proc.stderr[-2000:])
    assert "\n" not in row["reason"]
    assert row["reason"].startswith(
        f"libcudnn loaded from {stray}, not the cell's pinned backend {pinned}"
    )
    assert row["env"]["captured_in"] == "loaded"  # no pin verified by it
    assert rows["cudnn_link.cpp::cudnnGetVersion matches the headers"]["outcome"] == "pass"
    assert rows["outcomes.cpp::passes"]["outcome"] == "pass"


def test_a_failure_only_the_backend_log_explains_is_the_no_gpu_skip_without_a_gpu(
    fixture_run: tuple[Any, Path],
) -> None:
    """cudnnCreate's assertion says nothing of a GPU; the backend's error log in the test case's
    own output does (CUDNN_LOGERR_DBG, set by resources/run_catch2.py). On a host with a GPU
    the same TEST_CASE passes."""
    _, run_dir = fixture_run
    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/include").is_dir():
        pytest.skip("no CUDA toolkit headers on this host: cudnn_link is not built")
    row = _results(run_dir)["cudnn_link.cpp::cudnnCreate wants a device"]
    if shutil.which("nvidia-smi") is not None:
        assert row["outcome"] == "pass", row
        return
    assert row["outcome"] == "skip", row
    assert skip_kind(row["reason"]) is SkipKind.NO_GPU
    assert "REQUIRE( status == CUDNN_STATUS_SUCCESS ) failed" in row["reason"]
    assert "CUDNN_STATUS_NOT_INITIALIZED" in row["reason"]  # the backend's own line, quoted


def test_the_report_summarises_test_cases_per_source_file(
    fixture_run: tuple[Any, Path], tmp_path: Path
) -> None:
    """As for a pytest suite's ids: one row per source file (outcomes.cpp, crashes.cpp), the
    TEST_CASEs that neither passed nor skipped listed by name."""
    _, run_dir = fixture_run
    out = tmp_path / "compat.md"
    proc = cli(
        "report",
        "--results",
        str(run_dir),
        "--format",
        "md",
        "--out",
        str(out),
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode in (0, 1), proc.stderr
    text = out.read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith("|")]
    assert any("crashes.cpp" in ln and "outcomes.cpp" not in ln for ln in rows), text
    assert any("outcomes.cpp" in ln and "crashes.cpp" not in ln for ln in rows), text
    assert "C++ test cases, summarised per source file; columns: cells" in text
    assert "Pytest tests" not in text
    assert "segfaults" in text
    assert "after segfault passes" not in text  # a passing TEST_CASE is in its file's counts


def test_a_second_run_reuses_the_build_and_a_changed_source_rebuilds(
    fixture_run: tuple[Any, Path], wheelhouse: Path, env_cache: Path, tmp_path: Path
) -> None:
    """The build is keyed by content: the same project again is reused (no compile), a copy with
    one source changed is a new build whose results follow the change, and that build compiles
    only the project's sources (Catch2 was built once, as a unity build, for the first)."""
    (first_log,) = fixture_run[1].rglob("build.log")  # the first run built Catch2, as one unit
    assert "Catch2.dir/Unity/unity_" in first_log.read_text(), first_log.read_text()[-3000:]
    again = _validate(
        *CELL,
        *["--wheelhouse", str(wheelhouse), "--cache-dir", str(env_cache)],
        *["--cpp", str(PROJECT), "--cpp-catch2", str(CATCH2), "--timeout", str(TIMEOUT_S)],
        *["--results", str(tmp_path / "again")],
        cwd=tmp_path,
    )
    assert "reusing the C++ build" in again.stderr, again.stderr[-3000:]
    changed = tmp_path / "changed"
    shutil.copytree(PROJECT, changed)
    source = changed / "outcomes.cpp"
    source.write_text(source.read_text().replace("REQUIRE(got == 5);", "REQUIRE(got == 4);"))
    rebuilt = _validate(
        *CELL,
        *["--wheelhouse", str(wheelhouse), "--cache-dir", str(env_cache)],
        *["--cpp", str(changed), "--cpp-catch2", str(CATCH2), "--timeout", str(TIMEOUT_S)],
        *["--results", str(tmp_path / "rebuilt")],
        cwd=tmp_path,
    )
    assert "reusing the C++ build" not in rebuilt.stderr
    assert _results(tmp_path / "rebuilt")["outcomes.cpp::fails an assertion"]["outcome"] == "pass"
    # Catch2 is built once per source and toolchain, not per project build: the rebuild
    # compiled only the project's files and linked the Catch2 of the first build
    (log_path,) = (tmp_path / "rebuilt").rglob("build.log")
    log_text = log_path.read_text()
    assert "cudnn-matrix: Catch2 built once, reused: " in log_text, log_text[-3000:]
    assert "Catch2.dir" not in log_text, log_text[-3000:]
    assert "Catch2WithMain.dir" not in log_text, log_text[-3000:]
    assert "Building CXX object CMakeFiles/outcomes.dir/outcomes.cpp.o" in log_text, log_text
    assert len(list((env_cache / "cpp" / "catch2").glob("built-*/.complete"))) == 1


def test_a_failed_build_is_one_error_naming_the_first_compiler_error(
    toolchain: None,  # noqa: ARG001
    wheelhouse: Path,
    env_cache: Path,
    tmp_path: Path,
) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(broken CXX)\n"
        "add_executable(broken broken.cpp)\n"
    )
    (broken / "broken.cpp").write_text("int main() {\n  return undeclared_name;\n}\n")
    run_dir = tmp_path / "run"
    proc = _validate(
        *CELL,
        *["--wheelhouse", str(wheelhouse), "--cache-dir", str(env_cache)],
        *["--cpp", str(broken), "--results", str(run_dir)],
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (row,) = _results(run_dir).values()
    assert (row["case"], row["outcome"]) == ("cpp:broken", "error")
    assert row["reason"].startswith("the C++ build failed: ")
    assert "broken.cpp:2" in row["reason"]
    assert "error:" in row["reason"]
    assert "undeclared_name" in row["reason"]
    assert Path(row["log_path"]).is_file()  # the build log, in the run folder
    assert Path(row["log_path"]).is_relative_to(run_dir)
    builds = [p for p in (env_cache / "cpp").iterdir() if p.is_dir() and p.name != "catch2"]
    assert all((p / ".complete").is_file() for p in builds)  # the failed one was removed


#: The stuck build step's command line: no other process on the host runs `sleep 1234.5`.
_STUCK = ("sleep", "1234.5")


def _stuck_alive() -> list[int]:
    alive = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if [a.decode(errors="replace") for a in argv[:2]] == list(_STUCK):
                alive.append(int(entry.name))
    return alive


def _stuck_project(folder: Path) -> Path:
    """A CMake project whose one build step (`sleep 1234.5`, a custom target) never ends."""
    folder.mkdir()
    (folder / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(stuck CXX)\n"
        f"add_custom_target(never_ends ALL COMMAND {' '.join(_STUCK)})\n"
    )
    return folder


def test_a_build_past_its_limit_is_one_error_saying_so_and_leaves_nothing_running(
    toolchain: None,  # noqa: ARG001
    wheelhouse: Path,
    env_cache: Path,
    tmp_path: Path,
) -> None:
    """A project whose build step never ends (a custom target that sleeps), with
    --cpp-build-timeout 3: the build is killed at 3 s with everything it started (cmake, ninja,
    the step), the cell's one result is the `error` that says so, and no half-built folder is
    kept in the cache."""
    assert not _stuck_alive()
    stuck = _stuck_project(tmp_path / "stuck")
    run_dir = tmp_path / "run"
    started = time.monotonic()
    proc = _validate(
        *CELL,
        *["--wheelhouse", str(wheelhouse), "--cache-dir", str(env_cache)],
        *["--cpp", str(stuck), "--cpp-build-timeout", "3", "--results", str(run_dir)],
        cwd=tmp_path,
    )
    took = time.monotonic() - started
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (row,) = _results(run_dir).values()
    assert (row["case"], row["outcome"]) == ("cpp:stuck", "error")
    assert row["reason"] == (
        "the C++ build timed out: it ran past its time limit of 3s and was killed during "
        "cmake --build (--cpp-build-timeout)"
    )
    assert "ran past its time limit of 3s" in Path(row["log_path"]).read_text()
    assert not _stuck_alive()
    assert took < 600  # not the step's 1234.5 s
    builds = [p for p in (env_cache / "cpp").iterdir() if p.is_dir() and p.name != "catch2"]
    assert all((p / ".complete").is_file() for p in builds)  # the killed one was removed


def test_a_run_stopped_during_its_build_keeps_no_verdict_and_a_resume_builds_again(
    toolchain: None,  # noqa: ARG001
    wheelhouse: Path,
    env_cache: Path,
    tmp_path: Path,
) -> None:
    """SIGTERM (a cancelled CI job, `timeout`, the end of a lease) while the build step runs: the
    build is killed with what it started, and that is the tool's stop, not the project's failure,
    so no result is stored for it (a lease once recorded "the C++ build failed: the build exited
    with status -9"). `--resume` then builds again: here the stuck step meets
    --cpp-build-timeout, and its `error` says so."""
    assert not _stuck_alive()
    _stuck_project(tmp_path / "stuck")
    common = [*CELL, "--wheelhouse", str(wheelhouse), "--cache-dir", str(env_cache)]
    common += ["--cpp", "stuck", "--results", "run"]
    with tagged_tool("validate", *common, cwd=tmp_path) as (tool, tag):
        err = ctrl_c_when(
            tool,
            lambda: bool(tagged(tag, " ".join(_STUCK))),
            what="the build step never started",
            wait_s=300,
            sig=signal.SIGTERM,
        )
        assert tool.returncode == 143, err
        assert b"Traceback" not in err
        assert still_running(tag) == []
    store = tmp_path / "run" / "results.jsonl"
    assert not store.exists() or store.read_text().strip() == "", store.read_text()
    assert not _stuck_alive()

    proc = _validate(*common, "--resume", "--cpp-build-timeout", "3", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (row,) = _results(tmp_path / "run").values()
    assert (row["case"], row["outcome"]) == ("cpp:stuck", "error")
    assert row["reason"].startswith("the C++ build timed out: "), row["reason"]
    assert not _stuck_alive()


def test_a_build_the_stop_killed_is_no_verdict_in_the_suite_run(
    fixture_run: tuple[Any, Path],  # noqa: ARG001 - its environment holds the backend wheel
    env_cache: Path,
    tmp_path: Path,
) -> None:
    """The same stop, in the tool's own process, where nothing races it: the suite run's build
    job, on another thread, sees its build killed by the supervisor's stop (what SIGTERM does)
    and stores nothing. In the whole tool that thread races the tool's exit: on 2 CPUs it mostly
    loses (the test above passed without the fix), on the lease's 16 it won and stored "the C++
    build failed: the build exited with status -9" (reports/gpu/2026-12-07-h100-cpp-9.25)."""
    lib = next((env_cache / "envs").glob("*/**/nvidia/cudnn/lib/libcudnn.so.9"))
    stuck = _stuck_project(tmp_path / "stuck")
    target = ExecTarget(backend_dir=lib.parent, root=tmp_path / "cache" / "envs" / "x")
    options = RunOptions(results_dir=tmp_path / "run", timeout_s=60)
    store = ResultStore(tmp_path / "run" / "results.jsonl")
    # no Catch2: the stuck project needs none, and a build of it took 75 s of CI (run V)
    run = SuiteRun(Catch2Project(stuck), target, options, store, slots=1)
    (job,) = run.jobs()
    follow = stop_while(job, _stuck_alive, within_s=300)
    assert follow == []
    assert list(store) == []
    assert not _stuck_alive()


def test_a_test_case_that_kills_the_tool_is_its_crash_after_two_resumes(
    fixture_run: tuple[Any, Path], wheelhouse: Path, env_cache: Path, tmp_path: Path
) -> None:
    """The durable start marker the C++ batches share with pytest's (resources/markers.py): the
    tool killed during a TEST_CASE dies, `--resume` runs that TEST_CASE alone (the tool dies
    again), the second `--resume` stores it as the tool-killed crash and completes the run:
    every listed TEST_CASE has one result."""
    fixture_run  # noqa: B018 - the build is cached by then
    run_dir = tmp_path / "run"
    args = [
        *CELL,
        *["--wheelhouse", str(wheelhouse), "--cache-dir", str(env_cache)],
        *["--cpp", str(PROJECT), "--cpp-catch2", str(CATCH2), "--timeout", str(TIMEOUT_S)],
        *["--jobs", "2", "--results", str(run_dir)],
    ]
    env = {**os.environ, "CPP_FIXTURE_KILL_TOOL": "1"}
    first = _validate(*args, cwd=tmp_path, env=env)
    assert first.returncode == -9, first.stdout + first.stderr[-3000:]
    again = _validate(*args, "--resume", cwd=tmp_path, env=env)
    assert again.returncode == -9, again.stdout + again.stderr[-3000:]
    assert "were running when the tool was killed" in again.stderr, again.stderr[-3000:]
    assert "crashes.cpp::kills the tool when asked" in again.stderr
    last = _validate(*args, "--resume", cwd=tmp_path, env=env)
    assert last.returncode == 1, last.stdout + last.stderr[-3000:]
    rows = _results(run_dir)
    killer = rows["crashes.cpp::kills the tool when asked"]
    assert killer["outcome"] == "crash"
    assert killer["reason"].startswith("the tool was killed while it ran")
    listed = _listed(_outcomes_binary(rows))
    assert {c.split("::", 1)[1] for c in rows if c.startswith(("outcomes", "crashes"))} == listed
    assert rows["crashes.cpp::segfaults"]["outcome"] == "crash"  # the rest judged as ever


BISECTED = "cudnn_link.cpp::fails from backend 9.13 on"


def test_validate_case_runs_only_the_named_test_cases_of_the_project(
    fixture_run: tuple[Any, Path], wheelhouse: Path, env_cache: Path, tmp_path: Path
) -> None:
    """`--case FILE::NAME` (or a glob) with --cpp keeps those TEST_CASEs of the listing; one
    that matches none is the cell's one error naming the listed ids."""
    _cudnn_link_built()
    fixture_run  # noqa: B018 - the build is cached by then
    args = [
        *CELL,
        *["--wheelhouse", str(wheelhouse), "--cache-dir", str(env_cache)],
        *["--cpp", str(PROJECT), "--cpp-catch2", str(CATCH2), "--timeout", str(TIMEOUT_S)],
    ]
    one = _validate(*args, "--case", BISECTED, "--results", str(tmp_path / "one"), cwd=tmp_path)
    assert one.returncode == 1, one.stdout + one.stderr[-2000:]
    assert {c: r["outcome"] for c, r in _results(tmp_path / "one").items()} == {BISECTED: "fail"}
    glob = _validate(
        *args, "--case", "outcomes.cpp::[ps]*", "--results", str(tmp_path / "glob"), cwd=tmp_path
    )
    assert set(_results(tmp_path / "glob")) == {
        "outcomes.cpp::passes",
        "outcomes.cpp::skips with a reason",
        "outcomes.cpp::stderr noise, exit 0",
    }, glob.stderr[-2000:]
    none = _validate(
        *args, "--case", "nowhere.cpp::x", "--results", str(tmp_path / "none"), cwd=tmp_path
    )
    (row,) = _results(tmp_path / "none").values()
    assert (row["case"], row["outcome"]) == ("cpp:catch2_project", "error"), none.stderr[-2000:]
    assert row["reason"].startswith("--case nowhere.cpp::x: matches none of the ")


def test_bisect_finds_the_first_backend_a_test_case_fails_on(
    fixture_run: tuple[Any, Path], wheelhouse: Path, env_cache: Path, tmp_path: Path
) -> None:
    """`bisect --cpp DIR --case FILE::NAME`: each probe builds the project against its cell's
    backend (9.12.0.46, 9.13.0.50 from the wheelhouse) and runs that TEST_CASE alone; the first
    bad backend is the one whose headers and library make it fail."""
    _cudnn_link_built()
    fixture_run  # noqa: B018 - the 9.13 build is cached by then
    folder = tmp_path / "bisect"
    proc = cli(
        "bisect",
        *["--axis", "cudnn", "--good", "9.12.0.46", "--bad", "9.13.0.50"],
        *["--frontend", "1.27.0", "--cuda", "13.0", "--driver", "580", "--arch", "sm90"],
        "--no-backend-deps",
        *["--wheelhouse", str(wheelhouse), "--cache-dir", str(env_cache)],
        *["--cpp", str(PROJECT), "--cpp-catch2", str(CATCH2), "--timeout", str(TIMEOUT_S)],
        *["--case", BISECTED, "--results", str(folder)],
        cwd=tmp_path,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "first bad: 9.13.0.50" in proc.stdout
    assert "last good: 9.12.0.46" in proc.stdout
    state = json.loads((folder / "bisect.json").read_text())
    seen = {p["candidate"]: p["observations"][0]["outcome"] for p in state["probes"]}
    assert seen == {"9.12.0.46": "pass", "9.13.0.50": "fail"}
    for probe in folder.glob("probes/*/r1"):  # each probe ran that one TEST_CASE, nothing else
        assert list(_results(probe)) == [BISECTED]


@pytest.fixture(scope="module")
def cudnn_venv(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A C++ user's environment: a plain venv with the backend wheel installed (its headers and
    library), nothing else: no frontend, no pytest. Returns its python."""
    root = tmp_path_factory.mktemp("cudnn-venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    (wheel,) = wheelhouse.glob(f"nvidia_cudnn_cu13-{BACKEND}-*.whl")
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet"]
    subprocess.run([*install, "--no-index", "--no-deps", str(wheel)], check=True, timeout=600)
    return python


def test_run_cpp_builds_against_the_environments_wheel_one_result_per_test_case(
    toolchain: None,  # noqa: ARG001 - skips without one
    cudnn_venv: Path,
    env_cache: Path,
    tmp_path: Path,
) -> None:
    """`run --cpp DIR` as a user types it: relative paths, started in the folder that holds the
    project, the default results folder. The project is built against the interpreter's own
    cuDNN wheel (no cell to build), each TEST_CASE the build's binaries list is one result with
    the outcome `validate --cpp` gives it, the exit code is 1 (a fail and crashes), and run.json
    names the project and the backend folder. `--case FILE::NAME` runs that TEST_CASE alone from
    the cached build: exit 0."""
    shutil.copytree(PROJECT, tmp_path / "project")
    shutil.copy2(CATCH2, tmp_path / CATCH2.name)
    args = ["--cpp", "project", "--cpp-catch2", CATCH2.name, "--timeout", str(TIMEOUT_S)]
    args += ["--interpreter", str(cudnn_venv)]
    # the module's cache ($CUDNN_MATRIX_CACHE, as a user sets it), which holds fixture_run's
    # build of the same project at another path: the copy is a build of its own (its binaries
    # hold its own files' paths, by which the cases are named), its Catch2 the one built there
    env = {**os.environ, "CUDNN_MATRIX_CACHE": str(env_cache)}
    proc = cli("run", *args, cwd=tmp_path, env=env, timeout=900)
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    (run_dir,) = (tmp_path / "reports" / "runs").iterdir()  # the default results folder
    rows = _results(run_dir)
    binaries = {Path(r["case_path"]) for r in rows.values()}
    assert {b.name for b in binaries} <= {"outcomes", "cudnn_link"}
    listed = set().union(*(_listed(b) for b in binaries))
    assert {c.split("::", 1)[1] for c in rows} == listed
    assert f"{len(listed)} test cases, " in proc.stderr
    expected = {
        "outcomes.cpp::passes": "pass",
        "outcomes.cpp::fails an assertion": "fail",
        "outcomes.cpp::skips with a reason": "skip",
        "crashes.cpp::aborts": "crash",
        "crashes.cpp::segfaults": "crash",
        "crashes.cpp::hangs": "timeout",
        "crashes.cpp::after segfault passes": "pass",
    }
    assert {c: rows[c]["outcome"] for c in expected} == expected
    assert len(list((env_cache / "cpp" / "catch2").glob("built-*/.complete"))) == 1
    wheel_lib = cudnn_venv.parent.parent.glob("lib/python*/site-packages/nvidia/cudnn/lib")
    backend = next(wheel_lib).resolve()
    meta = json.loads((run_dir / "run.json").read_text())
    assert Path(meta["cpp"]) == (tmp_path / "project").resolve()
    assert Path(meta["backend_dir"]).resolve() == backend
    assert meta["cell"]["cudnn"] == BACKEND  # the wheel's, though no frontend says it
    if shutil.which("nvcc") is not None or Path("/usr/local/cuda/include").is_dir():
        called = rows["cudnn_link.cpp::cudnnGetVersion matches the headers"]
        assert called["outcome"] == "pass", called["reason"]
        assert called["env"]["captured_in"] == "case"
        assert Path(called["env"]["backend_dir"]) == backend
    one = cli("run", *args, "--case", "outcomes.cpp::passes", cwd=tmp_path, env=env, timeout=900)
    assert one.returncode == 0, one.stdout + one.stderr[-3000:]
    assert "reusing the C++ build" in one.stderr
    (second,) = set((tmp_path / "reports" / "runs").iterdir()) - {run_dir}
    assert {c: r["outcome"] for c, r in _results(second).items()} == {
        "outcomes.cpp::passes": "pass"
    }


def _outcomes_binary(rows: dict[str, dict[str, Any]]) -> Path:
    return Path(rows["outcomes.cpp::passes"]["case_path"])


#: The stated subset of the frontend's C++ (CUDNN_MATRIX_FRONTEND_CHECKOUT): its unit tests'
#: target, `tests` (test/cpp: 5 sources, 18 TEST_CASEs at 3929da2). The samples are one target
#: of about 70 sources (bench/cpp_build_bench.py builds them; reports/cpp/ has a run).
FRONTEND_TARGETS = ("tests",)
FRONTEND_BACKEND = "9.24.0.43"  # with its dependencies: cublasLt and nvrtc come from the wheels


def test_frontend_samples_subset(toolchain: None, tmp_path: Path) -> None:  # noqa: ARG001
    """A frontend checkout's `tests` target builds against the cell's backend wheel (installed
    from the configured index with its CUDA dependencies) and every TEST_CASE is a result."""
    checkout = os.environ.get("CUDNN_MATRIX_FRONTEND_CHECKOUT")
    if not checkout:
        pytest.skip("CUDNN_MATRIX_FRONTEND_CHECKOUT names no cudnn-frontend checkout")
    if shutil.which("nvcc") is None:
        pytest.skip(
            "the frontend's CMake needs a CUDA toolkit (find_package(CUDAToolkit REQUIRED))"
        )
    run_dir = tmp_path / "run"
    proc = _validate(
        *["--cudnn", FRONTEND_BACKEND, "--frontend", "1.27.0", "--cuda", "13.0"],
        *["--driver", "580", "--arch", "sm90"],
        *["--cpp", checkout, "--cpp-catch2", str(CATCH2), "--timeout", "120"],
        *(f"--cpp-target={t}" for t in FRONTEND_TARGETS),
        *["--results", str(run_dir)],
        cwd=tmp_path,
    )
    rows = _results(run_dir)
    assert not [r for r in rows.values() if r["case"].startswith("cpp:")], proc.stdout + proc.stderr
    assert all(r["case"].startswith("test/cpp/") for r in rows.values()), sorted(rows)
    listed = _listed(Path(next(iter(rows.values()))["case_path"]))
    assert {c.split("::", 1)[1] for c in rows} == listed
