"""`cudnn-matrix validate`: plan -> environment per cell -> run cases -> known issues -> verdict.

One small function per stage; each takes the previous stage's value plus the config, so each
can be tested alone. Results are appended (and fsynced) as each case finishes, so a killed run
loses nothing and `--resume` completes it.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import os
import platform
import shlex
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from validate import __version__
from validate.config import ValidateConfig
from validate.env.sources import (
    BackendSource,
    FrontendSource,
    parse_backend_source,
    parse_frontend_source,
    short_version,
)
from validate.env.venvs import EnvHandle, EnvSpec, cache_root, ensure_env
from validate.errors import ConfigError, EnvBuildError
from validate.execute.cases import (
    SHIPPED_CASES,
    Case,
    discover_cases,
    discover_samples,
    select_cases,
)
from validate.execute.records import now_stamp, record_all
from validate.execute.runner import RunOptions, RunTarget, run_cases
from validate.judge.known_issues import KnownIssue, apply_known_issues, load_known_issues
from validate.log import step
from validate.model.axes import AXES
from validate.model.matrix import Cell, load_matrix
from validate.model.outcome import Outcome
from validate.model.results import CaseResult, ResultStore, load_results, write_json
from validate.plan.host import (
    HostFacts,
    cell_skip_reason,
    default_jobs,
    detect_host,
    gpu_skip_reason,
    python_version_of,
)
from validate.plan.rules import Plan, load_rules, plan_cells

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["SHIPPED_CASES", "ValidateConfig", "env_spec_for", "record_all", "run"]

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parent.parent
_REASON_TAIL = 12  # lines of an install/build log kept in an `error` result's reason


# --- stages -----------------------------------------------------------------------------------


def plan_stage(config: ValidateConfig) -> Plan:
    """Planned and pruned cells for the selectors; the rules read the base python's version for
    cells without a python value (the interpreter their environments are made from)."""
    selectors = config.selectors
    matrix, rules = load_matrix(selectors.matrix), load_rules(selectors.rules)
    return plan_cells(matrix, rules, selectors, python=python_version_of(config.base_python))


def cases_stage(config: ValidateConfig) -> list[Case]:
    """The cases to run: named files/folders, a frontend checkout's samples, else the shipped ones."""
    cases: list[Case] = discover_cases(config.cases) if config.cases else []
    if config.samples is not None:
        cases += discover_samples(config.samples)
    if not config.cases and config.samples is None:
        cases = discover_cases([SHIPPED_CASES])
    cases = select_cases(cases, config.case_names)
    names = [c.name for c in cases]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        msg = f"two cases share the name {dupes[0]!r}; rename one (results are keyed by case name)"
        raise ConfigError(msg)
    return cases


@functools.cache
def _backend_source(text: str, declared: str) -> BackendSource:
    """Parsed once per run and declared version (a library folder's version is read by loading it)."""
    return parse_backend_source(text, declared=declared)


@functools.cache
def _frontend_source(text: str) -> FrontendSource:
    """Parsed once per run (a checkout's ref is resolved with git)."""
    return parse_frontend_source(text)


def env_spec_for(cell: Cell, config: ValidateConfig) -> EnvSpec:
    """The environment a cell needs: the axes the registry marks `env` (cudnn, frontend, cuda,
    python) decide it; driver and arch do not change what is installed."""
    current = config.env_mode == "current"
    backend: BackendSource
    if config.backend_source:
        backend = _backend_source(config.backend_source, cell.cudnn)
    elif current:
        backend = BackendSource(kind="current", version=cell.cudnn)
    else:
        backend = BackendSource(kind="pypi", version=cell.cudnn)
    frontend: FrontendSource = (
        _frontend_source(config.frontend_source)
        if config.frontend_source
        else FrontendSource(kind="pypi", version=cell.frontend)
    )
    base = {"current": config.base_python, "isolated": "isolated"}.get(
        config.env_mode, "system-site-packages"
    )
    return EnvSpec(
        backend=backend,
        frontend=frontend,
        cuda_major=int(cell.cuda.split(".")[0]),
        python=config.base_python,
        python_version=cell.python or None,
        extras=config.extras,
        base=base,
        backend_deps=config.backend_deps and not current,
    )


def _target(cell: Cell, handle: EnvHandle, host: HostFacts) -> RunTarget:
    return RunTarget(
        python=handle.python,
        env=dict(handle.env),
        cell_id=cell.id,
        cell=cell.pins(),
        expected_backend=handle.expected_backend or short_version(cell.cudnn),
        expected_backend_dir=handle.backend_dir,
        expected_frontend=handle.expected_frontend,
        host_arch=host.arch,
        has_gpu=host.has_gpu,
        backend_version=cell.cudnn,
    )


class KnownIssueStore(ResultStore):
    """A ResultStore that judges each result against the known issues before it is written."""

    def __init__(self, path: Path, issues: Sequence[KnownIssue]) -> None:
        super().__init__(path)
        self._issues = issues

    def append(self, result: CaseResult) -> None:
        super().append(apply_known_issues([result], self._issues)[0])


def _git_commit(path: Path) -> str | None:
    try:
        proc = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() or None


def provenance(config: ValidateConfig, host: HostFacts, plan: Plan, run_id: str) -> dict[str, Any]:
    """Who ran what where: written to run.json next to the results."""
    samples_commit = None
    if config.samples is not None:
        marker = config.samples / "COMMIT"
        samples_commit = (
            marker.read_text().strip() if marker.is_file() else _git_commit(config.samples)
        )
    return {
        "run_id": run_id,
        "tool": {"name": "cudnn-matrix", "version": __version__, "commit": _git_commit(REPO_ROOT)},
        "command": "cudnn-matrix " + shlex.join(config.argv),
        "started_at": now_stamp(),
        "host": {
            **host.to_dict(),
            "hostname": platform.node(),
            "cpus": os.cpu_count(),
            "os": platform.platform(),
            "python": platform.python_version(),
        },
        "executor": config.executor,
        "env_mode": config.env_mode,
        "samples": {"path": str(config.samples), "commit": samples_commit}
        if config.samples
        else None,
        "planned": [c.id for c in plan.planned],
        "pruned": [{"id": c.id, **c.pins(), "reason": r} for c, r in plan.pruned],
    }


def run_cells(
    config: ValidateConfig,
    plan: Plan,
    cases: Sequence[Case],
    host: HostFacts,
    store: ResultStore,
    run_id: str,
    *,
    ensure: Callable[[EnvSpec], EnvHandle] | None = None,
) -> None:
    """Build or reuse one environment per cell and run the cases there, cell by cell."""
    if config.executor == "docker":
        from validate.execute.docker_cells import run_cells_docker

        run_cells_docker(config, plan, cases, host, store, run_id)
        return
    ensure = ensure or (
        lambda spec: ensure_env(
            spec,
            config.cache_dir,
            config.wheelhouse,
            installer=config.installer,  # type: ignore[arg-type]
        )
    )
    results_dir = store.path.parent
    no_gpu = gpu_skip_reason(host)
    ran_in: dict[str, str] = {}  # env hash -> cell id that ran the CPU parts there (no-GPU host)
    handles: dict[str, EnvHandle | str] = {}  # env hash -> handle, or the build error
    jobs = config.jobs or default_jobs(host)
    options = RunOptions(
        timeout_s=config.timeout_s,
        jobs=jobs,
        reruns=config.reruns,
        results_dir=results_dir,
        resume=True,  # the store may already hold this run's results (resume or skip records)
        api_logs=config.api_logs,
        run_id=run_id,
        history=cache_root(config.cache_dir) / "durations.json",
    )
    for cell in plan.planned:
        skip = cell_skip_reason(cell, host)
        if skip:
            log.info("skip %s %s: %s", cell.id, cell.label, skip)
            record_all(store, cell, cases, Outcome.SKIP, skip, run_id)
            continue
        spec = env_spec_for(cell, config)
        key = spec.hash
        if no_gpu and key in ran_in:
            reason = f"{no_gpu}: pins checked in cell {ran_in[key]} (same environment)"
            record_all(store, cell, cases, Outcome.SKIP, reason, run_id)
            continue
        if key not in handles:
            try:
                with step(f"environment for {cell.label}"):
                    handles[key] = ensure(spec)
            except EnvBuildError as exc:  # the cell's cases become `error`; the run goes on
                lines = str(exc).strip().splitlines() or ["?"]
                handles[key] = "\n".join(
                    [f"environment build failed: {lines[0]}", *lines[1:][-_REASON_TAIL:]]
                )
                log.error("%s", handles[key])
        handle = handles[key]
        if isinstance(handle, str):
            record_all(store, cell, cases, Outcome.ERROR, handle, run_id)
            continue
        ran_in.setdefault(key, cell.id)
        with step(f"cell {cell.id}: {cell.label} ({len(cases)} cases, {jobs} at once)"):
            run_cases(cases, _target(cell, handle, host), options, store)


def run(config: ValidateConfig) -> int:
    """The whole job; returns the sign-off exit code (0 signed off, 1 regressions/errors)."""
    from validate.judge.signoff import decide, summary  # the report side is only needed at the end

    if config.executor == "auto":
        from validate.execute import docker_gpu_ready

        config = replace(config, executor="docker" if docker_gpu_ready() else "local")
    plan = plan_stage(config)
    cases = cases_stage(config)
    host = detect_host()
    run_id = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    # like `run` and `report`: under the working directory (the checkout, for nox), never inside
    # an installed package
    results_dir = config.results_dir or Path("reports") / "runs" / run_id
    if config.resume and config.results_dir is None:
        msg = "validate: --resume needs --results DIR (the folder of the run to complete)"
        raise ConfigError(msg)
    results_dir.mkdir(parents=True, exist_ok=True)
    meta_path = results_dir / "run.json"
    meta = provenance(config, host, plan, run_id)
    if config.resume and meta_path.is_file():
        meta = {**json.loads(meta_path.read_text(encoding="utf-8")), "resumed_at": now_stamp()}
    write_json(meta_path, meta)
    log.info(
        "run %s: %d planned cells, %d pruned, %d cases -> %s",
        run_id,
        len(plan.planned),
        len(plan.pruned),
        len(cases),
        results_dir,
    )
    start = time.monotonic()
    store = KnownIssueStore(results_dir / "results.jsonl", load_known_issues(config.known_issues))
    run_cells(config, plan, cases, host, store, meta["run_id"])
    store.seal()  # every case has ended: the folder's lines verify wherever it is read
    results = list({r.key: r for r in load_results([results_dir])}.values())  # later wins
    write_json(meta_path, {**meta, "finished_at": now_stamp(), "wall_s": time.monotonic() - start})
    print(cell_summary(results, plan))
    verdict = decide(results)
    print(summary(verdict))
    print(f"results: {results_dir}")
    return verdict.exit_code


def cell_summary(results: Sequence[CaseResult], plan: Plan) -> str:
    """One line per cell: its pins and how many cases got each outcome."""
    from tabulate import tabulate

    by_cell: dict[str, list[CaseResult]] = {}
    for result in results:
        by_cell.setdefault(result.cell_id, []).append(result)
    axes = [
        a for a in AXES if any(getattr(c, a) for c in plan.planned)
    ]  # an unused optional: no column
    rows = []
    for cell in plan.planned:
        got = by_cell.get(cell.id, [])
        counts = {o: sum(r.outcome is o for r in got) for o in Outcome}
        text = ", ".join(f"{n} {o}" for o, n in counts.items() if n) or "not run"
        reasons = sorted({r.reason for r in got if r.outcome is Outcome.SKIP and r.reason})
        note = reasons[0][:70] if len(reasons) == 1 and counts[Outcome.SKIP] == len(got) else ""
        rows.append([cell.id, *(getattr(cell, a) for a in axes), text, note])
    headers = ["cell", *axes, "outcomes", "note"]
    return str(tabulate(rows, headers=headers, tablefmt="github"))
