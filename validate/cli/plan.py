"""`cudnn-matrix plan`: show which cells the matrix plans and, with --show-pruned, why others are gone."""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import TYPE_CHECKING, Literal

from tabulate import tabulate

from validate.cli import add_selector_args
from validate.config import Selectors
from validate.model.axes import AXES
from validate.model.matrix import Cell, load_matrix
from validate.plan.rules import Plan, load_rules, plan_cells

if TYPE_CHECKING:
    import argparse

__all__ = ["plan_rows", "register", "render"]

log = logging.getLogger(__name__)

Format = Literal["table", "json"]


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
    parser.set_defaults(func=run)


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
    fmt: Format = "json" if args.format == "json" else "table"
    _emit(render(plan_rows(plan, show_pruned=args.show_pruned), fmt))
    if fmt == "table":  # JSON stays alone: `nox -s plan` merges stderr into stdout
        log.info(
            "%d cells: %d planned, %d pruned (%s)",
            len(plan.planned) + len(plan.pruned),
            len(plan.planned),
            len(plan.pruned),
            matrix.path,
        )
    return 0
