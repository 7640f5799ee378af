"""How a suite's test ids are shared among N pytest processes. Stdlib only: the tool and the
pytest plugin (run_pytest.py, which loads it by its path) cut the same shares from one list."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["split"]


def split(ids: Sequence[str], weights: Mapping[str, float], n: int) -> list[list[str]]:
    """`ids` in at most `n` contiguous shares (collection order: module fixtures stay shared) of
    about equal expected time: an id's weight is its recorded seconds, else the mean of the
    known ones, else 1. Never an empty share; fewer shares than `n` when there are fewer ids."""
    if not ids:
        return []
    known = [weights[i] for i in ids if i in weights]
    default = sum(known) / len(known) if known else 1.0
    cost = [max(weights.get(i, default), 1e-3) for i in ids]
    count = max(1, min(n, len(ids)))
    share = sum(cost) / count
    out: list[list[str]] = []
    part: list[str] = []
    done = 0.0
    for index, test in enumerate(ids):  # no zip(strict=): the cell's Python may predate 3.10
        part.append(test)
        done += cost[index]
        if done >= share * (len(out) + 1) - 1e-9 and len(out) < count - 1:
            out.append(part)
            part = []
    if part:
        out.append(part)
    return out
