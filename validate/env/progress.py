"""Progress of the env stage's long steps: downloads, installs, environment and image builds.

On a terminal (stderr a TTY, not CI) one rich display shows every open step (nested ones as
their own rows): a spinner, what it is doing now, and bytes or items done where they are known.
Elsewhere (CI, a pipe, a log file) a step prints plain lines through the `validate` logger:
its milestones (a package downloaded, "Installed 12 packages", a docker build step) as they
happen, and its running state at most once per `PLAIN_INTERVAL_S`, so a 20-minute download says
something every half minute and a fast one says nothing extra.

`run_streamed` runs a command with its output read as it comes: each line goes to a parser
(`uv_line`, `pip_line`, `ninja_line`, or one of the caller's), to an optional log file, and is
kept for the error message. The command line itself is logged at DEBUG only: inline `-c`
scripts and long argument lists stay out of the INFO log.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence
    from pathlib import Path

__all__ = [
    "PLAIN_INTERVAL_S",
    "Activity",
    "Streamed",
    "activity",
    "interactive",
    "ninja_line",
    "pip_line",
    "run_streamed",
    "uv_line",
]

log = logging.getLogger("validate.env.progress")

#: Plain mode: the least time between two running-state lines of one step.
PLAIN_INTERVAL_S: Final = 30.0
_UV_COUNT = re.compile(
    r"^(Resolved|Prepared|Installed|Uninstalled|Audited|Built)\s+(\d+)\s+packages?"
)
_UV_DOWNLOADING = re.compile(r"^\s*Downloading\s+(\S+)\s+\(([^)]+)\)")
_UV_DOWNLOADED = re.compile(r"^\s*Downloaded\s+(\S+)")
_UV_ADDED = re.compile(r"^\s*\+\s+(\S+)")
_PIP_PROGRESS = re.compile(r"^Progress (\d+) of (\d+)")
_PIP_DOWNLOADING = re.compile(r"^\s*Downloading\s+(\S+)(?:\s+\(([^)]+)\))?")
_PIP_EVENT = re.compile(
    r"^\s*(Collecting|Saved|Successfully (?:installed|downloaded|built))\s+(.*)"
)
_PIP_PROCESSING = re.compile(r"^\s*Processing\s+(\S+)")
_PIP_INSTALLING = re.compile(r"^\s*Installing collected packages:\s+(.*)")
_NINJA = re.compile(r"^\s*\[(\d+)/(\d+)\]\s+(.*)")


def interactive() -> bool:
    """Rich on a terminal; plain lines under CI, with TERM=dumb, or when stderr is not a TTY."""
    if os.environ.get("CI") or os.environ.get("TERM") == "dumb":
        return False
    return sys.stderr.isatty()


def _terminal() -> Any:
    """stderr as the terminal gets it: the stream under the CLI's SafeStream, if any."""
    from validate.textsafe import SafeStream

    stream = sys.stderr
    return stream._stream if isinstance(stream, SafeStream) else stream


def _size(value: float) -> str:
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} GB"  # pragma: no cover - the loop returns


@dataclass(eq=False)
class Activity:
    """One long step. `update` changes its running state, `milestone` reports an event."""

    title: str
    unit: str = ""  # "bytes" shows sizes; "" counts items
    total: float | None = None
    done: float = 0.0
    text: str = ""
    interval: float = PLAIN_INTERVAL_S  # plain mode: least seconds between running-state lines
    started: float = field(default_factory=time.monotonic)
    _plain_at: float = field(default_factory=time.monotonic)
    _plain_said: str = ""
    _task: Any = None  # the rich task id on a terminal

    def state(self) -> str:
        """'downloading: 120.0 MB of 313.7 MB' / 'compiling: 3 of 7' / the text alone."""
        amount = ""
        if self.total:
            if self.unit == "bytes":
                amount = f"{_size(self.done)} of {_size(self.total)}"
            else:
                amount = f"{self.done:.0f} of {self.total:.0f}"
        return ": ".join(part for part in (self.text, amount) if part)

    def update(
        self, text: str | None = None, *, done: float | None = None, total: float | None = None
    ) -> None:
        if text is not None:
            self.text = text
        if total is not None:
            self.total = total
        if done is not None:
            self.done = done
        if _DISPLAY.progress is not None:
            _DISPLAY.refresh(self)
            return
        now = time.monotonic()
        said = self.state()
        if said and said != self._plain_said and now - self._plain_at >= self.interval:
            log.info("  %s: %s (%.0fs)", self.title, said, now - self.started)
            self._plain_at, self._plain_said = now, said

    def milestone(self, text: str) -> None:
        """An event worth a line of its own in plain mode (on a terminal: the row's text)."""
        self.text = text
        if _DISPLAY.progress is not None:
            _DISPLAY.refresh(self)
            return
        log.info("  %s: %s", self.title, text)
        self._plain_at, self._plain_said = time.monotonic(), text


class _Display:
    """The one rich Progress of the process (rich allows one live display at a time)."""

    def __init__(self) -> None:
        self.progress: Any = None
        self.open: list[Activity] = []
        self.routed: list[tuple[logging.StreamHandler[Any], Any]] = []  # handler, its stream
        self.lock = threading.Lock()

    def start(self, act: Activity) -> None:
        with self.lock:
            if self.progress is None and interactive():
                from rich.console import Console
                from rich.progress import (
                    BarColumn,
                    Progress,
                    SpinnerColumn,
                    TextColumn,
                    TimeElapsedColumn,
                )

                self.progress = Progress(
                    SpinnerColumn(),
                    TextColumn("{task.description}"),
                    BarColumn(bar_width=24),
                    TextColumn("{task.fields[amount]}"),
                    TimeElapsedColumn(),
                    # the terminal itself: through the CLI's SafeStream rich's cursor codes would
                    # be printed as text (log lines keep SafeStream, _route_logs)
                    console=Console(file=_terminal()),
                    transient=True,
                )
                self.progress.start()
                self._route_logs(to_display=True)
            self.open.append(act)
            if self.progress is not None:
                act._task = self.progress.add_task(act.title, total=None, amount="")

    def _route_logs(self, *, to_display: bool) -> None:
        """While the display is live, the `validate` log handlers on stderr write through
        rich's stderr proxy (lines print above the display instead of through it)."""
        from validate.textsafe import SafeStream

        for handler in logging.getLogger("validate").handlers:
            if not isinstance(handler, logging.StreamHandler):
                continue
            stream = handler.stream
            on_stderr = stream is sys.__stderr__ or (
                isinstance(stream, SafeStream) and stream._stream is sys.__stderr__
            )
            if to_display and on_stderr:
                self.routed.append((handler, stream))
                # rich's proxy while the display is live, still redacted and made displayable
                handler.setStream(
                    SafeStream(sys.stderr) if stream is not sys.__stderr__ else sys.stderr
                )
        if not to_display:
            for handler, stream in self.routed:
                handler.setStream(stream)
            self.routed.clear()

    def refresh(self, act: Activity) -> None:
        progress = self.progress
        if progress is None or act._task is None:
            return
        amount = act.state().removeprefix(act.text).removeprefix(": ")
        desc = f"{act.title}: {act.text}" if act.text else act.title
        progress.update(
            act._task, description=desc[:100], total=act.total, completed=act.done, amount=amount
        )

    def stop(self, act: Activity) -> None:
        with self.lock:
            if act in self.open:
                self.open.remove(act)
            if self.progress is not None:
                if act._task is not None:
                    self.progress.remove_task(act._task)
                if not self.open:
                    self._route_logs(to_display=False)
                    self.progress.stop()
                    self.progress = None


_DISPLAY = _Display()


@contextmanager
def activity(
    title: str, *, unit: str = "", total: float | None = None, interval: float = PLAIN_INTERVAL_S
) -> Iterator[Activity]:
    """A long step for as long as the block runs (nested steps are rows of one display)."""
    act = Activity(title=title, unit=unit, total=total, interval=interval)
    _DISPLAY.start(act)
    try:
        yield act
    finally:
        _DISPLAY.stop(act)


# -- parsers: one output line of a tool -> the activity's state ---------------------------------
def uv_line(line: str, act: Activity) -> None:
    """uv (not --quiet): packages as they are resolved, downloaded and installed."""
    if match := _UV_COUNT.match(line):
        text = f"{match[1].lower()} {match[2]} package{'s' if match[2] != '1' else ''}"
        if match[1] == "Installed":
            act.milestone(text)
        else:
            act.update(text)
    elif match := _UV_DOWNLOADING.match(line):  # uv names only the large downloads
        act.milestone(f"downloading {match[1]} ({match[2]})")
    elif match := _UV_DOWNLOADED.match(line):
        act.milestone(f"downloaded {match[1]}")
    elif match := _UV_ADDED.match(line):
        act.update(f"installed {match[1]}", done=act.done + 1)


def _megabytes(size: str) -> float:
    """'29.7 MB' -> 29.7, '307 kB' -> 0.307 (pip's and uv's own size words)."""
    match = re.match(r"([\d.]+)\s*([kKMG]i?B)", size)
    if match is None:
        return 0.0
    scale = {"k": 1e-3, "K": 1e-3, "M": 1.0, "G": 1e3}[match[2][0]]
    return float(match[1]) * scale


def pip_line(line: str, act: Activity) -> None:
    """pip's own lines. With --progress-bar raw (pip >= 24.1) the bytes of each download as
    they arrive; every pip names each requirement as it resolves it ("Collecting X", a local
    file: "Processing X"), each download with its size, then "Installing collected packages:"
    and "Successfully installed". A download of 10 MB or more and the closing "Successfully ..."
    are milestones, the rest running state."""
    if match := _PIP_PROGRESS.match(line):
        act.unit = "bytes"
        act.update(done=float(match[1]), total=float(match[2]))
    elif match := _PIP_DOWNLOADING.match(line):
        size = match[2] or ""
        act.unit = "bytes"
        act.done, act.total = 0.0, None
        text = f"downloading {match[1].rsplit('/', 1)[-1]}" + (f" ({size})" if size else "")
        if _megabytes(size) >= 10:
            act.milestone(text)
        else:
            act.update(text)
    elif match := _PIP_PROCESSING.match(line):  # a wheel file given or found in --find-links
        act.update(f"processing {match[1].rsplit('/', 1)[-1]}")
    elif match := _PIP_INSTALLING.match(line):  # pip says nothing more until it is done
        names = [name.strip() for name in match[1].split(",") if name.strip()]
        act.unit, act.done, act.total = "", 0.0, None
        act.update(f"installing {len(names)} package{'s' if len(names) != 1 else ''}")
    elif match := _PIP_EVENT.match(line):
        text = f"{match[1].lower()} {match[2]}".strip()
        text = text if len(text) <= 160 else text[:157] + "..."
        if match[1].startswith("Successfully"):
            act.milestone(text)
        else:
            act.update(text)


def ninja_line(line: str, act: Activity) -> None:
    """A CMake/ninja build (inside `pip wheel -v`): objects compiled of the total."""
    if match := _NINJA.match(line):
        what = match[3].removeprefix("Building CXX object ").split(" ", 1)[0]
        act.update(
            f"compiling {what.rsplit('/', 1)[-1]}", done=float(match[1]), total=float(match[2])
        )
    else:
        pip_line(line, act)


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
) -> Streamed:
    """Run `argv`, feeding each output line to `parse` (and `log_file`) as it arrives."""
    log.debug("+ %s", _describe(argv))
    if log_file is not None:
        log_file.write(f"+ {shlex.join(argv)}\n")
        log_file.flush()
    proc = subprocess.Popen(
        list(argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        env=dict(env) if env is not None else None,
        cwd=cwd,
        bufsize=1,
    )
    kept: list[str] = []
    assert proc.stdout is not None
    with proc.stdout:
        for line in proc.stdout:
            kept.append(line)
            if log_file is not None:
                log_file.write(line)
            if parse is not None:
                parse(line.rstrip("\n"), act)
    returncode = proc.wait()
    if log_file is not None:
        log_file.flush()
    return Streamed(returncode=returncode, output="".join(kept))
