"""How evenly the suite's shares divide real work: a replay of a committed whole-L0 run.

Reads a committed run: each share's `assigned` ids (its `record.1.jsonl`, in collection order)
and each id's measured `duration_s` (`results.jsonl`). Either layout:
- the H200's (reports/gpu/2026-12-04-h200-l0/l0: cases.tgz and validate.tgz), the default;
- bench/gpu_39.sh's (a report folder whose `l0.tgz` holds `l0/l0-<backend>/validate/` whole,
  e.g. reports/gpu/2026-12-07-h100-l0-9.25).

Cuts the ids with a known duration into N shares and replays each way's slowest share (the wall
time of the shares, start-up aside) against the ideal, the work over N:
- contiguous: N shares of equal count in collection order (the split before the blocks);
- blocks: `execute/resources/shares.split` knowing no durations, as a first run cuts them;
- blocks, durations known: the same split given every id's duration, as a run with the first
  run's history cuts them (the same durations replayed, so a best case);
- blocks claimed when free: the first way's blocks in collection order, each taken by whichever
  share is free first (what a shared queue of blocks would give; not what the tool does).
For the second layout it also prints what the run measured: the shares' test times, and when
their last tests ended (the `gpu_exclusive` ids, run alone after the shares, left out). Asserts nothing.

    python bench/share_balance.py [--jobs 16] [--run DIR]
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from validate.execute.resources.shares import split


def _contiguous(ids: list[str], n: int) -> list[list[str]]:
    step = -(-len(ids) // n)
    return [ids[i : i + step] for i in range(0, len(ids), step)]


def _claimed(ids: list[str], durations: dict[str, float], n: int) -> list[float]:
    """Each share's load when the blocks that `split` cuts knowing no durations go, in collection
    order, to the share that is free first. The blocks are read back from split's own answer: it
    deals consecutive blocks to different shares, so a block ends where the share changes."""
    owner = {i: k for k, part in enumerate(split(ids, {}, n)) for i in part}
    blocks: list[float] = []
    for index, test in enumerate(ids):
        if index == 0 or owner[test] != owner[ids[index - 1]]:
            blocks.append(0.0)
        blocks[-1] += durations[test]
    free = [(0.0, share) for share in range(len(set(owner.values())))]
    for load in blocks:
        at, share = heapq.heappop(free)
        heapq.heappush(free, (at + load, share))
    return sorted(at for at, _ in free)


def _records(lines: list[bytes]) -> tuple[list[str], list[str]]:
    """A share's whole collection (its `item` events, in order) and its `assigned` ids."""
    items: list[str] = []
    assigned: list[str] = []
    for line in lines:
        if b'"ev": "item"' in line[:20]:
            items.append(json.loads(line)["id"])
        elif b'"assigned"' in line[:40]:
            assigned = list(json.loads(line)["ids"])
    return items, assigned


def _results(lines: list[bytes]) -> list[dict[str, Any]]:
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a torn last line
    return out


def _h200_layout(run: Path) -> tuple[list[tuple[list[str], list[str]]], list[dict[str, Any]]]:
    shares = []
    with tarfile.open(run / "cases.tgz") as tar:
        for member in sorted(
            (m for m in tar.getmembers() if m.name.endswith("record.1.jsonl")), key=lambda m: m.name
        ):
            fh = tar.extractfile(member)
            assert fh is not None
            shares.append(_records(fh.readlines()))
    with tarfile.open(run / "validate.tgz") as tar:
        fh = tar.extractfile("./results.jsonl")
        assert fh is not None
        return shares, _results(fh.readlines())


def _folder_layout(folder: Path) -> tuple[list[tuple[list[str], list[str]]], list[dict[str, Any]]]:
    records = sorted(folder.glob("cases/*/pytest/share-*/record.1.jsonl"))
    shares = [_records(p.read_bytes().splitlines()) for p in records]
    return shares, _results((folder / "results.jsonl").read_bytes().splitlines())


def _measured(rows: list[dict[str, Any]]) -> list[tuple[str, float, float]]:
    """(share, its test time, when its last test ended after the first test started) per share."""
    from datetime import datetime

    def at(row: dict[str, Any]) -> float:
        return datetime.fromisoformat(row["started_at"]).timestamp() + float(
            row.get("duration_s", 0.0)
        )

    first = min(datetime.fromisoformat(r["started_at"]).timestamp() for r in rows)
    per: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        log = str(row.get("log_path") or "")
        if "/pytest/share-" in log:  # not the gpu_exclusive ids, run alone after the shares
            per.setdefault(log.split("/pytest/")[1].split("/")[0], []).append(row)
    return [
        (name, sum(r.get("duration_s", 0.0) for r in part), max(at(r) for r in part) - first)
        for name, part in sorted(per.items())
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--run", type=Path, default=ROOT / "reports/gpu/2026-12-04-h200-l0/l0")
    args = parser.parse_args()
    measured: list[tuple[str, float, float]] = []
    if (args.run / "cases.tgz").is_file():
        shares, rows = _h200_layout(args.run)
    else:
        with tempfile.TemporaryDirectory() as unpacked:
            for packed in sorted(args.run.glob("*.tgz")):
                with tarfile.open(packed) as tar:
                    tar.extractall(unpacked, filter="data")
            folders = sorted(Path(unpacked).glob("**/validate/results.jsonl"))
            if len(folders) != 1:
                sys.exit(f"{args.run}: {len(folders)} run folders in its .tgz files, need one")
            shares, rows = _folder_layout(folders[0].parent)
            measured = _measured(rows)
    durations = {str(r["case"]): float(r.get("duration_s", 0.0)) for r in rows}
    # the collection order: share 1's own collection where recorded, else (the H200's run, whose
    # shares were contiguous) the shares' ids one after another
    items = shares[0][0] if shares and shares[0][0] else [i for _, part in shares for i in part]
    ids = [i for i in items if i in durations]
    work = sum(durations[i] for i in ids)
    ideal = work / args.jobs
    print(f"{len(ids)} ids with a measured duration, {work:.0f} s of test time, {args.jobs} shares")
    print(f"ideal (work / shares):  {ideal:7.0f} s")
    for name, loads in (
        ("contiguous", [sum(durations[i] for i in p) for p in _contiguous(ids, args.jobs)]),
        ("blocks", [sum(durations[i] for i in p) for p in split(ids, {}, args.jobs)]),
        (
            "blocks, durations known",
            [sum(durations[i] for i in p) for p in split(ids, durations, args.jobs)],
        ),
        ("blocks claimed when free", _claimed(ids, durations, args.jobs)),
    ):
        loads = sorted(loads)
        print(
            f"{name + ':':26s} slowest {loads[-1]:7.0f} s ({loads[-1] / ideal:.2f}x the ideal), "
            f"fastest {loads[0]:6.0f} s, {len(loads)} shares"
        )
    if measured:
        slowest = max(measured, key=lambda m: m[1])
        print(
            f"measured: {len(measured)} shares, test time {min(m[1] for m in measured):.0f} to "
            f"{slowest[1]:.0f} s ({slowest[1] / ideal:.2f}x the ideal); last test of a share ended "
            f"{min(m[2] for m in measured):.0f} to {max(m[2] for m in measured):.0f} s after the "
            "first test started"
        )


if __name__ == "__main__":
    main()
