"""`cudnn-matrix known-issues suggest`: where stored results contradict the known-issue database.

For every known issue whose evidence contradicts its declared backend range, frontends or archs,
print the whole `[[issue]]` entry with the tightest range the evidence supports, each changed bound
explained in comments (last good / first bad, last bad / first good, with cases, cells and runs;
"unknown" where the evidence gives no bound). The database is never edited.
Exit 0: nothing contradicts it; 1: suggestions printed; 2: bad input.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from validate.cli import caller_path
from validate.judge.suggest import render_suggestion, suggest
from validate.report.store import load_known_issue_db, load_runs

if TYPE_CHECKING:
    import argparse

__all__ = ["register"]


def _suggest(args: argparse.Namespace) -> int:
    runs = load_runs([Path(p) for p in args.results])
    issues = load_known_issue_db(Path(args.known_issues) if args.known_issues else None, runs.runs)
    evidence = [(item.result, item.run.run_id) for item in runs.items]
    found = [s for ki in issues if (s := suggest(ki, evidence)) is not None]
    ids = ", ".join(r.run_id for r in runs.runs)
    if not found:
        print(
            f"no known issue is contradicted by the evidence ({len(issues)} issue(s), "
            f"{len(evidence)} result(s), run(s) {ids})"
        )
        return 0
    print(
        f"# {len(found)} of {len(issues)} known issue(s) contradicted by {len(evidence)} "
        f"result(s) of run(s) {ids}; corrected entries follow (the database is not edited)"
    )
    for s in found:
        print()
        sys.stdout.write(render_suggestion(s))
    return 1


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the `known-issues` command group and its `suggest` sub-command."""
    parser = subparsers.add_parser(
        "known-issues",
        help="check the known-issue database against stored results",
        description="Check the known-issue database against stored results.",
    )
    sub = parser.add_subparsers(dest="ki_command", metavar="SUBCOMMAND", parser_class=type(parser))
    sub.required = True
    suggest_parser = sub.add_parser(
        "suggest",
        help="print corrected [[issue]] entries where the evidence contradicts the database",
        description=__doc__,
    )
    suggest_parser.add_argument(
        "--results",
        nargs="+",
        required=True,
        type=caller_path,
        metavar="RUN",
        help="run folder(s) to merge, oldest first (later results for a cell x case win)",
    )
    suggest_parser.add_argument(
        "--known-issues",
        type=caller_path,
        metavar="FILE",
        help="known-issues TOML (default: the newest run's snapshot, else matrix/known_issues.toml)",
    )
    suggest_parser.set_defaults(func=_suggest)
