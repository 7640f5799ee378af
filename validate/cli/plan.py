"""`cudnn-matrix plan`: show which cells the matrix plans and, with --show-pruned, why others are gone."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from tabulate import tabulate

from validate.cli import add_selector_args, add_tier_arg, caller_path, positive, writable_file
from validate.config import Selectors
from validate.errors import ConfigError
from validate.model.axes import AXES, REGISTRY
from validate.model.matrix import Cell, load_matrix
from validate.plan.rules import Plan, load_rules, plan_cells

if TYPE_CHECKING:
    import argparse

    from validate.dispatch.runners import Runners

__all__ = ["plan_rows", "register", "render"]

log = logging.getLogger(__name__)

Format = Literal["table", "json"]
#: Axes each emitted job selects itself (its arch, environment and drivers).
_PER_JOB = frozenset({"arch", "driver", *(a.name for a in REGISTRY if a.env)})


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `plan` sub-command."""
    parser = subparsers.add_parser("plan", help="list the planned (and pruned) cells of the matrix")
    add_selector_args(parser)
    parser.add_argument(
        "--format", choices=("table", "json"), default="table", help="output format"
    )
    parser.add_argument(
        "--show-pruned", action="store_true", help="also list pruned cells with their reasons"
    )
    add_tier_arg(parser)
    _add_pipeline_args(parser)
    parser.set_defaults(func=run)


def _add_pipeline_args(parser: argparse.ArgumentParser) -> None:
    """Runner pools and the CI files emitted from the plan (dispatch/runners.py, dispatch/ci.py)."""
    group = parser.add_argument_group("runners and CI pipelines")
    group.add_argument(
        "--runners",
        type=caller_path,
        metavar="FILE",
        help="runner pools per arch (matrix/runners.toml): cells of an arch without one are "
        "pruned; --emit reads matrix/runners.toml when this is left out",
    )
    group.add_argument(
        "--emit",
        choices=("gitlab", "github"),
        help="write a CI file instead of the plan: a GitLab child pipeline (for the parent's "
        "trigger: include: artifact) or a GitHub Actions workflow",
    )
    group.add_argument(
        "--out", type=caller_path, metavar="FILE", help="--emit: write here (default stdout)"
    )
    group.add_argument(
        "--shards",
        type=positive(int, 1, 1000),
        default=1,
        metavar="N",
        help="--emit: jobs per arch x environment, each `validate --shard i/N` (default 1)",
    )
    group.add_argument(
        "--tool",
        default="cudnn-matrix",
        metavar="CMD",
        help="--emit: how jobs call the tool (CUDNN_MATRIX; default %(default)s)",
    )
    group.add_argument(
        "--job-args",
        default="",
        metavar="ARGS",
        help="--emit: flags every job adds to validate (CUDNN_MATRIX_ARGS), e.g. '--cases DIR'",
    )
    group.add_argument(
        "--install",
        default="",
        metavar="CMD",
        help="--emit: a shell line every job runs first, e.g. 'python3 -m pip install cudnn-matrix'",
    )
    group.add_argument(
        "--durations",
        metavar="FILE",
        help="--emit: the case durations every shard balances by (a file in the checkout), so "
        "every job splits the same way; default: equal durations, which balances by count",
    )


def _in_clone(path: Path | None) -> str | None:
    """--matrix/--rules as a CI job reads them from its own clone: a file under the folder the
    emitter runs in (the checkout) by its path from there, as typed; one elsewhere absolute."""
    if path is None:
        return None
    return str(path.relative_to(Path.cwd())) if path.is_relative_to(Path.cwd()) else str(path)


def _row(cell: Cell, status: str, reason: str) -> dict[str, str]:
    return {"id": cell.id, **cell.pins(), "status": status, "reason": reason}


def plan_rows(plan: Plan, *, show_pruned: bool) -> list[dict[str, str]]:
    """Planned cells first, then (if asked) pruned ones; each row has the JSON keys."""
    rows = [_row(cell, "planned", "") for cell in plan.planned]
    if show_pruned:
        rows += [_row(cell, "pruned", reason) for cell, reason in plan.pruned]
    return rows


def render(rows: list[dict[str, str]], fmt: Format) -> str:
    """Rows as a plain table (tabulate) or a JSON list of objects."""
    match fmt:
        case "json":
            return json.dumps(rows, indent=2)
        case "table":
            # the axes some row carries: an optional axis no cell has gets no column
            axes = [a for a in AXES if any(a in r for r in rows)]
            columns = ("id", *axes, "status", "reason")
            return tabulate(
                [[r.get(c, "") for c in columns] for r in rows],
                headers=columns,
                tablefmt="simple",
                disable_numparse=True,
            )


def _emit(text: str) -> None:
    """Print to stdout; a reader that stops early (`| head`) is not an error."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # https://docs.python.org/3/library/signal.html#note-on-sigpipe
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def run(args: argparse.Namespace) -> int:
    """Load the matrix and rules, plan, print; bad input raises MatrixError/ConfigError (exit 2)."""
    selectors = Selectors.from_args(args)
    matrix = load_matrix(selectors.matrix)
    rules = load_rules(selectors.rules)
    plan = plan_cells(matrix, rules, selectors)
    runners: Runners | None = None
    if args.emit is not None or args.runners is not None:
        from validate.dispatch.runners import load_runners, prune_without_runner
        from validate.execute import EXECUTORS

        runners = load_runners(args.runners, executors=(*EXECUTORS, "auto"))
        plan = prune_without_runner(plan, runners)
    coverage, left_out = "", 0
    if args.tier is not None:
        from validate.plan.tiers import apply_tier

        plan, out, choice = apply_tier(matrix, rules, plan, args.tier)
        coverage = choice.summary(len(choice.cells) + len(choice.left_out))
        left_out = len(out)
    if args.emit is not None and runners is not None:
        return _emit_pipeline(args, selectors, plan, runners, coverage)
    fmt: Format = "json" if args.format == "json" else "table"
    _emit(render(plan_rows(plan, show_pruned=args.show_pruned), fmt))
    if fmt == "table":  # JSON stays alone: `nox -s plan` merges stderr into stdout
        if coverage:
            log.info("%s", coverage)
        log.info(
            "%d cells: %d planned, %d pruned%s (%s)",
            len(plan.planned) + len(plan.pruned) + left_out,
            len(plan.planned),
            len(plan.pruned),
            f", {left_out} left out by tier {args.tier}" if args.tier else "",
            matrix.path,
        )
    return 0


def _emit_pipeline(
    args: argparse.Namespace, selectors: Selectors, plan: Plan, runners: Runners, coverage: str = ""
) -> int:
    """Write the CI file of the plan; no planned cell is an error (an empty pipeline is invalid)."""
    from validate.dispatch.ci import PipelineOptions, github_workflow, gitlab_pipeline, to_yaml
    from validate.dispatch.runners import job_groups

    if args.out is not None:
        writable_file("--out", args.out)
    if not plan.planned:
        reasons = sorted({reason for _, reason in plan.pruned})[:3]
        msg = f"--emit {args.emit}: no cell is left to run ({'; '.join(reasons) or 'empty matrix'})"
        raise ConfigError(msg)
    forwarded = {a: v for a, v in selectors.values.items() if a not in _PER_JOB}
    tier = [f"--tier {args.tier}"] if args.tier else []  # each job runs its part of the tier
    job_args = " ".join(
        [*(f"--{a} {','.join(v)}" for a, v in forwarded.items()), *tier, args.job_args]
    )
    options = PipelineOptions(
        shards=args.shards,
        tool=args.tool,
        validate_args=job_args.strip(),
        matrix=_in_clone(args.matrix),
        rules=_in_clone(args.rules),
        durations=args.durations,
        install=args.install,
    )
    groups = job_groups(plan, runners)
    emit = gitlab_pipeline if args.emit == "gitlab" else github_workflow
    doc, notes = emit(groups, options)
    jobs = len(groups) * args.shards
    summary = (
        f"{len(plan.planned)} cells ({len(plan.pruned)} pruned) in {len(groups)} arch x "
        f"environment groups x {args.shards} shard(s) = {jobs} validate jobs, then one report job"
    )
    head = [
        f"Generated by `cudnn-matrix plan --emit {args.emit}`: regenerate it, do not edit it.",
        summary,
        *([f"tier {coverage}"] if coverage else []),
        *(f"pruned: {n} cell(s): {r}" for r, n in _reason_counts(plan).items()),
        *notes,
    ]
    text = to_yaml(doc, head)
    if args.out is None:
        _emit(text.rstrip("\n"))
    else:
        args.out.write_text(text, encoding="utf-8")
        log.info("wrote %s: %d validate jobs for %d cells", args.out, jobs, len(plan.planned))
    return 0


def _reason_counts(plan: Plan) -> dict[str, int]:
    counts: dict[str, int] = {}
    for _, reason in plan.pruned:
        if reason.startswith(
            "no runner for arch"
        ):  # the rules' reasons are in `plan --show-pruned`
            counts[reason] = counts.get(reason, 0) + 1
    return counts
