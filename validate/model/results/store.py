"""The append-only JSON Lines store: every finished result is on disk before append returns."""

from __future__ import annotations

import errno
import json
import os
import threading
from contextlib import suppress
from typing import TYPE_CHECKING, Any, Final

from validate.errors import ResultsLost
from validate.model.results.durable import fsync_dir, write_all, write_durable
from validate.model.results.reader import read_results
from validate.model.results.signing import RunKey
from validate.textsafe import redact_obj

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from validate.model.results.schema import CaseResult

__all__ = ["MIN_FREE_BYTES", "RESERVE_BYTES", "ResultStore"]

#: Kept allocated in the run folder so a full disk can still take the last results lines.
RESERVE_BYTES: Final = 256 * 1024
#: Below this much free space no new case starts (`ResultStore.check`).
MIN_FREE_BYTES: Final = 64 * 1024
_RESERVE: Final = ".results.reserve"
_STOPPED: Final = "no new case started, finished results are kept, --resume completes the run"


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


class ResultStore:
    """Append-only JSON Lines file; each append is flushed and fsynced so `kill -9` loses nothing.

    Every line carries an HMAC-SHA256 (`mac`) under the run's key (see `RunKey`), so a line that a
    case process appended (it is never given the key) is detected and never counted. A torn last
    line (a kill mid-write, or a case writing a fragment) is closed with a newline before the next
    append, so it can never swallow the line that follows it.

    The store also survives its folder breaking mid-run (issue: the tool's own I/O). It keeps
    every line in memory and the device/inode of its folder and file: a folder or file deleted or
    replaced is re-created with all of them. A reserve file (`RESERVE_BYTES`) is given up when a
    write hits a full disk, so the results that finish then are still written. Either way the run
    must stop: `check()`, called before each case starts, raises `ResultsLost` naming the cause.
    """

    def __init__(self, path: Path, key: RunKey | None = None) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.key = key or RunKey.for_run(path.parent, create=True)
        self._lock = threading.Lock()  # check() runs in worker threads, append() in the runner's
        self._lost: str | None = None  # why the run must stop, once it must
        try:  # a resumed run's lines too: a deleted folder gets them back
            self._lines = [line for line in path.read_bytes().split(b"\n") if line.strip()]
        except FileNotFoundError:
            self._lines = []
        self._folder_id = _identity(path.parent)
        self._file_id = _identity(path)
        self._reserve = path.parent / _RESERVE
        self._make_reserve()

    def append(self, result: CaseResult) -> None:
        data: dict[str, Any] = redact_obj(result.to_dict())  # no secret reaches the file
        data["mac"] = self.key.sign(data)
        line = json.dumps(data, sort_keys=True, default=str).encode("utf-8")
        with self._lock:
            self._keep_in_place()
            try:
                self._write(line)
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or not self._release_reserve():
                    self._lost = self._lost or f"cannot write {self.path}: {exc.strerror}"
                    msg = f"{self._lost}: the result of {result.case} is lost; {_STOPPED}"
                    raise ResultsLost(msg) from exc
                self._lost = self._lost or f"disk full: no space left on device for {self.path}"
                try:
                    self._write(line)  # what the reserve gave back is enough for the last lines
                except OSError as again:
                    msg = f"{self._lost}: the result of {result.case} is lost; {_STOPPED}"
                    raise ResultsLost(msg) from again
            self._lines.append(line)

    def problem(self) -> str | None:
        """Why the run cannot go on, or None: the folder or file was deleted or replaced (it is
        re-created with every finished result first) or the disk is (nearly) full. Raises
        `ResultsLost` only where the folder cannot be re-created."""
        with self._lock:
            self._keep_in_place()
            if self._lost is None:
                try:
                    vfs = os.statvfs(self.path.parent)
                except OSError as exc:
                    self._lost = f"results folder {self.path.parent}: {exc.strerror}"
                else:
                    free = vfs.f_bavail * vfs.f_frsize
                    if vfs.f_blocks and free < MIN_FREE_BYTES:  # f_blocks 0: size not reported
                        self._lost = (
                            f"disk full: {free} bytes free in {self.path.parent}, a case needs "
                            f"{MIN_FREE_BYTES // 1024} KiB to start"
                        )
            if self._lost is not None:
                self._release_reserve()
            return self._lost

    def check(self) -> None:
        """Raise `ResultsLost` naming the `problem()`; the runner calls it before each case."""
        why = self.problem()
        if why is not None:
            msg = f"{why}; {_STOPPED}"
            raise ResultsLost(msg)

    def _write(self, line: bytes) -> None:
        """Append one line with its own newline and fsync it before returning (each append, under
        the store's lock: no line waits on a later one's fsync); a failed write is cut back off
        (no torn line). The first line also makes the file's name (and its folder's) durable."""
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            size = os.fstat(fd).st_size
            torn = size > 0 and os.pread(fd, 1, size - 1) != b"\n"
            try:
                write_all(fd, (b"\n" if torn else b"") + line + b"\n")
                st = os.fstat(fd)
                if self._file_id != (st.st_dev, st.st_ino):  # created now: name it durably
                    fsync_dir(self.path.parent)
                    fsync_dir(self.path.parent.parent)  # the run folder is new as well
            except OSError:
                with suppress(OSError):
                    os.ftruncate(fd, size)
                raise
            self._file_id = st.st_dev, st.st_ino
        finally:
            os.close(fd)

    def _keep_in_place(self) -> None:
        """The folder or file was deleted or replaced: re-create it with every line written."""
        if _identity(self.path.parent) != self._folder_id:
            why = f"results folder {self.path.parent} was deleted or replaced mid-run"
        elif self._file_id is not None and _identity(self.path) != self._file_id:
            why = f"{self.path} was deleted or replaced mid-run"
        else:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_durable(self.path, b"".join(line + b"\n" for line in self._lines))
        except OSError as exc:
            self._lost = self._lost or why
            lost = len(self._lines)
            msg = f"{why}, and re-creating it failed ({exc.strerror}): {lost} results lost"
            raise ResultsLost(msg) from exc
        self._folder_id, self._file_id = _identity(self.path.parent), _identity(self.path)
        self._lost = self._lost or f"{why} (re-created)"

    def _make_reserve(self) -> None:
        try:
            fd = os.open(self._reserve, os.O_WRONLY | os.O_CREAT, 0o600)
        except OSError:
            return  # no reserve: check() still stops the run when the disk fills
        try:
            try:
                os.posix_fallocate(fd, 0, RESERVE_BYTES)
            except OSError:  # a file system without fallocate: real zeros take the blocks
                os.pwrite(fd, bytes(RESERVE_BYTES), 0)
        except OSError:
            self._reserve.unlink(missing_ok=True)
        finally:
            os.close(fd)

    def _release_reserve(self) -> bool:
        """Give the reserve's space back; whether there was one to give."""
        try:
            self._reserve.unlink()
        except OSError:
            return False
        return True

    def __iter__(self) -> Iterator[CaseResult]:
        return iter(read_results(self.path, self.key).results)

    def done_keys(self) -> set[str]:
        """Keys of results already recorded (for --resume)."""
        return {r.key for r in self}

    def seal(self) -> None:
        """The run is over (no case process is left): keep the key beside the results, so the
        folder verifies anywhere (`report` on another machine, CI artifacts), and drop the
        private copy. A run whose folder broke is not sealed: `ResultsLost` (exit 5)."""
        self.check()
        self._release_reserve()
        self.key.seal(self.path.parent)
