"""The one-pool issue's GPU figures from `bench/gpu_pool.sh` parts a, b and c.

    python bench/gpu_pool_figures.py OUT_DIR      (reads OUT_DIR/a, b and c, each if present)

Prints and writes OUT_DIR/figures.json and OUT_DIR/figures.md:
- two cells: the sequential loop over each cell (a, b: measured) against `validate` on both (b);
- the whole matrix (c): `validate`'s wall time (plus `c/resume_wall_s` where the run was cut and
  completed with `--resume`) against the per-cell loop summed over its cells. The loop was not run
  per cell, so that sum is an estimate: the mean measured loop per cell times the number of cells.
A figure whose parts are missing is reported as not measured, never filled in.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _cells_and_results(run: Path) -> tuple[int, int]:
    cells = set()
    count = 0
    for line in (run / "results.jsonl").read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and "cell_id" in row:
            count += 1
            cells.add(str(row["cell_id"]))
    return len(cells), count


def _seconds(path: Path) -> float | None:
    return float(path.read_text()) if path.is_file() else None


def main(out: Path) -> int:
    loops = {
        p: json.loads((out / p / "loop.json").read_text())["total_s"]
        for p in ("a", "b")
        if (out / p / "loop.json").is_file()
    }
    fig: dict[str, Any] = {"loops_s": loops}
    rows = ["| figure | sequential loop | validate | ratio |", "|---|---|---|---|"]
    two = _seconds(out / "b" / "validate_wall_s")
    if two is not None and len(loops) == 2:
        total = sum(loops.values())
        fig["two_cells"] = {"loop_s": total, "validate_s": two, "ratio": round(two / total, 3)}
        rows.append(f"| two cells | {total} s (measured) | {two} s | {fig['two_cells']['ratio']} |")
    else:
        fig["two_cells"] = "not measured"
        rows.append("| two cells | not measured | not measured | — |")
    whole = _seconds(out / "c" / "validate_wall_s")
    if whole is not None and loops:
        resumed = _seconds(out / "c" / "resume_wall_s") or 0.0
        cells, results = _cells_and_results(out / "c" / "validate")
        mean = sum(loops.values()) / len(loops)
        estimate = round(mean * cells, 1)
        wall = round(whole + resumed, 1)
        fig["whole_matrix"] = {
            "cells": cells,
            "results": results,
            "validate_s": whole,
            "resume_s": resumed,
            "wall_s": wall,
            "loop_estimate_s": estimate,
            "loop_cells_measured": len(loops),
            "ratio_to_estimate": round(wall / estimate, 3),
        }
        rows.append(
            f"| whole matrix ({cells} cells, {results} results) | {estimate} s (estimate: "
            f"{round(mean, 1)} s x {cells}, from {len(loops)} measured cell loop(s)) | {wall} s "
            f"({whole} + {resumed} resumed) | {fig['whole_matrix']['ratio_to_estimate']} |"
        )
    (out / "figures.json").write_text(json.dumps(fig, indent=1) + "\n")
    (out / "figures.md").write_text("\n".join(rows) + "\n")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
