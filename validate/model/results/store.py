"""The append-only JSON Lines store: every finished result is on disk before append returns."""

from __future__ import annotations

import errno
import os
import threading
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any, Final

from validate.errors import ResultsLost
from validate.model.results.durable import fsync_dir, write_all, write_durable
from validate.model.results.reader import iter_records, iter_results
from validate.model.results.signing import RunKey
from validate.textsafe import redact_obj

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence
    from pathlib import Path

    from validate.model.results.schema import CaseResult

__all__ = ["MIN_FREE_BYTES", "RESERVE_BYTES", "ResultStore"]

#: Kept allocated in the run folder so a full disk can still take the last results lines.
RESERVE_BYTES: Final = 256 * 1024
#: Below this much free space no new case starts (`ResultStore.check`).
MIN_FREE_BYTES: Final = 64 * 1024
_RESERVE: Final = ".results.reserve"
_STOPPED: Final = "no new case started, finished results are kept, --resume completes the run"


def _which(lines: Sequence[tuple[str, bytes]]) -> str:
    """`the result of CASE`, or `the results of N cases (CASE, ...)`."""
    if len(lines) == 1:
        return f"the result of {lines[0][0]} is"
    return f"the results of {len(lines)} cases ({lines[0][0]}, ...) are"


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


class ResultStore:
    """Append-only JSON Lines file; a result is fsynced before it counts as stored, so `kill -9`
    loses nothing that was reported.

    Every line carries an HMAC-SHA256 (`mac`) under the run's key (see `RunKey`), so a line that a
    case process appended (it is never given the key) is detected and never counted. A torn last
    line (a kill mid-write, or a case writing a fragment) is closed with a newline before the next
    append, so it can never swallow the line that follows it.

    Durability may be grouped (issue #27, 600k results a run): inside `batch()` (or through
    `append_many`), appends only queue their lines, and the block's end writes them in one write
    and one fsync. A result is stored when `append` returns outside a batch, or when the batch
    block ends: that is when a caller may report it.

    The store also survives its folder breaking mid-run (issue: the tool's own I/O). It keeps the
    results file open and the device/inode of its folder and file: a folder or file deleted or
    replaced is re-created from the open file (its lines live on while the store holds it). A
    reserve file (`RESERVE_BYTES`) is given up when a write hits a full disk, so the results that
    finish then are still written. Either way the run must stop: `check()`, called before each
    case starts, raises `ResultsLost` naming the cause.
    """

    def __init__(self, path: Path, key: RunKey | None = None) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.key = key or RunKey.for_run(path.parent, create=True)
        self._lock = threading.Lock()  # check() runs in worker threads, append() in the runner's
        self._lost: str | None = None  # why the run must stop, once it must
        self._held: int | None = None  # the results file, open: a deleted one is copied back
        self._batches = threading.local()  # per thread: lines queued by an open batch()
        self._folder_id = _identity(path.parent)
        self._file_id = _identity(path)
        if self._file_id is not None:  # a resumed run's lines too: a deleted folder gets them back
            self._hold()
        self._reserve = path.parent / _RESERVE
        self._make_reserve()

    def append(self, result: CaseResult) -> None:
        """Sign and write one result; on return it is durable (inside `batch()`: queued, and
        durable when the batch ends)."""
        data: dict[str, Any] = redact_obj(result.to_line())  # no secret reaches the file
        line = self.key.signed_line(data)
        pending: list[tuple[str, bytes]] | None = getattr(self._batches, "pending", None)
        if pending is not None:
            pending.append((result.case, line))
            return
        self._store([(result.case, line)])

    def append_many(self, results: Iterable[CaseResult]) -> None:
        """Append results with one write and one fsync; on return every one of them is durable."""
        with self.batch():
            for result in results:
                self.append(result)  # a subclass's append (e.g. one that judges) still applies

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Group the appends made in this block (in this thread) into one write and one fsync at
        its end: none of them is durable, so none may be reported, before the block ends. Nested
        blocks join the outer one."""
        if getattr(self._batches, "pending", None) is not None:
            yield
            return
        pending: list[tuple[str, bytes]] = []
        self._batches.pending = pending
        try:
            yield
        finally:
            self._batches.pending = None
            if pending:
                self._store(pending)

    def _store(self, lines: Sequence[tuple[str, bytes]]) -> None:
        """Write (case, line) pairs together, durably, under the store's lock."""
        data = b"".join(line + b"\n" for _, line in lines)
        with self._lock:
            self._keep_in_place()
            try:
                self._write(data)
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT) or not self._release_reserve():
                    self._lost = self._lost or f"cannot write {self.path}: {exc.strerror}"
                    msg = f"{self._lost}: {_which(lines)} lost; {_STOPPED}"
                    raise ResultsLost(msg) from exc
                self._lost = self._lost or f"disk full: no space left on device for {self.path}"
                try:
                    self._write(data)  # what the reserve gave back is enough for the last lines
                except OSError as again:
                    msg = f"{self._lost}: {_which(lines)} lost; {_STOPPED}"
                    raise ResultsLost(msg) from again

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

    def _write(self, data: bytes) -> None:
        """Append whole lines and fsync them before returning (under the store's lock: no line
        waits on a later one's fsync); a failed write is cut back off (no torn line). The first
        line also makes the file's name (and its folder's) durable."""
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            size = os.fstat(fd).st_size
            torn = size > 0 and os.pread(fd, 1, size - 1) != b"\n"
            try:
                write_all(fd, (b"\n" if torn else b"") + data)
                st = os.fstat(fd)
                if self._file_id != (st.st_dev, st.st_ino):  # created now: name it durably
                    fsync_dir(self.path.parent)
                    fsync_dir(self.path.parent.parent)  # the run folder is new as well
            except OSError:
                with suppress(OSError):
                    os.ftruncate(fd, size)
                raise
            if self._file_id != (st.st_dev, st.st_ino):
                self._file_id = st.st_dev, st.st_ino
                self._hold()
        finally:
            os.close(fd)

    def _hold(self) -> None:
        """Keep the results file open (read-only), so its lines outlive a deletion."""
        old, self._held = self._held, None
        with suppress(OSError):
            self._held = os.open(self.path, os.O_RDONLY)
        if old is not None:
            os.close(old)

    def __del__(self) -> None:
        held = getattr(self, "_held", None)  # None too when __init__ failed before it was set
        if held is not None:
            with suppress(OSError):
                os.close(held)

    def _held_bytes(self) -> bytes:
        """Every byte of the file the store holds (b"" before its first line)."""
        if self._held is None:
            return b""
        chunks = []
        offset = 0
        while chunk := os.pread(self._held, 1 << 20, offset):
            chunks.append(chunk)
            offset += len(chunk)
        return b"".join(chunks)

    def _keep_in_place(self) -> None:
        """The folder or file was deleted or replaced: re-create it with every line written."""
        if _identity(self.path.parent) != self._folder_id:
            why = f"results folder {self.path.parent} was deleted or replaced mid-run"
        elif self._file_id is not None and _identity(self.path) != self._file_id:
            why = f"{self.path} was deleted or replaced mid-run"
        else:
            return
        try:
            data = self._held_bytes()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_durable(self.path, data)
        except OSError as exc:
            self._lost = self._lost or why
            msg = f"{why}, and re-creating it failed ({exc.strerror}): {len(data)} bytes of results lost"
            raise ResultsLost(msg) from exc
        self._folder_id, self._file_id = _identity(self.path.parent), _identity(self.path)
        self._hold()
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
        return iter_results(self.path, self.key)

    def done_keys(self) -> set[str]:
        """Keys of results already recorded (for --resume), read line by line."""
        return {
            f"{data.get('cell_id', '')}::{data['case']}"
            for data in iter_records(self.path, self.key)
        }

    def seal(self) -> None:
        """The run is over (no case process is left): keep the key beside the results, so the
        folder verifies anywhere (`report` on another machine, CI artifacts), and drop the
        private copy. A run whose folder broke is not sealed: `ResultsLost` (exit 5)."""
        self.check()
        self._release_reserve()
        self.key.seal(self.path.parent)
