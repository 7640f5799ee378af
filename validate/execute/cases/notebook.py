"""Notebook cases: run by resources/run_notebook.py under the case env's Python, fresh kernel each."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from validate.execute.resources import RESOURCES

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["RUN_NOTEBOOK", "command"]

RUN_NOTEBOOK: Final = RESOURCES / "run_notebook.py"


def command(python: Path, notebook: Path, report: Path, timeout_s: float) -> list[str]:
    """argv that runs `notebook` in a fresh kernel of `python` and writes `report` (JSON)."""
    return [str(python), str(RUN_NOTEBOOK), str(notebook), str(report), "--timeout", str(timeout_s)]
