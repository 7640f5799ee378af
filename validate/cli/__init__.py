"""`cudnn-matrix` / `python -m validate`: argparse front end; maps ValidateError to exit codes.

Each sub-command lives in its own module, which exposes
``register(subparsers) -> None`` (adds its parser and sets ``func``) and a handler
``func(args) -> int``. Adding a command is one line in ``_COMMAND_MODULES``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import math
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NoReturn

from validate import __version__
from validate.config import DEFAULT_SPEED_BUDGET_S, DEFAULT_TIMEOUT_S
from validate.errors import ConfigError, ValidateError
from validate.log import setup_logging
from validate.textsafe import SafeStream

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = [
    "ENDS_AGREE_EXIT",
    "EXIT_CODES",
    "OneLineParser",
    "add_cpp_args",
    "add_flaky_option",
    "add_require_gpu_option",
    "add_run_options",
    "add_selector_args",
    "add_speed_options",
    "add_tests_args",
    "build_parser",
    "caller_path",
    "caller_path_or",
    "caller_program",
    "caller_source",
    "main",
    "positive",
    "split_list",
    "writable_dir",
    "writable_file",
]

#: The module that registers each sub-command, in help order. A command line that names one
#: imports only that module (start-up: `run` must not pay for `report`'s renderers).
_COMMANDS: Final = {
    "plan": "validate.cli.plan",
    "validate": "validate.cli.validate",
    "envs": "validate.cli.envs",
    "run": "validate.cli.run",
    "report": "validate.cli.report",
    "known-issues": "validate.cli.known_issues",
    "images": "validate.cli.images",
    "bisect": "validate.cli.bisect",
}
_COMMAND_MODULES: Final = tuple(_COMMANDS.values())


#: `bisect`: both ends of the range gave the same outcome class (a finding, not bad input).
ENDS_AGREE_EXIT: Final = 6

#: The exit-code table, in every command's --help epilogue and in the README.
EXIT_CODES: Final = """exit codes:
  0    signed off / command succeeded; also a run short only of a GPU: its verdict line says
       NOT SIGNED OFF — no GPU (GPU cases skipped for want of a GPU or driver, pins verified)
  1    not signed off: regressions (fail, crash, timeout), infra errors or cases skipped for a
       module missing from their environment; with --require-gpu also a run short of a GPU
  2    bad input: a flag, a data file, a path; one line on stderr, nothing run or written
  3    an environment could not be built (outside a run; inside one it is the cell's `error`)
  4    docker daemon unreachable, image build or pull failed; Slurm refused a job or did not answer
  5    results lost mid-run (disk full, folder deleted): run stopped, finished results kept
  6    bisect: both ends gave the same outcome; the range holds no change to find (a finding)
  130  interrupted (Ctrl-C): finished results are kept, --resume completes the run
  143  terminated (SIGTERM: a cancelled CI job, scancel, timeout): as 130"""


class OneLineParser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line on stderr and exit code 2 (no usage dump); every
    command's --help ends with the exit-code table and shows each option's default.

    No option is taken by a prefix of its name (`--cudn` is refused, not read as `--cudnn`).
    An option added with `add_global_argument` is also accepted after any sub-command below
    this parser (`envs list --cache-dir X`, `report -v`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("epilog", EXIT_CODES)
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
        #: (flags, keywords) of the options every sub-command below this parser accepts too
        self.global_arguments: list[tuple[tuple[str, ...], dict[str, Any]]] = []

    def add_global_argument(self, *flags: str, **kwargs: Any) -> argparse.Action:
        """An option of this parser that its sub-commands (and theirs) accept after their name.

        There it defaults to SUPPRESS, so a value given before the sub-command stays when the
        option is not repeated after it."""
        self.global_arguments.append((flags, kwargs))
        return self.add_argument(*flags, **kwargs)

    def add_subparsers(self, **kwargs: Any) -> Any:
        kwargs.setdefault("parser_class", type(self))
        kwargs.setdefault("action", _SubCommands)
        action = super().add_subparsers(**kwargs)
        if isinstance(action, _SubCommands):
            action.inherited = list(self.global_arguments)
        return action

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


class _SubCommands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Sub-commands that accept the global options of the parser above them."""

    inherited: list[tuple[tuple[str, ...], dict[str, Any]]] = []  # noqa: RUF012 (set per instance)

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        child = super().add_parser(name, **kwargs)
        for flags, options in self.inherited:
            if isinstance(child, OneLineParser):
                child.add_global_argument(*flags, **{**options, "default": argparse.SUPPRESS})
            else:
                child.add_argument(*flags, **{**options, "default": argparse.SUPPRESS})
        return child


def split_list(values: Sequence[str] | None) -> list[str]:
    """`--axis a,b --axis c` -> ["a", "b", "c"] (validate.config.split_list)."""
    from validate.config import split_list as split

    return split(values)


def positive(
    kind: type[float | int], minimum: float, maximum: float | None = None
) -> Callable[[str], Any]:
    """argparse type: a finite number of `kind` in [minimum, maximum] (one-line error otherwise).

    nan and inf are refused here, at the flag, so no thread later dies on them (a timer of inf
    seconds, a timedelta of nan days); the upper bound keeps every value one the OS accepts.
    """
    limit = _DEFAULT_MAX[kind] if maximum is None else maximum

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except (ValueError, OverflowError):
            value = None
        if value is None or not math.isfinite(value) or not minimum <= value <= limit:
            msg = f"expected a number from {minimum:g} to {limit:g}, got {text!r}"
            raise argparse.ArgumentTypeError(msg)
        return value

    return parse


#: Upper bounds of numeric flags unless a flag names its own: far beyond any sensible value.
_DEFAULT_MAX: Final[dict[type[float | int], float]] = {int: 10_000, float: 7 * 86_400.0}


def caller_path(text: str) -> Path:
    """argparse type of every path flag: the path as the caller meant it, relative to the folder
    the command was started in, made absolute here, once (`~` expanded; symlinks kept).

    Child processes run elsewhere (a pytest suite in its own folder, a container, a Slurm node),
    so no relative path may leave the command line (issue 36).
    """
    if not text:
        msg = "expected a path, got ''"
        raise argparse.ArgumentTypeError(msg)
    # abspath: `a/../b` made `b` as a shell would, symlinks kept (Path.resolve follows them)
    return Path(os.path.abspath(Path(text).expanduser()))  # noqa: PTH100


def caller_path_or(*words: str) -> Callable[[str], Path]:
    """`caller_path`, except that each of `words` (e.g. `none`) is kept as the word it is."""

    def parse(text: str) -> Path:
        return Path(text) if text in words else caller_path(text)

    return parse


def caller_program(text: str) -> Path:
    """argparse type of an interpreter flag: a bare name (`python3`) is kept for a PATH lookup,
    as a shell would do it; anything with a folder in it is a `caller_path`."""
    return Path(text) if os.sep not in text else caller_path(text)


def caller_source(text: str) -> str:
    """argparse type of --backend-source/--frontend-source: a version or `current` as typed; a
    path (a wheel, a library folder, a checkout, with its `@ref`) made absolute as caller_path."""
    from packaging.version import InvalidVersion, Version

    if text.strip() == "current":
        return text
    try:
        Version(text)
    except InvalidVersion:
        where, at, ref = text.partition("@")
        return f"{caller_path(where)}{at}{ref}" if where else text
    return text


_PSEUDO_FS: Final = ("/proc", "/sys", "/dev")


def writable_dir(flag: str, path: Path) -> Path:
    """Check, before anything runs, that `path` is (or can become) a folder we can write in.

    A file, a folder under /proc, /sys or /dev, or a read-only place is one ConfigError naming
    the flag; the folder is created (with its parents) when it does not exist yet.
    """
    where = path.resolve()
    pseudo = next((p for p in _PSEUDO_FS if where == Path(p) or Path(p) in where.parents), None)
    if pseudo is not None:
        msg = f"{flag} {path}: under {pseudo}, a kernel file system, not a place to write to"
        raise ConfigError(msg)
    if where.exists() and not where.is_dir():
        msg = f"{flag} {path}: is a file, not a folder"
        raise ConfigError(msg)
    try:
        where.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=where, prefix=".write-probe-")  # noqa: SIM115
        probe.close()
    except OSError as exc:
        msg = f"{flag} {path}: cannot write there ({exc.strerror or exc})"
        raise ConfigError(msg) from exc
    return path


def writable_file(flag: str, path: Path) -> Path:
    """Check that `path` can be written as a file: its folder is writable, and it is no folder."""
    if path.is_dir():
        msg = f"{flag} {path}: is a folder, not a file"
        raise ConfigError(msg)
    writable_dir(flag, path.parent if str(path.parent) else Path())
    return path


def gpu_list(text: str) -> tuple[int, ...]:
    """--gpus: comma-separated GPU indices (0,2)."""
    try:
        out = tuple(int(part) for part in text.split(","))
    except ValueError:
        out = ()
    if not out or any(i < 0 for i in out):
        msg = f"expected GPU indices such as 0,2, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return out


def add_run_options(group: argparse._ActionsContainer) -> None:
    """How cases run, shared by `run` and `validate` (and the commands built on validate)."""
    group.add_argument(
        "--jobs",
        type=positive(int, 1),
        metavar="N",
        help="cases at once (default: from resources: one per core, two on a GPU host; 2 GiB "
        "of free host memory per case; free GPU memory over the largest peak a case reached, "
        "else 4 GiB; the bound and why are logged at start)",
    )
    group.add_argument(
        "--gpus",
        type=gpu_list,
        metavar="I,J",
        help="the GPUs cases run on, by index as nvidia-smi numbers them, e.g. 0,2 (default: "
        "those CUDA_VISIBLE_DEVICES names, else all); each GPU's memory and busy share are "
        "booked on their own, and each case runs on the one it was booked on",
    )
    group.add_argument(
        "--timeout",
        type=positive(float, 0.1),
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help="per-case limit in seconds (notebooks: per cell, +30s start-up); the whole process "
        "group is killed. A case the duration history knows never gets less than 3x the "
        "duration of its last run that ended on its own (not by a timeout). A case that times "
        "out while it shared its GPU or the host's CPUs beyond its need, or fails while it "
        "shared its GPU, runs once more alone before it is judged. A pytest suite's "
        "start-up and collection (--tests) get 3x this, at least 60s (default: "
        f"{DEFAULT_TIMEOUT_S:g})",
    )
    group.add_argument(
        "--capture-cap",
        type=positive(float, 0),
        default=2.0,
        metavar="MIB",
        help="output kept per case process, in MiB: its first and last half, with one line "
        "between them giving the bytes left out and the full size (a pytest process of a suite "
        "is one such process). GitLab keeps 4 MiB of a whole job's log; 0 keeps everything "
        "(default: 2)",
    )
    group.add_argument(
        "--reruns",
        type=positive(int, 0),
        default=0,
        metavar="N",
        help="repeat each failing case N more times; differing outcomes = flaky (default: 0)",
    )
    group.add_argument(
        "--no-api-logs",
        dest="api_logs",
        action="store_false",
        help="do not re-run failures with FE/BE API logging (default: re-run once with logs)",
    )


def add_tests_args(group: argparse._ActionsContainer) -> None:
    """--tests, --tests-select and --tests-startup-timeout, shared by `run` and `validate`: a
    pytest suite as cases."""
    group.add_argument(
        "--tests",
        type=caller_path,
        metavar="PATH",
        help="a pytest root (e.g. a cudnn-frontend checkout's test/python): one result per "
        "test id, in batches inside long-lived pytest processes, every crash named",
    )
    group.add_argument(
        "--tests-select",
        metavar="ARGS",
        help='pytest selection for --tests, e.g. "-m L0 -k norm test_matmul.py" (default: the '
        "suite's own ini and addopts)",
    )
    group.add_argument(
        "--tests-startup-timeout",
        type=positive(float, 1),
        metavar="S",
        help="seconds a --tests pytest process may take to start (imports and the collection "
        "of the selection) before its first test; past it the process is killed and the suite's "
        "start-up is one error (default: 3 x --timeout, at least 60)",
    )


def add_cpp_args(group: argparse._ActionsContainer) -> None:
    """--cpp, --cpp-target, --cpp-catch2 and --cpp-build-timeout, shared by `validate` and `run`:
    a CMake project's Catch2 tests."""
    group.add_argument(
        "--cpp",
        type=caller_path,
        metavar="DIR",
        help="a CMake project with Catch2 tests (e.g. a cudnn-frontend checkout: its samples/cpp "
        "and test/cpp), built per cell against the cell's backend (`run`: against the "
        "environment's cuDNN wheel; cached): one result per TEST_CASE, each in a process of its "
        "own, every crash named",
    )
    group.add_argument(
        "--cpp-target",
        dest="cpp_targets",
        action="append",
        default=[],
        metavar="NAME",
        help="build and run only this CMake target of --cpp, e.g. samples or tests (repeatable; "
        "default: every target, and every Catch2 binary among them)",
    )
    group.add_argument(
        "--cpp-catch2",
        type=caller_path,
        metavar="PATH",
        help="Catch2 v3 source folder or .tar.gz archive for --cpp, for builds without network "
        "(default: the project's find_package(Catch2) or FetchContent)",
    )
    group.add_argument(
        "--cpp-build-timeout",
        type=positive(float, 1),
        metavar="S",
        help="seconds one cell's --cpp build (configure and compile) may take; past it the build "
        "is killed and is that cell's one error (default: 6 x --timeout, at least 3600)",
    )


def add_flaky_option(group: argparse._ActionsContainer) -> None:
    """--flaky, shared by `validate` and `report`: the sign-off policy for flaky results."""
    from validate.model.outcome import FLAKY_POLICIES

    group.add_argument(
        "--flaky",
        choices=FLAKY_POLICIES,
        default="block",
        help="a result that did not pass but passed on a re-run (the API-log re-run or --reruns) "
        "is flaky (≈, its own sign-off section): block withholds sign-off as its first outcome "
        "would, warn lists it without blocking (default: %(default)s)",
    )


def add_speed_options(group: argparse._ActionsContainer, *, repeats: bool) -> None:
    """--slower-ratio/--slower-min-s, shared by `validate` and `report` (judge/speed.py), and
    --speed-repeats (validate only: how often each candidate is re-run alone)."""
    group.add_argument(
        "--slower-ratio",
        type=positive(float, 1.0),
        default=1.5,
        metavar="R",
        help="speed: a timed unit (notebook cell, script section) at least R times slower than in "
        "a cell that differs only in backend or frontend is a candidate (default: %(default)s)",
    )
    group.add_argument(
        "--slower-min-s",
        type=positive(float, 0.0),
        default=1.0,
        metavar="S",
        help="speed: ... and at least S seconds slower (default: %(default)s)",
    )
    if repeats:
        group.add_argument(
            "--speed-repeats",
            type=positive(int, 0, 100),
            default=3,
            metavar="K",
            help="speed: re-run each candidate's case alone K times in both cells after the "
            "main cases; it is confirmed only if the minimum of the repeats is still slower by "
            "both thresholds (0: no re-run, nothing confirmed; default: %(default)s)",
        )
        group.add_argument(
            "--speed-budget",
            type=positive(float, 0.0),
            default=DEFAULT_SPEED_BUDGET_S,
            metavar="S",
            help="speed: re-run alone only the candidates whose re-runs fit S seconds (by the "
            "main run's times), the largest ratios first; a re-run past S is not started. Those "
            "left are reported as not re-measured (default: %(default)s)",
        )
        group.add_argument(
            "--no-speed",
            dest="speed_repeats",
            action="store_const",
            const=0,
            default=argparse.SUPPRESS,
            help="speed: no re-run at all (as --speed-repeats 0): candidates are counted, none "
            "confirmed",
        )


def add_require_gpu_option(group: argparse._ActionsContainer) -> None:
    """--require-gpu, shared by `validate` and `report`: no sign-off exit without GPU evidence."""
    group.add_argument(
        "--require-gpu",
        action="store_true",
        help="exit 1 when GPU cases were skipped for want of a GPU or driver (verdict line: NOT "
        "SIGNED OFF — no GPU); without it such a run exits 0, as on a CPU-only machine where "
        "only the pins can be verified (skips for a declared requirement, such as a backend "
        "floor, arch or SM, never count)",
    )


def add_selector_args(parser: argparse.ArgumentParser) -> None:
    """The matrix selectors shared by plan, validate, report and later commands."""
    from validate.model.axes import REGISTRY

    group = parser.add_argument_group("matrix selection")
    group.add_argument(
        "--matrix",
        type=caller_path,
        metavar="FILE",
        help="matrix TOML (default: the embedded default)",
    )
    group.add_argument(
        "--rules", type=caller_path, metavar="FILE", help="rules TOML (default: the embedded rules)"
    )
    for axis in REGISTRY:
        group.add_argument(
            f"--{axis.name}",
            action="append",
            metavar="V[,V]",
            help=f"narrow or override the {axis.name} axis (repeatable, comma list; e.g. {axis.example})",
        )


def add_tier_arg(parser: argparse.ArgumentParser) -> None:
    """`--tier NAME`: only the cells of a tier declared in the matrix's [tiers] (plan/tiers.py)."""
    parser.add_argument(
        "--tier",
        metavar="NAME",
        help="run/show only the cells of this tier of the matrix's [tiers] (e.g. pr: a cover of "
        "every value pair); default: every planned cell",
    )


def build_parser(command: str | None = None) -> OneLineParser:
    """The parser; with `command` (a known sub-command name) only that sub-command is added."""
    parser = OneLineParser(
        prog="cudnn-matrix",
        description="Release validation for the cuDNN frontend across a declared matrix.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_global_argument(
        "-v", "--verbose", action="count", default=0, help="more logging (also after COMMAND)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    sub.required = True
    modules = (_COMMANDS[command],) if command in _COMMANDS else _COMMAND_MODULES
    for name in modules:
        importlib.import_module(name).register(sub)
    return parser


def _command_of(argv: Sequence[str]) -> str | None:
    """The sub-command a command line names: its first word after the global flags."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI. Its stdout and stderr pass through textsafe.SafeStream while it runs: secrets are
    redacted and no control character (an escape sequence a case printed) reaches the terminal."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = SafeStream(sys.stdout), SafeStream(sys.stderr)
    try:
        return _main(argv)
    finally:
        sys.stdout, sys.stderr = streams


class _Terminated(KeyboardInterrupt):
    """SIGTERM, taken as Ctrl-C is: a cancelled CI job, `scancel`, `timeout` end the running cases
    and keep the finished results (the default action would drop the known-issue stamping and the
    last progress line, and leave the cases to their guard)."""


#: After Ctrl-C or SIGTERM the tool has this long to end its cases, keep its results and exit;
#: past it, it removes its half-built folders and exits all the same (`_arm_exit`).
EXIT_GRACE_S: Final = 60.0
_EXIT_ARMED = threading.Event()


def _arm_exit(code: int) -> None:
    """However the interrupt unwinds (a thread that holds a lock the unwinding needs, a child
    that ignores its signal), the tool exits with `code` within EXIT_GRACE_S of the signal: no
    run is left hanging, and no half-built folder is left behind."""
    if _EXIT_ARMED.is_set():
        return
    _EXIT_ARMED.set()

    def expire() -> None:
        from validate import children, scratch

        with contextlib.suppress(Exception):
            print(
                f"cudnn-matrix: still unwinding {EXIT_GRACE_S:.0f} s after the signal: exiting",
                file=sys.__stderr__,
                flush=True,
            )
        children.end_all()
        scratch.remove_all()
        os._exit(code)

    timer = threading.Timer(EXIT_GRACE_S, expire)
    timer.daemon = True
    timer.start()


def _interrupt(_signum: int, _frame: object) -> NoReturn:
    _arm_exit(130)
    raise KeyboardInterrupt


def _terminate(_signum: int, _frame: object) -> NoReturn:
    _arm_exit(143)
    raise _Terminated


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser(_command_of(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    before = signal.getsignal(signal.SIGTERM)
    main_thread = threading.current_thread() is threading.main_thread()
    # an ignored SIGINT (a job started in the background) stays ignored
    own_int = main_thread and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if main_thread:
        signal.signal(signal.SIGTERM, _terminate)
    if own_int:
        signal.signal(signal.SIGINT, _interrupt)
    try:
        rc: int = args.func(args)
    except ValidateError as exc:
        print(f"cudnn-matrix: error: {exc}", file=sys.stderr)
        return exc.return_code
    except KeyboardInterrupt as exc:
        terminated = isinstance(exc, _Terminated)
        print(f"cudnn-matrix: {'terminated' if terminated else 'interrupted'}", file=sys.stderr)
        from validate import children, scratch

        children.end_all()  # an installer the signal did not reach stops writing first
        scratch.remove_all()  # a half-built environment or image context goes with the tool
        # Exit now: the running cases were killed and every finished result is fsynced; a worker
        # thread still unwinding must not hold the exit (interpreter shutdown joins them all).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(143 if terminated else 130)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, before)
        if own_int:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    return rc
