"""Tests run in batches inside long-lived pytest processes, every test's end attributed.

A batch is a list of pytest node ids (or a share of the collected selection, whose ids the
process assigns itself) run by one pytest process with the tool's plugin (resources/run_pytest.py,
the process's bootstrap), which records each test's `start` (before its setup) and `done` in a
record file. This module starts the process, reads the record as it grows and turns it into one
`TestEnd` per id:

- `done`: the plugin's verdict (pass, fail, error, skip, xfail, xpass; a failure whose text
  names a poisoned CUDA context is a `crash`);
- a `start` without `done` when the process ended: that test is the `crash`, with the signal or
  exit status and the last lines of the output it wrote since its start;
- a test running past its limit: the process group is ended (TERM, then KILL) and the test is a
  `timeout`;
- the plugin ends the process itself after a test that reported a poisoned context (exit 75).

After any of these the ids not yet run go to a fresh process; a process that ended without
starting any test ends the batch (each id left is an `error` naming why), so nothing loops.
Every id gets exactly one end. Fork isolation is not used: the frontend's suite initialises
CUDA in the parent (DOMAIN.md §9).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import os
import signal
import subprocess
import time
from contextlib import suppress
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

from validate.execute import launch
from validate.execute.classify import classify_exception, signal_name
from validate.execute.resources import RESOURCES, markers
from validate.execute.resources.cuda_errors import POISON
from validate.execute.resources.guard import PARENT_ENV
from validate.execute.supervise import SUPERVISOR
from validate.model.outcome import Outcome

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from pathlib import Path

    from validate.execute.placement import Placement

__all__ = [
    "BOOTSTRAP",
    "EXCLUSIVE_ENV",
    "REPLACE_EXIT",
    "RESEED",
    "RESEED_PLUGIN",
    "SHARE_ENV",
    "SKIP_ENV",
    "WEIGHTS_ENV",
    "BatchRun",
    "TestEnd",
    "plugin_env",
]

log = logging.getLogger(__name__)

#: pytest with the plugin: what the suite's processes run (`python run_pytest.py ARGS`).
BOOTSTRAP: Final = RESOURCES / "run_pytest.py"
RECORD_ENV: Final = "CUDNN_MATRIX_PYTEST_RECORD"
IDS_ENV: Final = "CUDNN_MATRIX_PYTEST_IDS"
#: A share's settings (resources/run_pytest.py): "k/n", and files of ids to skip and of weights.
SHARE_ENV: Final = "CUDNN_MATRIX_PYTEST_SHARE"
SKIP_ENV: Final = "CUDNN_MATRIX_PYTEST_SKIP"
WEIGHTS_ENV: Final = "CUDNN_MATRIX_PYTEST_WEIGHTS"
EXCLUSIVE_ENV: Final = "CUDNN_MATRIX_PYTEST_EXCLUSIVE"
#: The plugin that seeds each test's `random` by its node id (resources/run_pytest.py `_Reseed`),
#: and how, as results' content keys hold it: bump it when the seeding changes.
RESEED_PLUGIN: Final = "cudnn_matrix_reseed"
RESEED: Final = "random=crc32(nodeid) before setup, call, teardown"
#: The plugin's exit status after a poisoned test (it ended the process on purpose).
REPLACE_EXIT: Final = 75
_POLL_S: Final = 0.05
_TERM_GRACE_S: Final = 5.0
_TAIL_LINES: Final = 40
_TAIL_BYTES: Final = 64 * 1024
_TEXT_LIMIT: Final = 4000


@dataclass(frozen=True, kw_only=True)
class TestEnd:
    """How one test of a batch ended (the suite turns it into a CaseResult)."""

    id: str
    outcome: Outcome
    reason: str
    duration_s: float = 0.0
    exit_code: int | None = None
    signal: str | None = None
    exception: Mapping[str, Any] | None = None
    tail: str = ""
    log_path: str = ""
    started_at: str = ""
    #: which libcudnn the test's process loaded, where its bootstrap traced it (a C++ test
    #: case: resources/run_catch2.py `cudnn_evidence`); the kind judges it (`judged`)
    cudnn: Mapping[str, Any] | None = None
    env: Mapping[str, Any] | None = None  # what the result stores as its captured environment


def plugin_env(base: Mapping[str, str], record: Path, ids: Path | None = None) -> dict[str, str]:
    """The suite process's environment: the plugin's record file (and the batch's ids), and the
    tool's pid (the plugin dies with the tool)."""
    env = dict(base)
    env[RECORD_ENV] = str(record)
    if ids is not None:
        env[IDS_ENV] = str(ids)
    env[PARENT_ENV] = str(os.getpid())
    env["PYTHONFAULTHANDLER"] = "1"  # a segfault's Python stack lands in the output
    return env


class _Record:
    """The lines of a record file as they are appended (a torn last line waits for its end)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def read(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        events = []
        for line in lines:
            with suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict):
                    events.append(event)
        return events


def _stamp(t: float | None = None) -> str:
    when = dt.datetime.fromtimestamp(t, dt.timezone.utc) if t else dt.datetime.now(dt.timezone.utc)
    return when.isoformat(timespec="seconds")


def _tail_from(path: Path, offset: int | None) -> str:
    """The last lines `path` got from `offset` on (the dead test's own output)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            end = fh.tell()
            start = max(offset or 0, end - _TAIL_BYTES)
            fh.seek(start)
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-_TAIL_LINES:])


def _kill(pgid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _end_from_done(event: Mapping[str, Any], log_path: Path, started: float | None) -> TestEnd:
    """The plugin's verdict as a TestEnd: a failure goes through the tool's classifier (a
    poisoned CUDA context is a crash, a missing module an environment error)."""
    test_id = str(event["id"])
    outcome = str(event.get("outcome"))
    reason = str(event.get("reason") or "")
    message = str(event.get("message") or "")
    text = str(event.get("text") or "")
    exception = None
    result: tuple[Outcome, str]
    match outcome:
        case "pass":
            result = (Outcome.PASS, "")
        case "skip":
            result = (Outcome.SKIP, reason)
        case "xfail":
            result = (Outcome.XFAIL, f"pytest xfail: {reason}".rstrip(": "))
        case "xpass":
            result = (Outcome.XPASS, f"pytest xpass (not strict): {reason}".rstrip(": "))
        case "fail" | "error":
            ename, _, evalue = message.partition(": ")
            if not evalue:
                ename, evalue = "", message
            found, why = classify_exception(ename, evalue, text)
            when = str(event.get("when") or "call")
            if outcome == "error" and found is not Outcome.CRASH:
                result = (Outcome.ERROR, f"{when} failed: {message}"[:600])
            elif found in (Outcome.CRASH, Outcome.ERROR):
                result = (found, why)
            else:  # a product failure stays one (no graph-not-supported skip for a test)
                result = (Outcome.FAIL, message.strip().splitlines()[0][:600] if message else why)
            if event.get("teardown"):
                result = (result[0], f"{result[1]}; teardown failed too: {event['teardown']}")
            exception = {"ename": ename, "evalue": evalue[:_TEXT_LIMIT], "traceback": text}
        case _:
            result = (Outcome.ERROR, f"the plugin reported {outcome!r}")
    return TestEnd(
        id=test_id,
        outcome=result[0],
        reason=result[1],
        duration_s=float(event.get("duration") or 0.0),
        exception=exception,
        tail=text[-_TEXT_LIMIT:] if result[0] is not Outcome.PASS else "",
        log_path=str(log_path),
        started_at=_stamp(started),
        cudnn=event.get("cudnn") if isinstance(event.get("cudnn"), dict) else None,
    )


@dataclass
class _Running:
    id: str
    since: float  # monotonic, when its `start` was read
    t: float | None  # its wall-clock start, from the plugin
    offset: int | None


class BatchRun:
    """Run a batch to the end in as many fresh pytest processes as it takes (see the module doc).

    `ids`: the node ids to run; None: a share, whose ids the first process's plugin assigns
    itself from the collected selection (`share_env` says which share; `on_collect` gets that
    process's collection lines: `item`, `collect_error`, `collected`). `argv` is the pytest
    command without the ids; `limit_s(id)` the time a test may run ("" for the start-up);
    `on_ends` gets the ends read in one poll, each id once (their results may share one fsync).
    `check_env(env)`: why what a process reports it loaded (its `env` line) is not the cell's
    pins, or None; every test that process ran is then an `error` with that reason (a pin that
    was not honoured overrides the verdict, as for every case). Each `env` is kept beside the
    process's output (env.N.json). Every process starts through the launcher (execute/launch.py)
    on `placement`, its output cut to `capture_cap` when it ends, and whatever it left running is
    ended and named: in the note of the test it was running when it died, else of the test that
    started it (`on_note(id, note)`, after that test's end), else in the log.
    """

    def __init__(
        self,
        *,
        ids: Sequence[str] | None,
        argv: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        folder: Path,
        limit_s: Callable[[str], float],
        on_ends: Callable[[list[TestEnd]], object],
        share_env: Mapping[str, str] | None = None,
        on_collect: Callable[[list[dict[str, Any]]], None] | None = None,
        check_env: Callable[[Mapping[str, Any]], str | None] | None = None,
        placement: Placement | None = None,
        capture_cap: int = launch.DEFAULT_CAPTURE_CAP,
        on_note: Callable[[str, str], object] | None = None,
        process: str = "pytest process",
    ) -> None:
        self.ids = None if ids is None else list(ids)
        self.process = process  # what a crash's reason calls the process: "test binary"
        self.argv, self.env, self.cwd, self.folder = argv, env, cwd, folder
        self.limit_s, self.on_ends = limit_s, on_ends
        self.share_env, self.on_collect = share_env, on_collect
        self.check_env = check_env
        self.placement, self.capture_cap = placement, capture_cap
        self.on_note = on_note
        self.processes = 0  # how many pytest processes the batch took
        self.assigned = 0  # how many ids a share's first process took (the progress line)
        #: a share's first process that ended without assigning ids (it could not collect):
        #: its exit status and output file, for the caller to judge
        self.unassigned: tuple[int | str, Path] | None = None

    def run(self) -> bool:
        """Run every id; False when a share's first process assigned none (nothing ran)."""
        left: list[str] | None = self.ids
        self.folder.mkdir(parents=True, exist_ok=True)
        while (left is None or left) and not SUPERVISOR.stopped:
            self.processes += 1
            left = self._one_process(left, self.processes)
            if left is None:
                return False
        return True

    def _one_process(self, ids: list[str] | None, n: int) -> list[str] | None:
        """One pytest process over `ids` (None: its share); returns the ids it left for a fresh
        one, or None when it was a share that never assigned its ids."""
        state = _Process(self, ids, n)
        try:
            state.run()
            return state.finish()
        finally:
            full = launch.CAPTURE.end(state.log_path)
            if full is not None:
                log.info("%s: %s", state.log_path, launch.capture_note(full))


class _Process:
    """One pytest process of a batch: started, its record followed, its end attributed."""

    def __init__(self, batch: BatchRun, ids: list[str] | None, n: int) -> None:
        self.batch = batch
        self.left: list[str] | None = None if ids is None else list(ids)
        self.ended: set[str] = set()
        self.pending: list[TestEnd] = []
        self.log_path = batch.folder / f"output.{n}.log"
        self.record_path = batch.folder / f"record.{n}.jsonl"
        self.ids_path = None if ids is None else batch.folder / f"ids.{n}.txt"
        self.running: _Running | None = None
        self.started_any = False
        self.killed: str | None = None  # "timeout" (a test ran past its limit) or "stalled"
        self.replaced = False
        self.returncode = 0
        self.pin_error: str | None = None
        #: what the process left running (the launcher ended it)
        self.leftovers: list[launch.Leftover] = []
        self.windows: list[launch.Window] = []  # when each test ran
        self.pid0: int | None = None  # the kernel's last pid when the running test started

    def _end(self, end: TestEnd) -> None:
        if end.id in self.ended or SUPERVISOR.stopped:
            return
        if self.pin_error is not None and end.outcome is not Outcome.ERROR:
            why = f"{self.pin_error}; the test ended {end.outcome}"
            end = replace(end, outcome=Outcome.ERROR, reason=f"{why}: {end.reason}".rstrip(": "))
        self.ended.add(end.id)
        if self.left is not None:
            with suppress(ValueError):
                self.left.remove(end.id)
        self.pending.append(end)

    def _flush(self) -> None:
        if self.pending and not SUPERVISOR.stopped:
            ends, self.pending = self.pending, []
            self.batch.on_ends(ends)

    def _events(self, record: _Record) -> None:
        collection: list[dict[str, Any]] = []
        for event in record.read():
            match event.get("ev"):
                case "start":
                    self.running = _Running(
                        str(event["id"]), time.monotonic(), event.get("t"), event.get("offset")
                    )
                    self.pid0 = event.get("pid0")
                    self.started_any = True
                    self.last = self.running.since
                case "done":
                    running = self.running
                    since = running.t if running and running.id == event["id"] else None
                    self._end(_end_from_done(event, self.log_path, since))
                    if since is not None:  # when it ran: what it left running is its note
                        t1 = float(event.get("t") or time.time())
                        window = launch.Window(event["id"], since, t1, self.pid0, event.get("pid1"))
                        self.windows.append(window)
                    self.running, self.last = None, time.monotonic()
                case "missing":
                    why = "not collected by the batch's pytest process (its collection differs)"
                    self._end(TestEnd(id=str(event["id"]), outcome=Outcome.ERROR, reason=why))
                case "replace":
                    self.replaced = True
                case "env":
                    self._pins(event.get("env") or {})
                case "assigned":
                    self.left = [str(i) for i in event.get("ids") or ()]
                    self.batch.assigned = self.batch.assigned or len(self.left)
                    self.last = time.monotonic()
                case "session" | "item" | "collect_error" | "collect_skip" | "collected":
                    collection.append(event)
        if collection and self.batch.on_collect is not None:
            self.batch.on_collect(collection)
        self._flush()

    def _pins(self, env: Mapping[str, Any]) -> None:
        with suppress(OSError):
            path = self.log_path.with_name(self.log_path.name.replace("output", "env"))
            path.with_suffix(".json").write_text(json.dumps(env, default=str), encoding="utf-8")
        if self.batch.check_env is not None:
            self.pin_error = self.batch.check_env(env)

    def run(self) -> None:
        batch = self.batch
        self.record_path.unlink(missing_ok=True)
        if self.ids_path is not None and self.left is not None:
            self.ids_path.write_text("".join(f"{i}\n" for i in self.left), encoding="utf-8")
        env = plugin_env(batch.env, self.record_path, self.ids_path)
        if self.ids_path is None:
            env.update(batch.share_env or {})
        log.debug("+ %s (%s)", " ".join(batch.argv), self.ids_path or "its share")
        token = launch.new_token()
        proc = launch.start(
            batch.argv,
            env=env,
            log_path=self.log_path,
            token=token,
            placement=batch.placement,
            cwd=batch.cwd,
        )
        launch.CAPTURE.add(self.log_path, batch.capture_cap)
        markers.launched(str(self.record_path), token)  # what it leaves, if the tool dies first
        # an interrupt ends it: the test it was running is no suspect of the tool's death
        SUPERVISOR.after_kill(proc.pid, functools.partial(markers.abandon, str(self.record_path)))
        SUPERVISOR.live.add(
            proc.pid, self.log_path.with_suffix(".kernel")
        )  # ended on Ctrl-C with the cases
        record = _Record(self.record_path)
        self.last = time.monotonic()  # the last sign of life: start, or a test's start or end
        returncode: int | None = None
        try:
            while returncode is None:
                try:
                    returncode = proc.wait(timeout=_POLL_S)
                except subprocess.TimeoutExpired:
                    returncode = None
                self._events(record)
                if returncode is not None:
                    break
                now, running = time.monotonic(), self.running
                if running is not None and now - running.since > batch.limit_s(running.id):
                    self.killed = "timeout"
                elif running is None and now - self.last > batch.limit_s(""):
                    self.killed = "stalled"
                if self.killed:
                    _kill(proc.pid, signal.SIGTERM)
                    try:
                        returncode = proc.wait(timeout=_TERM_GRACE_S)
                    except subprocess.TimeoutExpired:
                        _kill(proc.pid, signal.SIGKILL)
                        returncode = proc.wait()
        finally:
            if returncode is None:  # an exception in this thread: the process must not outlive it
                _kill(proc.pid, signal.SIGKILL)
                proc.wait()
            SUPERVISOR.live.discard(proc.pid)
            SUPERVISOR.after_kill(proc.pid, None)
            self.leftovers = launch.reap(token)  # a daemon a test started, wherever it went
            _kill(proc.pid, signal.SIGKILL)  # whatever the process group left behind
        self.returncode = returncode
        self._events(record)  # what it wrote before it ended, not read yet

    def finish(self) -> list[str] | None:
        """Attribute the end of the process; the ids left for a fresh one."""
        returncode, log_path = self.returncode, self.log_path
        if self.left is None:  # a share that never assigned its ids: it could not collect
            stalled = f"stalled: killed after {self.batch.limit_s(''):g}s without collecting"
            self.batch.unassigned = (stalled if self.killed else returncode, log_path)
            return None
        sig = signal_name(returncode)
        status = f"killed by {sig}" if sig else f"exited with status {returncode}"
        running = self.running
        if running is not None:
            tail = _tail_from(log_path, running.offset)
            took = (time.time() - running.t) if running.t else time.monotonic() - running.since
            if self.killed == "timeout":
                limit = self.batch.limit_s(running.id)
                outcome = Outcome.TIMEOUT
                reason = f"timed out after {limit:g}s; its {self.batch.process} was killed"
            else:
                poisoned = next((ln.strip() for ln in tail.splitlines() if POISON.search(ln)), None)
                outcome = Outcome.CRASH
                reason = f"the {self.batch.process} {status} during this test"
                if poisoned:
                    reason += f"; CUDA context poisoned: {poisoned[:300]}"
            if self.leftovers:
                reason += "; " + launch.leftover_note(self.leftovers)
            self._end(
                TestEnd(
                    id=running.id,
                    outcome=outcome,
                    reason=reason,
                    duration_s=round(took, 3),
                    exit_code=returncode if returncode >= 0 else None,
                    signal=sig,
                    tail=tail,
                    log_path=str(log_path),
                    started_at=_stamp(running.t),
                )
            )
        elif self.left and not self.started_any and not SUPERVISOR.stopped:
            why = "stalled before its first test" if self.killed == "stalled" else status
            tail = _tail_from(log_path, 0)
            last_line = next((ln for ln in reversed(tail.splitlines()) if ln.strip()), "")
            reason = f"its {self.batch.process} {why} before running it: {last_line[:300]}"
            for test_id in list(self.left):
                self._end(
                    TestEnd(
                        id=test_id,
                        outcome=Outcome.ERROR,
                        reason=reason,
                        exit_code=returncode,
                        signal=sig,
                        tail=tail,
                        log_path=str(log_path),
                    )
                )
        self._flush()
        self._name_leftovers(running.id if running is not None else None)
        return self.left

    def _name_leftovers(self, running: str | None) -> None:
        """Each process it left running goes in the note of the test that started it
        (`launch.owner`; the test it died in has them all already), else in the log."""
        if not self.leftovers or running is not None:
            return
        by_test: dict[str, list[launch.Leftover]] = {}
        unowned = []
        for process in self.leftovers:
            owner = launch.owner(process, self.windows)
            if owner is None or self.batch.on_note is None:
                unowned.append(process)
            else:
                by_test.setdefault(str(owner), []).append(process)
        for test_id, processes in by_test.items():
            assert self.batch.on_note is not None
            self.batch.on_note(test_id, launch.leftover_note(processes).replace("case", "test"))
        if unowned:
            note = launch.leftover_note(unowned).replace("the case", "its tests")
            log.warning("%s: %s", self.log_path, note)
