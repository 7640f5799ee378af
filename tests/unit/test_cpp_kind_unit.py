"""The C++ kind's pieces that need no build: bad input (one line, exit 2), which kind owns a
stored C++ result, its repro line, the Catch2 test spec of an odd name, and known issues and the
report's per-file summary on C++ ids (tests/integration/test_cpp_kind.py builds and runs)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from usercli import cli

from validate.env.cmake_build import BUILTIN_TARGETS, declared_targets, first_error
from validate.execute import batches
from validate.execute.cases.kinds import KINDS, BatchedKind, kind_for_result
from validate.execute.catch2_suite import Catch2Project
from validate.execute.resources.run_catch2 import spec_for
from validate.judge.known_issues import case_matches
from validate.model.outcome import Outcome
from validate.plan.requirements import SkipKind, skip_kind

PROJECT = Path(__file__).resolve().parents[1] / "resources" / "cpp" / "catch2_project"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cpp", "/nonexistent/project"], "--cpp /nonexistent/project: no CMakeLists.txt there"),
        (["--cpp", "."], "no CMakeLists.txt there (expected a CMake project"),
        (["--cpp-target", "samples"], "--cpp-target and --cpp-catch2 need --cpp DIR"),
        (["--cpp-build-timeout", "60"], "--cpp-build-timeout needs --cpp DIR"),
        (["--cpp", str(PROJECT), "--cpp-build-timeout", "0"], "--cpp-build-timeout"),
        (
            ["--cpp", str(PROJECT), "--cpp-catch2", "/nonexistent/catch2.tgz"],
            "--cpp-catch2 /nonexistent/catch2.tgz: no such folder or archive",
        ),
        (
            ["--cpp", str(PROJECT), "--cpp-target", "outcomes", "--cpp-target", "sampels"],
            "--cpp-target sampels: no such target in ",
        ),
    ],
)
def test_bad_cpp_input_is_one_line_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    proc = cli("validate", "--cudnn", "9.24.0.43", *args, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert message in lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cpp", "nowhere"], "/nowhere: no CMakeLists.txt there"),
        (["--cpp", "."], ": no CMakeLists.txt there (expected a CMake project"),
        (
            ["--cpp", "project", "--cpp-target", "sampels"],
            "--cpp-target sampels: no such target in /",
        ),
        (["--cpp-target", "tests"], "run: --cpp-target and --cpp-catch2 need --cpp DIR"),
        (["--cpp-build-timeout", "60"], "run: --cpp-build-timeout needs --cpp DIR"),
        (["--cpp", "project", "--tests", "."], "run: pass --tests PATH or --cpp DIR, not both"),
        (["--cpp", "project", "case.py"], "run --cpp DIR: pass no CASE_OR_DIR or --samples"),
        (["--cpp", "project", "--cpp-catch2", "no.tgz"], "no.tgz: no such folder or archive"),
        (
            ["--cpp", "project", "--interpreter", "bare/bin/python"],
            "/bare/bin/python has no cuDNN wheel; the C++ build compiles and links against",
        ),
    ],
)
def test_bad_run_cpp_input_is_one_line_exit_2_nothing_written(
    tmp_path: Path, args: list[str], message: str
) -> None:
    """`run --cpp` as a user types it (relative paths): bad input is one line, exit 2, and no
    results folder. An interpreter without a cuDNN wheel has nothing to build against."""
    shutil.copytree(PROJECT, tmp_path / "project")
    (tmp_path / "case.py").write_text("print('VERDICT pass')\n")
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True
    )
    proc = cli("run", *args, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert message in lines[0]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "reports").exists()
    if "sampels" in args:  # the targets the project has, to pick from
        assert lines[0].endswith(
            "project's CMake files (targets there: cudnn_link, helper_tool, outcomes)"
        )


def test_the_docker_executor_refuses_cpp_in_one_line_naming_what_is_missing(
    tmp_path: Path,
) -> None:
    """A cell's image has no C++ toolchain and no mount for the project: `--executor docker`
    with --cpp is bad input before any work (no daemon is asked), one line that says so and
    names the executor that builds it."""
    proc = cli(
        *("validate", "--cudnn", "9.24.0.43", "--frontend", "1.27.0", "--executor", "docker"),
        *("--cpp", str(PROJECT)),
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "--executor docker: --cpp is not supported: a cell's image has no C++ toolchain" in line
    assert "use --executor local" in line
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "reports").exists()  # no run folder claimed


def test_declared_targets_are_the_projects_own_builds(tmp_path: Path) -> None:
    """What --cpp-target is checked against: the literal first argument of each add_executable,
    add_library, add_custom_target and wrapper (python_add_library), less IMPORTED and ALIAS
    names, across subfolders; a name made from a variable leaves the check to the build."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "CMakeLists.txt").write_text(
        "add_subdirectory(sub)\nADD_LIBRARY(core INTERFACE)\n"
        "add_library(Dep::lib UNKNOWN IMPORTED)\nadd_library(alias ALIAS core)\n"
    )
    (tmp_path / "sub" / "CMakeLists.txt").write_text(
        "add_executable(\n    samples\n    a.cpp)\npython_add_library(_mod MODULE m.cpp)\n"
        "add_custom_target(docs ALL)\nadd_test(NAME t COMMAND samples)\n"
    )
    known, variable = declared_targets(tmp_path)
    assert known - BUILTIN_TARGETS == {"core", "samples", "_mod", "docs"}
    assert not variable
    (tmp_path / "sub" / "more.cmake").write_text("add_executable(${PROJECT_NAME}_x x.cpp)\n")
    assert declared_targets(tmp_path)[1]


def test_the_cpp_kind_is_batched_and_owns_cpp_ids_before_pytest() -> None:
    kind = KINDS["catch2"]
    assert isinstance(kind, BatchedKind)
    assert isinstance(KINDS["pytest"], BatchedKind)
    assert kind_for_result("/b/samples", "samples/cpp/sdpa/fp16_cached.cpp::Cached sdpa") is kind
    assert kind_for_result("/p", "cpp:cudnn-frontend") is kind
    assert kind_for_result("/t", "test/python/test_mhas.py::test_x[1]").name == "pytest"


def test_the_repro_line_runs_the_one_test_case_from_its_binary() -> None:
    line = KINDS["catch2"].repro_line("/build/bin/samples", "sdpa/a.cpp::Cached sdpa, fp16 [x]")
    assert line == "/build/bin/samples 'Cached sdpa\\, fp16 \\[x\\]'"


@pytest.mark.parametrize(
    ("name", "spec"),
    [
        ("plain name", "plain name"),
        ("a, b", "a\\, b"),
        ("[tag] * \\ ~x", "\\[tag\\] \\* \\\\ \\~x"),
        ('say "hi"', 'say \\"hi\\"'),
    ],
)
def test_a_test_case_name_is_escaped_into_a_spec_of_itself(name: str, spec: str) -> None:
    assert spec_for(name) == spec


def test_known_issues_match_cpp_ids_by_file_and_name() -> None:
    case = "samples/cpp/sdpa/fp16_cached.cpp::Cached sdpa"
    assert case_matches(case, "fp16_cached.cpp::Cached*")
    assert case_matches(case, "samples/cpp/sdpa/fp16_cached.cpp::*")
    assert not case_matches(case, "fp16_bwd.cpp::*")


@pytest.mark.parametrize("has_gpu", [False, True])
@pytest.mark.parametrize(
    "why",
    [
        "CUDA Error: no CUDA-capable device is detected (100) at helpers.h:61",
        "CUDA Error: CUDA driver version is insufficient for CUDA runtime version (35) at h.h:61",
        "cuDNN Error: CUDNN_STATUS_NOT_INITIALIZED (1001) at helpers.h:54",  # cudnnCreate
    ],
)
def test_a_failure_that_wants_a_device_is_the_no_gpu_skip_only_without_a_gpu(
    has_gpu: bool, why: str
) -> None:
    project = Catch2Project(PROJECT)
    end = batches.TestEnd(id="a.cpp::x", outcome=Outcome.FAIL, reason=why)
    judged = project.judged(end, has_gpu=has_gpu)
    if has_gpu:
        assert judged == end  # nothing on a GPU host says "no GPU": the failure stands
    else:
        assert judged.outcome is Outcome.SKIP
        assert skip_kind(judged.reason) is SkipKind.NO_GPU
        assert why in judged.reason
    other = batches.TestEnd(
        id="a.cpp::y", outcome=Outcome.FAIL, reason="REQUIRE( a == b ) failed: 1 == 2"
    )
    assert project.judged(other, has_gpu=has_gpu) == other


def test_the_first_error_of_a_build_log_is_the_compilers() -> None:
    log = (
        "[1/3] Building CXX object a.o\nFAILED: a.o\n/src/a.cpp:2:10: error: 'x' was not "
        "declared\nninja: build stopped: subcommand failed.\n"
    )
    assert first_error(log) == "/src/a.cpp:2:10: error: 'x' was not declared"
    assert first_error("CMake Error at CMakeLists.txt:3 (find_package):\nx").startswith(
        "CMake Error"
    )
    assert first_error("all fine\n") == ""
