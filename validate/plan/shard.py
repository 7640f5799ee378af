"""Shards: split a run's (cell x case) units into n parts of about equal expected duration.

The unit is one case in one cell, not a whole cell. A CI job already runs one environment (one
arch runner group x one environment x one shard, see dispatch/ci.py), so a job's cells often share
one environment or are one cell: splitting by cell would leave shards with nothing to do while one
shard runs every case. Each shard builds (or reuses from its cache) the environments of the cells
it holds a unit of; that cost is paid once per shard and environment, the price of the balance.

Assignment is longest processing time first (Graham): units sorted by expected duration, longest
first, each to the shard with the least load so far (lowest index on ties). Its makespan is at most
4/3 - 1/(3n) of the optimum. Durations come from the duration history the runner keeps
(cache_root()/durations.json, by case name); a case without history counts as the mean of the known
ones (1 s when none is known, which balances by count). The same units and durations give the same
shards on every host: pass the same `--durations` file to every shard of one run.
"""

from __future__ import annotations

import heapq
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from validate.errors import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

__all__ = [
    "DEFAULT_DURATION_S",
    "ShardSpec",
    "Unit",
    "assign",
    "expected",
    "lpt_bound",
    "read_durations",
]

#: (cell id, case name): the smallest piece of work a shard is given.
Unit = tuple[str, str]

#: What a case counts for when no duration of any case is known.
DEFAULT_DURATION_S: Final = 1.0
_SPEC: Final = re.compile(r"(\d{1,6})/(\d{1,6})")


@dataclass(frozen=True, kw_only=True)
class ShardSpec:
    """Shard `index` of `total` (1-based, as `--shard 2/4` is written)."""

    index: int
    total: int

    @classmethod
    def parse(cls, text: str) -> ShardSpec:
        """`i/n` with 1 <= i <= n; anything else is a ConfigError naming the flag."""
        found = _SPEC.fullmatch(text.strip())
        if found is None:
            msg = f"--shard {text!r}: expected I/N, e.g. 2/4 (shard 2 of 4)"
            raise ConfigError(msg)
        index, total = int(found[1]), int(found[2])
        if total < 1 or not 1 <= index <= total:
            msg = f"--shard {text!r}: expected I/N with N at least 1 and I from 1 to N, got {index} of {total}"
            raise ConfigError(msg)
        return cls(index=index, total=total)

    def __str__(self) -> str:
        return f"{self.index}/{self.total}"


def read_durations(path: Path | None) -> dict[str, float]:
    """Case name -> seconds from a durations.json (the runner's history); {} when absent or unreadable."""
    if path is None or not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    out: dict[str, float] = {}
    for name, value in data.items():
        if isinstance(value, int | float) and value >= 0:
            out[str(name)] = float(value)
    return out


def expected(units: Sequence[Unit], durations: Mapping[str, float]) -> list[float]:
    """Each unit's expected seconds: its case's known duration, else the mean of the known ones."""
    known = [durations[case] for _, case in units if case in durations]
    default = sum(known) / len(known) if known else DEFAULT_DURATION_S
    return [durations.get(case, default) for _, case in units]


def assign(units: Sequence[Unit], durations: Mapping[str, float], total: int) -> list[list[Unit]]:
    """The units of each of `total` shards (index 0 is shard 1/total), longest first to the least
    loaded shard; each shard's units keep the order they were given in."""
    costs = expected(units, durations)
    order = sorted(range(len(units)), key=lambda i: (-costs[i], i))
    heap = [(0.0, shard) for shard in range(total)]
    picked: list[list[int]] = [[] for _ in range(total)]
    for i in order:
        load, shard = heapq.heappop(heap)
        picked[shard].append(i)
        heapq.heappush(heap, (load + costs[i], shard))
    return [[units[i] for i in sorted(members)] for members in picked]


def lpt_bound(costs: Sequence[float], total: int) -> float:
    """A lower bound of any assignment's makespan: max(mean load, longest unit)."""
    return max(sum(costs) / total, max(costs, default=0.0))
