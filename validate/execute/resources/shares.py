"""How a suite's test ids are shared among N pytest processes. Stdlib only: the tool and the
pytest plugin (run_pytest.py, which loads it by its path) cut the same shares from one list."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["BLOCKS", "MIN_BLOCK", "split"]

#: Blocks per share: the ids are cut into about n x BLOCKS contiguous blocks of equal expected
#: time, dealt out round robin. Where no duration is known, equal-count contiguous shares put a
#: slow family of parametrized tests (test_mhas, a fuzzer) in one or two shares: the whole L0
#: suite on the H200 had shares of 55 s beside shares still running at 1,420 s
#: (reports/gpu/2026-12-04-h200-l0). Blocks keep most of the locality module fixtures need.
BLOCKS = 64
#: No block shorter than this many ids, so a small selection stays in contiguous shares.
MIN_BLOCK = 16


def split(ids: Sequence[str], weights: Mapping[str, float], n: int) -> list[list[str]]:
    """`ids` in at most `n` shares of about equal expected time, each a few contiguous blocks in
    collection order (see BLOCKS): an id's weight is its recorded seconds, else the mean of the
    known ones, else 1. Never an empty share; fewer shares than `n` when there are fewer ids."""
    if not ids:
        return []
    known = [weights[i] for i in ids if i in weights]
    default = sum(known) / len(known) if known else 1.0
    cost = [max(weights.get(i, default), 1e-3) for i in ids]
    count = max(1, min(n, len(ids)))
    blocks = max(count, min(count * BLOCKS, len(ids) // MIN_BLOCK))
    blocks -= blocks % count  # as many blocks in every share
    size = sum(cost) / blocks
    out: list[list[str]] = [[] for _ in range(count)]
    block = 0
    done = 0.0
    for index, test in enumerate(ids):  # no zip(strict=): the cell's Python may predate 3.10
        out[block % count].append(test)
        done += cost[index]
        if done >= size * (block + 1) - 1e-9 and block < blocks - 1:
            block += 1
    return [part for part in out if part]
