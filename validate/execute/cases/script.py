"""Script cases (`.py` repros) and their contract with the runner.

A script case is run as ``python SCRIPT`` would run it (through resources/run_script.py, which
uses runpy with ``__main__``) in its own process group. Its verdict, first match wins:

1. A JSON result file at ``$CUDNN_MATRIX_RESULT_FILE``:
   ``{"outcome": "pass" | "fail" | "skip", "reason": "..."}``.
2. The last output line of the form ``VERDICT pass|fail|skip: <reason>`` (reason optional).
3. The exit status: 0 -> pass, 1 -> fail (an uncaught exception exits 1 and its name, message
   and traceback tail are kept).

Anything else is ERROR (exit 2+, a bad result file). Death by a signal (SIGSEGV, SIGABRT, ...)
is CRASH. Exceptions are classified by text first: a context-poisoning CUDA error is CRASH,
``cudnnGraphNotSupportedError`` is SKIP, a missing module or cuDNN sub-library is ERROR.

Timing (issue 29, judge/speed.py): a script may time sections of its own work and print one line
per section, ``CUDNN_MATRIX_TIME <unit> <seconds>`` (unit: no spaces; seconds: a decimal number),
e.g. ``CUDNN_MATRIX_TIME conv_fwd 1.84``; a unit printed twice keeps its last value. A script
that prints none is timed as one unit, ``script``: its own run in the bootstrap, without the
interpreter's start-up or the environment capture. The figures are evidence for the speed
comparison across cells, never a verdict.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

from validate.execute.classify import classify_exception, poisoned, poisoned_at, signal_name
from validate.execute.resources import RESOURCES
from validate.model.outcome import Outcome

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from validate.execute.cases import Case
    from validate.execute.classify import ExecResult

__all__ = [
    "KIND",
    "RESULT_FILE_ENV",
    "RUN_SCRIPT",
    "WHOLE_SCRIPT",
    "ScriptKind",
    "command",
    "read_result_file",
    "time_lines",
    "verdict_line",
]

RUN_SCRIPT: Final = RESOURCES / "run_script.py"
RESULT_FILE_ENV: Final = "CUDNN_MATRIX_RESULT_FILE"
_VERDICT: Final = re.compile(r"^VERDICT (pass|fail|skip)(?::\s*(.*))?\s*$")
_ALLOWED: Final = {"pass": Outcome.PASS, "fail": Outcome.FAIL, "skip": Outcome.SKIP}
_TIME: Final = re.compile(
    rb"^CUDNN_MATRIX_TIME (\S+) ([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)\s*$"
)
#: The unit of a script that times no section of its own: its whole run (the bootstrap's figure).
WHOLE_SCRIPT: Final = "script"


def command(python: Path, script: Path, report: Path, args: Sequence[str] = ()) -> list[str]:
    """argv that runs `script ARGS...` through the bootstrap, which writes `report` at exit."""
    return [str(python), str(RUN_SCRIPT), str(script), str(report), *args]


def verdict_line(tail: str) -> tuple[Outcome, str] | None:
    """The last `VERDICT pass|fail|skip: reason` line of the output, if any."""
    for line in reversed(tail.splitlines()):
        match = _VERDICT.match(line.strip())
        if match:
            return _ALLOWED[match.group(1)], (match.group(2) or "").strip()
    return None


def read_result_file(path: Path) -> tuple[Outcome, str] | str | None:
    """(outcome, reason) from the script's result file; a str is why the file is unusable."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace"))
        outcome = _ALLOWED[str(data["outcome"])]
    except (ValueError, KeyError, TypeError) as exc:
        return f"bad result file {path}: {type(exc).__name__}: {exc}"
    return outcome, str(data.get("reason", ""))


def _own_verdict(verdict: tuple[Outcome, str], tail: str = "") -> tuple[Outcome, str]:
    """A script's own pass or fail verdict is still a crash when a context-poisoning CUDA error
    shows anywhere in the script: in its reason (the repro catches `illegal memory access` to say
    which graph it was in) or in its output (an error printed, or kept in its RESULT JSON, while
    a later one - "cudnnHandle Destroy failed" at teardown - became the reason)."""
    outcome, reason = verdict
    if outcome not in (Outcome.FAIL, Outcome.PASS):
        return verdict
    if poisoned(reason):
        return Outcome.CRASH, f"CUDA context poisoned: {reason}"
    where = poisoned_at(tail)
    if where is None:
        return verdict
    said = f"; the script said {outcome}" + (f": {reason}" if reason else "")
    return Outcome.CRASH, f"CUDA context poisoned: {where}{said}"[:600]


def _classify_script(run: ExecResult, report: Mapping[str, Any] | None) -> tuple[Outcome, str]:
    if isinstance(run.result_file, str):
        return Outcome.ERROR, run.result_file
    if run.result_file is not None:
        return _own_verdict(run.result_file, run.tail)
    if run.verdict is not None:
        return _own_verdict(run.verdict, run.tail)
    exc = (report or {}).get("exception")
    if exc:
        return classify_exception(
            str(exc.get("ename", "")), str(exc.get("evalue", "")), str(exc.get("traceback", ""))
        )
    code = run.returncode
    if code == 0:
        return Outcome.PASS, ""
    if code == 1:
        outcome, reason = classify_exception("", "", run.tail)
        if outcome is Outcome.FAIL:
            return Outcome.FAIL, "exit status 1"
        return outcome, reason
    return Outcome.ERROR, f"script exited with status {code} (contract: 0 pass, 1 fail)"


class ScriptKind:
    """`.py` files (and a manifest's variants of one, cases/__init__.py `load_manifest`); the
    contract in this module's docstring."""

    name = "script"
    suffix: str | None = ".py"
    bootstrap: Path = RUN_SCRIPT
    forkable = True  # the interpreter and the bootstrap's stdlib imported once per environment
    batched = False
    grace_s = 0.0

    def command(self, case: Case, python: Path, report: Path, timeout_s: float) -> list[str]:  # noqa: ARG002
        return command(python, case.path, report, case.args)

    def gather(self, run: ExecResult, result_file: Path) -> ExecResult:
        return replace(
            run, result_file=read_result_file(result_file), verdict=verdict_line(run.tail)
        )

    def classify(self, run: ExecResult) -> tuple[Outcome, str]:
        sig = signal_name(run.returncode)
        if sig:
            return Outcome.CRASH, f"killed by {sig}"
        return _classify_script(run, run.report)

    def exception(self, report: Mapping[str, Any]) -> Mapping[str, Any]:
        return report.get("exception") or {}

    def owns(self, case_path: str, case: str) -> bool:  # noqa: ARG002
        return case_path.endswith(".py")

    def units(self, run: ExecResult) -> Mapping[str, Any]:
        """Its own `CUDNN_MATRIX_TIME` sections, else its whole run in the bootstrap."""
        found: dict[str, Any] = time_lines(run.log_path) if run.log_path is not None else {}
        whole = (run.report or {}).get("run_s")
        if not found and whole is not None:
            found = {WHOLE_SCRIPT: whole}
        return found

    def repro_line(self, case_path: str, case: str) -> str:
        return f"python {shlex.quote(case_path or case)}"


KIND: Final = ScriptKind()


def time_lines(log: Path) -> dict[str, float]:
    """The `CUDNN_MATRIX_TIME <unit> <seconds>` lines of a script's full output (read line by
    line: a flood of output is never held in memory); {} when it printed none."""
    units: dict[str, float] = {}
    try:
        with log.open("rb") as fh:
            for line in fh:
                if line.startswith(b"CUDNN_MATRIX_TIME ") and (match := _TIME.match(line)):
                    units[match.group(1).decode("utf-8", "replace")] = float(match.group(2))
    except OSError:
        return {}
    return units
