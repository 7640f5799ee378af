"""Run ids and run folders: `open_run` is the one way a command opens a run.

`validate` (and through it each Slurm task and bisect probe), `run`, the in-container runner and
`validate --executor slurm` each open their run here (issue 26: they built the id, the default
folder and the store in four copies). A run id is the UTC second it started plus a random suffix,
and a default folder is claimed with an exclusive `mkdir`, so two runs started in the same second
(two terminals, a CI matrix on one runner) never share a folder nor read each other's results
(issues 25, 30). Ids still sort by start time to the second: the stamp comes first. A folder given
with --results is locked for as long as the run is open, so a second run (a `--resume` started
while the first still writes) is refused instead of interleaving its lines with the first's.
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import json
import logging
import os
import secrets
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from validate.errors import ConfigError
from validate.model.results import ResultStore

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from types import TracebackType

__all__ = [
    "DEFAULT_RUNS_ROOT",
    "LOCK_FILE",
    "RUN_META",
    "Run",
    "check_resumed_pins",
    "claim_run_dir",
    "new_run_id",
    "open_run",
    "refuse_reuse",
    "stored_meta",
]

log = logging.getLogger(__name__)

#: Where a run without --results goes, under the working directory (the checkout, for nox), never
#: inside an installed package; `report` reads the newest run from here.
DEFAULT_RUNS_ROOT: Final = Path("reports") / "runs"
_TRIES: Final = 16
#: The run folder's lock (flock, held while the run is open; the kernel drops it when the process
#: dies, so a killed run never leaves its folder locked).
LOCK_FILE: Final = ".run.lock"
#: What a run folder says about its run (id, command, pins); `validate` and `run` write it.
RUN_META: Final = "run.json"
#: A folder holding either of these holds a run: it is completed with --resume, never reused.
_RUN_MARKS: Final = (RUN_META, "results.jsonl")


def stored_meta(folder: Path) -> dict[str, Any]:
    """The folder's run.json ({} where there is none or it is unreadable)."""
    try:
        meta = json.loads((folder / RUN_META).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def refuse_reuse(results: Path | None, *, resume: bool, command: str = "") -> None:
    """A --results folder that holds a run is taken only with --resume (issue 36): without it the
    new run would overwrite run.json and mix its results with the old ones. ConfigError, before
    anything is built or written."""
    if resume or results is None:
        return
    mark = next((m for m in _RUN_MARKS if (results / m).is_file()), None)
    if mark is None:
        return
    meta = stored_meta(results)
    what = f"run {meta['run_id']}" if meta.get("run_id") else f"a run ({mark})"
    if meta.get("started_at"):
        what += f" of {meta['started_at']}"
    if command == "bisect":
        advice = "choose another folder (a bisect keeps its probes in a folder of its own)"
    else:
        advice = "--resume completes that run, or choose another folder"
    msg = f"--results {results}: holds {what}; {advice}"
    raise ConfigError(msg)


def check_resumed_pins(
    folder: Path, stored: Mapping[str, Sequence[str]], given: Mapping[str, Sequence[str]]
) -> None:
    """--resume with other pins than the stored run's: ConfigError naming both, per axis that
    differs (the new results would be judged together with the old run's)."""
    axes = [
        a
        for a in dict.fromkeys([*stored, *given])
        if set(stored.get(a, ())) != set(given.get(a, ()))
    ]
    if not axes:
        return

    def side(pins: Mapping[str, Sequence[str]]) -> str:
        return ", ".join(f"{a} {','.join(pins.get(a, ())) or 'none'}" for a in axes)

    msg = (
        f"--resume {folder}: the stored run has {side(stored)}, this command {side(given)}; "
        "resume with the run's own pins, or choose another --results folder"
    )
    raise ConfigError(msg)


def new_run_id(now: dt.datetime | None = None) -> str:
    """`20260101T120000Z-1a2b3c`: the start time to the second, then 24 random bits."""
    stamp = (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{secrets.token_hex(3)}"


def claim_run_dir(results: Path | None, root: Path = DEFAULT_RUNS_ROOT) -> tuple[str, Path]:
    """A new run's id and folder. `results` (the user's --results, which --resume reads back) is
    used as given and may exist; otherwise a fresh folder `root/<id>` is created exclusively, with
    a new id on the (unlikely) collision, so no other run can be writing into it."""
    run_id = new_run_id()
    if results is not None:
        return run_id, results
    try:
        root.mkdir(parents=True, exist_ok=True)
        for _ in range(_TRIES):
            folder = root / run_id
            try:
                folder.mkdir()
            except FileExistsError:
                run_id = new_run_id()
                continue
            return run_id, folder
    except OSError as exc:
        msg = f"cannot create a run folder under {root}: {exc.strerror or exc}; pass --results DIR"
        raise ConfigError(msg) from exc
    msg = f"cannot claim a new run folder under {root} after {_TRIES} tries; pass --results DIR"
    raise ConfigError(msg)


@dataclass(frozen=True, kw_only=True)
class Run:
    """An open run: its id, its folder, its results store and the folder's lock (`close`, or
    leave the `with` block, to release it)."""

    id: str
    folder: Path
    _lock_fd: int | None = field(default=None, repr=False)

    @cached_property
    def store(self) -> ResultStore:
        """The run's results.jsonl, opened on first use (opening makes the run's key and its
        disk reserve; a dispatcher that only merges never opens it)."""
        return ResultStore(self.folder / "results.jsonl")

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the last descriptor drops the flock

    def __enter__(self) -> Run:  # noqa: PYI034 - Self needs 3.11 or typing_extensions
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_run(results: Path | None, *, run_id: str | None = None) -> Run:
    """Open a run: `results` (--results, which --resume reads back) used as given, else a fresh
    folder under DEFAULT_RUNS_ROOT claimed for it; `run_id` the id a parent gave it (the docker
    executor's, for the in-container runner), else a new one. ConfigError when another open run
    holds the folder's lock."""
    new_id, folder = claim_run_dir(results)
    # absolute from here on: the run's cases (a pytest suite in its own folder, a container)
    # read and write the folder from elsewhere (issue 36)
    folder = folder.absolute()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        msg = f"--results {folder}: cannot create it ({exc.strerror or exc})"
        raise ConfigError(msg) from exc
    return Run(id=run_id or new_id, folder=folder, _lock_fd=_lock(folder))


def _lock(folder: Path) -> int | None:
    """An exclusive flock on the folder's LOCK_FILE (its descriptor), or None where the file
    system offers no locks (the run goes on unlocked, as it did before locks)."""
    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        log.debug("run folder %s: no lock file (%s)", folder, exc)
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
            msg = (
                f"--results {folder}: another run is writing into it; wait for it to end "
                "(then --resume completes it) or choose another folder"
            )
            raise ConfigError(msg) from exc
        log.debug("run folder %s: no lock (%s)", folder, exc)
        return None
    return fd
