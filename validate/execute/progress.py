"""Progress for `run`: rich (done/total, failures so far) on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from validate.model.outcome import Outcome
    from validate.model.results import CaseResult

__all__ = ["progress"]


@contextmanager
def progress(
    total: int, *, failing: frozenset[Outcome]
) -> Iterator[Callable[[CaseResult, int, int], None]]:
    """rich progress (done/total, failures) on a terminal; one plain line per case otherwise."""
    failures = 0
    if sys.stderr.isatty():
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=Console(stderr=True),
        )
        task = bar.add_task("running", total=total)

        def show(result: CaseResult, done: int, todo: int) -> None:
            nonlocal failures
            failures += result.outcome in failing
            bar.update(
                task, completed=done, total=todo, description=f"running ({failures} failing)"
            )
            bar.console.print(_line(result, done, todo))

        with bar:
            yield show
        return

    def plain(result: CaseResult, done: int, todo: int) -> None:
        print(_line(result, done, todo), file=sys.stderr, flush=True)

    yield plain


def _line(result: CaseResult, done: int, todo: int) -> str:
    reason = f": {result.reason}" if result.reason else ""
    flaky = " [flaky]" if result.flaky else ""
    return (
        f"[{done}/{todo}] {result.outcome.upper():7} {result.case}{reason}{flaky} "
        f"({result.duration_s:.1f}s)"
    )
