"""Paths are the caller's (issue 36, item 2): every path flag given relative means relative to the
folder the command was started in, through every child process (a pytest suite runs in its own
folder, so a relative run folder was read from there: `skip.txt` not found, one `error`).

Through the real CLI in real processes, started in a folder of their own with every path given
relative to it; the cases are real scripts and a real pytest suite (tests/resources).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from usercli import cli, own_cache

from validate.cli import build_parser
from validate.model.matrix import MATRIX_DIR
from validate.model.results import read_results

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[2]
RESOURCES = ROOT / "tests" / "resources"
CELL = ["--cudnn", "9.24.0.43", "--frontend", "1.27.0", "--cuda", "13.0", "--driver", "580"]
CELL += ["--arch", "sm90"]
#: validate without an install: the tool's own interpreter is the cell environment
CURRENT = ["--env", "current", "--frontend-source", "current"]
#: test_marks.py: 7 test ids (a pass, a fail, skips, xfails), run in the suite's own folder
MARKS = ["--tests-select", "test_marks.py"]
MARK_IDS = 7


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return cli(*args, cwd=cwd, env=own_cache(cwd), timeout=300)


@pytest.fixture
def caller(tmp_path: Path) -> Path:
    """`tmp/caller`, the folder the command starts in, beside `tmp/data` (what its paths name)."""
    data = tmp_path / "data"
    shutil.copytree(RESOURCES / "pytest_suite", data / "suite")
    (data / "cases").mkdir()
    shutil.copy(RESOURCES / "scripts" / "pass_script.py", data / "cases")
    for name in ("default.toml", "rules.toml", "known_issues.toml", "runners.toml"):
        shutil.copy(MATRIX_DIR / name, data / name)  # the installed package's data
    (data / "durations.json").write_text('{"pass_script.py": 1.0}', encoding="utf-8")
    (data / "wheels").mkdir()
    here = tmp_path / "caller"
    here.mkdir()
    return here


def _ids(run: Path) -> dict[str, str]:
    """case id -> outcome of a run folder (the later line of a case wins)."""
    return {r.case: str(r.outcome) for r in read_results(run / "results.jsonl").results}


def _suite_ran(run: Path) -> None:
    """One verdict per test id of test_marks.py, none an `error` (a suite that did not collect)."""
    ids = _ids(run)
    assert len(ids) == MARK_IDS, ids
    assert all(case.startswith("test_marks.py::") for case in ids), ids
    assert "error" not in ids.values(), ids


def test_run_tests_relative_with_default_folder(caller: Path) -> None:
    proc = _cli("run", "--tests", "../data/suite", *MARKS, cwd=caller)
    assert proc.returncode == 1, proc.stderr  # test_marks.py has one failing test
    (run,) = (caller / "reports" / "runs").iterdir()
    _suite_ran(run)


def test_run_tests_relative_with_relative_results(caller: Path) -> None:
    proc = _cli("run", "--tests", "../data/suite", *MARKS, "--results", "res", cwd=caller)
    assert proc.returncode == 1, proc.stderr
    _suite_ran(caller / "res")
    assert f"results in {caller / 'res' / 'results.jsonl'}" in proc.stderr


def test_run_cases_interpreter_and_results_relative(caller: Path) -> None:
    (caller / "py").symlink_to(sys.executable)
    proc = _cli("run", "../data/cases", "--interpreter", "./py", "--results", "sub/res", cwd=caller)
    assert proc.returncode == 0, proc.stderr
    assert _ids(caller / "sub" / "res") == {"pass_script.py": "pass"}


def test_validate_every_path_flag_relative(caller: Path) -> None:
    """validate with each of its path flags relative: the suite, the cases, the data files, the
    caches and the run folder are all found, and the run lands where the caller said."""
    common = [*CELL, *CURRENT, "--matrix", "../data/default.toml", "--rules", "../data/rules.toml"]
    common += ["--known-issues", "../data/known_issues.toml", "--wheelhouse", "../data/wheels"]
    common += ["--cache-dir", "envcache", "--base-python", os.path.relpath(sys.executable, caller)]
    proc = _cli(
        "validate", *common, "--tests", "../data/suite", *MARKS, "--results", "v1", cwd=caller
    )
    assert proc.returncode == 1, proc.stderr  # one failing test; the verdict withholds sign-off
    ids = _ids(caller / "v1")
    assert len(ids) == MARK_IDS, ids
    assert not any("could not collect" in line for line in proc.stdout.splitlines()), proc.stdout
    proc = _cli(
        "validate", *common, "--cases", "../data/cases", "--shard", "1/1",
        "--durations", "../data/durations.json", "--results", "v2", cwd=caller,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr  # --env current without the pinned backend: error
    assert set(_ids(caller / "v2")) == {"pass_script.py"}
    shard = json.loads((caller / "v2" / "run.json").read_text())["shard"]
    assert shard["durations"] == str(caller.parent / "data" / "durations.json")


def test_report_plan_and_envs_paths_relative(caller: Path) -> None:
    assert _cli("run", "../data/cases", "--results", "r1", cwd=caller).returncode == 0
    assert _cli("run", "../data/cases", "--results", "r2", cwd=caller).returncode == 0
    proc = _cli(
        "report", "--results", "r2", "--baseline", "r1", "--known-issues",
        "../data/known_issues.toml", "--out", "out/page.md", "--bug-reports", "bugs", cwd=caller,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (caller / "out" / "page.md").is_file()
    proc = _cli("report", "--runs-dir", "reports/runs", "--format", "json", cwd=caller)
    assert proc.returncode == 2, proc.stderr  # no run there: named as given, made absolute
    assert str(caller / "reports" / "runs") in proc.stderr
    proc = _cli("known-issues", "suggest", "--results", "r1", "r2", cwd=caller)
    assert proc.returncode in (0, 1), proc.stderr
    proc = _cli(
        "plan", *CELL, "--matrix", "../data/default.toml", "--rules", "../data/rules.toml",
        "--runners", "../data/runners.toml",
        "--emit", "gitlab", "--out", "ci/child.yml", cwd=caller,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (caller / "ci" / "child.yml").is_file()
    proc = _cli("envs", "--cache-dir", "../data/envs", "list", cwd=caller)
    assert proc.returncode == 0, proc.stderr


#: Path-like metavars: a flag with one of these takes a path (or an interpreter).
_PATHLIKE = {"FILE", "DIR", "PATH", "RUN_DIR", "RUN", "CHECKOUT", "CASE_OR_DIR", "PY", "PYTHON"}
_PATHLIKE |= {"SRC", "SPEC"}  # --backend-source/--frontend-source: a version or a path
#: The one path flag kept as typed: `plan --emit --durations FILE` names a file in the checkout
#: that every emitted CI job reads from its own clone, so it must stay relative to the checkout.
_AS_TYPED = {("plan", "--durations")}


def _parsers(
    parser: argparse.ArgumentParser, name: str = ""
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, child in action.choices.items():
                yield from _parsers(child, f"{name} {sub}".strip())


def test_every_path_flag_is_made_absolute_at_the_parser() -> None:
    """Each path-like option of every command is parsed by the one shared type (caller_path,
    caller_path_or, caller_program, caller_source), so a new path flag cannot skip it."""
    from validate.cli import caller_path, caller_program, caller_source

    seen, wrong = 0, []
    for name, parser in _parsers(build_parser()):
        for action in parser._actions:
            if action.metavar not in _PATHLIKE:
                continue
            flag = action.option_strings[0] if action.option_strings else action.dest
            if (name, flag) in _AS_TYPED:
                continue
            seen += 1
            kind = getattr(action.type, "__qualname__", repr(action.type))
            if action.type not in (
                caller_path,
                caller_program,
                caller_source,
            ) and not kind.startswith("caller_path_or"):
                wrong.append(f"{name} {flag}: type {kind}")
    assert seen > 30  # the walk reached every command
    assert not wrong, "\n".join(wrong)


def test_caller_path_is_absolute_and_keeps_words() -> None:
    from validate.cli import caller_path, caller_path_or, caller_program, caller_source

    assert caller_path("a/b") == Path.cwd() / "a" / "b"
    assert caller_path("~/x") == Path.home() / "x"
    assert caller_path_or("none")("none") == Path("none")
    assert caller_program("python3") == Path("python3")  # a bare name: looked up on PATH
    assert caller_program("./py") == Path.cwd() / "py"
    with pytest.raises(argparse.ArgumentTypeError):
        caller_path("")
    assert caller_source("9.24.0.43") == "9.24.0.43"  # a version or `current`: as typed
    assert caller_source("current") == "current"
    assert caller_source("fe@v1.27.0") == f"{Path.cwd() / 'fe'}@v1.27.0"  # a checkout@ref
    assert caller_source("w/x.whl") == str(Path.cwd() / "w" / "x.whl")
