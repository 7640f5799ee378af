"""Files run by the case environment's Python (run_notebook.py, run_script.py, capture.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

__all__ = ["RESOURCES"]

#: Folder of these files; the runner passes their paths to the case interpreter.
RESOURCES: Final = Path(__file__).resolve().parent
