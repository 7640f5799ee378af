"""CaseResult and the append-only JSON Lines store: every finished result is on disk at once."""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import secrets
import threading
from contextlib import suppress
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from validate.errors import ResultsError, ResultsLost
from validate.model.axes import pins_label
from validate.model.outcome import Outcome, policy
from validate.textsafe import redact_obj

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

__all__ = [
    "MIN_FREE_BYTES",
    "RESERVE_BYTES",
    "RUN_KEY_ENV",
    "SCHEMA_VERSION",
    "CaseResult",
    "ReadResults",
    "ResultStore",
    "RunKey",
    "axis_value",
    "cell_label",
    "is_bad",
    "is_good",
    "load_results",
    "read_results",
    "result_key",
    "write_json",
]

#: Bump when a field changes meaning; readers accept any version <= this one.
SCHEMA_VERSION = 2  # 2: every line carries a MAC (`mac`) under the run key


@dataclass(frozen=True, kw_only=True)
class CaseResult:
    """One case run in one cell: verdict, reason and the evidence kept for it."""

    case: str  # case name, e.g. "26_layernorm....ipynb" or "repro_fusion_uid.py::pygraph"
    outcome: Outcome
    reason: str = ""
    duration_s: float = 0.0
    cell_id: str = ""  # "" when run outside a matrix (plain `run`)
    cell: Mapping[str, str] = field(default_factory=dict)  # the pins: cudnn, frontend, cuda, ...
    case_path: str = ""
    exit_code: int | None = None
    signal: str | None = None  # "SIGSEGV", "SIGABRT", ...
    exception: Mapping[str, Any] | None = None  # ename, evalue, cell_index, traceback tail
    tail: str = ""  # bounded stdout/stderr tail
    log_path: str = ""  # full output on disk
    api_logs: Mapping[str, str] = field(default_factory=dict)  # {"frontend": path, "backend": path}
    env: Mapping[str, Any] = field(default_factory=dict)  # captured inside the case process
    attempts: tuple[str, ...] = ()  # outcomes of reruns, first run first
    flaky: bool = False
    known_issue: str | None = None  # KI id matched by the known-issues check
    ki_note: str = ""  # e.g. "KI-1 reproduces outside its declared range"
    started_at: str = ""  # ISO 8601, UTC
    run_id: str = ""
    content_key: str = ""  # hash of case content + pins, for --resume / result cache
    #: the contention its first attempt met when that one failed or timed out beside other cases
    #: and it ran again alone, e.g. "timed out at 300 s beside 17 other cases (GPU 98% busy);
    #: passed alone in 97 s" (execute/runner.py); "" when it was judged as it first ran
    contention: str = ""

    @property
    def key(self) -> str:
        """Identity of a result inside a run: cell and case."""
        return f"{self.cell_id}::{self.case}"

    def with_(self, **changes: Any) -> CaseResult:
        """Copy with fields replaced."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["outcome"] = str(self.outcome)
        data["attempts"] = list(self.attempts)
        data["cell"] = dict(self.cell)
        # the case's captured environment, redacted again here (the capture hides secrets in the
        # case process): every copy (results line, result.json, --json) goes through to_dict
        data["env"] = redact_obj(dict(self.env))
        data["schema"] = SCHEMA_VERSION
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CaseResult:
        known = set(cls.__dataclass_fields__)
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["outcome"] = Outcome(data["outcome"])
        kwargs["attempts"] = tuple(data.get("attempts", ()))
        return cls(**kwargs)


#: Kept allocated in the run folder so a full disk can still take the last results lines.
RESERVE_BYTES: Final = 256 * 1024
#: Below this much free space no new case starts (`ResultStore.check`).
MIN_FREE_BYTES: Final = 64 * 1024
_RESERVE: Final = ".results.reserve"
_STOPPED: Final = "no new case started, finished results are kept, --resume completes the run"


def _write_all(fd: int, data: bytes) -> None:
    """Write all of `data` (a write may take only part of it) and fsync."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


def _fsync_dir(folder: Path) -> None:
    """fsync a folder, so the names created or renamed in it survive a power loss (an fsync of a
    file makes its bytes durable, not its directory entry). A file system that cannot fsync a
    folder (EINVAL) gives no more than this."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
    finally:
        os.close(fd)


def _write_durable(path: Path, data: bytes, mode: int = 0o666) -> None:
    """Replace `path` with `data` (temp file, fsync, rename, fsync of the folder)."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)
    tmp.replace(path)
    _fsync_dir(path.parent)


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
                _write_all(fd, (b"\n" if torn else b"") + line + b"\n")
                st = os.fstat(fd)
                if self._file_id != (st.st_dev, st.st_ino):  # created now: name it durably
                    _fsync_dir(self.path.parent)
                    _fsync_dir(self.path.parent.parent)  # the run folder is new as well
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
            _write_durable(self.path, b"".join(line + b"\n" for line in self._lines))
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


#: Environment variable through which a parent tool hands a run's key to its own runner (the docker
#: path); the store pops it at once, so no case process ever inherits it.
RUN_KEY_ENV: Final = "CUDNN_MATRIX_RUN_KEY"
_SEALED_KEY: Final = "results.key"


def _state_dir() -> Path:
    """Where unsealed run keys live: never inside a run folder a case could read from."""
    override = os.environ.get("CUDNN_MATRIX_STATE_DIR")
    if override:
        return Path(override)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "cudnn-matrix" / "run-keys"


def _canonical(data: Mapping[str, Any]) -> bytes:
    body = {k: v for k, v in data.items() if k != "mac"}
    return json.dumps(body, sort_keys=True, default=str, separators=(",", ":")).encode("utf-8")


@dataclass(frozen=True)
class RunKey:
    """The secret that the tool's lines in one run's results.jsonl are signed with.

    Design (issue: results integrity): an HMAC per line rather than a hash chain or file
    permissions, because case processes run as the same user as the tool. While the run is live,
    the key exists only in the tool's memory and in a 0600 file under the user's state folder
    (`$XDG_STATE_HOME/cudnn-matrix/run-keys/`, for `--resume` after a kill), keyed by the run
    folder's path; it is never in a case's environment nor in the run folder. When the run ends,
    `seal` writes it as `<run>/results.key`, so the folder is self-contained. This detects lines a
    case appends (by accident or on purpose) while it runs; it does not stop a process that goes
    looking for the state file -- the docker executor, where cases cannot see the host's files, is
    the isolation for that.
    """

    secret: bytes

    def sign(self, data: Mapping[str, Any]) -> str:
        return hmac.new(self.secret, _canonical(data), hashlib.sha256).hexdigest()

    def verifies(self, data: Mapping[str, Any]) -> bool:
        mac = data.get("mac")
        return isinstance(mac, str) and hmac.compare_digest(mac, self.sign(data))

    @staticmethod
    def _private_file(run_dir: Path) -> Path:
        digest = hashlib.sha256(str(run_dir.resolve()).encode()).hexdigest()[:32]
        return _state_dir() / f"{digest}.key"

    @classmethod
    def for_run(cls, run_dir: Path, *, create: bool = False) -> RunKey:
        """The run's key: handed over by the parent tool, sealed in the folder, or kept privately
        for a live or killed run; a new one when `create` and none exists (else KeyError)."""
        handed = os.environ.pop(RUN_KEY_ENV, None)
        if handed:
            key = cls(bytes.fromhex(handed))
            key._keep(run_dir)
            return key
        for candidate in (run_dir / _SEALED_KEY, cls._private_file(run_dir)):
            try:
                return cls(bytes.fromhex(candidate.read_text(encoding="ascii").strip()))
            except (OSError, ValueError):
                continue
        if not create:
            raise KeyError(str(run_dir))
        key = cls(secrets.token_bytes(32))
        key._keep(run_dir)
        return key

    def _keep(self, run_dir: Path) -> None:
        """The private copy, durable before any line is signed with it: a result whose key was
        lost in a power cut would not verify, which is as good as lost."""
        path = self._private_file(run_dir)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        _write_durable(path, self.secret.hex().encode("ascii"), 0o600)

    def seal(self, run_dir: Path) -> None:
        """`results.key` beside the results, durable before the private copy is dropped."""
        _write_durable(run_dir / _SEALED_KEY, self.secret.hex().encode("ascii") + b"\n")
        self._private_file(run_dir).unlink(missing_ok=True)


@dataclass(frozen=True, kw_only=True)
class ReadResults:
    """What one results.jsonl held: the results the tool wrote, and every line it skipped."""

    results: list[CaseResult]
    skipped: list[str]  # "file:line: why", one per line that is not counted


def _mistyped(data: Mapping[str, Any]) -> str | None:
    """Why a decoded line is not a result the tool wrote, or None."""
    for name, kind in (("case", str), ("outcome", str)):
        if not isinstance(data.get(name), kind) or not data.get(name):
            return f"field {name!r} missing or not a string"
    for name, kinds in (
        ("reason", (str,)),
        ("cell_id", (str,)),
        ("duration_s", (int, float)),
        ("cell", (dict,)),
        ("attempts", (list,)),
        ("env", (dict,)),
        ("api_logs", (dict,)),
    ):
        value = data.get(name)
        if name in data and (not isinstance(value, kinds) or isinstance(value, bool)):
            return f"field {name!r} has the wrong type ({type(data[name]).__name__})"
    return None


def read_results(file: Path, key: RunKey | None = None) -> ReadResults:
    """Read one results.jsonl; lines that do not decode, do not type-check or whose MAC does not
    verify are skipped and listed (never counted). A run written by a newer schema is refused.

    `key`: the run's key (default: found beside the file, or privately, as `RunKey.for_run`). A
    folder with no key at all is a run from before lines were signed (schema 1): its lines are
    read as they are; once a key exists, every line must carry a valid MAC.
    """
    if key is None:
        try:
            key = RunKey.for_run(file.parent)
        except KeyError:
            key = None
    results: list[CaseResult] = []
    skipped: list[str] = []
    try:
        raw_lines = file.read_bytes().split(b"\n")
    except FileNotFoundError:
        return ReadResults(results=[], skipped=[])
    for number, raw in enumerate(raw_lines, start=1):
        if not raw.strip():
            continue
        where = f"{file}:{number}"
        try:
            data = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError:
            skipped.append(f"{where}: not valid UTF-8")
            continue
        except json.JSONDecodeError:
            skipped.append(f"{where}: not a JSON object (torn or foreign line)")
            continue
        if not isinstance(data, dict):
            skipped.append(f"{where}: a JSON {type(data).__name__}, not a result object")
            continue
        schema = data.get("schema", 1)
        if not isinstance(schema, int) or isinstance(schema, bool):
            skipped.append(f"{where}: field 'schema' is not an integer")
            continue
        if schema > SCHEMA_VERSION:
            msg = (
                f"{where}: written by a newer cudnn-matrix (results schema {schema}, this one "
                f"reads up to {SCHEMA_VERSION}); upgrade the tool to read this run"
            )
            raise ResultsError(msg)
        problem = _mistyped(data)
        if problem is None and (key is not None or "mac" in data):
            if key is None:
                problem = "signed, but the run's key is missing (results.key); cannot verify it"
            elif not key.verifies(data):
                problem = "MAC does not verify: a line the tool did not write"
        if problem is None:
            try:
                results.append(CaseResult.from_dict(data))
            except (KeyError, ValueError, TypeError) as exc:
                problem = f"not a result ({exc})"
        if problem is not None:
            skipped.append(f"{where}: {problem}")
    return ReadResults(results=results, skipped=skipped)


def load_results(paths: Iterable[Path], *, skipped: list[str] | None = None) -> list[CaseResult]:
    """Read results from JSONL files or run folders; unreadable or forged lines are left out
    (and listed in `skipped` when given), so `--resume` re-runs the cases they stood for."""
    out: list[CaseResult] = []
    for path in paths:
        file = path / "results.jsonl" if path.is_dir() else path
        read = read_results(file)
        out.extend(read.results)
        if skipped is not None:
            skipped.extend(read.skipped)
    return out


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Replace `path` atomically (temp file + rename): a reader never sees half a file; secrets
    are redacted (run.json keeps the command line)."""
    tmp = path.with_suffix(".tmp")
    text = json.dumps(redact_obj(dict(data)), indent=2, sort_keys=True, default=str)
    tmp.write_text(text + "\n", encoding="utf-8")
    tmp.replace(path)


def axis_value(result: CaseResult, axis: str) -> str:
    """The value of a matrix axis (or the case name) for one result."""
    if axis == "case":
        return result.case
    return str(result.cell.get(axis, "?"))


def cell_label(result: CaseResult) -> str:
    """Human label of a result's cell, e.g. 'cudnn 9.24.0.43 / fe 1.27.0 / cuda 13.0 / ...'."""
    if not result.cell:
        return result.cell_id or "no cell"
    return pins_label(result.cell)


def result_key(result: CaseResult) -> str:
    """Identity of a result across runs: cell (id, or pins when run outside a matrix) and case."""
    cell = result.cell_id or ";".join(f"{k}={v}" for k, v in sorted(result.cell.items()))
    return f"{cell}::{result.case}"


def is_bad(result: CaseResult) -> bool:
    """fail, crash or timeout: the outcomes that count against the product (policy `bad`)."""
    return policy(result.outcome).bad


def is_good(result: CaseResult) -> bool:
    """pass or xpass: the case works (policy `good`)."""
    return policy(result.outcome).good
