"""The tool's own death is a verdict, not a loop: what a batched kind does on `--resume`.

A batch's process writes a durable start marker before each id (resources/markers.py). When the
tool itself is killed (a test that kills its parent, the OOM killer, a driver fault), the id
each batch process was running has a `start` and no `done`, and no result. On `--resume`:

- such an id found in a batch's markers runs once more, **alone**: in a process of its own, in a
  pool job with nothing beside it (`alone_job`), before the rest, in a folder named `alone-...`;
- such an id found in an `alone-` folder's markers killed the tool twice: it is the `crash`
  "the tool was killed while it ran" (`TOOL_KILLED`), and the rest of the run completes.

So a test that kills the tool ends in a completed run after at most two `--resume`. What the
dead run's processes left running (a test's daemon) is ended then too, found by the launcher
tokens the markers name. An id cut
short by an interrupt is no suspect (the tool marks its process abandoned). Shared by every
batched kind: pytest suites (execute/suite.py) and, next, Catch2 binaries.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from validate.execute import launch
from validate.execute.pool import Job
from validate.execute.resources.markers import tokens, unfinished
from validate.execute.supervise import SUPERVISOR

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence
    from pathlib import Path

__all__ = ["ALONE", "TOOL_KILLED", "Deaths", "alone_job", "find_deaths"]

log = logging.getLogger(__name__)

#: The reason of an id the tool died during twice.
TOOL_KILLED: Final = (
    "the tool was killed while it ran (twice: in a batch, then alone; the run was resumed)"
)
#: The folder prefix of the ids run alone after the tool died (a second death there convicts).
ALONE: Final = "alone-"


@dataclass(frozen=True, kw_only=True)
class Deaths:
    """What the markers under a kind's folder say about earlier deaths of the tool."""

    #: id -> the output of its alone process: the tool died there again; store its crash
    convicted: dict[str, Path] = field(default_factory=dict)
    #: ids the tool died during in a batch: run each once more, alone, before the rest
    again: tuple[str, ...] = ()


def find_deaths(folder: Path, stored: Collection[str]) -> Deaths:
    """Read every `*/record.*.jsonl` marker file under `folder`: the ids without a result in
    `stored` that a process was running when it died with the tool (see the module doc)."""
    shared: set[str] = set()
    alone: dict[str, Path] = {}
    records = sorted(folder.glob("*/record.*.jsonl"))
    left = launch.reap_everywhere({t for r in records for t in tokens(str(r))})
    if left:  # a process that ended with its tool was reaped then: these outlived the tool
        log.warning("%s left by the run that was killed", launch.leftover_note(left))
    for record in records:
        ident = unfinished(str(record))
        if ident is None or ident in stored:
            continue
        if record.parent.name.startswith(ALONE):
            alone[ident] = record.with_name(record.name.replace("record", "output", 1))
        else:
            shared.add(ident)
    if alone:
        log.warning("%d test(s) killed the tool twice: %s", len(alone), ", ".join(sorted(alone)))
    again = tuple(sorted(shared - set(alone)))
    if again:
        why = "were running when the tool was killed: each runs once more, alone"
        log.warning("%d test(s) %s: %s", len(again), why, ", ".join(again))
    return Deaths(convicted=alone, again=again)


def alone_folder(ident: str) -> str:
    """The folder (under the kind's) of `ident`'s alone run."""
    return ALONE + hashlib.sha256(ident.encode()).hexdigest()[:12]


def alone_job(
    name: str,
    ids: Sequence[str],
    run_one: Callable[[str, str], object],
    then: Sequence[Job],
    *,
    gpu_mib: float = 0.0,
) -> Job:
    """One exclusive pool job that runs each id alone (`run_one(id, folder name)`: a process
    of its own, nothing else in the pool beside it, so a second death names one id), then
    hands on `then` (the kind's usual jobs, the ids left out of them)."""

    def run() -> Sequence[Job]:
        for ident in ids:
            if SUPERVISOR.stopped:
                break
            run_one(ident, alone_folder(ident))
        return then

    return Job(
        name=f"{name}: {len(ids)} test(s) the tool died during, alone",
        run=run,
        cases=len(ids),
        gpu_mib=gpu_mib,
        exclusive=True,
    )
