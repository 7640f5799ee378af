"""Plan a 100 000-cell matrix (50 x 10 x 5 x 4 x 10) and compare with naive per-cell evaluation.

Run: python bench/plan_bench.py. Prints seconds and cells/s for the planner (target <= 1 s), and the
speed ratio against evaluating every rule on every cell with versions parsed per cell, measured in
the same run on every 10th cell. Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from packaging.version import Version

# Run from a checkout without installing: make the `validate` package next to bench/ importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from validate.config import Selectors
from validate.model.matrix import AXES, Cell, Driver, expand, load_matrix
from validate.plan.rules import Rule, base_python, load_rules, plan_cells

AXIS_VALUES: dict[str, list[str]] = {
    "cudnn": [f"9.{minor}.{patch}.{10 + patch}" for minor in range(25) for patch in range(2)],
    "frontend": [f"1.{minor}.0" for minor in range(10, 33, 2)][:10],
    "cuda": ["12.4", "12.6", "12.8", "12.9", "13.0"],
    "arch": ["sm80", "sm90", "sm100", "sm120"],
    "driver": [
        "520",
        "525.60.13",
        "550",
        "570.25",
        "570",
        "575",
        "580.65.05",
        "580",
        "fc-610@570",
        "fc-610@580",
    ],
}
SAMPLE_EVERY = 10
#: The axes this matrix declares (the optional python axis is left out: cells use this interpreter).
AXES_USED = [axis for axis in AXES if axis in AXIS_VALUES]


def _write_matrix(folder: Path) -> Path:
    lines = ["[axes]"]
    lines += [f"{axis} = [{', '.join(repr(v) for v in AXIS_VALUES[axis])}]" for axis in AXES_USED]
    path = folder / "bench.toml"
    path.write_text("\n".join(lines).replace("'", '"') + "\n", encoding="utf-8")
    return path


def _naive(cell: Cell, rules: list[Rule], python: Version) -> str | None:
    """The obvious way: parse every pin of every cell, then test every rule on it."""
    driver = Driver.parse(cell.driver)
    facts: dict[str, object] = {
        "cudnn": Version(cell.cudnn),
        "frontend": Version(cell.frontend),
        "cuda": Version(cell.cuda),
        "driver": driver.user,
        "driver_kernel": driver.kernel,
        "forward_compat": driver.forward_compat,
        "arch": cell.arch,
        "python": python,
    }
    hit = next((rule for rule in rules if rule.matches(facts)), None)
    return hit.explain(cell, python) if hit else None


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        path = _write_matrix(Path(tmp))
        t0 = time.perf_counter()
        matrix = load_matrix(path)
        rules = load_rules(None)
        t_load = time.perf_counter() - t0

        t0 = time.perf_counter()
        plan = plan_cells(matrix, rules, Selectors())
        t_plan = time.perf_counter() - t0

    cells = len(plan.planned) + len(plan.pruned)
    reasons = dict(plan.pruned)
    sample = expand(matrix)[::SAMPLE_EVERY]
    t0 = time.perf_counter()
    naive = [_naive(cell, rules, base_python()) for cell in sample]
    t_naive = time.perf_counter() - t0
    agree = all(reasons.get(cell) == got for cell, got in zip(sample, naive, strict=True))

    fast_rate = cells / t_plan
    naive_rate = len(sample) / t_naive
    print(f"matrix: {' x '.join(str(len(AXIS_VALUES[a])) for a in AXES_USED)} = {cells} cells")
    print(f"load matrix + rules: {t_load:.3f} s")
    print(f"plan: {t_plan:.3f} s, {fast_rate:,.0f} cells/s ({len(plan.planned)} planned, "
          f"{len(plan.pruned)} pruned)")  # fmt: skip
    print(f"naive per-cell evaluation on {len(sample)} cells: {t_naive:.3f} s, "
          f"{naive_rate:,.0f} cells/s")  # fmt: skip
    print(f"ratio planner/naive: {fast_rate / naive_rate:.1f}x faster; results agree: {agree}")
    return 0 if agree else 1


if __name__ == "__main__":
    raise SystemExit(main())
