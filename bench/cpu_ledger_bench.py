"""The CPU ledger against none, side by side in one run; prints the wall times, the timeouts and
the ratio, asserts nothing.

A synthetic, CPU-heavy matrix: N scripts that each do a fixed amount of pure-Python work (about
W seconds of one core, calibrated here first), run through the real CLI (`validate --env
current`, real case processes) with more slots than CPUs (`--jobs J`, as a GPU host's two per
core). A first run (`--jobs` = the CPUs) records each case's duration and CPU share in the
history; both measured runs start from a copy of it, with the same `--timeout T`:

- CPU booked (the default): the running cases' recorded shares stay within the CPUs;
- not booked (CUDNN_MATRIX_CPU_LEDGER=0): the slots alone, every case at once.

A case whose work does not finish within its limit while it shares busy CPUs times out and runs
again alone (the contention re-run, execute/reruns.py): the timeouts are what the ledger saves,
and their alone re-runs are where the wall time goes. (The cases end `error` here: --env current
pins a backend this host does not have; they run all the same, which is what is measured.)

Usage: python bench/cpu_ledger_bench.py [--cases N] [--work W] [--jobs J] [--timeout T]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CELL = ["--cudnn", "9.24.0.43", "--frontend", "1.27.0", "--cuda", "13.0", "--driver", "580"]
CELL += ["--arch", "sm90", "--env", "current", "--no-api-logs"]
SCRIPT = """\
n = 0
for _ in range(ITERATIONS):
    n += 1
print("VERDICT pass")
"""


def _calibrate(seconds: float) -> int:
    """Loop iterations that take about `seconds` of one core here (measured on 0.3 s)."""
    probe = 3_000_000
    start = time.process_time()
    n = 0
    for _ in range(probe):
        n += 1  # noqa: SIM113 - the very loop the cases run, timed
    took = max(1e-3, time.process_time() - start)
    return int(probe * seconds / took)


def _validate(
    cases: Path, results: Path, cache: Path, jobs: int, timeout: float, env: dict[str, str]
) -> tuple[float, str]:
    argv = [sys.executable, "-m", "validate", "validate", *CELL, "--cases", str(cases)]
    argv += ["--jobs", str(jobs), "--timeout", str(timeout), "--results", str(results)]
    argv += ["--cache-dir", str(cache)]
    start = time.monotonic()
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
        env={**os.environ, **env},
        timeout=3600,
    )
    wall = time.monotonic() - start
    if proc.returncode not in (0, 1):
        sys.exit(f"validate exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    start_line = next((ln for ln in proc.stderr.splitlines() if "slots:" in ln), "")
    return wall, start_line


def _figures(results: Path) -> dict[str, int]:
    """First attempts that timed out (and so ran again alone), and final timeouts."""
    latest: dict[str, dict[str, object]] = {}
    for line in (results / "results.jsonl").read_text().splitlines():
        data = json.loads(line)
        if "case" in data:
            latest[str(data["case"])] = data
    contended = sum(1 for d in latest.values() if "timed out" in str(d.get("contention", "")))
    final = sum(1 for d in latest.values() if d.get("outcome") == "timeout")
    return {"cases": len(latest), "timed_out_first": contended, "timeouts": final}


def main() -> None:
    cpus = len(os.sched_getaffinity(0))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=6 * cpus)
    parser.add_argument("--work", type=float, default=2.0, help="seconds of one core per case")
    parser.add_argument("--jobs", type=int, default=6 * cpus)
    parser.add_argument("--timeout", type=float, default=4.0)
    args = parser.parse_args()
    iterations = _calibrate(args.work)
    with tempfile.TemporaryDirectory(prefix="cpu-ledger-bench-") as tmp:
        root = Path(tmp)
        cases = root / "cases"
        cases.mkdir()
        body = SCRIPT.replace("ITERATIONS", str(iterations))
        for i in range(args.cases):
            (cases / f"burn{i:02d}.py").write_text(body)
        warm_cache = root / "warm-cache"
        wall, _ = _validate(cases, root / "warm", warm_cache, cpus, 600, {})
        history = json.loads((warm_cache / "durations.json").read_text())
        shares = history.get("#cpu_share", {})
        known = sorted(shares.values())
        print(
            f"host: {cpus} CPUs; {args.cases} cases of ~{args.work:g} s of one core each"
            f" ({iterations} iterations); --jobs {args.jobs}, --timeout {args.timeout:g}"
        )
        print(
            f"warm-up run (--jobs {cpus}): {wall:.1f} s; CPU shares recorded: "
            + (f"min {known[0]:.2f}, max {known[-1]:.2f}" if known else "none")
        )
        rows = []
        for name, env in (("cpu booked", {}), ("not booked", {"CUDNN_MATRIX_CPU_LEDGER": "0"})):
            cache = root / f"cache-{name.replace(' ', '-')}"
            cache.mkdir()
            shutil.copy(warm_cache / "durations.json", cache / "durations.json")
            results = root / name.replace(" ", "-")
            wall, start_line = _validate(cases, results, cache, args.jobs, args.timeout, env)
            rows.append((name, wall, _figures(results), start_line))
        print(f"{'':12} {'wall s':>8} {'timed out first':>16} {'timeouts':>9} {'cases':>6}")
        for name, wall, fig, _ in rows:
            print(
                f"{name:12} {wall:8.1f} {fig['timed_out_first']:16d} {fig['timeouts']:9d}"
                f" {fig['cases']:6d}"
            )
        booked, unbooked = rows[0][1], rows[1][1]
        print(f"ratio (cpu booked / not booked): {booked / unbooked:.2f}")
        for name, _, _, line in rows:
            print(f"start line ({name}): {line.split('validate: ', 1)[-1][:300]}")


if __name__ == "__main__":
    main()
