"""Pure classification of one finished case process into (Outcome, reason); no I/O here.

What holds for every case kind is here (a pin not honoured, the tool's timeout, exceptions read
by their text); what a kind's own report and exit status mean is its `classify` (cases/kinds.py).
"""

from __future__ import annotations

import json
import re
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from validate.execute.resources.cuda_errors import POISON
from validate.model.outcome import Outcome

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

__all__ = [
    "ExecResult",
    "classify",
    "classify_exception",
    "poisoned",
    "poisoned_at",
    "signal_name",
]

#: CUDA errors that poison the context: the process is as good as dead (DOMAIN.md §6).
_POISON: Final = POISON
#: The harness or the environment broke, not the product (DOMAIN.md §2): a sub-library that
#: did not load or is of another version, a backend not loaded at all, or a symbol the frontend
#: could not load from the backend (a sub-library from elsewhere: "Invalid handle. Cannot load
#: symbol cudnnCausalConv1dForward" on the H200, issue 12 item 7).
_ENV_TEXT: Final = re.compile(
    r"CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED|CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH"
    r"|Unable to find symbol cudnnGetVersion|Cannot load symbol"
)
_ENV_NAMES: Final = frozenset({"ModuleNotFoundError", "ImportError"})
_NOT_SUPPORTED: Final = re.compile(
    r"cudnnGraphNotSupportedError|graph not supported", re.IGNORECASE
)
_MISSING_SYMBOL: Final = re.compile(r"Unable to find symbol (cudnn\w+)")
_ANSI: Final = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass(frozen=True, kw_only=True)
class ExecResult:
    """How one process ended: a case process (the input of `classify`) or a container's runner.

    One type for what used to be three (the classifier's CaseExec, the runner's per-attempt
    record and the executors' ExecResult). A failing case is data here, never an exception.
    """

    kind: str  # a case kind's name (cases/kinds.py KINDS), or "runner": never classified
    returncode: int | None  # of the process the tool started; negative = killed by that signal
    timed_out: bool = False
    timeout_s: float = 0.0
    duration_s: float = 0.0
    log_path: Path | None = None  # its full output; only a bounded tail is kept below
    tail: str = ""  # bounded tail of stdout+stderr
    report: Mapping[str, Any] | None = None  # JSON written by run_notebook.py / run_script.py
    result_file: tuple[Outcome, str] | str | None = None  # script's own result file (see script.py)
    verdict: tuple[Outcome, str] | None = None  # script's `VERDICT ...` line
    note: str = ""  # the launcher's: processes that outlived the case, output cut to the cap


def signal_name(returncode: int | None) -> str | None:
    """'SIGSEGV' for -11 and so on; None for a normal exit."""
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _floor_line(text: str) -> str:
    for line in text.splitlines():
        if "backend_version" in line and ("assert" in line or ">=" in line):
            return line.strip().lstrip("->").strip().lstrip("0123456789 ").strip()
    return "backend_version() floor"


def classify_exception(ename: str, evalue: str, context: str = "") -> tuple[Outcome, str]:
    """An exception raised by a case; `context` is the traceback and the failing source."""
    text = _ANSI.sub("", f"{ename}: {evalue}\n{context}")
    first = evalue.strip().splitlines()[0] if evalue.strip() else ""
    head = f"{ename}: {first}".strip(": ")[:300]
    if _POISON.search(text):
        return Outcome.CRASH, f"CUDA context poisoned: {head}"
    if ename in _ENV_NAMES or _ENV_TEXT.search(text):
        return Outcome.ERROR, f"environment: {head}"
    if _NOT_SUPPORTED.search(text):
        return Outcome.SKIP, f"graph not supported by this backend ({head})"
    symbol = _MISSING_SYMBOL.search(text)
    if symbol:
        return Outcome.SKIP, f"backend lacks {symbol.group(1)} (too old for this case)"
    if ename == "AssertionError" and "backend_version" in text:
        return Outcome.SKIP, f"backend floor not met: {_floor_line(text)}"
    return Outcome.FAIL, head


def _timeout(run: ExecResult) -> tuple[Outcome, str]:
    return Outcome.TIMEOUT, f"timed out after {run.timeout_s:g}s; process group killed"


def poisoned(text: str) -> bool:
    """Whether `text` names a CUDA error that poisons the context (the process is as good as dead)."""
    return _POISON.search(text) is not None


def poisoned_at(tail: str) -> str | None:
    """Where a script's output shows a context-poisoning CUDA error: the first error its last
    `RESULT <json>` line records (`first_error`, else a graph's `error`), else the first output
    line that names one; None when there is none."""
    for line in reversed(tail.splitlines()):
        if line.startswith("RESULT "):
            found = _poisoned_result(line.removeprefix("RESULT "))
            if found is not None:
                return found
            break
    for line in _ANSI.sub("", tail).splitlines():
        if _POISON.search(line):
            return line.strip()[:300]
    return None


def _poisoned_result(text: str) -> str | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    graphs = data.get("graphs")
    records = [data.get("first_error"), *(graphs if isinstance(graphs, list) else [])]
    for record in records:
        if not isinstance(record, dict):
            continue
        error = str(record.get("error") or "")
        if not _POISON.search(error):
            continue
        first = error.strip().splitlines()[0]
        graph, stage = record.get("graph"), record.get("stage")
        if graph and stage and not first.startswith(str(graph)):
            return f"{graph} failed at {stage}: {first}"
        return first
    return None


def classify(run: ExecResult, *, pin_error: str | None = None) -> tuple[Outcome, str]:
    """The verdict for one case process. A pin that was not honoured overrides everything, then
    the tool's timeout; the rest is the case kind's."""
    if pin_error:
        return Outcome.ERROR, pin_error
    if run.timed_out:
        return _timeout(run)
    from validate.execute.cases.kinds import KINDS  # the kinds classify with this module's parts

    return KINDS[run.kind].classify(run)
