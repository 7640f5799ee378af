"""Runner vs the frontend CI's loop, side by side in one run; prints ratios, asserts nothing.

1. N synthetic notebooks (one calls os.abort()) through `cudnn-matrix run --jobs K`, against a
   sequential `jupyter execute` loop with `set -e` semantics (stop at the first failure).
2. Per-case overhead of a script through the runner against a bare `python script.py`.
3. Issue 17 item 3: `cudnn-matrix run` on T trivial scripts at `--jobs 1` against a plain loop of
   `python x.py` over them (goal: within 1.3x), with its parts: `run` on one script and on all T
   give the cost of each further case (the slope) and what is paid once (start-up: imports, host
   and GPU detection, the slot bound); the bookkeeping per case is the slope less a
   case forked by a warm fork server (execute/forkserver.py, as `run` runs a script) on its own;
   the fresh bootstrap (run_script.py started per case) is printed beside it.

Every subprocess gets a bytecode cache (PYTHONPYCACHEPREFIX in the temporary folder, warmed
first, PYTHONDONTWRITEBYTECODE dropped), as an installed tool has one.

Usage: python bench/runner_bench.py [--notebooks N] [--jobs K] [--crash-at I] [--scripts M]
       [--trivial T] [--only-trivial]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _notebooks(folder: Path, n: int, crash_at: int) -> list[Path]:
    import nbformat  # not for --only-trivial (a GPU host without Jupyter)
    from nbformat.v4 import new_code_cell, new_notebook

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


def _env(folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
    return env


def _timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=REPO, env=env, capture_output=True, check=True)
    return time.perf_counter() - start


def _cpu() -> float:
    """CPU seconds of every waited-for child so far (their own children included): less moved
    by other load on the host than wall time."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _trivial(folder: Path, t: int, rounds: int) -> dict[str, float]:
    """Medians over `rounds` interleaved rounds: the loop, the runner, and both parts."""
    scripts = folder / "trivial"
    scripts.mkdir()
    for i in range(t):
        (scripts / f"s{i:02d}.py").write_text(f"print({i} + sum(range(1000)))\n", encoding="utf-8")
    env = _env(folder)
    py = sys.executable
    paths = sorted(scripts.glob("*.py"))
    boot = str(REPO / "validate" / "execute" / "resources" / "run_script.py")

    def loop() -> float:
        start = time.perf_counter()
        for path in paths:
            subprocess.run([py, str(path)], env=env, capture_output=True, check=True)
        return time.perf_counter() - start

    def runner(n: int, what: Path = scripts) -> float:
        out = folder / f"trivial-run-{n}-{what.name}"
        return _timed(
            [py, "-m", "validate", "run", str(what), "--jobs", "1", "--results", str(out)], env
        )

    def bootstrap_alone() -> float:
        start = time.perf_counter()
        for path in paths:
            subprocess.run(
                [py, boot, str(path), str(folder / "r.json")],
                env=env,
                capture_output=True,
                check=True,
            )
        return time.perf_counter() - start

    def forked_alone() -> float:
        """The T cases forked by a warm fork server (as `run` runs them), server start left out."""
        if str(REPO) not in sys.path:
            sys.path.insert(0, str(REPO))  # this checkout's tool, as `python -m validate` here
        from validate.execute.forkserver import ForkServers

        servers = ForkServers()
        report = str(folder / "r.json")
        with servers.session():
            servers.start([py, boot, str(paths[0]), report], folder / "f.log", env).wait()
            start = time.perf_counter()
            for path in paths:
                servers.start([py, boot, str(path), report], folder / "f.log", env).wait()
            return time.perf_counter() - start

    runner(0)  # warm the bytecode cache (and the page cache) for both sides
    loop()
    got: dict[str, list[float]] = {
        k: []
        for k in (
            *("loop", "runner", "runner1", "boot", "forked", "bare", "help"),
            *("loop_cpu", "runner_cpu"),
        )
    }
    for n in range(1, rounds + 1):
        cpu = _cpu()
        got["loop"].append(loop())
        got["loop_cpu"].append(_cpu() - cpu)
        cpu = _cpu()
        got["runner"].append(runner(n))
        got["runner_cpu"].append(_cpu() - cpu)
        got["runner1"].append(runner(n, paths[0]))
        got["boot"].append(bootstrap_alone())
        got["forked"].append(forked_alone())
        got["bare"].append(_timed([py, "-c", "pass"], env))
        got["help"].append(_timed([py, "-m", "validate", "run", "--help"], env))
    return {k: statistics.median(v) for k, v in got.items()}


def _ci_loop(paths: list[Path]) -> tuple[float, int]:
    """`for nb in ...; do jupyter execute $nb; done` under `set -e`: verdicts until the first failure."""
    start = time.monotonic()
    verdicts = 0
    for path in paths:
        beside = Path(sys.executable).with_name("jupyter")  # the venv's, when it is not on PATH
        proc = subprocess.run(
            [str(beside) if beside.exists() else "jupyter", "execute", str(path)],
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
    parser.add_argument("--trivial", type=int, default=20, help="at least 2")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--only-trivial", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trivial = _trivial(Path(tmp), args.trivial, args.rounds)
    t = args.trivial
    print(f"{t} trivial scripts, --jobs 1 (medians of {args.rounds} interleaved rounds):")
    print(f"  plain loop `python x.py`:      {trivial['loop']:6.3f}s")
    print(f"  cudnn-matrix run:              {trivial['runner']:6.3f}s")
    print(
        f"  ratio runner/loop:             {trivial['runner'] / trivial['loop']:.2f}x (goal 1.3x)"
    )
    cpu_ratio = trivial["runner_cpu"] / trivial["loop_cpu"]
    print(
        f"  CPU time, loop / runner:       {trivial['loop_cpu']:.3f}s / {trivial['runner_cpu']:.3f}s"
        f" = {cpu_ratio:.2f}x (less moved by other load)"
    )
    print(
        f"  python start-up (python -c pass): {trivial['bare'] * 1000:.0f} ms (the loop's unit:"
        " an editable install's import hook in site adds to every start and flatters the ratio)"
    )
    # `run` on one script against `run` on all T: the slope is what each further case costs,
    # the rest is paid once (imports, host and GPU detection, the slot bound, sealing)
    slope = (trivial["runner"] - trivial["runner1"]) / (t - 1)
    startup = trivial["runner1"] - slope - trivial["bare"]
    imports = trivial["help"] - trivial["bare"]
    print(
        f"  start-up (run on 1 script - one case - python -c pass): {startup * 1000:.0f} ms"
        f" (goal 100 ms; of it `run --help`: {imports * 1000:.0f} ms)"
    )
    per_boot = (trivial["boot"] - trivial["loop"]) / t
    per_fork = trivial["forked"] / t
    per_book = slope - per_fork
    print(
        f"  a case forked by the warm fork server (fork, bootstrap, exit): {per_fork * 1000:.1f} ms"
        f" against {trivial['loop'] / t * 1000:.1f} ms for `python x.py`"
        f" (a fresh bootstrap, run_script.py, adds {per_boot * 1000:.1f} ms to that)"
    )
    print(
        f"  bookkeeping per case (slope over {t} scripts - forked case alone):"
        f" {per_book * 1000:.1f} ms (goal 5 ms)"
    )
    if args.only_trivial:
        return 0
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
