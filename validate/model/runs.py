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
import logging
import os
import secrets
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Final

from validate.errors import ConfigError
from validate.model.results import ResultStore

if TYPE_CHECKING:
    from types import TracebackType

__all__ = ["DEFAULT_RUNS_ROOT", "LOCK_FILE", "Run", "claim_run_dir", "new_run_id", "open_run"]

log = logging.getLogger(__name__)

#: Where a run without --results goes, under the working directory (the checkout, for nox), never
#: inside an installed package; `report` reads the newest run from here.
DEFAULT_RUNS_ROOT: Final = Path("reports") / "runs"
_TRIES: Final = 16
#: The run folder's lock (flock, held while the run is open; the kernel drops it when the process
#: dies, so a killed run never leaves its folder locked).
LOCK_FILE: Final = ".run.lock"


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
