"""Inside a cell's container: run the cases the run's config names, with its options.

The docker executor writes one JSON object next to the cell's results (`payload`): the run's
ValidateConfig as the container sees it (execute.docker.container_config), the backend pin
every case process must load, and the run id. `cudnn-matrix run --config FILE` reads it here;
no option crosses as an argv string, so --case, --timeout, --reruns and the rest mean inside
exactly what they meant on the host.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Final

from validate.config import ValidateConfig
from validate.env.target import ExecTarget
from validate.errors import ConfigError
from validate.execute.cases import cases_for
from validate.execute.jobs import run_jobs, run_options
from validate.execute.runner import FAILING
from validate.execute.slots import plan_ledger
from validate.model.runs import open_run
from validate.plan.host import detect_host

if TYPE_CHECKING:
    from validate.model.results import CaseResult

__all__ = ["CONFIG_FILE", "payload", "read_payload", "run_payload"]

#: The payload's file name in the cell's results folder (mounted as /results).
CONFIG_FILE: Final = "config.json"


def payload(config: ValidateConfig, expected_backend: str | None, run_id: str) -> str:
    """The one JSON object a container receives."""
    data = {"config": config.to_dict(), "expected_backend": expected_backend, "run_id": run_id}
    return json.dumps(data, indent=2, sort_keys=True)


def read_payload(path: Path) -> tuple[ValidateConfig, str | None, str]:
    """(config, expected backend, run id) from a payload file; ConfigError when malformed."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        config = ValidateConfig.from_dict(data["config"])
        expected, run_id = data.get("expected_backend"), str(data.get("run_id", ""))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        msg = f"run --config {path}: not a run config ({exc})"
        raise ConfigError(msg) from exc
    if config.results_dir is None:
        msg = f"run --config {path}: the config names no results folder"
        raise ConfigError(msg)
    return config, expected, run_id


def run_payload(path: Path) -> int:
    """Run the payload's cases in this interpreter; 1 when any failed (as `validate run`)."""
    config, expected, run_id = read_payload(path)
    assert config.results_dir is not None  # read_payload checked it
    cases = cases_for(config)
    host = detect_host()  # inside the container: the GPUs the executor made visible
    target = ExecTarget(
        python=Path(sys.executable),
        expected_backend=expected,
        host_arch=host.arch,
        has_gpu=host.has_gpu,
    )
    # the GPUs the executor made visible (the cell's placement), each booked on its own
    bound, ledger = plan_ledger(host, jobs=config.jobs)
    with open_run(config.results_dir, run_id=run_id or None) as run:  # the cell's folder
        options = run_options(config, results_dir=run.folder, run_id=run.id, slots=bound.slots)
        # every kind, suites too: the same step from cases to jobs as on the host
        results: list[CaseResult] = run_jobs(cases, target, options, run.store, ledger=ledger)
        run.store.seal()  # every case has ended: the folder's lines verify wherever it is read
    bad = sum(r.outcome in FAILING for r in results)
    print(f"{len(results)} cases, {bad} failing; results in {run.store.path}", file=sys.stderr)
    return 1 if bad else 0
