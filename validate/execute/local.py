"""LocalExecutor: the runner on this host, each case in the cell environment's interpreter.

A thin adapter over `validate.execute.runner.run_cases` (what `validate run` does), so the cell
environment needs only the case's own packages: orchestration stays in this process, and each
case runs in `ExecRequest.python` (default: this interpreter) with `ExecRequest.env` added.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import sys
import time
from pathlib import Path

from validate.errors import ConfigError
from validate.execute import ExecRequest, ExecResult

__all__ = ["LocalExecutor"]

logger = logging.getLogger(__name__)


def _runner_flags(args: tuple[str, ...]) -> argparse.Namespace:
    """The `validate run` flags an ExecRequest may carry (runner_args); others are refused."""
    parser = argparse.ArgumentParser(prog="validate run", add_help=False)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--reruns", type=int, default=0)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--no-api-logs", dest="api_logs", action="store_false")
    known, unknown = parser.parse_known_args(list(args))
    if unknown:
        msg = f"local executor: unsupported runner flags {' '.join(unknown)!r}"
        raise ConfigError(msg)
    return known


class LocalExecutor:
    """Runs the cases of one request on this host; results go to `results_dir/results.jsonl`."""

    name = "local"

    def available(self) -> bool:
        return True

    def run(self, request: ExecRequest) -> ExecResult:
        """Run every case once (plus reruns); a failing case is data in the results, not here."""
        from validate.execute.cases import discover_cases, discover_samples
        from validate.execute.runner import FAILING, RunOptions, RunTarget, run_cases
        from validate.model.results import ResultStore
        from validate.plan.host import detect_host

        flags = _runner_flags(request.runner_args)
        cases = discover_cases(list(request.cases)) if request.cases else []
        if request.samples is not None:
            cases += discover_samples(request.samples)
        host = detect_host()
        target = RunTarget(
            python=request.python or Path(sys.executable),
            env=dict(request.env),
            cell_id=request.cell.id,
            cell=request.cell.pins(),
            expected_backend=request.expect_backend,
            host_arch=host.arch,
            has_gpu=host.has_gpu,
            backend_version=request.cell.cudnn,
        )
        request.results_dir.mkdir(parents=True, exist_ok=True)
        options = RunOptions(
            timeout_s=flags.timeout,
            jobs=flags.jobs,
            reruns=flags.reruns,
            results_dir=request.results_dir,
            resume=flags.resume,
            api_logs=flags.api_logs,
            run_id=dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ"),
        )
        start = time.monotonic()
        store = ResultStore(request.results_dir / "results.jsonl")
        results = run_cases(cases, target, options, store)
        bad = sum(r.outcome in FAILING for r in results)
        tail = f"{len(results)} cases, {bad} failing; results in {store.path}"
        return ExecResult(
            returncode=1 if bad else 0,
            timed_out=False,  # each case has its own limit; request.timeout_s is not enforced here
            duration_s=time.monotonic() - start,
            log_path=None,  # each case keeps its own log under results_dir
            tail=tail,
            results_dir=request.results_dir,
            gpu=target.has_gpu,
        )
