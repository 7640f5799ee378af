"""Bootstrap of a Catch2 binary's batch: each TEST_CASE of the batch in a process of its own.

Usage: python run_catch2.py BINARY  (the batch's ids: the file named by $CUDNN_MATRIX_PYTEST_IDS;
the record: $CUDNN_MATRIX_PYTEST_RECORD, the marker file of resources/markers.py that the pytest
plugin writes too, so execute/batches.py follows both alike).

An id is `FILE::NAME` (FILE: the TEST_CASE's source file relative to the project; NAME: its
Catch2 name). For each id, in order: a durable `start` marker, then `BINARY "NAME" -r xml -o
FILE` (the name escaped, so a comma or bracket in it is no test spec syntax), then `done` with
the verdict read from Catch2's XML report:

- `pass`: the test case succeeded with no SKIP;
- `skip`: Catch2's SKIP(), its message the reason;
- `fail`: the first failing expression (`REQUIRE( got == 5 ) failed: 4 == 5`), FAIL()'s message,
  an unexpected exception, with the rest of the failures and the captured output as text;
- `error`: the binary did not run the test case (no such name, no XML report).

A `fail` or `error` also keeps what the test case's process wrote (its error lines, else its
last lines, in its text): the backend logs its errors to stderr there (CUDNN_LOGERR_DBG=1
unless the caller set its own), and a `fail` runs once more with the frontend's log
(CUDNN_FRONTEND_LOG_INFO=1 to stderr; its verdict stays the first run's), so a failure on a host
without a driver says so ("cudaGetDeviceCount(&count) != cudaSuccess", "cuda_get_device(&device)
failed with CUDA driver version is insufficient").

Which libcudnn each test case loaded (the pin's evidence): its process runs with the loader's
debug output (LD_DEBUG=files,bindings, to its own file, LD_DEBUG_OUTPUT), unless the caller set
LD_DEBUG itself. Of it only the lines about libcudnn objects are kept, bounded (`cudnn_evidence`:
the folders they were loaded from, whether the test case called into cuDNN after the program
started, a few lines); the raw file is removed. "Called" is a lazy binding of a cuDNN symbol made
after the loader handed control to the program, or a libcudnn object loaded after that (a
sub-library the dispatcher opens, a dlopen): a binary linked to libcudnn maps it in every test
case, and only one that called it proves anything of the pin.

A test case whose process dies of a signal (abort, segfault; Catch2 re-raises the signal after
writing its report) ends this process with the same signal right after: the tool sees the process
die during that id (its `start` has no `done`), names the crash with the signal and the output
since its start, and runs the ids left in a fresh process, as for a pytest process that dies
(execute/batches.py). A hang is ended by the tool at the case's time limit (it kills this
process's group, the test case's process included). Each test case runs in a process of its own,
so a sticky CUDA error or a corrupted heap of one cannot reach the next (DOMAIN.md §11: the
frontend's CUDA_CHECK calls FAIL(), not abort). Stdlib only.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import resource
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

RECORD_ENV = "CUDNN_MATRIX_PYTEST_RECORD"
IDS_ENV = "CUDNN_MATRIX_PYTEST_IDS"
_TEXT_LIMIT = 4000
_OUTPUT_LINES = 30  # of the test case's own output, kept with a failure's text
_OUTPUT_BYTES = 1 << 20  # of its output read for them (its error lines first)
_RERUN_FLOOR_S = 30.0  # the logged re-run of a failure: 3x the first run, at least this
#: Characters Catch2's test spec parser reads as syntax (a backslash makes the next one literal).
_SPEC_CHARS = '\\,[]*"~'
_FAILURES = ("Expression", "Failure", "Exception", "FatalErrorCondition")
#: The loader's debug output of a test case's processes (LD_DEBUG_OUTPUT appends `.PID`).
_LD_DEBUG = "files,bindings"
_LD_LINES = 24  # libcudnn lines kept per test case (the rest counted)
_LD_LINE_CHARS = 300
_LD_PATHS = 16  # libcudnn files named per test case
_LD_CALLS = 8  # cuDNN symbols named per test case
_LD_READ_BYTES = 256 << 20  # of each raw file read at most (a file is one process's)


def _load_sibling(name: str) -> Any:
    path = Path(__file__).resolve().parent / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_cudnn_matrix_{name}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def spec_for(name: str) -> str:
    """The Catch2 test spec that matches the test case named `name` and nothing else."""
    return "".join(f"\\{c}" if c in _SPEC_CHARS else c for c in name)


def _stdout_offset() -> int | None:
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        return os.lseek(1, 0, os.SEEK_CUR)
    except OSError:
        return None


def _last_pid() -> int | None:
    try:
        with open("/proc/sys/kernel/ns_last_pid", "rb") as fh:  # noqa: PTH123
            return int(fh.read())
    except (OSError, ValueError):
        return None


def _no_core() -> None:
    """In the test case's process: no core file (a crash is a verdict, not a dump)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _text(element: ET.Element | None) -> str:
    return " ".join("".join(element.itertext()).split()) if element is not None else ""


def _where(element: ET.Element) -> str:
    file, line = element.get("filename") or "", element.get("line") or ""
    return f" ({Path(file).name}:{line})" if file else ""


def _failure_line(element: ET.Element) -> str:
    match element.tag:
        case "Expression":
            macro = element.get("type") or "CHECK"
            original = _text(element.find("Original"))
            expanded = _text(element.find("Expanded"))
            line = f"{macro}( {original} ) failed"
            if expanded and expanded != original:
                line += f": {expanded}"
            return line + _where(element)
        case "Exception":
            return f"unexpected exception: {_text(element)}{_where(element)}"
        case "FatalErrorCondition":
            return f"fatal error: {_text(element)}{_where(element)}"
    return _text(element) + _where(element)


def verdict(xml_path: str, returncode: int) -> dict[str, Any]:
    """The `done` fields of one test case from its XML report (see the module doc)."""
    try:
        root = ET.parse(xml_path).getroot()
    except (OSError, ET.ParseError) as exc:
        why = f"the binary wrote no readable XML report (exit status {returncode}): {exc}"
        return {"outcome": "error", "when": "call", "message": why[:_TEXT_LIMIT]}
    case = root.find("TestCase")
    if case is None:
        why = f"the binary ran no test case of this name (exit status {returncode})"
        return {"outcome": "error", "when": "call", "message": why}
    result = case.find("OverallResult")
    ok = result is not None and result.get("success") == "true"
    failures = [e for e in case.iter() if e.tag in _FAILURES and e.get("success") != "true"]
    output = [
        f"{e.tag}: {''.join(e.itertext()).strip()}"
        for e in case.iter()
        if e.tag in ("StdOut", "StdErr")
    ]
    skips = [e for e in case.iter() if e.tag == "Skip"]
    duration = float(result.get("durationInSeconds") or 0) if result is not None else 0.0
    if ok and not failures and skips:
        reason = _text(skips[0]) or "SKIP() without a message"
        return {"outcome": "skip", "reason": f"Catch2 SKIP: {reason}", "duration": duration}
    if ok and not failures:
        return {"outcome": "pass", "duration": duration}
    lines = [_failure_line(e) for e in failures] or [f"failed (exit status {returncode})"]
    text = "\n".join([*lines, *output])
    return {
        "outcome": "fail",
        "when": "call",
        "message": lines[0][:_TEXT_LIMIT],
        "text": text[-_TEXT_LIMIT:],
        "duration": duration,
    }


_CHILD: list[subprocess.Popen[bytes]] = []  # the test case's process while it runs
_LD_PREFIX: list[str] = []  # the loader's debug files' prefix, removed when this process dies


def _on_term(signum: int, frame: Any) -> None:  # noqa: ARG001 - a signal handler's
    """The tool ends this process (a hang, an interrupt): the test case's process goes first,
    so nothing of the batch outlives it."""
    _drop_ld()  # first: the tool's KILL may follow before the wait below ends
    for child in _CHILD:
        try:
            child.kill()
            child.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass
    _die_like(signum)


def _crash_lines(report: str, name: str, sig: int) -> None:
    """What the dead test case's XML report says (Catch2 writes the fatal condition before it
    re-raises the signal), on stdout: the tool's tail of the crash is read from there."""
    try:
        lines = str(verdict(report, -sig).get("text", "")).splitlines()
    except Exception:  # noqa: BLE001 - a torn report: the signal is the evidence
        lines = []
    sig_name = signal.Signals(sig).name if sig in signal.valid_signals() else str(sig)
    print(f"[cudnn-matrix] TEST_CASE {name!r} killed by {sig_name}", flush=True)
    for line in lines[:20]:
        print(f"[cudnn-matrix]   {line}", flush=True)


def _output_since(offset: int | None) -> str:
    """What the test case's process wrote to this process's output file since `offset` (the
    backend's and the frontend's own logging, which Catch2's XML does not hold), its last lines."""
    if offset is None:
        return ""
    try:
        with open(f"/proc/self/fd/{sys.stdout.fileno()}", "rb") as fh:  # noqa: PTH123
            fh.seek(offset)
            data = fh.read(_OUTPUT_BYTES)
    except (OSError, ValueError):
        return ""
    return data.decode("utf-8", "replace")


def _child_env(ld_prefix: str) -> dict[str, str]:
    """The test case's environment: the backend logs its errors to stderr (CUDNN_LOGERR_DBG),
    so a failure says why (on a host without a driver: "cudaGetDeviceCount(&count) !=
    cudaSuccess"), unless the caller set its own logging; the loader's debug output goes to
    `ld_prefix.PID` (the module doc), unless the caller set LD_DEBUG."""
    env = dict(os.environ)
    if "CUDNN_LOGERR_DBG" not in env and "CUDNN_LOGDEST_DBG" not in env:
        env.update(CUDNN_LOGERR_DBG="1", CUDNN_LOGDEST_DBG="stderr")
    if "LD_DEBUG" not in env:
        env.update(LD_DEBUG=_LD_DEBUG, LD_DEBUG_OUTPUT=ld_prefix)
    return env


def _is_cudnn(path: str) -> bool:
    return Path(path).name.startswith("libcudnn")


def _object(text: str) -> str:
    """`/x/libcudnn.so.9 [0]` -> `/x/libcudnn.so.9` (the loader's object and its namespace)."""
    return text.rsplit(" [", 1)[0].strip()


def cudnn_evidence(prefix: str) -> dict[str, Any] | None:
    """The libcudnn part of the loader's debug files `prefix.PID` (one per process the test case
    ran), which are removed: `loaded` (the libcudnn files mapped, full paths), `called` (a cuDNN
    symbol bound, or a libcudnn object loaded, after control passed to the program), `calls`
    (those symbols), `lines` (the first libcudnn lines, cut), `lines_total` and `raw_bytes`
    (what the loader wrote). None when the loader wrote nothing (LD_DEBUG not honoured)."""
    where = Path(prefix)
    files = sorted(where.parent.glob(f"{glob.escape(where.name)}.*"))
    if not files:
        return None
    loaded: dict[str, None] = {}
    calls: dict[str, None] = {}
    lines: list[str] = []
    called = False
    total = raw = 0
    for path in files:
        running = False  # past "transferring control": what binds or loads now, the test did
        try:
            raw += path.stat().st_size
            with path.open("rb") as fh:
                data = fh.read(_LD_READ_BYTES)
        except OSError:
            continue
        finally:
            path.unlink(missing_ok=True)
        for raw_line in data.decode("utf-8", "replace").splitlines():
            body = raw_line.split(":\t", 1)[-1].strip()  # without the pid
            if body.startswith("transferring control:"):
                running = True
                continue
            if "libcudnn" not in body:
                continue
            if body.startswith("binding file "):
                source, _, rest = body.removeprefix("binding file ").partition(" to ")
                target, _, symbol = rest.partition(": ")
                if not _is_cudnn(_object(target)):
                    continue  # a libcudnn object's own binding to libc & co: not evidence
                loaded.setdefault(_object(target))
                if _is_cudnn(_object(source)):
                    continue  # cuDNN calling itself
                if running:
                    called = True
                    calls.setdefault(symbol.split("`", 1)[-1].split("'", 1)[0])
            elif body.startswith(("calling init: ", "opening file=")):
                found = _object(body.split(": ", 1)[-1].removeprefix("opening file=").split(";")[0])
                if _is_cudnn(found):
                    loaded.setdefault(found)
            elif running and body.startswith("file=") and "generating link map" in body:
                called = True  # a libcudnn object loaded while the test case ran
            total += 1
            if len(lines) < _LD_LINES:
                lines.append(body[:_LD_LINE_CHARS])
    return {
        "loaded": list(loaded)[:_LD_PATHS],
        "called": called,
        "calls": list(calls)[:_LD_CALLS],
        "lines": lines,
        "lines_total": total,
        "raw_bytes": raw,
    }


def _drop_ld() -> None:
    """The loader's output of a test case this process will not judge (it dies): removed."""
    for prefix in _LD_PREFIX:
        where = Path(prefix)
        for path in where.parent.glob(f"{glob.escape(where.name)}.*"):
            path.unlink(missing_ok=True)


def _die_like(sig: int) -> None:
    """End this process with the signal its test case died of (see the module doc)."""
    _drop_ld()
    sys.stdout.flush()
    sys.stderr.flush()
    _no_core()
    signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    time.sleep(1)
    os._exit(128 + sig)


def main() -> int:
    binary = sys.argv[1]
    record_path = os.environ[RECORD_ENV]
    with open(os.environ[IDS_ENV], encoding="utf-8") as fh:  # noqa: PTH123
        ids = [line.rstrip("\n") for line in fh if line.strip()]
    _load_sibling("guard").die_with_parent()
    signal.signal(signal.SIGTERM, _on_term)
    record = _load_sibling("markers").Markers(record_path)
    report = f"{record_path}.case.xml"
    ld_prefix = f"{record_path}.ld"
    _LD_PREFIX.append(ld_prefix)
    env = _child_env(ld_prefix)
    traced = env.get("LD_DEBUG_OUTPUT") == ld_prefix  # else the caller's own LD_DEBUG
    ours = ("LD_DEBUG", "LD_DEBUG_OUTPUT") if traced else ()
    plain = {k: v for k, v in env.items() if k not in ours}  # the logged re-run's, untraced
    for ident in ids:
        name = ident.split("::", 1)[1] if "::" in ident else ident
        offset = _stdout_offset()
        record.start(ident, t=time.time(), offset=offset, pid0=_last_pid())
        if os.path.exists(report):  # noqa: PTH110
            os.unlink(report)  # noqa: PTH108
        cudnn_evidence(ld_prefix)  # a stale one (a process a killed batch left) is not this one's
        started = time.monotonic()
        argv = [binary, spec_for(name), "-r", "xml", "-o", report, "--durations", "yes"]
        child = subprocess.Popen(argv, env=env, preexec_fn=_no_core)  # noqa: PLW1509
        _CHILD.append(child)
        returncode = child.wait()
        _CHILD.clear()
        if returncode < 0:
            _crash_lines(report, name, -returncode)
            _die_like(-returncode)
        done = verdict(report, returncode)
        done.setdefault("duration", round(time.monotonic() - started, 6))
        evidence = cudnn_evidence(ld_prefix) if traced else None
        if evidence is not None:
            done["cudnn"] = evidence
        if done["outcome"] == "fail" and "CUDNN_FRONTEND_LOG_INFO" not in os.environ:
            # once more with the frontend's log, for the evidence only: the verdict stays the
            # first run's (a frontend failure logs its cause only there)
            print(f"[cudnn-matrix] TEST_CASE {name!r} failed: once more with the frontend's log")
            sys.stdout.flush()
            logged = {**plain, "CUDNN_FRONTEND_LOG_INFO": "1", "CUDNN_FRONTEND_LOG_FILE": "stderr"}
            # the console reporter: the XML one would capture the log (std::cerr) into its report
            again = [binary, spec_for(name), "-r", "console"]
            _CHILD.append(subprocess.Popen(again, env=logged, preexec_fn=_no_core))  # noqa: PLW1509
            try:  # bounded: a re-run for evidence never turns the verdict into a timeout
                _CHILD[-1].wait(timeout=max(_RERUN_FLOOR_S, 3 * float(done["duration"])))
            except subprocess.TimeoutExpired:
                _CHILD[-1].kill()
                _CHILD[-1].wait()
            _CHILD.clear()
        if done["outcome"] in ("fail", "error"):  # its own output is evidence too
            own = _output_since(offset)
            if own:
                lines = own.splitlines()
                errors = [ln for ln in lines if "ERROR" in ln or "Error" in ln]
                text = f"{done.get('text', '')}\n--- its output ---\n" + "\n".join(
                    errors[:_OUTPUT_LINES] or lines[-_OUTPUT_LINES:]
                )
                done["text"] = text[-_TEXT_LIMIT:]
        done.update(ev="done", id=ident, t=time.time(), pid1=_last_pid())
        record.write(done)
    cudnn_evidence(ld_prefix)  # none is left behind
    record.write({"ev": "end"})
    record.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
