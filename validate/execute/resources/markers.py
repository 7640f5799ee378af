"""Which id was running when a process died: a durable start marker before each id, its end after.

Stdlib only, and shared by every batched kind: the process that runs many ids (the pytest plugin,
run_pytest.py, which loads this file by its path; a Catch2 binary's runner) writes through
`Markers`, and the tool reads the file back with `unfinished`, after the process ended
(execute/batches.py: the id it was running is its crash or timeout) and on `--resume` after the
tool itself was killed (execute/suite.py: that id runs once more alone; if the tool dies again,
it is the `crash` "the tool was killed while it ran").

The file holds one JSON object per line, each written whole by one write(2) on an O_APPEND
descriptor: `{"ev": "start", "id": ...}` before an id (then fdatasync'd: the marker outlives a
kill -9 of everything, the OOM killer, and a machine that went down), `{"ev": "done", "id": ...}`
after it, other events of the kind's own between them, `{"ev": "abandon"}` where the tool
ended the process itself on an interrupt (`abandon`): an id cut short by Ctrl-C is no suspect,
and `{"ev": "launched", "token": ...}`, the launcher's token of the process (`launched`): what it
left running when the tool died is ended on `--resume`.
"""

from __future__ import annotations

import json
import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "ABANDON",
    "DONE",
    "LAUNCHED",
    "START",
    "Markers",
    "abandon",
    "launched",
    "tokens",
    "unfinished",
]

START = "start"
DONE = "done"
ABANDON = "abandon"
LAUNCHED = "launched"


class Markers:
    """The marker file of one process (see the module doc)."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, event: dict[str, Any], *, sync: bool = False) -> None:
        """One line, whole (one O_APPEND write); `sync`: on disk before this returns."""
        data = (json.dumps(event, default=str) + "\n").encode("utf-8", "replace")
        os.write(self._fd, data)
        if sync:
            os.fdatasync(self._fd)

    def start(self, ident: str, **extra: Any) -> None:
        """Before the id runs: durable (see the module doc)."""
        self.write({"ev": START, "id": ident, **extra}, sync=True)

    def done(self, ident: str, **extra: Any) -> None:
        self.write({"ev": DONE, "id": ident, **extra})

    def close(self) -> None:
        os.fsync(self._fd)
        os.close(self._fd)


def abandon(path: str) -> None:
    """The tool ended the process itself (an interrupt): no id of it was running at a death."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    except OSError:
        return
    try:
        os.write(fd, (json.dumps({"ev": ABANDON}) + "\n").encode())
    finally:
        os.close(fd)


def launched(path: str, token: str) -> None:
    """The launcher's token of the process writing `path` (execute/launch.py): after the tool
    died, what that process left is found by it on `--resume`."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps({"ev": LAUNCHED, "token": token}) + "\n").encode())
    finally:
        os.close(fd)


def tokens(path: str) -> list[str]:
    """The launcher tokens named in `path` (`launched`)."""
    found = []
    try:
        with open(path, "rb") as fh:  # noqa: PTH123 - stdlib only, no pathlib
            for line in fh:
                if b'"launched"' in line:
                    try:
                        found.append(str(json.loads(line)["token"]))
                    except (ValueError, KeyError, TypeError):
                        continue
    except OSError:
        return []
    return found


def unfinished(path: str) -> str | None:
    """The id whose `start` has no `done` at the end of the file (what the process was running
    when it died); None when it ended between ids, was abandoned, or the file is unreadable."""
    running: str | None = None
    try:
        with open(path, "rb") as fh:  # noqa: PTH123 - stdlib only, no pathlib
            for line in fh:
                try:
                    event = json.loads(line)
                except ValueError:  # a torn last line
                    continue
                if not isinstance(event, dict):
                    continue
                ev = event.get("ev")
                if ev == START:
                    running = str(event.get("id"))
                elif ev in (DONE, ABANDON):
                    running = None
    except OSError:
        return None
    return running
