"""Progress: for `run` (done/total, failures so far) and for the case pool of `validate` (done,
running, left, ETA). rich on a terminal; plain lines otherwise (CI, a log file): one per case for
`run`, for the pool one every `PLAIN_EVERY_S` seconds and one at the end."""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final, TextIO

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from validate.execute.pool import PoolStats
    from validate.model.outcome import Outcome
    from validate.model.results import CaseResult

__all__ = ["PLAIN_EVERY_S", "pool_line", "pool_progress", "progress"]

#: Seconds between two plain progress lines of the pool (not a terminal).
PLAIN_EVERY_S: Final = 30.0


@contextmanager
def progress(
    total: int, *, failing: frozenset[Outcome]
) -> Iterator[Callable[[CaseResult, int, int], None]]:
    """rich progress (done/total, failures) on a terminal; one plain line per case otherwise."""
    failures = 0
    if sys.stderr.isatty():
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
        from rich.text import Text

        from validate.env.progress import _terminal
        from validate.textsafe import display, redact

        bar = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=Console(file=_terminal()),  # the terminal: not through SafeStream's escaping
        )
        task = bar.add_task("running", total=total)

        def show(result: CaseResult, done: int, todo: int) -> None:
            nonlocal failures
            failures += result.outcome in failing
            bar.update(
                task, completed=done, total=todo, description=f"running ({failures} failing)"
            )
            # what SafeStream does for every other line (a reason holds case output), and as
            # Text: a "[...]" in it is no rich markup
            bar.console.print(Text(display(redact(_line(result, done, todo)))))

        with bar:
            yield show
        return

    def plain(result: CaseResult, done: int, todo: int) -> None:
        print(_line(result, done, todo), file=sys.stderr, flush=True)

    yield plain


def _line(result: CaseResult, done: int, todo: int) -> str:
    """One line per result: a newline in a case's file name or its reason is shown as \x0a."""
    from validate.textsafe import display

    reason = f": {result.reason}" if result.reason else ""
    flaky = " [flaky]" if result.flaky else ""
    text = f"{result.case}{reason}"
    return (
        f"[{done}/{todo}] {result.outcome.upper():7} {display(text, keep_newlines=False)}{flaky} "
        f"({result.duration_s:.1f}s)"
    )


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    whole = int(seconds + 0.5)
    hours, rest = divmod(whole, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def pool_line(stats: PoolStats) -> str:
    """`cases: 12 done, 6 running, 30 left, ETA 4:10 (6 slots)`, without the ETA until there is
    a basis for one (the history, or a case finished in this run); once stopped (an interrupt)
    `cases stopped: 12 done, 6 cut, 30 not started (6 slots)`."""
    if stats.stopped:
        return (
            f"cases stopped: {stats.done} done, {stats.cut} cut, {stats.left} not started "
            f"({stats.slots} slots)"
        )
    eta = f", ETA {_clock(stats.eta_s)}" if stats.eta_s is not None else ""
    return (
        f"cases: {stats.done} done, {stats.running} running, {stats.left} left{eta} "
        f"({stats.slots} slots)"
    )


@contextmanager
def pool_progress(
    *, tty: bool | None = None, every_s: float = PLAIN_EVERY_S, stream: TextIO | None = None
) -> Iterator[Callable[[PoolStats], None]]:
    """The pool's `on_change`. On a terminal one row of the process's one rich display
    (env.progress: rich allows one live display at a time, and the environments built in the
    background show their rows in it too; log lines print above it). Else a plain line on stderr
    at most every `every_s` seconds and a last one on leaving."""
    out = stream or sys.stderr
    if tty is None:
        from validate.env.progress import interactive

        tty = interactive()
    if tty:
        from validate.env.progress import activity

        with activity("cases") as act:

            def show(stats: PoolStats) -> None:
                total = stats.done + stats.running + stats.left
                act.update(pool_line(stats).removeprefix("cases: "), done=stats.done, total=total)

            yield show
        return
    lock = threading.Lock()
    last_at = -float("inf")
    last: list[PoolStats] = []

    def plain(stats: PoolStats) -> None:
        nonlocal last_at
        with lock:
            last[:] = [stats]
            now = time.monotonic()
            if now - last_at < every_s:
                return
            last_at = now
        print(pool_line(stats), file=out, flush=True)

    try:
        yield plain
    finally:
        if last:
            print(pool_line(last[0]), file=out, flush=True)
