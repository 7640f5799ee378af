"""The `validate` command: flags -> ValidateConfig -> workflow.run() (or a dispatcher) -> printed."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from validate.cli import (
    add_cpp_args,
    add_flaky_option,
    add_require_gpu_option,
    add_run_options,
    add_selector_args,
    add_speed_options,
    add_tests_args,
    add_tier_arg,
    caller_path,
    caller_path_or,
    caller_program,
    caller_source,
    positive,
    split_list,
    writable_dir,
)
from validate.config import Selectors
from validate.dispatch import DISPATCHERS, DispatchOptions
from validate.errors import ConfigError
from validate.execute import EXECUTORS
from validate.model.runs import refuse_reuse

if TYPE_CHECKING:
    from validate.workflow import RunOutcome

__all__ = ["add_validate_args", "config_from_args", "register"]


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `validate` command."""
    parser = subparsers.add_parser(
        "validate",
        help="the main job: plan, build pinned environments, run the cases, give a verdict",
        description=(
            "Plan the matrix, build or reuse one pinned environment per cell, run the cases in "
            "it (each in its own process), check known issues and print the sign-off verdict."
        ),
    )
    add_validate_args(parser)
    parser.set_defaults(func=_handle)


def add_validate_args(parser: argparse.ArgumentParser) -> None:
    """The flags of `validate` (bisect takes the same ones for its probes)."""
    add_selector_args(parser)
    add_tier_arg(parser)
    what = parser.add_argument_group("cases")
    what.add_argument(
        "--cases",
        action="append",
        type=caller_path,
        default=[],
        metavar="PATH",
        help="notebook, script or folder of them (repeatable; default: the shipped repro cases)",
    )
    what.add_argument(
        "--samples",
        type=caller_path,
        metavar="CHECKOUT",
        help="cudnn-frontend checkout: samples/python",
    )
    add_tests_args(what)
    add_cpp_args(what)
    what.add_argument(
        "--case",
        dest="case_names",
        action="append",
        default=[],
        metavar="NAME",
        help="run only cases with this name or fnmatch pattern (repeatable); with --tests or "
        "--cpp and no other cases: an exact pytest node id, or a TEST_CASE as FILE::NAME (globs "
        "allowed)",
    )
    env = parser.add_argument_group("environments")
    env.add_argument(
        "--executor",
        choices=(*EXECUTORS, "auto", *DISPATCHERS),
        default="local",
        help="local venvs (default); docker: each cell in its image; auto: docker when the "
        "daemon has an NVIDIA runtime, else local; slurm: sbatch array jobs, one task per "
        "shard, each running the cells with its arch's runner executor (see --runners)",
    )
    env.add_argument(
        "--base-image",
        metavar="IMAGE",
        help="docker: base of the cell images (default nvidia/cuda:<cuda>.0-runtime-ubuntu24.04, "
        "or cudnn-matrix/base:bookworm-py3 where only that one is on the daemon)",
    )
    env.add_argument(
        "--env",
        dest="env_mode",
        choices=("isolated", "current", "system-site-packages"),
        default="isolated",
        help="isolated venv per cell (default); 'current': backend and base packages (torch) "
        "from this interpreter, frontend per cell; 'system-site-packages': venv layered on "
        "--base-python's packages",
    )
    env.add_argument(
        "--base-python",
        type=caller_program,
        default=sys.executable,
        metavar="PYTHON",
        help="interpreter the cell venvs are made from (default: the one running the tool)",
    )
    env.add_argument(
        "--backend-source",
        type=caller_source,
        metavar="SRC",
        help="wheel file or library folder instead of PyPI",
    )
    env.add_argument(
        "--backend-store",
        type=caller_path,
        metavar="DIR",
        help="unpacked backends, one subfolder per version (a wheel's nvidia/cudnn tree named "
        "9.24.0.43, or cudnn-linux-x86_64-<version>_cuda<N>-archive): each cell takes its "
        "cudnn version's folder; a version missing from it is an error for that cell",
    )
    env.add_argument(
        "--frontend-source",
        type=caller_source,
        metavar="SRC",
        help="wheel file, checkout[@ref] or 'current'",
    )
    env.add_argument(
        "--with",
        dest="extras",
        action="append",
        default=[],
        metavar="REQ",
        help="extra pinned requirement for every cell, e.g. torch==2.11.0 (repeatable)",
    )
    env.add_argument(
        "--wheelhouse", type=caller_path, metavar="DIR", help="install offline from here"
    )
    env.add_argument("--cache-dir", type=caller_path, metavar="DIR", help="environment cache")
    env.add_argument(
        "--installer",
        choices=("auto", "uv", "pip"),
        default="auto",
        help="package installer for the cell venvs (default: auto, uv when on PATH, else pip)",
    )
    env.add_argument(
        "--no-backend-deps",
        dest="backend_deps",
        action="store_false",
        help="install the backend wheel without its dependencies (nvidia-cublas): enough to "
        "load it and build graphs without a GPU, e.g. from a small offline wheelhouse",
    )
    run = parser.add_argument_group("running")
    add_run_options(run)
    add_flaky_option(run)
    add_require_gpu_option(run)
    add_speed_options(run, repeats=True)
    run.add_argument("--results", type=caller_path, metavar="DIR", help="run folder")
    run.add_argument("--resume", action="store_true", help="complete the run in --results DIR")
    run.add_argument(
        "--shard",
        type=_shard,
        metavar="I/N",
        help="run only shard I of N: the (cell x case) units split by expected duration, longest "
        "first (the same on every host given the same --durations); the run folder records it",
    )
    run.add_argument(
        "--durations",
        type=caller_path_or("none"),
        metavar="FILE",
        help="case durations for --shard (JSON name -> seconds; default: the cache's durations.json; "
        "'none': every case alike, which balances by count)",
    )
    slurm = parser.add_argument_group("slurm (--executor slurm)")
    slurm.add_argument(
        "--shards",
        type=positive(int, 1, 1000),
        metavar="N",
        help="array tasks per (arch x environment) job, each one shard of its cells' units "
        "(default: 1)",
    )
    slurm.add_argument(
        "--queue-timeout",
        type=positive(float, 1),
        metavar="S",
        help="cancel a task still pending S seconds after submission; its cases are `error` "
        "'not scheduled' (default: wait as long as it takes)",
    )
    slurm.add_argument(
        "--runners",
        type=caller_path,
        metavar="FILE",
        help="runner pools per arch (default: matrix/runners.toml): partition, constraint, gres, "
        "time; cells of an arch without a runner are pruned",
    )
    # what the batch scripts run on the nodes (dispatch/slurm.py); not for people
    slurm.add_argument("--slurm-task", metavar="GROUP:I", help=argparse.SUPPRESS)
    slurm.add_argument("--slurm-merge", action="store_true", help=argparse.SUPPRESS)
    run.add_argument(
        "--known-issues",
        type=caller_path,
        metavar="FILE",
        help="known-issues TOML (default: matrix/known_issues.toml, embedded in the package)",
    )


def _shard(text: str) -> str:
    """argparse type for --shard: checked here, so a bad value is one line before any work."""
    from validate.plan.shard import ShardSpec

    try:
        return str(ShardSpec.parse(text))
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--shard ")) from exc


def config_from_args(args: argparse.Namespace, argv: list[str] | None = None) -> Any:
    """Check the flags once and build the frozen config."""
    from validate.config import ValidateConfig

    for flag, path in (("--samples", args.samples), ("--wheelhouse", args.wheelhouse)):
        if path is not None and not path.is_dir():
            msg = f"{flag} {path}: not a folder"
            raise ConfigError(msg)
    if (
        args.durations is not None
        and str(args.durations) != "none"
        and not args.durations.is_file()
    ):
        msg = f"--durations {args.durations}: no such file (a JSON object: case name -> seconds)"
        raise ConfigError(msg)
    if args.results is not None:
        refuse_reuse(args.results, resume=args.resume, command=getattr(args, "command", ""))
        writable_dir("--results", args.results)
    for path in args.cases:
        if not path.exists():
            msg = f"--cases {path}: no such file or folder"
            raise ConfigError(msg)
    if args.samples is not None and not (args.samples / "samples" / "python").is_dir():
        msg = f"--samples {args.samples}: no samples/python folder (expected a cudnn-frontend checkout)"
        raise ConfigError(msg)
    if args.tests is not None:  # checked now: a bad suite or selection is bad input (exit 2)
        from validate.execute.collection import Suite

        Suite.from_flags(args.tests, args.tests_select)
    elif args.tests_select is not None or args.tests_startup_timeout is not None:
        flag = "--tests-select" if args.tests_select is not None else "--tests-startup-timeout"
        msg = f"{flag} needs --tests PATH"
        raise ConfigError(msg)
    if args.cpp is not None:  # checked now: a bad project or Catch2 source is bad input (exit 2)
        from validate.execute.catch2_suite import Catch2Project

        Catch2Project.from_flags(args.cpp, args.cpp_targets, args.cpp_catch2)
    elif args.cpp_targets or args.cpp_catch2 is not None:
        msg = "--cpp-target and --cpp-catch2 need --cpp DIR"
        raise ConfigError(msg)
    if args.cpp is None and args.cpp_build_timeout is not None:
        msg = "--cpp-build-timeout needs --cpp DIR"
        raise ConfigError(msg)
    if args.backend_store is not None:  # checked now: a bad store is bad input (exit 2)
        from validate.env.sources import Sources

        Sources(args.backend_source, store=args.backend_store)
    return ValidateConfig(
        selectors=Selectors.from_args(args),
        cases=tuple(args.cases),
        samples=args.samples,
        tests=args.tests.resolve() if args.tests is not None else None,
        tests_select=args.tests_select,
        tests_startup_timeout_s=args.tests_startup_timeout,
        cpp=args.cpp.resolve() if args.cpp is not None else None,
        cpp_targets=tuple(args.cpp_targets),
        cpp_catch2=args.cpp_catch2.resolve() if args.cpp_catch2 is not None else None,
        cpp_build_timeout_s=args.cpp_build_timeout,
        case_names=tuple(args.case_names),
        executor=args.executor,
        base_image=args.base_image,
        env_mode=args.env_mode,
        base_python=str(args.base_python),
        backend_source=args.backend_source,
        backend_store=args.backend_store.expanduser().resolve() if args.backend_store else None,
        frontend_source=args.frontend_source,
        extras=tuple(split_list(args.extras)),
        wheelhouse=args.wheelhouse,
        cache_dir=args.cache_dir,
        installer=args.installer,
        backend_deps=args.backend_deps,
        jobs=args.jobs,
        gpus=args.gpus,
        timeout_s=args.timeout,
        capture_cap=int(args.capture_cap * 1024 * 1024),
        reruns=args.reruns,
        results_dir=args.results,
        resume=args.resume,
        api_logs=args.api_logs,
        flaky=args.flaky,
        require_gpu=args.require_gpu,
        known_issues=args.known_issues,
        shard=args.shard,
        durations=args.durations,
        argv=tuple(argv if argv is not None else sys.argv[1:]),
        tier=args.tier,
        slower_ratio=args.slower_ratio,
        slower_min_s=args.slower_min_s,
        speed_repeats=args.speed_repeats,
        speed_budget_s=args.speed_budget,
    )


def _handle(args: argparse.Namespace) -> int:
    if args.slurm_task or args.slurm_merge:
        return _slurm_node(args)
    dispatcher = DISPATCHERS.get(args.executor)
    if dispatcher is None:
        dispatch_only = (
            ("--shards", args.shards),
            ("--runners", args.runners),
            ("--queue-timeout", args.queue_timeout),
        )
        for flag, value in dispatch_only:
            if value is not None:
                msg = f"{flag} is for --executor {'|'.join(DISPATCHERS)}"
                raise ConfigError(msg)
    from validate.env.versions import resolve_versions

    config = config_from_args(args)
    if dispatcher is not None:
        if args.runners is not None and not args.runners.is_file():
            msg = f"--runners {args.runners}: no such file"
            raise ConfigError(msg)
        options = DispatchOptions(
            shards=args.shards or 1,
            queue_timeout=args.queue_timeout,
            runners=args.runners,
            resolve=resolve_versions,
        )
        outcome = dispatcher().run(config, options)
    else:
        from validate.workflow import run

        # every version pin checked against its source once the input files are read, before
        # any environment or run folder (env/versions.py)
        outcome = run(config, resolve=resolve_versions)
    return _show(outcome)


def _show(outcome: RunOutcome) -> int:
    """Print the run's verdict, cells and folder (within a terminal's width); its sign-off exit
    code."""
    import shutil

    from validate.workflow import describe

    width = shutil.get_terminal_size().columns if sys.stdout.isatty() else None
    print(describe(outcome, width))
    return outcome.exit_code


def _slurm_node(args: argparse.Namespace) -> int:
    """A batch script's call on a node: one array task, or the merge job."""
    from validate.dispatch import slurm

    if args.results is None:
        msg = "--slurm-task/--slurm-merge need --results RUN (the Slurm run folder)"
        raise ConfigError(msg)
    if args.slurm_merge:
        _show(slurm.merge_job(args.results))
        return 0  # merged: the tool (or whoever reads RUN) judges the verdict
    _show(slurm.run_task(args.results.resolve(), args.slurm_task))
    return 0  # the task ran whatever its verdict: the merge judges
