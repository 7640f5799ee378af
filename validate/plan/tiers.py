"""Tiers: a named subset of the planned cells, e.g. a pull-request tier that covers every value pair.

`cover = "pairs"` chooses planned cells so that every pair of values of two different axes that
occurs in some planned cell occurs in at least one chosen cell: a covering array over the planned
cells (not over the full product: pruned combinations need no cover). The choice is a greedy set
cover with lazy gains (a cell's gain only falls as others are chosen, so a stale gain is an upper
bound), seeded by the tier's `always` patterns. Every tie is broken by plan order, which comes from
the files alone, so every host and every shard chooses the same cells.

A lower bound on any cover: for each two axes, every chosen cell covers exactly one of their value
pairs, so the cover has at least as many cells as the largest count of pairs of two axes.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from validate.config import Selectors
from validate.errors import MatrixError
from validate.model.axes import AXES, axis_named
from validate.plan.rules import Plan, plan_cells

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from packaging.version import Version

    from validate.model.matrix import Cell, Matrix, Tier
    from validate.plan.rules import Rule

__all__ = ["TierChoice", "apply_tier", "choose_pairs", "select_tier"]


@dataclass(frozen=True, kw_only=True)
class TierChoice:
    """The cells a tier runs (in plan order), the planned cells it leaves out, and its coverage."""

    name: str
    cells: list[Cell]
    left_out: list[Cell]
    pairs: int  # value pairs that occur in the planned cells
    covered: int  # of those, the pairs the chosen cells hold
    lower_bound: int  # no pair cover of the planned cells has fewer cells

    def summary(self, planned: int) -> str:
        """The coverage line: "pr: 11 of 46 cells; 100 % of 212 value pairs (lower bound 9)"."""
        if not self.left_out and not self.pairs:
            return f"{self.name}: {len(self.cells)} of {planned} cells (all)"
        pct = 100.0 if not self.pairs else 100.0 * self.covered / self.pairs
        return (
            f"{self.name}: {len(self.cells)} of {planned} cells; {pct:.0f} % of {self.pairs} "
            f"value pairs (lower bound {self.lower_bound} cells)"
        )

    def narrow(self, plan: Plan) -> tuple[Plan, list[Cell]]:
        """`plan` (a selection of the matrix) kept to the tier's cells, and the planned cells of
        `plan` it leaves out (neither planned nor pruned: reports show them as not run)."""
        chosen = set(self.cells)
        keep = [c for c in plan.planned if c in chosen]
        if not keep:
            msg = (
                f"tier {self.name!r}: none of its {len(self.cells)} cells is in this selection "
                f"({len(plan.planned)} planned cells; a tier is chosen over the whole matrix)"
            )
            raise MatrixError(msg)
        return Plan(planned=keep, pruned=list(plan.pruned)), [
            c for c in plan.planned if c not in chosen
        ]


def _pair_columns(rows: Sequence[Sequence[int]], sizes: Sequence[int]) -> list[list[int]]:
    """Per axis pair, the id of each row's value pair; ids are dense and disjoint across pairs."""
    columns = [[r[a] for r in rows] for a in range(len(sizes))]
    out: list[list[int]] = []
    base = 0
    for i, j in itertools.combinations(range(len(sizes)), 2):
        n = sizes[j]
        out.append([base + x * n + y for x, y in zip(columns[i], columns[j], strict=True)])
        base += sizes[i] * n
    return out


def choose_pairs(
    rows: Sequence[Sequence[int]], seeds: Sequence[Sequence[int]] = ()
) -> tuple[list[int], int, int, int]:
    """Greedy pair cover of `rows` (each a tuple of value indices, one per axis, at least two).

    `seeds` are lists of row indices: for each, the row among them that covers most new pairs
    (the first such) is chosen first: the `always` patterns. Returns the chosen row indices in
    the order chosen, the number of distinct pairs, how many of them the chosen rows hold, and
    the lower bound.

    Each row's gain (its pairs not yet covered) is kept exact: covering a pair lowers the gain
    of the rows that hold it (an index pair -> rows), so the work is one step per (row, pair).
    Rows wait in buckets by gain; a row whose gain fell since it was filed moves down when it
    reaches the top, and the first row found at the top gain is taken."""
    if not rows:
        return [], 0, 0, 0
    width = len(rows[0])
    sizes = [max(r[a] for r in rows) + 1 for a in range(width)]
    columns = _pair_columns(rows, sizes)
    bound = max(len(set(column)) for column in columns)
    total = sum(sizes[i] * sizes[j] for i, j in itertools.combinations(range(width), 2))
    rows_of: list[list[int]] = [[] for _ in range(total)]
    for column in columns:
        for r, p in enumerate(column):
            rows_of[p].append(r)
    pairs = sum(1 for holders in rows_of if holders)
    ids = list(zip(*columns, strict=True))
    gain = [len(columns)] * len(rows)
    covered = bytearray(total)
    chosen: list[int] = []
    left = pairs

    def take(r: int) -> None:
        nonlocal left
        chosen.append(r)
        for p in ids[r]:
            if not covered[p]:
                covered[p] = 1
                left -= 1
                for q in rows_of[p]:
                    gain[q] -= 1

    for seed in seeds:
        if seed and not set(seed) & set(chosen):
            take(max(seed, key=lambda r: (gain[r], -r)))
    top = len(columns)
    buckets: list[list[int]] = [[] for _ in range(top + 1)]
    skip = set(chosen)
    buckets[top] = [r for r in reversed(range(len(rows))) if r not in skip]  # pop(): plan order
    while left > 0 and top > 0:
        bucket = buckets[top]
        if not bucket:
            top -= 1
            continue
        r = bucket.pop()
        if gain[r] == top:
            take(r)
        elif gain[r]:
            buckets[gain[r]].append(r)  # gains only fall: it waits in its lower bucket
    return chosen, pairs, pairs - left, bound


def _ordered(axis: str, values: set[str]) -> list[str]:
    """The values oldest first by the axis's order (its key); unorderable ones by text."""
    spec = axis_named(axis)
    try:
        return sorted(values, key=spec.sort_key)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return sorted(values)


def _matches(cell: Cell, pattern: Mapping[str, str], ends: Mapping[str, Mapping[str, str]]) -> bool:
    for axis, want in pattern.items():
        value = ends[axis].get(want, want)
        if getattr(cell, axis) != value and not axis_named(axis).same(getattr(cell, axis), value):
            return False
    return True


def apply_tier(
    matrix: Matrix,
    rules: Sequence[Rule],
    plan: Plan,
    name: str,
    *,
    python: Version | None = None,
) -> tuple[Plan, list[Cell], TierChoice]:
    """`plan` (the selectors' plan of `matrix`) kept to tier `name`, the cells it leaves out, and
    the choice. The tier is chosen over the whole matrix's plan, whatever the selectors: a CI
    job or Slurm group that selects its arch and environment runs exactly its part of the one
    tier, and every host chooses the same cells."""
    whole = plan_cells(matrix, rules, Selectors(), python=python)
    choice = select_tier(matrix, whole, name)
    narrowed, left_out = choice.narrow(plan)
    return narrowed, left_out, choice


def select_tier(matrix: Matrix, plan: Plan, name: str) -> TierChoice:
    """The cells of tier `name` of `matrix` among `plan`'s planned cells.

    An undeclared tier is a MatrixError that names the --tier flag first; an `always` pattern
    that no planned cell matches (the rules or the selectors pruned it) is one located at the
    declaration."""
    tier = matrix.tiers.get(name)
    if tier is None:
        declared = ", ".join(sorted(matrix.tiers)) or "none"
        # the flag is what was wrong: named first, the matrix's [tiers] after it
        msg = f"--tier {name}: no such tier in {matrix.tiers_where} (declared: {declared})"
        raise MatrixError(msg)
    planned = list(plan.planned)
    seeds = _seeds(tier, plan)
    if tier.cover == "all":
        return TierChoice(
            name=name, cells=planned, left_out=[], pairs=0, covered=0, lower_bound=len(planned)
        )
    axes = [a for a in AXES if len({getattr(c, a) for c in planned}) > 1]
    index = {
        a: {v: k for k, v in enumerate(dict.fromkeys(getattr(c, a) for c in planned))} for a in axes
    }
    rows = [tuple(index[a][getattr(c, a)] for a in axes) for c in planned]
    if len(axes) < 2:  # no pair of axes: a constant axis makes each value (or one cell) a pair
        rows = [(*r, 0, 0)[:2] for r in rows]
    picked, pairs, covered, bound = choose_pairs(rows, seeds)
    keep = set(picked)
    cells = [c for k, c in enumerate(planned) if k in keep]
    return TierChoice(
        name=name,
        cells=cells,
        left_out=[c for k, c in enumerate(planned) if k not in keep],
        pairs=pairs,
        covered=covered,
        lower_bound=bound,
    )


def _seeds(tier: Tier, plan: Plan) -> list[list[int]]:
    """Per `always` pattern, the planned cells (indices) that match it; none is an error."""
    planned = plan.planned
    seeds: list[list[int]] = []
    for pattern, where in zip(tier.always, tier.always_where, strict=True):
        ends = {
            axis: dict(zip(("oldest", "newest"), (o[0], o[-1]), strict=True))
            for axis in pattern
            if (o := _ordered(axis, {getattr(c, axis) for c in planned} - {""}))
        }
        ends.update({a: {} for a in pattern if a not in ends})
        hits = [k for k, c in enumerate(planned) if _matches(c, pattern, ends)]
        if not hits:
            shown = ", ".join(f"{a}={v}" for a, v in pattern.items())
            pruned = next((r for c, r in plan.pruned if _matches(c, pattern, ends)), None)
            why = f"the plan prunes it: {pruned}" if pruned else "no planned cell has these values"
            msg = f"{where}: tier {tier.name!r}: always cell ({shown}) is not planned: {why}"
            raise MatrixError(msg)
        seeds.append(hits)
    return seeds
