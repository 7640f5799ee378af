"""The pool's critical-path priority against none, side by side in one run; prints both wall times
and the ratio, asserts nothing.

Where the cases are CPU-bound and the slots outnumber the cores (the default is two slots per
CPU), a long case shares its core with the short ones beside it and ends late: on the H200 the
heaviest notebook took 74.7 s alone and 124.7 s among 31 others, and the run ended 11 s after it
(reports/gpu/2026-12-03-h200-two-cell). With the duration history the pool knows that case is
the critical path (its estimate is at least the work left per slot) and lowers the CPU priority of
the cases started beside it (execute/pool.py).

A synthetic batch through the real CaseBatch, pool and runner (real case processes): one heavy
case that burns H CPU-seconds and K short ones that burn h each, `--jobs` slots (default twice the
CPUs), the same history for both (what a previous run recorded). Alternating rounds, the best of
each is printed, with the lower bound max(H, total CPU / CPUs).

Usage: python bench/priority_bench.py [--heavy H] [--short h] [--count K] [--jobs J] [--rounds R]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from validate.env.target import ExecTarget
from validate.execute.cases import discover_cases
from validate.execute.pool import YIELD_NICE, Pool
from validate.execute.runner import CaseBatch, RunOptions, run_pool
from validate.model.results import ResultStore

_BURN = (
    "import time\nend = time.process_time() + {seconds}\n"
    "while time.process_time() < end:\n    pass\n"
)


def _run(folder: Path, scripts: list[Path], history: Path, jobs: int, nice: int) -> float:
    out = folder / f"run-{time.monotonic_ns()}"
    options = RunOptions(results_dir=out, api_logs=False, jobs=jobs, history=history)
    store = ResultStore(out / "results.jsonl")
    target = ExecTarget(python=Path(sys.executable), cell_id="bench")
    batch = CaseBatch(discover_cases(scripts), target, options, store)
    pool = Pool(jobs, yield_nice=nice)
    start = time.monotonic()
    pool.submit(batch.jobs())
    pool.close()
    run_pool(pool)
    wall = time.monotonic() - start
    bad = [r.case for r in batch.ordered() if r.outcome.value != "pass"]
    assert not bad, f"cases did not pass: {bad}"
    return wall


def main() -> int:
    cpus = len(os.sched_getaffinity(0))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heavy", type=float, default=4.0)
    parser.add_argument("--short", type=float, default=0.4)
    parser.add_argument("--count", type=int, default=4 * cpus)
    parser.add_argument("--jobs", type=int, default=2 * cpus)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        heavy = folder / "heavy.py"
        heavy.write_text(_BURN.format(seconds=args.heavy) + "print('VERDICT pass')\n")
        scripts, durations = [heavy], {"heavy.py": args.heavy}
        for i in range(args.count):
            script = folder / f"short_{i:02d}.py"
            script.write_text(_BURN.format(seconds=args.short) + "print('VERDICT pass')\n")
            scripts.append(script)
            durations[script.name] = args.short
        history = folder / "durations.json"
        best = {"none": float("inf"), "critical": float("inf")}
        for _ in range(args.rounds):
            for name, nice in (("none", 0), ("critical", YIELD_NICE)):
                history.write_text(json.dumps(durations), encoding="utf-8")  # the same each time
                best[name] = min(best[name], _run(folder, scripts, history, args.jobs, nice))
    total = args.heavy + args.count * args.short
    print(
        f"1 case of {args.heavy:g} CPU-s + {args.count} of {args.short:g} CPU-s, {args.jobs} slots "
        f"on {cpus} CPUs, best of {args.rounds} alternating rounds"
    )
    print(f"  no priority:                        {best['none']:6.2f}s")
    print(f"  critical path first (nice +{YIELD_NICE} beside): {best['critical']:6.2f}s")
    print(f"  ratio critical/none:                {best['critical'] / best['none']:.2f}x")
    print(f"  lower bound max(heavy, CPU-s/CPUs): {max(args.heavy, total / cpus):.2f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
