"""A duration history (`durations.json`, validate/execute/history.py) from a committed run's
results, to seed a lent machine's cache with what an earlier run of the same suite measured.

A user who validated one backend on a machine has that run's history in the tool's cache when the
next backend runs there, and the suite's shares are then cut by measured durations. A lent GPU
machine starts bare: this writes the same file from the committed results, so that a run there
starts with the history a user's second run would have.

Only the seconds of ids that ended on their own go in (pass, fail, skip, xfail, xpass): a timed-out
id's duration is its limit, not its need, and errors may have died early. Nothing else of the
history (GPU peaks, CPU shares, memory, the timeout floors) is written: those are the machine's
own, and the run records them itself.

    python bench/history_from_run.py RESULTS OUT_JSON
RESULTS: a results.jsonl, or a .tgz whose one member named results.jsonl is read.
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
from pathlib import Path

ENDED = frozenset({"pass", "fail", "skip", "xfail", "xpass"})


def lines_of(path: Path) -> list[str]:
    if path.name.endswith((".tgz", ".tar.gz")):
        with tarfile.open(path) as tar:
            members = [m for m in tar.getmembers() if m.name.endswith("/results.jsonl")]
            if len(members) != 1:
                sys.exit(f"{path}: {len(members)} members named results.jsonl, want one")
            data = tar.extractfile(members[0])
            assert data is not None
            return data.read().decode().splitlines()
    return path.read_text().splitlines()


def durations(lines: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            sys.exit(f"results line {n}: not JSON")
        seconds = row.get("duration_s")
        if row.get("outcome") in ENDED and isinstance(seconds, (int, float)):
            out[str(row["case"])] = round(float(seconds), 3)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("out", type=Path)
    args = parser.parse_args()
    seen = durations(lines_of(args.results))
    args.out.write_text(json.dumps(seen, sort_keys=True) + "\n")
    print(f"{args.out}: {len(seen)} ids, {sum(seen.values()):.0f} s of test time")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
