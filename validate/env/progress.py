"""Progress of the env stage's long steps: downloads, installs, environment and image builds.

On a terminal (stderr a TTY, not CI) one rich display shows every open step (nested ones as
their own rows): a spinner, what it is doing now, and bytes or items done where they are known.
Elsewhere (CI, a pipe, a log file) a step prints plain lines through the `validate` logger:
its milestones (a package downloaded, "Installed 12 packages", a docker build step) as they
happen, and its running state at most once per `PLAIN_INTERVAL_S`, so a 20-minute download says
something every half minute and a fast one says nothing extra.

Commands run with their output read as it comes: env/streamed.py (`run_streamed`).

A download's bytes (shown as `120.0 MB of 313.7 MB (38%, 4.1 MB/s)`) come from the installer:
- pip >= 24.1: `--progress-bar raw` prints `Progress N of M` lines;
- older pip has no such output off a terminal: pip writes each download into
  `$TMPDIR/pip-unpack-*/<file>`, so the tool gives it a TMPDIR of its own and reads the size of
  the file being downloaded (`grow`), the total from pip's `Downloading X (313.7 MB)` line;
- uv draws its byte counts only on a terminal: its stderr is a pseudo-terminal (`pty_stderr`)
  and its redraws (`name ---- 120.00 MiB/313.70 MiB`) are read like lines.
`$CUDNN_MATRIX_PROGRESS_INTERVAL_S` sets the plain mode's interval (the tests use a short one).
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
import time
import urllib.parse
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "PLAIN_INTERVAL_S",
    "Activity",
    "activity",
    "interactive",
    "ninja_line",
    "pip_line",
    "uv_line",
]

log = logging.getLogger("validate.env.progress")

#: Plain mode: the least time between two running-state lines of one step.
PLAIN_INTERVAL_S: Final = 30.0
#: Sets the plain interval in seconds instead (the progress tests use a short one).
INTERVAL_ENV: Final = "CUDNN_MATRIX_PROGRESS_INTERVAL_S"
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
#: uv's per-download row on a terminal: `nvidia-cudnn-cu13  ------  120.00 MiB/313.70 MiB`.
#: (A bar of bar characters only: with spaces in it, a long run of spaces backtracks badly.)
_UV_ROW = re.compile(r"(\S+) +[-━─╸╺=>]{4,} +([\d.]+ ?[kKMGT]?i?B)/([\d.]+ ?[kKMGT]?i?B)")
_UNITS: Final = {"": 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


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


def _plain_interval() -> float:
    """PLAIN_INTERVAL_S, or the interval $CUDNN_MATRIX_PROGRESS_INTERVAL_S names."""
    try:
        return max(0.0, float(os.environ.get(INTERVAL_ENV) or PLAIN_INTERVAL_S))
    except ValueError:
        return PLAIN_INTERVAL_S


def _bytes(size: str) -> float:
    """'313.7 MB' -> 313.7e6, '120.00 MiB' -> 120 * 2**20 (pip's and uv's size words)."""
    match = re.match(r"([\d.]+)\s*([kKMGT]?)(i?)B", size.strip())
    if match is None:
        return 0.0
    power = "KMGT".index(match[2].upper()) + 1 if match[2] else 0
    return float(match[1]) * float((1024 if match[3] else 1000) ** power)


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
    interval: float = field(default_factory=_plain_interval)  # plain: least s between lines
    started: float = field(default_factory=time.monotonic)
    file: str = ""  # the file a pip without `raw` is downloading (run_streamed's `grow`)
    parts: dict[str, tuple[float, float]] = field(default_factory=dict)  # uv: name -> bytes
    _since: tuple[float, float] = (0.0, 0.0)  # (monotonic, done) where this download began
    _plain_at: float = field(default_factory=time.monotonic)
    _plain_said: str = ""
    _task: Any = None  # the rich task id on a terminal
    lock: threading.RLock = field(default_factory=threading.RLock)  # two readers (pty, stdout)

    def download(self, text: str, *, total: float | None, file: str = "") -> None:
        """A download begins: bytes from 0 of `total` (None: not known yet)."""
        self.unit, self.done, self.total, self.file = "bytes", 0.0, total, file
        self._since = (time.monotonic(), 0.0)
        self.text = text

    def _rate(self) -> str:
        began, at_start = self._since
        elapsed = time.monotonic() - began
        if not began or elapsed < 1.0 or self.done <= at_start:
            return ""
        return f"{_size((self.done - at_start) / elapsed)}/s"

    def state(self) -> str:
        """'downloading: 120.0 MB of 313.7 MB (38%, 4.1 MB/s)' / 'compiling: 3 of 7' / the text."""
        amount = ""
        if self.unit == "bytes" and (self.total or self.done):
            extra = [self._rate()]
            if self.total:
                amount = f"{_size(self.done)} of {_size(self.total)}"
                extra.insert(0, f"{min(100.0, 100 * self.done / self.total):.0f}%")
            else:
                amount = _size(self.done)
            shown = ", ".join(part for part in extra if part)
            amount += f" ({shown})" if shown else ""
        elif self.total:
            amount = f"{self.done:.0f} of {self.total:.0f}"
        return ": ".join(part for part in (self.text, amount) if part)

    def update(
        self, text: str | None = None, *, done: float | None = None, total: float | None = None
    ) -> None:
        with self.lock:
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
        with self.lock:
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
    title: str, *, unit: str = "", total: float | None = None, interval: float | None = None
) -> Iterator[Activity]:
    """A long step for as long as the block runs (nested steps are rows of one display)."""
    act = Activity(title=title, unit=unit, total=total)
    if interval is not None:
        act.interval = interval
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
        if act.parts:  # the downloads are over
            act.parts.clear()
            act.unit, act.done, act.total = "", 0.0, None
        if match[1] == "Installed":
            act.milestone(text)
        else:
            act.update(text)
    elif rows := _UV_ROW.findall(line):  # a redraw of uv's download rows (on a pseudo-terminal)
        if not act.parts:
            act.download(f"downloading {rows[0][0]}", total=None)
        for name, done, total in rows:
            act.parts[name] = (_bytes(done), _bytes(total))
        names = list(act.parts)
        text = f"downloading {names[0]}" if len(names) == 1 else f"downloading {len(names)} files"
        act.update(
            text,
            done=sum(d for d, _ in act.parts.values()),
            total=sum(t for _, t in act.parts.values()),
        )
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
        name = urllib.parse.unquote(match[1].rsplit("/", 1)[-1])
        text = f"downloading {name}" + (f" ({size})" if size else "")
        act.download(text, total=_bytes(size) or None, file=name)
        if _megabytes(size) >= 10:
            act.milestone(text)
        else:
            act.update(text)
    elif match := _PIP_PROCESSING.match(line):  # a wheel file given or found in --find-links
        act.update(f"processing {match[1].rsplit('/', 1)[-1]}")
    elif match := _PIP_INSTALLING.match(line):  # pip says nothing more until it is done
        names = [name.strip() for name in match[1].split(",") if name.strip()]
        act.unit, act.done, act.total, act.file = "", 0.0, None, ""
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
