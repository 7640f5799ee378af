"""One attempt of one case: its environment, its process (execute/supervise.py), its evidence on
disk read back, and its verdict (execute/classify.py and the case's kind)."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from validate.config import DEFAULT_TIMEOUT_S
from validate.execute.cases.kinds import KINDS
from validate.execute.cases.script import RESULT_FILE_ENV
from validate.execute.classify import ExecResult, classify
from validate.execute.launch import DEFAULT_CAPTURE_CAP, leftover_note
from validate.execute.limits import process_limit
from validate.execute.resources.capture import verify_pins
from validate.execute.resources.guard import LEFTOVERS_ENV, PARENT_ENV
from validate.execute.supervise import SUPERVISOR

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from validate.env.target import ExecTarget
    from validate.execute.cases import Case
    from validate.execute.placement import Placement
    from validate.execute.slots import CaseUsage, UsageSampler
    from validate.model.outcome import Outcome

__all__ = [
    "RunOptions",
    "captured",
    "case_dir",
    "exception_of",
    "pin_error",
    "run_attempt",
    "verdict",
]

_TAIL_BYTES: Final = 8192


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How to run: limits, parallelism, reruns and where evidence goes."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    jobs: int = 1
    reruns: int = 0
    results_dir: Path
    resume: bool = False
    api_logs: bool = True
    run_id: str = ""
    #: JSON file of case name -> last duration; cases start longest first (None: given order).
    history: Path | None = None
    #: Bytes of output kept per case process, its first and last half (0: all of it).
    capture_cap: int = DEFAULT_CAPTURE_CAP
    #: --cpp-build-timeout: a C++ build's limit (None: limits.cpp_build_limit of timeout_s).
    cpp_build_timeout_s: float | None = None
    #: --tests-startup-timeout: a pytest process's start-up limit (None: limits.startup_limit).
    tests_startup_timeout_s: float | None = None


def case_dir(case: Case, target: ExecTarget, options: RunOptions) -> Path:
    """The case's evidence folder in this cell: its logs, reports and result.json."""
    return options.results_dir / "cases" / (target.cell_id or "local") / case.slug


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - _TAIL_BYTES))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _killed_by_guard(path: Path) -> str:
    """The note for what the case's own supervisor (resources/guard.py) killed after it."""
    try:
        named = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    except OSError:
        return ""
    path.unlink(missing_ok=True)
    return leftover_note(named)


def _case_env(target: ExecTarget, result_file: Path, api_dir: Path | None) -> dict[str, str]:
    # the overlay's library path and preload go in front of the host's (ExecTarget.process_env)
    env = {**target.process_env(), "PYTHONFAULTHANDLER": "1", RESULT_FILE_ENV: str(result_file)}
    env[PARENT_ENV] = str(os.getpid())  # resources/guard.py: the case dies with this process
    env.pop("CUDNN_FRONTEND_LOG_FILE", None)
    if target.expected_backend:
        env["CUDNN_MATRIX_EXPECT_BACKEND"] = target.expected_backend
    if api_dir is not None:  # DOMAIN.md §7: both must be set before the process starts
        env["CUDNN_FRONTEND_LOG_INFO"] = "1"
        env["CUDNN_FRONTEND_LOG_FILE"] = str(api_dir / "fe.log")
        env["CUDNN_LOGLEVEL_DBG"] = "3"
        env["CUDNN_LOGDEST_DBG"] = str(api_dir / "be.log")
    return env


def pin_error(target: ExecTarget, env: Mapping[str, Any]) -> str | None:
    """Why what a case process captured (resources/capture.py) is not the target's pins, or
    None: it is, nothing is pinned, or it captured nothing in the case."""
    if not env or env.get("captured_in") != "case":
        return None
    expected = {
        "backend": target.expected_backend,
        "backend_dir": str(target.backend_dir) if target.backend_dir else None,
        "frontend": target.expected_frontend,
    }
    return verify_pins(env, expected) if any(expected.values()) else None


def run_attempt(
    case: Case,
    target: ExecTarget,
    options: RunOptions,
    folder: Path,
    n: int,
    *,
    api_logs: bool,
    sampler: UsageSampler | None = None,
    placement: Placement | None = None,
) -> tuple[ExecResult, CaseUsage | None]:
    """Attempt `n` of `case` in `folder` (its files suffixed `.n` from the second on): its process
    started and waited for, and how it ended, with what it used where `sampler` watched it.
    `placement`: the GPUs and CPUs its processes run on (the pool's ledger chooses it)."""
    suffix = "" if n == 1 else f".{n}"
    log_path = folder / f"output{suffix}.log"
    report_path = folder / f"report{suffix}.json"
    result_file = folder / f"script-result{suffix}.json"
    leftovers = folder / f"leftovers{suffix}.txt"
    for stale in (report_path, result_file, leftovers):
        stale.unlink(missing_ok=True)
    kind = KINDS[case.kind]
    limit = process_limit(options.timeout_s, case.kind)
    env = _case_env(target, result_file, folder if api_logs else None)
    env[LEFTOVERS_ENV] = str(leftovers)  # resources/guard.py names what it killed after the case
    start = time.monotonic()
    argv = case.command(target.python, report_path, options.timeout_s)
    kernel_file = report_path.with_suffix(".kernel")
    ended = SUPERVISOR.spawn(
        argv,
        env,
        log_path,
        limit,
        kernel_file,
        sampler,
        placement=placement,
        capture_cap=options.capture_cap,
    )
    duration = time.monotonic() - start
    tail = _tail(log_path)
    report: dict[str, Any] | None = None
    if report_path.exists():
        try:
            report = json.loads(report_path.read_text(encoding="utf-8", errors="replace"))
        except ValueError:
            report = None
    result = ExecResult(
        kind=case.kind,
        returncode=ended.returncode,
        timed_out=ended.timed_out,
        timeout_s=options.timeout_s,
        duration_s=duration,
        log_path=log_path,
        tail=tail,
        report=report,
        note="; ".join(n for n in (_killed_by_guard(leftovers), ended.note) if n),
    )
    return kind.gather(result, result_file), ended.usage


def captured(run: ExecResult) -> Mapping[str, Any]:
    """The environment the case process captured about itself (capture.py), if any."""
    return (run.report or {}).get("env") or {}


def verdict(run: ExecResult, target: ExecTarget) -> tuple[Outcome, str]:
    """The attempt's outcome and reason; a pin the case saw broken is its error. The launcher's
    note (processes that outlived the case, output cut to the cap) ends the reason."""
    outcome, reason = classify(run, pin_error=pin_error(target, captured(run)))
    if run.note:
        reason = f"{reason}; {run.note}" if reason else run.note
    return outcome, reason


def exception_of(run: ExecResult) -> dict[str, Any] | None:
    """The exception that ended the case, as its kind's report keeps it; None when none did."""
    source = KINDS[run.kind].exception(run.report or {})
    if not source.get("ename") and not source.get("traceback"):
        return None
    keys = ("ename", "evalue", "cell_index", "cell_source", "traceback")
    return {k: source[k] for k in keys if source.get(k) is not None}
