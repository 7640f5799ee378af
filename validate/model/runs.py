"""Run ids and run folders: the one place a command makes them.

`validate`, `run` and `validate --executor slurm` each open a run here (issue 26: they built the
id and the default folder in three copies). A run id is the UTC second it started plus a random
suffix, and a default folder is claimed with an exclusive `mkdir`, so two runs started in the same
second (two terminals, a CI matrix on one runner) never share a folder nor read each other's
results (issues 25, 30). Ids still sort by start time to the second: the stamp comes first.
"""

from __future__ import annotations

import datetime as dt
import secrets
from pathlib import Path
from typing import Final

from validate.errors import ConfigError

__all__ = ["DEFAULT_RUNS_ROOT", "claim_run_dir", "new_run_id"]

#: Where a run without --results goes, under the working directory (the checkout, for nox), never
#: inside an installed package; `report` reads the newest run from here.
DEFAULT_RUNS_ROOT: Final = Path("reports") / "runs"
_TRIES: Final = 16


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
