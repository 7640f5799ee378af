"""How evenly the suite's shares divide real work: a replay of the H200's whole-L0 run.

Reads the committed run (reports/gpu/2026-12-04-h200-l0/l0: each share's `assigned` ids in
cases.tgz, in collection order, and each id's measured `duration_s` in validate.tgz) and cuts the
ids with a known duration into N shares, knowing no durations (a first run), two ways:

- contiguous: N shares of equal count in collection order (the split before the blocks);
- blocks: `execute/resources/shares.split` as the tool and the plugin cut them now.

Prints each way's slowest share (the wall time of the shares, start-up aside) against the ideal,
the work over N. Asserts nothing.

    python bench/share_balance.py [--jobs 16] [--run reports/gpu/2026-12-04-h200-l0/l0]
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from validate.execute.resources.shares import split


def _contiguous(ids: list[str], n: int) -> list[list[str]]:
    step = -(-len(ids) // n)
    return [ids[i : i + step] for i in range(0, len(ids), step)]


def _assigned(cases: Path) -> list[str]:
    order: list[str] = []
    with tarfile.open(cases) as tar:
        members = sorted(
            (m for m in tar.getmembers() if m.name.endswith("record.1.jsonl")), key=lambda m: m.name
        )
        for member in members:
            fh = tar.extractfile(member)
            assert fh is not None
            for line in fh:
                if b'"assigned"' in line[:40]:
                    order += json.loads(line)["ids"]
    return order


def _durations(results: Path) -> dict[str, float]:
    out: dict[str, float] = {}
    with tarfile.open(results) as tar:
        fh = tar.extractfile("./results.jsonl")
        assert fh is not None
        for line in fh:
            try:
                data = json.loads(line)
            except ValueError:
                continue  # a torn last line
            out[data["case"]] = float(data.get("duration_s", 0.0))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--run", type=Path, default=ROOT / "reports/gpu/2026-12-04-h200-l0/l0")
    args = parser.parse_args()
    durations = _durations(args.run / "validate.tgz")
    ids = [i for i in _assigned(args.run / "cases.tgz") if i in durations]
    work = sum(durations[i] for i in ids)
    ideal = work / args.jobs
    print(f"{len(ids)} ids with a measured duration, {work:.0f} s of test time, {args.jobs} shares")
    print(f"ideal (work / shares):  {ideal:7.0f} s")
    for name, parts in (
        ("contiguous", _contiguous(ids, args.jobs)),
        ("blocks", split(ids, {}, args.jobs)),
    ):
        loads = sorted(sum(durations[i] for i in part) for part in parts)
        print(
            f"{name + ':':12s} slowest {loads[-1]:7.0f} s ({loads[-1] / ideal:.2f}x the ideal), "
            f"fastest {loads[0]:6.0f} s, {len(parts)} shares"
        )


if __name__ == "__main__":
    main()
