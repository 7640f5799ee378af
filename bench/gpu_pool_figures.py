"""The one-pool issue's GPU figures from `bench/gpu_pool.sh` parts a and b.

    python bench/gpu_pool_figures.py OUT_DIR      (reads OUT_DIR/a and OUT_DIR/b)

Prints and writes OUT_DIR/figures.json and OUT_DIR/figures.md:
- two cells: the sequential loop over each cell (measured) against `validate` on both;
- the whole matrix: `validate`'s wall time against the per-cell loop summed over its cells. Only two
  cells' loops were measured, so that sum is an estimate: the measured mean per cell times the
  number of cells, and the smaller measured loop times the cells as the conservative one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _results(run: Path) -> tuple[int, set[str]]:
    lines = (run / "results.jsonl").read_text(encoding="utf-8", errors="replace").splitlines()
    cells = set()
    count = 0
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and "cell" in row:
            count += 1
            cells.add(str(row["cell"]))
    return count, cells


def main(out: Path) -> int:
    loops = {p: json.loads((out / p / "loop.json").read_text()) for p in ("a", "b")}
    wall = {p: float((out / p / "validate_wall_s").read_text()) for p in ("a", "b")}
    two_loop = loops["a"]["total_s"] + loops["b"]["total_s"]
    two_results, two_cells = _results(out / "a" / "validate")
    all_results, all_cells = _results(out / "b" / "validate")
    per_cell = [loops["a"]["total_s"], loops["b"]["total_s"]]
    mean = sum(per_cell) / 2
    fig = {
        "two_cells": {
            "loop_s": round(two_loop, 1),
            "loop_per_cell_s": per_cell,
            "validate_s": wall["a"],
            "ratio": round(wall["a"] / two_loop, 3),
            "validate_results": two_results,
            "cells": len(two_cells),
        },
        "whole_matrix": {
            "cells": len(all_cells),
            "results": all_results,
            "validate_s": wall["b"],
            "loop_estimate_s": round(mean * len(all_cells), 1),
            "ratio_to_estimate": round(wall["b"] / (mean * len(all_cells)), 3),
            "loop_conservative_estimate_s": round(min(per_cell) * len(all_cells), 1),
            "ratio_to_conservative_estimate": round(
                wall["b"] / (min(per_cell) * len(all_cells)), 3
            ),
            "estimate": "mean of the two measured per-cell loops x cells (the loop was not run per cell)",
        },
    }
    (out / "figures.json").write_text(json.dumps(fig, indent=1) + "\n")
    t, w = fig["two_cells"], fig["whole_matrix"]
    md = "\n".join(
        [
            "| figure | sequential loop | validate | ratio |",
            "|---|---|---|---|",
            (
                f"| two cells ({t['cells']} cells, {t['validate_results']} results) | {t['loop_s']} s "
                f"(measured: {per_cell[0]} + {per_cell[1]}) | {t['validate_s']} s | {t['ratio']} |"
            ),
            (
                f"| whole matrix ({w['cells']} cells, {w['results']} results) | {w['loop_estimate_s']} s "
                f"(estimate) | {w['validate_s']} s | {w['ratio_to_estimate']} |"
            ),
            (
                f"| whole matrix, conservative estimate | {w['loop_conservative_estimate_s']} s "
                f"(estimate) | {w['validate_s']} s | {w['ratio_to_conservative_estimate']} |"
            ),
        ]
    )
    (out / "figures.md").write_text(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
