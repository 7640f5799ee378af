"""Runner vs the frontend CI's loop, side by side in one run; prints ratios, asserts nothing.

1. N synthetic notebooks (one calls os.abort()) through `cudnn-matrix run --jobs K`, against a
   sequential `jupyter execute` loop with `set -e` semantics (stop at the first failure).
2. Per-case overhead of a script through the runner against a bare `python script.py`.

Usage: python bench/runner_bench.py [--notebooks N] [--jobs K] [--crash-at I] [--scripts M]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook

REPO = Path(__file__).resolve().parents[1]


def _notebooks(folder: Path, n: int, crash_at: int) -> list[Path]:
    paths = []
    for i in range(n):
        code = "import os\nos.abort()" if i == crash_at else f"x = sum(range(10000))\nprint({i}, x)"
        first = new_code_cell("import time\ntime.sleep(0.2)")  # type: ignore[no-untyped-call]
        second = new_code_cell(code)  # type: ignore[no-untyped-call]
        nb = new_notebook(cells=[first, second])  # type: ignore[no-untyped-call]
        nb.metadata["kernelspec"] = {
            "name": "python3",
            "display_name": "Python 3",
            "language": "python",
        }
        path = folder / f"nb_{i:02d}.ipynb"
        nbformat.write(nb, path)  # type: ignore[no-untyped-call]
        paths.append(path)
    return paths


def _ci_loop(paths: list[Path]) -> tuple[float, int]:
    """`for nb in ...; do jupyter execute $nb; done` under `set -e`: verdicts until the first failure."""
    start = time.monotonic()
    verdicts = 0
    for path in paths:
        proc = subprocess.run(
            ["jupyter", "execute", str(path)],
            capture_output=True,
            check=False,
        )
        verdicts += 1
        if proc.returncode != 0:
            break  # set -e: everything after the crash never runs
    return time.monotonic() - start, verdicts


def _runner(paths: list[Path], jobs: int, out: Path, *extra: str) -> tuple[float, int]:
    argv = [sys.executable, "-m", "validate", "run", *map(str, paths), "--jobs", str(jobs), *extra]
    argv += ["--results", str(out), "--json", "--timeout", "120"]
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    took = time.monotonic() - start
    return took, len(json.loads(proc.stdout))


def _script_overhead(folder: Path, m: int) -> tuple[float, float]:
    script = folder / "tiny.py"
    script.write_text("import json, os\nprint(sum(range(100000)))\n", encoding="utf-8")
    sys.path.insert(0, str(REPO))
    from validate.env.target import ExecTarget
    from validate.execute.cases import discover_cases
    from validate.execute.runner import RunOptions, run_case
    from validate.model.results import ResultStore

    [case] = discover_cases([script])
    target = ExecTarget(python=Path(sys.executable))
    options = RunOptions(timeout_s=60, results_dir=folder / "runs", api_logs=False)
    ResultStore(folder / "runs" / "results.jsonl")
    bare = through = 0.0
    for _ in range(m):  # interleaved, so load from other processes hits both alike
        start = time.monotonic()
        subprocess.run([sys.executable, str(script)], capture_output=True, check=True)
        bare += (time.monotonic() - start) / m
        start = time.monotonic()
        run_case(case, target, options)
        through += (time.monotonic() - start) / m
    return bare, through


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebooks", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--crash-at", type=int, default=2)
    parser.add_argument("--scripts", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        paths = _notebooks(folder, args.notebooks, args.crash_at)
        ci_s, ci_verdicts = _ci_loop(paths)
        run_s, run_verdicts = _runner(paths, args.jobs, folder / "run")
        resume_s, _ = _runner(paths, args.jobs, folder / "run", "--resume")
        bare, through = _script_overhead(folder, args.scripts)
    n = args.notebooks
    print(f"notebooks: {n}, crash at #{args.crash_at}, runner --jobs {args.jobs}")
    print(f"  jupyter execute loop (set -e): {ci_s:6.2f}s, verdicts {ci_verdicts}/{n}")
    print(f"  cudnn-matrix run:              {run_s:6.2f}s, verdicts {run_verdicts}/{n}")
    print(f"  wall-time ratio runner/loop:   {run_s / ci_s:.2f}x")
    print(f"  per-verdict time ratio:        {(run_s / run_verdicts) / (ci_s / ci_verdicts):.2f}x")
    print(
        f"  re-run with --resume:          {resume_s:6.2f}s = {resume_s / run_s:.1%} of the first run"
    )
    print(
        f"script overhead ({args.scripts} runs): bare {bare * 1000:.0f} ms, runner {through * 1000:.0f} ms"
    )
    print(f"  per-case ratio runner/bare:    {through / bare:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
