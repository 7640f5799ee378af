"""Tier size and choice time: the greedy pair cover against the full product and the lower bound.

Run: python bench/tier_bench.py. For the default matrix's `pr` tier and for generated planned-cell
sets up to 8 axes x 10 values and 10^5 cells (a seeded sample of the product: the rest stands for
pruned cells), prints the planned cells, the full product, the lower bound (the most value pairs of
any two axes: each cell covers one of them), the tier's size, and the seconds the choice took (the
aim is under a second for 10^5 planned cells). Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import math
import random
import sys
import time
from pathlib import Path

# Run from a checkout without installing: make the `validate` package next to bench/ importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from validate.config import Selectors
from validate.model.matrix import load_matrix
from validate.plan.rules import load_rules, plan_cells
from validate.plan.tiers import choose_pairs, select_tier

#: (axes, values per axis, planned cells sampled from the product)
SHAPES = ((3, 5, 100), (5, 6, 2_000), (6, 10, 20_000), (8, 10, 100_000))


def _rows(axes: int, values: int, cells: int, seed: int) -> list[tuple[int, ...]]:
    rnd = random.Random(seed)
    rows: set[tuple[int, ...]] = set()
    while len(rows) < min(cells, values**axes):
        rows.add(tuple(rnd.randrange(values) for _ in range(axes)))
    return sorted(rows)


def main() -> None:
    print(f"{'matrix':<28} {'planned':>8} {'product':>12} {'bound':>6} {'tier':>5} {'choice s':>9}")
    matrix = load_matrix(None)
    plan = plan_cells(matrix, load_rules(None), Selectors())
    start = time.perf_counter()
    choice = select_tier(matrix, plan, "pr")
    took = time.perf_counter() - start
    product = math.prod(len(a.values) for a in matrix.axes.values())
    print(
        f"{'default.toml tier pr':<28} {len(plan.planned):>8} {product:>12} "
        f"{choice.lower_bound:>6} {len(choice.cells):>5} {took:>9.3f}"
    )
    print(f"  {choice.summary(len(plan.planned))}")
    for axes, values, cells in SHAPES:
        rows = _rows(axes, values, cells, seed=axes * 1000 + values)
        start = time.perf_counter()
        chosen, pairs, covered, bound = choose_pairs(rows)
        took = time.perf_counter() - start
        name = f"{axes} axes x {values} values"
        print(
            f"{name:<28} {len(rows):>8} {values**axes:>12} {bound:>6} {len(chosen):>5} {took:>9.3f}"
            f"   ({covered} of {pairs} pairs)"
        )


if __name__ == "__main__":
    main()
