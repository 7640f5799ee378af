"""Notebook cases: run by resources/run_notebook.py under the case env's Python, fresh kernel each."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any, Final

from validate.execute.classify import classify_exception, signal_name
from validate.execute.resources import RESOURCES
from validate.model.outcome import Outcome

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from validate.execute.cases import Case
    from validate.execute.classify import ExecResult

__all__ = ["KIND", "RUN_NOTEBOOK", "NotebookKind", "command"]

RUN_NOTEBOOK: Final = RESOURCES / "run_notebook.py"


def command(python: Path, notebook: Path, report: Path, timeout_s: float) -> list[str]:
    """argv that runs `notebook` in a fresh kernel of `python` and writes `report` (JSON)."""
    return [str(python), str(RUN_NOTEBOOK), str(notebook), str(report), "--timeout", str(timeout_s)]


def _classify_report(run: ExecResult, report: Mapping[str, Any]) -> tuple[Outcome, str]:
    cell = report.get("cell_index")
    where = f" (cell {cell})" if cell is not None else ""
    match report.get("status"):
        case "pass":
            return Outcome.PASS, ""
        case "fail":
            context = f"{report.get('traceback', '')}\n{report.get('cell_source', '')}"
            outcome, reason = classify_exception(
                str(report.get("ename", "")), str(report.get("evalue", "")), context
            )
            return outcome, f"{reason}{where}"
        case "timeout":
            return Outcome.TIMEOUT, f"cell timed out after {run.timeout_s:g}s{where}"
        case "dead":
            sig = report.get("kernel_signal")
            code = report.get("kernel_exit_code")
            how = f"killed by {sig}" if sig else f"exited with status {code}"
            return Outcome.CRASH, f"kernel died{where}: {how}"
        case _:
            ename, evalue = report.get("ename", "?"), report.get("evalue", "")
            return Outcome.ERROR, f"notebook runner: {ename}: {evalue}"[:400]


class NotebookKind:
    """`.ipynb` files; the bootstrap's report (`status`, the failing cell) is the verdict."""

    name = "notebook"
    suffix: str | None = ".ipynb"
    bootstrap: Path = RUN_NOTEBOOK
    forkable = True  # nbclient and jupyter_client imported once; each kernel still starts fresh
    batched = False
    grace_s = 30.0  # kernel start-up and env capture on top of the cell timeout

    def command(self, case: Case, python: Path, report: Path, timeout_s: float) -> list[str]:
        return command(python, case.path, report, timeout_s)

    def gather(self, run: ExecResult, result_file: Path) -> ExecResult:  # noqa: ARG002
        return run

    def classify(self, run: ExecResult) -> tuple[Outcome, str]:
        if run.report is not None:
            return _classify_report(run, run.report)
        sig = signal_name(run.returncode)
        if sig:
            return Outcome.CRASH, f"notebook runner killed by {sig}"
        last = next((ln for ln in reversed(run.tail.splitlines()) if ln.strip()), "")
        outcome, reason = classify_exception("", "", last) if last else (Outcome.ERROR, "")
        if outcome is Outcome.FAIL:
            outcome, reason = Outcome.ERROR, last[:300]
        return outcome, f"notebook runner exited with status {run.returncode}, no result: {reason}"

    def exception(self, report: Mapping[str, Any]) -> Mapping[str, Any]:
        return report  # ename, evalue, cell_index, cell_source, traceback at the top level

    def owns(self, case_path: str, case: str) -> bool:  # noqa: ARG002
        return case_path.endswith(".ipynb")

    def units(self, run: ExecResult) -> Mapping[str, Any]:
        """Its code cells as nbclient timed them in the kernel (resources/run_notebook.py)."""
        raw = (run.report or {}).get("units")
        return raw if isinstance(raw, dict) else {}

    def repro_line(self, case_path: str, case: str) -> str:  # noqa: ARG002
        return f"jupyter execute {shlex.quote(case_path)}"


KIND: Final = NotebookKind()
