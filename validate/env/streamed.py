"""`run_streamed`: a command of the env stage's long steps (an install, a build) with its output
read as it comes. Each line goes to a parser (`uv_line`, `pip_line`, `ninja_line` of
env/progress.py, or one of the caller's), to an optional log file, and is kept for the error
message. The command line itself is logged at DEBUG only: inline `-c` scripts and long argument
lists stay out of the INFO log. How a download's bytes are read: env/progress.py."""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
import threading
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

from validate import children

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

    from validate.env.progress import Activity

__all__ = ["Streamed", "run_streamed"]

log = logging.getLogger(__name__)


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass(frozen=True)
class Streamed:
    """A finished command: its exit status and everything it printed (stdout, then stderr
    interleaved as it came)."""

    returncode: int
    output: str

    def tail(self, lines: int = 12) -> str:
        return "\n".join(self.output.strip().splitlines()[-lines:])


def _describe(argv: Sequence[str]) -> str:
    """The command for the DEBUG log, with an inline script shown by its size only."""
    shown = list(argv)
    for index, arg in enumerate(shown[:-1]):
        if arg == "-c" and "\n" in shown[index + 1]:
            shown[index + 1] = f"<script, {shown[index + 1].count(chr(10))} lines>"
    return shlex.join(shown)


def run_streamed(
    argv: Sequence[str],
    act: Activity,
    parse: Callable[[str, Activity], None] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    log_file: IO[str] | None = None,
    cwd: Path | None = None,
    grow: Path | None = None,
    pty_stderr: bool = False,
) -> Streamed:
    """Run `argv`, feeding each output line to `parse` (and `log_file`) as it arrives.

    `grow`: the TMPDIR given to a pip without `--progress-bar raw`: the size of the file it
    is downloading there (`act.file`) is the download's bytes. `pty_stderr`: stderr is a
    pseudo-terminal (uv draws its byte counts only there); each redraw goes to `parse` too,
    the finished lines also to the log and the error tail.
    """
    log.debug("+ %s", _describe(argv))
    if log_file is not None:
        log_file.write(f"+ {shlex.join(argv)}\n")
        log_file.flush()
    master, slave = _open_pty() if pty_stderr else (None, None)
    proc = subprocess.Popen(
        list(argv),
        stdout=subprocess.PIPE,
        stderr=slave if slave is not None else subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        env=dict(env) if env is not None else None,
        cwd=cwd,
        bufsize=1,
    )
    if slave is not None:
        os.close(slave)
    kept: list[str] = []
    lock = threading.Lock()

    def take(line: str, *, final: bool = True) -> None:
        with lock:
            if final:
                kept.append(line + "\n")
                if log_file is not None:
                    log_file.write(line + "\n")
            if parse is not None:
                parse(line, act)

    ended = threading.Event()
    helpers = []
    if master is not None:
        helpers.append(threading.Thread(target=_read_pty, args=(master, take), daemon=True))
    if grow is not None:
        helpers.append(threading.Thread(target=_watch_growth, args=(grow, act, ended), daemon=True))
    for helper in helpers:
        helper.start()
    assert proc.stdout is not None
    with children.running(proc.pid), proc.stdout:  # ended with the tool (children.py)
        for line in proc.stdout:
            take(line.rstrip("\n"))
        returncode = proc.wait()
    ended.set()
    for helper in helpers:
        helper.join(timeout=10)  # a pty another process still holds open: stop reading it
    if master is not None:
        os.close(master)
    if log_file is not None:
        log_file.flush()
    return Streamed(returncode=returncode, output="".join(kept))


def _open_pty() -> tuple[int | None, int | None]:
    """(master, slave) of a 200-column pseudo-terminal; (None, None) where there is none."""
    try:
        import fcntl
        import pty
        import struct
        import termios

        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    except (ImportError, OSError):
        return None, None
    return master, slave


def _read_pty(master: int, take: Callable[..., None]) -> None:
    """Lines and redraws from a pseudo-terminal: a piece ended by a newline is a line, one
    ended by a carriage return a redraw; terminal codes are dropped."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: every writer has closed it
            data = b""
        text = (pending + decoder.decode(data, final=not data)).replace("\r\n", "\n")
        held = "\r" if data and text.endswith("\r") else ""  # maybe half of a \r\n
        parts = re.split(r"([\r\n])", text.removesuffix(held))
        tail = parts.pop()  # after the last line end: wait for the rest
        for piece, end in zip(parts[::2], parts[1::2], strict=True):
            _take_piece(take, piece, final=end == "\n")
        if not data:
            _take_piece(take, tail, final=True)
            return
        pending = tail + held


def _take_piece(take: Callable[..., None], piece: str, *, final: bool) -> None:
    if text := _ANSI.sub("", piece).rstrip():
        take(text, final=final)


def _watch_growth(folder: Path, act: Activity, ended: threading.Event) -> None:
    """The size of the file a pip without `raw` downloads into its TMPDIR, twice a second."""
    while not ended.wait(0.5):
        name = act.file
        if not name:
            continue
        sizes = []
        for path in folder.glob(f"pip-unpack-*/{name}"):
            try:
                sizes.append(path.stat().st_size)
            except OSError:
                continue
        if sizes and max(sizes) != act.done and act.file == name:
            act.update(done=float(max(sizes)))
