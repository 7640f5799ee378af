"""`validate --executor docker`: per cell, build (or reuse) its image and run the runner inside.

The container's runner writes `<run>/cells/<cell id>/results.jsonl`; each result is stamped with
the cell and run, then appended to the run's store (where known issues apply), so the run's
results.jsonl holds everything. A failed image build is an `error` for that cell's cases, with
the build log's tail as the reason, never a product failure; the run goes on.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Final

from validate.env.sources import parse_backend_source, parse_frontend_source, short_version
from validate.errors import DockerError, EnvBuildError, ImageBuildError
from validate.execute import ExecRequest
from validate.execute.cases import SHIPPED_CASES
from validate.execute.records import record_all
from validate.log import step
from validate.model.outcome import Outcome
from validate.model.results import CaseResult, load_results
from validate.plan.host import cell_skip_reason

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from validate.config import ValidateConfig
    from validate.env.builder import ImageBuilder
    from validate.execute.cases import Case
    from validate.execute.docker import DockerExecutor
    from validate.model.matrix import Cell
    from validate.model.results import ResultStore
    from validate.plan.host import HostFacts
    from validate.plan.rules import Plan

__all__ = ["run_cells_docker"]

log = logging.getLogger(__name__)

_RESULTS: Final = "/results"
_REASON_LINES: Final = 12  # of the build log's tail, in an error result's reason


def _runner_args(config: ValidateConfig) -> tuple[str, ...]:
    jobs = config.jobs or os.cpu_count() or 1
    args = ["--jobs", str(jobs), "--timeout", str(config.timeout_s)]
    args += ["--reruns", str(config.reruns), "--resume"]  # resume: the cell folder may hold some
    return (*args, *(() if config.api_logs else ("--no-api-logs",)))


def _host_path(path: str, cell_dir: Path) -> str:
    """A container path under /results as the same file on the host."""
    if path and (path == _RESULTS or path.startswith(_RESULTS + "/")):
        return str(cell_dir) + path[len(_RESULTS) :]
    return path


def _collect(
    store: ResultStore, cell: Cell, cases: Sequence[Case], cell_dir: Path, run_id: str, tail: str
) -> None:
    """Stamp the container's results with cell and run, append them; missing cases are errors."""
    done = store.done_keys()
    seen: set[str] = set()
    for result in load_results([cell_dir]):
        stamped: CaseResult = result.with_(
            cell_id=cell.id,
            cell=cell.pins(),
            run_id=run_id,
            log_path=_host_path(result.log_path, cell_dir),
        )
        seen.add(stamped.case)
        if stamped.key not in done:
            store.append(stamped)
            done.add(stamped.key)
    missing = [case for case in cases if case.name not in seen]
    if missing:
        last = tail.strip().splitlines()[-1:] or ["no output"]
        reason = f"runner in the container recorded no result: {last[0][:200]}"
        record_all(store, cell, missing, Outcome.ERROR, reason, run_id)


def run_cells_docker(
    config: ValidateConfig,
    plan: Plan,
    cases: Sequence[Case],
    host: HostFacts,
    store: ResultStore,
    run_id: str,
    *,
    builder: ImageBuilder | None = None,
    executor: DockerExecutor | None = None,
) -> None:
    """One image per distinct pin set, then the cell's cases in a container from it."""
    from validate.env.builder import ImageBuilder
    from validate.execute.docker import DockerExecutor

    own = builder is None
    builder = builder or ImageBuilder(wheelhouse=config.wheelhouse)
    executor = executor or DockerExecutor(client=builder.client)  # DockerError: no daemon
    try:
        _run_all(config, plan, cases, host, store, run_id, builder, executor)
    finally:
        if own:
            builder.close()


def _run_all(
    config: ValidateConfig,
    plan: Plan,
    cases: Sequence[Case],
    host: HostFacts,
    store: ResultStore,
    run_id: str,
    builder: ImageBuilder,
    executor: DockerExecutor,
) -> None:
    backend = (
        parse_backend_source(config.backend_source, declared=plan.planned[0].cudnn)
        if config.backend_source and plan.planned
        else None
    )
    frontend = parse_frontend_source(config.frontend_source) if config.frontend_source else None
    case_roots = tuple(config.cases) or (() if config.samples else (SHIPPED_CASES,))
    images: dict[str, str | ImageBuildError | EnvBuildError] = {}  # spec tag -> built tag/error
    runs_dir = store.path.parent / "cells"
    for cell in plan.planned:
        skip = cell_skip_reason(cell, host)
        if skip:
            record_all(store, cell, cases, Outcome.SKIP, skip, run_id)
            continue
        try:
            spec = builder.spec_for(
                cell,
                backend=backend,
                frontend=frontend,
                base_image=config.base_image,  # None: base_image_for chooses
            )
        except EnvBuildError as exc:  # a wheel the wheelhouse could not provide
            record_all(
                store, cell, cases, Outcome.ERROR, f"image inputs: {exc}".splitlines()[0], run_id
            )
            continue
        cell_dir = runs_dir / cell.id
        cell_dir.mkdir(parents=True, exist_ok=True)
        if spec.tag not in images:
            with step(f"image for {cell.label}"):
                try:
                    images[spec.tag] = builder.ensure(spec, log_path=cell_dir / "build.log")
                except ImageBuildError as exc:
                    images[spec.tag] = exc
        image = images[spec.tag]
        if not isinstance(image, str):
            lines = str(image).strip().splitlines()
            reason = "\n".join([lines[0], *lines[1:][-_REASON_LINES:]])
            record_all(store, cell, cases, Outcome.ERROR, f"image build failed: {reason}", run_id)
            continue
        request = ExecRequest(
            cell=cell,
            cases=case_roots,
            results_dir=cell_dir,
            expect_backend=short_version(cell.cudnn),
            samples=config.samples,
            image=image,
            runner_args=_runner_args(config),
            timeout_s=config.timeout_s * max(1, len(cases)) * (config.reruns + 1) + 300,
        )
        with step(f"cell {cell.id}: {cell.label} in {image} ({len(cases)} cases)"):
            try:
                ran = executor.run(request)
            except DockerError as exc:
                record_all(
                    store, cell, cases, Outcome.ERROR, f"container: {exc}".splitlines()[0], run_id
                )
                continue
        if ran.timed_out:
            log.warning("cell %s: the container ran out of time and was killed", cell.id)
        _collect(store, cell, cases, cell_dir, run_id, ran.tail)
