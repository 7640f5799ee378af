"""The result lines of a run folder as a test reads them while the tool may still be writing:
whole lines only, since the file can end in part of one (CI L of stop 52: a reader that polled
results.jsonl parsed a cut last line and failed with JSONDecodeError)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path


def whole_result_lines(run_dir: Path) -> list[dict[str, Any]]:
    """Each complete line of `run_dir`/results.jsonl, decoded ([] where there is no file yet)."""
    path = run_dir / "results.jsonl"
    if not path.exists():
        return []
    whole = path.read_text().split("\n")[:-1]  # what follows the last newline is being written
    return [json.loads(line) for line in whole if line.strip()]
