"""Two commits of the tool side by side in one run: the runner, pool and plan benchmarks of each,
interleaved (A, B, A, B, ...), with the median of each figure and the ratio after/before.

Issue #26 asks for "no slowdown" from a refactor: that is a claim about two commits measured on one
machine at one time, so both run here, alternately, each from its own checkout (a detached git
worktree, so each runs its own bench files against its own `validate/`).

Usage: python bench/revs_bench.py BEFORE AFTER [--rounds N]
e.g.   python bench/revs_bench.py 3c6ceb5 HEAD
Prints; asserts nothing.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: (bench file, its arguments, {figure name: regex whose group 1 is the figure in seconds})
BENCHES: tuple[tuple[str, tuple[str, ...], dict[str, str]], ...] = (
    (
        "runner_bench.py",
        ("--only-trivial", "--trivial", "20", "--rounds", "3"),
        {
            "run 20 trivial scripts (s)": r"cudnn-matrix run:\s+([\d.]+)s",
            "plain loop, same scripts (s)": r"plain loop `python x.py`:\s+([\d.]+)s",
        },
    ),
    (
        "pool_bench.py",
        (),
        {
            "one pool (s)": r"one pool \(background builds\):\s+([\d.]+)s",
            "cell by cell (s)": r"cell by cell \(prepare, run, drain\):\s+([\d.]+)s",
        },
    ),
    ("plan_bench.py", (), {"plan 100k cells (s)": r"^plan: ([\d.]+) s"}),
)


def _checkout(rev: str, where: Path) -> Path:
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(where), rev],
        check=True,
        capture_output=True,
    )
    return where


def _run(tree: Path, bench: str, args: tuple[str, ...]) -> str:
    proc = subprocess.run(
        [sys.executable, str(tree / "bench" / bench), *args],
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        msg = f"{tree.name}: {bench} exited {proc.returncode}: {proc.stderr[-500:]}"
        raise SystemExit(msg)
    return proc.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    revs = {}
    for rev in (args.before, args.after):
        out = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", rev],
            capture_output=True,
            text=True,
            check=True,
        )
        revs[rev] = out.stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        trees = {rev: _checkout(rev, Path(tmp) / f"rev-{revs[rev]}") for rev in revs}
        try:
            figures: dict[str, dict[str, list[float]]] = {}
            for _ in range(args.rounds):
                for bench, bench_args, patterns in BENCHES:
                    for rev, tree in trees.items():
                        text = _run(tree, bench, bench_args)
                        for name, pattern in patterns.items():
                            found = re.search(pattern, text, flags=re.MULTILINE)
                            if found is None:
                                msg = f"{revs[rev]}: {bench} printed no {name!r}:\n{text}"
                                raise SystemExit(msg)
                            figures.setdefault(name, {}).setdefault(rev, []).append(float(found[1]))
        finally:
            for tree in trees.values():
                subprocess.run(
                    ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
                    check=False,
                    capture_output=True,
                )
    before, after = args.before, args.after
    print(
        f"before {revs[before]} ({before}) vs after {revs[after]} ({after}),"
        f" medians of {args.rounds} interleaved rounds:"
    )
    print(f"  {'figure':<32} {'before':>9} {'after':>9} {'after/before':>13}")
    for name, by_rev in figures.items():
        b = statistics.median(by_rev[before])
        a = statistics.median(by_rev[after])
        print(f"  {name:<32} {b:>9.3f} {a:>9.3f} {a / b if b else float('nan'):>12.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
