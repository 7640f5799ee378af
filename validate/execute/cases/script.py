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
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Final

from validate.execute.resources import RESOURCES
from validate.model.outcome import Outcome

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

__all__ = ["RESULT_FILE_ENV", "RUN_SCRIPT", "command", "read_result_file", "verdict_line"]

RUN_SCRIPT: Final = RESOURCES / "run_script.py"
RESULT_FILE_ENV: Final = "CUDNN_MATRIX_RESULT_FILE"
_VERDICT: Final = re.compile(r"^VERDICT (pass|fail|skip)(?::\s*(.*))?\s*$")
_ALLOWED: Final = {"pass": Outcome.PASS, "fail": Outcome.FAIL, "skip": Outcome.SKIP}


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
