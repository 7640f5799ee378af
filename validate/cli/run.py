"""The `run` command: cases in the current Python environment, one process each."""

from __future__ import annotations

import json
import logging
import shlex
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from validate.cli import (
    add_cpp_args,
    add_run_options,
    add_tests_args,
    caller_path,
    caller_program,
    writable_dir,
)
from validate.env.found import UNKNOWN, FoundCell, find_cell
from validate.env.target import ExecTarget
from validate.env.venvs import backend_env
from validate.errors import ConfigError
from validate.execute.cases import (
    cpp_case,
    discover_cases,
    discover_samples,
    select_cases,
    suite_case,
)
from validate.execute.cases.kinds import KINDS
from validate.execute.jobs import run_jobs
from validate.execute.progress import pool_progress, progress
from validate.execute.records import now_stamp
from validate.execute.runner import FAILING, RunOptions
from validate.execute.slots import plan_ledger
from validate.model.results import CaseResult, write_json
from validate.model.runs import (
    RUN_META,
    check_resumed_pins,
    open_run,
    refuse_reuse,
    stored_meta,
)
from validate.plan.host import detect_host

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping, Sequence

    from validate.execute.cases import Case

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `run` command."""
    parser = subparsers.add_parser(
        "run",
        help="run notebooks/scripts, a pytest suite or a C++ project's Catch2 tests in the current "
        "environment",
        description="Run cases (.ipynb / .py, or folders of them), a pytest suite (--tests) or a "
        "CMake project's Catch2 tests (--cpp, built against this environment's cuDNN wheel) in "
        "this Python environment.",
    )
    parser.add_argument("cases", nargs="*", type=caller_path, metavar="CASE_OR_DIR")
    parser.add_argument(
        "--samples",
        type=caller_path,
        metavar="CHECKOUT",
        help="a cudnn-frontend checkout: run samples/python/*.ipynb",
    )
    parser.add_argument(
        "--results",
        type=caller_path,
        metavar="DIR",
        help="results folder (default: a new reports/runs/<UTC time>-<random>)",
    )
    parser.add_argument(
        "--case",
        dest="case_names",
        action="append",
        default=[],
        metavar="NAME",
        help="run only cases with this name or fnmatch pattern (repeatable); with --tests a "
        "pytest node id, with --cpp a TEST_CASE as FILE::NAME or a glob of it",
    )
    add_tests_args(parser)
    add_cpp_args(parser)
    parser.add_argument(
        "--interpreter",
        type=caller_program,
        metavar="PY",
        help="the Python the cases (and a --tests suite) run under, whose cuDNN wheel a --cpp "
        "project is built against (default: the one running the tool)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as a JSON list")
    parser.add_argument(
        "--resume", action="store_true", help="skip cases already recorded in --results DIR"
    )
    parser.add_argument(
        "--expect-backend",
        metavar="V",
        help="error unless the case loads this cuDNN backend, e.g. 9.24.0",
    )
    add_run_options(parser)
    parser.add_argument(
        "--config",
        type=caller_path,
        metavar="FILE",
        help="run what a `validate` run config names, with its options (the docker executor's "
        "entry point inside a cell's container); no other argument is taken with it",
    )
    parser.set_defaults(func=_cmd_run)


def _cmd_run(args: argparse.Namespace) -> int:
    if args.config is not None:
        if args.cases or args.samples is not None or args.case_names:
            msg = (
                "run --config: the config names the cases; pass no CASE_OR_DIR, --samples or --case"
            )
            raise ConfigError(msg)
        from validate.execute.incontainer import run_payload

        return run_payload(args.config)
    suite = _suite(args)
    cases = discover_cases(args.cases) if args.cases else []
    if args.samples is not None:
        cases += discover_samples(args.samples)
    if not cases and suite is None:
        msg = (
            "run: no cases given (pass CASE_OR_DIR..., --samples CHECKOUT, --tests PATH or "
            "--cpp DIR)"
        )
        raise ConfigError(msg)
    cases = select_cases(cases, args.case_names) if cases else []
    if args.resume and args.results is None:
        msg = "run: --resume needs --results DIR (the folder of the run to complete)"
        raise ConfigError(msg)
    host = detect_host()
    if args.results is not None:
        refuse_reuse(args.results, resume=args.resume)
    if args.interpreter is not None and not args.interpreter.is_file():
        # a bare name (`python3`) is looked up on PATH, as a shell would
        found = shutil.which(args.interpreter) if len(args.interpreter.parts) == 1 else None
        if found is None:
            msg = f"--interpreter {args.interpreter}: no such file (nor a command on PATH)"
            raise ConfigError(msg)
        args.interpreter = Path(found)
    python = (args.interpreter or Path(sys.executable)).absolute()  # a bare name found here
    cell = find_cell(python, host)
    cpp = suite is not None and suite.kind == KINDS["catch2"].name
    if cpp:
        cell = _cpp_cell(python, cell)
    elif suite is not None and not cell.has_pytest:
        msg = (
            f"run --tests: {python} has no pytest; install it there "
            f"({shlex.quote(str(python))} -m pip install pytest) or pass --interpreter PY of an "
            "environment that has it"
        )
        raise ConfigError(msg)
    if args.resume and args.results is not None:
        stored = stored_meta(args.results)
        if isinstance(stored.get("cell"), dict):
            check_resumed_pins(args.results, _pins(stored), _pins(_meta(python, cell, suite)))
    if args.results is not None:
        writable_dir("--results", args.results)
    bound, ledger = plan_ledger(host, jobs=args.jobs, gpus=args.gpus)
    jobs = bound.slots
    target = ExecTarget(
        python=python,
        # a C++ project's binaries load the wheel they were built against, as a cell's do
        env=backend_env(str(cell.backend_dir)) if cpp else {},
        backend_dir=cell.backend_dir if cpp else None,
        expected_backend=args.expect_backend,
        host_arch=host.arch,
        has_gpu=host.has_gpu,
        cell=dict(cell.pins),
    )
    with open_run(args.results) as run:  # without --results: a fresh folder
        # the start line once the folder is this run's (a refused one gets one line, the error)
        logging.getLogger("validate").info("%s", "; ".join([bound.line(), *ledger.lines()]))
        meta_path = run.folder / RUN_META
        meta = {"run_id": run.id, **_meta(python, cell, suite), "host": host.to_dict()}
        if args.resume and meta_path.is_file():
            meta = {**stored_meta(run.folder), "resumed_at": now_stamp()}
        write_json(meta_path, meta)
        options = RunOptions(
            timeout_s=args.timeout,
            capture_cap=int(args.capture_cap * 1024 * 1024),
            cpp_build_timeout_s=args.cpp_build_timeout,
            tests_startup_timeout_s=args.tests_startup_timeout,
            jobs=jobs,
            reruns=args.reruns,
            results_dir=run.folder,
            resume=args.resume,
            api_logs=args.api_logs,
            run_id=str(meta.get("run_id") or run.id),
        )
        # the one step from cases to jobs that validate's executors take (execute/jobs.py):
        # the same placement, limits, ledger and re-runs
        if suite is not None:
            what = "test cases" if cpp else "tests"
            with pool_progress() as on_change:
                results = run_jobs(
                    [suite], target, options, run.store, ledger=ledger, on_change=on_change
                )
        else:
            what = "cases"
            with progress(len(cases), failing=FAILING) as report:
                results = run_jobs(
                    cases, target, options, run.store, ledger=ledger, on_result=report
                )
        run.store.seal()  # every case has ended: the folder's lines verify wherever it is read
        write_json(meta_path, {**meta, "finished_at": now_stamp()})
    bad = [r for r in results if r.outcome in FAILING]
    print(
        f"{len(results)} {what}, {len(bad)} failing; results in {run.store.path}", file=sys.stderr
    )
    for line in failing_lines(bad):
        print(line, file=sys.stderr)
    if args.json:
        print(json.dumps([r.to_dict() for r in results], indent=2, default=str))
    return 1 if bad else 0


#: How many failing results the summary names; the rest are counted.
_SHOWN = 10


def failing_lines(bad: Sequence[CaseResult], shown: int = _SHOWN) -> list[str]:
    """The summary's failing results: outcome, id and reason, the first `shown`, then how many
    more (the report lists them all)."""
    lines = []
    for result in bad[:shown]:
        reason = " ".join(result.reason.split())
        reason = f"  {reason[:117]}..." if len(reason) > 120 else f"  {reason}" if reason else ""
        lines.append(f"  {result.outcome!s:<8}{result.case}{reason}")
    if len(bad) > shown:
        lines.append(f"  ... and {len(bad) - shown} more (cudnn-matrix report --results DIR)")
    return lines


def _suite(args: argparse.Namespace) -> Case | None:
    """The batched case `run` names, checked (bad input exits 2): a pytest suite (--tests) or a
    C++ project (--cpp), each the only kind of its run; --case selects in it (a node id, a
    TEST_CASE)."""
    if args.tests is not None and args.cpp is not None:
        msg = "run: pass --tests PATH or --cpp DIR, not both (one kind per run)"
        raise ConfigError(msg)
    if args.tests is None and args.tests_select is not None:
        msg = "run: --tests-select needs --tests PATH"
        raise ConfigError(msg)
    if args.tests is None and args.tests_startup_timeout is not None:
        msg = "run: --tests-startup-timeout needs --tests PATH"
        raise ConfigError(msg)
    if args.cpp is None and (args.cpp_targets or args.cpp_catch2 is not None):
        msg = "run: --cpp-target and --cpp-catch2 need --cpp DIR"
        raise ConfigError(msg)
    if args.cpp is None and args.cpp_build_timeout is not None:
        msg = "run: --cpp-build-timeout needs --cpp DIR"
        raise ConfigError(msg)
    flag = "--tests PATH" if args.tests is not None else "--cpp DIR"
    if (args.tests is not None or args.cpp is not None) and (args.cases or args.samples):
        msg = f"run {flag}: pass no CASE_OR_DIR or --samples with it (one kind per run)"
        raise ConfigError(msg)
    if args.tests is not None:
        return suite_case(args.tests, args.tests_select, ids=args.case_names)
    if args.cpp is not None:
        return cpp_case(args.cpp, args.cpp_targets, args.cpp_catch2, args.case_names)
    return None


def _cpp_cell(python: Path, found: FoundCell) -> FoundCell:
    """The cell a --cpp project is built for: `python`'s cuDNN wheel, its headers and library
    (bad input where it has none); the backend pin is the wheel's where no frontend said it."""
    lib = found.backend_dir
    if lib is None or not (lib.parent / "include" / "cudnn.h").is_file():
        what = f"a cuDNN wheel without headers ({lib.parent})" if lib else "no cuDNN wheel"
        msg = (
            f"run --cpp: {python} has {what}; the C++ build compiles and links against the "
            f"environment's nvidia/cudnn (include/cudnn.h, lib/libcudnn.so.9): install one there "
            f"({shlex.quote(str(python))} -m pip install nvidia-cudnn-cu13) or pass "
            "--interpreter PY of an environment that has it"
        )
        raise ConfigError(msg)
    if found.pins.get("cudnn") != UNKNOWN or not found.backend_wheel:
        return found
    notes = {k: v for k, v in found.notes.items() if k != "cudnn"}
    return replace(found, pins={**found.pins, "cudnn": found.backend_wheel}, notes=notes)


def _meta(python: Path, found: FoundCell, suite: Case | None) -> dict[str, Any]:
    """run.json of a `run`: what ran where, and the cell found there (model/runs.py RUN_META)."""
    cpp = suite.path if suite is not None and suite.kind == KINDS["catch2"].name else None
    return {
        "command": "cudnn-matrix " + shlex.join(sys.argv[1:]),
        "started_at": now_stamp(),
        "interpreter": str(python),
        "tests": str(suite.path) if suite is not None and cpp is None else None,
        **({"cpp": str(cpp), "backend_dir": str(found.backend_dir)} if cpp else {}),
        "cell": dict(found.pins),
        "cell_unknown": dict(found.notes),  # why each `unknown` pin could not be found
    }


def _pins(meta: Mapping[str, Any]) -> dict[str, list[str]]:
    """What --resume must match: the interpreter and the cell found in it."""
    cell = meta.get("cell") or {}
    return {"interpreter": [str(meta.get("interpreter"))], **{k: [str(v)] for k, v in cell.items()}}
