"""`report` over a real whole-L0 run, old code against new, side by side in one run.

Unpacks the committed run once (default: reports/gpu/2026-12-07-h100-l0-9.25/l0.tgz, 41,613
results of the frontend's own L0 ids), checks out OLD (a git revision) into a temporary worktree,
then runs `python -m validate report --results RUN` from the old tree and from this tree in turn,
ROUNDS times each, with the running interpreter (which needs the tool's dependencies). Every
output must be byte for byte the old one's: a faster report that says something else is a bug.
Prints each side's times, the medians and the ratio new / old. Asserts nothing else.

    python bench/report_l0_bench.py [--old REV] [--rounds 3] [--tgz FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TGZ = ROOT / "reports/gpu/2026-12-07-h100-l0-9.25/l0.tgz"


def _report(tree: Path, run: Path) -> tuple[float, bytes]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "validate", "report", "--results", str(run)],
        env=env,
        capture_output=True,
        check=False,
        cwd=run.parent,
    )
    took = time.perf_counter() - start
    if proc.returncode not in (0, 1):  # 1: the run is not signed off, as this one
        sys.exit(f"report from {tree} exited {proc.returncode}: {proc.stderr.decode()[-2000:]}")
    return took, proc.stdout + proc.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", default="HEAD", help="the revision to compare with (HEAD)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tgz", type=Path, default=TGZ)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with tarfile.open(args.tgz) as tar:
            tar.extractall(work / "run", filter="data")
        (run,) = sorted((work / "run").glob("**/validate/results.jsonl"))
        rows = sum(1 for line in run.open(encoding="utf-8") if line.strip())
        old = work / "old"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(old), args.old],
            check=True,
        )
        try:
            times: dict[str, list[float]] = {"old": [], "new": []}
            first: bytes | None = None
            for _ in range(args.rounds):
                for side, tree in (("old", old), ("new", ROOT)):
                    took, out = _report(tree, run.parent)
                    first = out if first is None else first
                    if out != first:
                        sys.exit(f"the {side} report differs from the old one: not comparable")
                    times[side].append(took)
        finally:
            remove = ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)]
            subprocess.run(remove, check=False)
    print(f"report over {args.tgz.name} ({rows} results), {args.rounds} rounds, outputs identical")
    for side in ("old", "new"):
        print(f"{side} ({args.old if side == 'old' else 'this tree'}): "
              + ", ".join(f"{t:.2f}" for t in times[side])
              + f" s; median {statistics.median(times[side]):.2f} s")  # fmt: skip
    ratio = statistics.median(times["new"]) / statistics.median(times["old"])
    print(f"new / old: {ratio:.2f}x (medians)")


if __name__ == "__main__":
    main()
