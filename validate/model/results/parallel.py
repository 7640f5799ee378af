"""The lines of a results.jsonl in blocks, their MACs checked on a second core meanwhile.

Checking every line's HMAC was a sixth of reading a run of a million results (issue #27), and it
needs nothing the parse makes: a child forked at the start checks block k+1 while the reader
parses block k. The reader sends the child each block's bytes over a pipe, so both look at the
same bytes (never the file twice: it may change between two reads), and gets one verdict per
line back. The child's answer only ever saves work: a line counts as checked when a well-formed
answer for its very block says so; for every other line (no child, a child that died, hangs, or
answers out of turn or short, a line it did not vouch for) the reader checks the MAC itself, as
the serial path does. A sample of each block's vouched lines is checked again in the reader; one
disagreement and the child is not asked again.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import signal
import struct
import threading
import time
from typing import IO, TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Generator, Iterator

    from validate.model.results.signing import RunKey

__all__ = ["PARALLEL_MIN_BYTES", "blocks"]

#: A results file smaller than this is checked in the reader: a fork is not worth it.
PARALLEL_MIN_BYTES = 16 << 20
#: Bytes read at a time: small enough that the reader never holds more than a few of them (it
#: streams), large enough that a million lines are a few thousand round trips.
_BLOCK: Final = 256 << 10
#: How long the reader waits for the child's next answer (or to hand it a block) before it
#: checks the rest itself: the child takes milliseconds a block.
_PATIENCE_S: Final = 10.0
#: One vouched line in this many (at a random place in each block) is checked in the reader too.
_SAMPLE: Final = 64
_HEAD: Final = struct.Struct("<QQ")  # block number, and the length of what follows


def _lines(stream: IO[bytes]) -> Iterator[list[bytes]]:
    """The lines of `stream` without their newlines, a block at a time: what iterating the
    stream gives, each line `removesuffix(b"\\n")` (a last line without one included)."""
    head: list[bytes] = []  # the start of a line that a read cut off
    while chunk := stream.read(_BLOCK):
        lines = chunk.split(b"\n")
        if len(lines) == 1:  # no newline in this read: a line longer than a block
            head.append(chunk)
            continue
        if head:
            head.append(lines[0])
            lines[0] = b"".join(head)
            head = []
        if last := lines.pop():
            head.append(last)
        yield lines
    if head:
        yield [b"".join(head)]


def blocks(
    stream: IO[bytes], key: RunKey | None
) -> Generator[tuple[list[bytes], bytes], None, None]:
    """The lines of `stream` (see `_lines`), each block with the verdicts of the second core:
    byte i is 1 where the child found line i's MAC valid as `RunKey.verifies_line` checks it,
    0 where it did not or gave no answer (the reader checks those lines itself)."""
    child = _Child.start(stream, key)
    if child is None:
        for lines in _lines(stream):
            yield lines, bytes(len(lines))
        return
    try:
        source = _lines(stream)
        ahead = next(source, None)
        if ahead is not None:
            child.send(0, ahead)
        number = 0
        while ahead is not None:
            lines = ahead
            verdicts = child.receive(number, lines) or bytes(len(lines))
            number += 1
            ahead = next(source, None)
            if ahead is not None:  # the child checks the next block while this one is parsed
                child.send(number, ahead)
            yield lines, verdicts
    finally:
        child.stop()


def _usable(stream: IO[bytes]) -> bool:
    """Whether a second core is worth starting: a large file, a host with more than one core,
    and no thread in this process (a fork copies only the thread that calls it)."""
    try:
        size = os.fstat(stream.fileno()).st_size
    except (OSError, ValueError):  # not a real file: read it serially
        return False
    return size >= PARALLEL_MIN_BYTES and _cores() > 1 and hasattr(os, "fork") and _alone()


def _alone() -> bool:
    """Whether this process runs no other thread (a fork copies only the thread that calls it,
    and a lock another one held would stay held in the child)."""
    return threading.active_count() == 1


def _cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class _Child:
    """The forked checker, seen from the reader. Any failure (a broken pipe, a wait past
    `_PATIENCE_S`, an answer that is not the one asked for) ends it: `receive` then returns
    None for every later block."""

    def __init__(self, key: RunKey, pid: int, to_child: int, from_child: int) -> None:
        self._key = key
        self._pid = pid
        self._to = to_child
        self._from = from_child
        self._alive = True

    @classmethod
    def start(cls, stream: IO[bytes], key: RunKey | None) -> _Child | None:
        if key is None or not _usable(stream):
            return None
        to_r, to_w = os.pipe()  # close-on-exec (PEP 446): no process the tool starts gets them
        from_r, from_w = os.pipe()
        for fd in (to_w, from_w):
            with contextlib.suppress(OSError, AttributeError):  # larger pipes: fewer wakeups
                _grow_pipe(fd)
        try:
            pid = os.fork()
        except OSError:
            for fd in (to_r, to_w, from_r, from_w):
                os.close(fd)
            return None
        if pid == 0:  # the child: it checks blocks until the reader closes the pipe, then exits
            code = 1
            try:
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                    signal.signal(sig, signal.SIG_DFL)  # never the tool's handlers: it just ends
                os.close(to_w)
                os.close(from_r)
                _serve(key, to_r, from_w)
                code = 0
            finally:
                os._exit(code)  # no atexit, no flush of the reader's buffers
        os.close(to_r)
        os.close(from_w)
        os.set_blocking(to_w, False)  # a write past the patience never hangs the reader
        return cls(key, pid, to_w, from_r)

    def send(self, number: int, lines: list[bytes]) -> None:
        if not self._alive:
            return
        body = b"\n".join(lines)
        if not _write_all(self._to, _HEAD.pack(number, len(body)) + body):
            self._fail()

    def receive(self, number: int, lines: list[bytes]) -> bytes | None:
        """The verdicts for block `number` (of `lines`), or None when the child gave none."""
        if not self._alive:
            return None
        deadline = time.monotonic() + _PATIENCE_S
        head = _read_exact(self._from, _HEAD.size, deadline)
        answer: bytes | None = None
        if head is not None:
            got, size = _HEAD.unpack(head)
            if got == number and size == len(lines):
                answer = _read_exact(self._from, size, deadline)
        if answer is None or not self._agrees(lines, answer):
            self._fail()
            return None
        return answer

    def _agrees(self, lines: list[bytes], answer: bytes) -> bool:
        """Whether the reader's own check of a sample of the lines the child vouched for agrees."""
        return not any(
            answer[at] == 1 and not self._key.verifies_line(lines[at]) for at in _sample(len(lines))
        )

    def _fail(self) -> None:
        self._alive = False
        self.stop()

    def stop(self) -> None:
        """Close the pipes, end the child and reap it; once only."""
        if self._pid == 0:
            return
        for fd in (self._to, self._from):
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self._pid, signal.SIGKILL)  # its work is over or no longer wanted
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self._pid, 0)
        self._pid = 0


def _sample(count: int) -> range:
    """Which of a block's `count` lines the reader checks again: one in `_SAMPLE`, from a random
    place, so no line is known ahead to go unchecked."""
    return range(secrets.randbelow(_SAMPLE), count, _SAMPLE)


def _grow_pipe(fd: int) -> None:
    """Ask for a pipe buffer of a block and more (Linux; elsewhere the default stays)."""
    import fcntl

    fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _BLOCK + 4096)


def _serve(key: RunKey, source: int, answers: int) -> None:
    """The child's loop: a block in, one verdict byte per line out, until the reader closes."""
    while (head := _read_exact(source, _HEAD.size, None)) is not None:
        number, size = _HEAD.unpack(head)
        body = _read_exact(source, size, None)
        if body is None:
            return
        verdicts = bytes(map(key.verifies_line, body.split(b"\n")))
        if not _write_all(answers, _HEAD.pack(number, len(verdicts)) + verdicts):
            return


def _read_exact(fd: int, size: int, deadline: float | None) -> bytes | None:
    """`size` bytes from `fd`, or None at its end or past `deadline` (a monotonic time)."""
    parts: list[bytes] = []
    left = size
    while left:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                return None
        try:
            piece = os.read(fd, left)
        except OSError:
            return None
        if not piece:
            return None
        parts.append(piece)
        left -= len(piece)
    return parts[0] if len(parts) == 1 else b"".join(parts)  # b"" for size 0


def _write_all(fd: int, data: bytes) -> bool:
    """Write all of `data`; False when the other end is gone or did not take it in time."""
    view = memoryview(data)
    deadline = time.monotonic() + _PATIENCE_S
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([], [fd], [], wait)[1]:
                return False
        except OSError:
            return False
    return True
