"""One pool for the run against cell-by-cell scheduling, side by side in one run; prints both wall
times and the ratio, asserts nothing.

A synthetic matrix: C cells (different backends, so one environment each), each running one slow
case (sleep S) and K short ones (sleep s), through the real LocalExecutor and runner (real case
processes); each environment "build" takes B seconds (an `ensure` that sleeps, standing in for a
venv install). Both schedules use the same slots (--jobs) and the same duration history (the
durations a previous run recorded, so both start the longest case first):

- cell by cell (before issue 17): prepare a cell's environment, run its cases in a pool of its
  own until it drains, then the next cell;
- one pool (workflow.run_cells): environments prepared in a background thread, every cell's
  cases in one pool, longest first across cells.

Usage: python bench/pool_bench.py [--cells C] [--short K] [--slow S] [--fast s] [--build B]
       [--jobs J]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from validate.config import ValidateConfig
from validate.env.sources import Sources
from validate.env.target import ExecTarget
from validate.execute import RunContext
from validate.execute.cases import cases_for
from validate.execute.history import History
from validate.execute.local import LocalExecutor
from validate.execute.pool import Pool
from validate.execute.runner import run_pool
from validate.model.matrix import Cell
from validate.model.results import ResultStore, load_results
from validate.plan.host import HostFacts
from validate.plan.rules import Plan
from validate.plan.steps import plan_steps
from validate.workflow import run_cells

BACKENDS = ("9.19.0.56", "9.20.0.48", "9.21.0.82", "9.22.0.52", "9.23.0.79", "9.24.0.43")


def _cases(folder: Path, short: int, slow: float, fast: float) -> tuple[Path, dict[str, float]]:
    cases = folder / "cases"
    cases.mkdir()
    durations = {"slow.py": slow}
    (cases / "slow.py").write_text(f"import time\ntime.sleep({slow})\n", encoding="utf-8")
    for i in range(short):
        name = f"short_{i:02d}.py"
        (cases / name).write_text(f"import time\ntime.sleep({fast})\n", encoding="utf-8")
        durations[name] = fast
    return cases, durations


def _executor(build_s: float) -> LocalExecutor:
    def ensure(spec: object) -> ExecTarget:  # noqa: ARG001 - every cell gets this interpreter
        time.sleep(build_s)  # the environment build
        return ExecTarget(python=Path(sys.executable))

    return LocalExecutor(ensure=ensure)


def _cell_by_cell(config: ValidateConfig, plan: Plan, out: Path, build_s: float) -> float:
    """The schedule before one pool: each cell prepared, then run to its last case."""
    executor = _executor(build_s)
    store = ResultStore(out / "results.jsonl")
    history = History.load(config.cache_dir / "durations.json")  # type: ignore[operator]
    context = RunContext(
        config=config,
        host=HostFacts(),
        run_id="cells",
        sources=Sources(),
        store=store,
        slots=config.jobs or 1,
        history=history,
    )
    cases = cases_for(config)
    start = time.monotonic()
    for step in plan_steps(plan.planned, HostFacts(), lambda c: executor.env_key(c, context)).steps:
        target = executor.prepare(step, context)
        assert not isinstance(target, str), target
        pool = Pool(context.slots)
        pool.submit(executor.run(step, target, cases, context))
        pool.close()
        run_pool(pool)
    return time.monotonic() - start


def _one_pool(config: ValidateConfig, plan: Plan, out: Path, build_s: float) -> float:
    store = ResultStore(out / "results.jsonl")
    start = time.monotonic()
    run_cells(
        config, plan, cases_for(config), HostFacts(), store, "pool", executor=_executor(build_s)
    )
    return time.monotonic() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=4)
    parser.add_argument("--short", type=int, default=6)
    parser.add_argument("--slow", type=float, default=3.0)
    parser.add_argument("--fast", type=float, default=0.3)
    parser.add_argument("--build", type=float, default=0.5)
    parser.add_argument("--jobs", type=int, default=4)
    args = parser.parse_args()
    cells = [
        Cell(
            cudnn=BACKENDS[i % len(BACKENDS)],
            frontend="1.27.0",
            cuda="13.0",
            driver="580",
            arch="sm90",
        )
        for i in range(args.cells)
    ]
    plan = Plan(planned=cells, pruned=[])
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cases, durations = _cases(folder, args.short, args.slow, args.fast)
        cache = folder / "cache"
        cache.mkdir()
        config = ValidateConfig(
            cases=(cases,), jobs=args.jobs, timeout_s=120, api_logs=False, cache_dir=cache
        )
        times = {}
        for name, schedule in (("cells", _cell_by_cell), ("pool", _one_pool)):
            # the same history before each: what a previous run recorded
            (cache / "durations.json").write_text(json.dumps(durations), encoding="utf-8")
            out = folder / name
            times[name] = schedule(replace(config), plan, out, args.build)
            got = len({r.key for r in load_results([out])})
            assert got == args.cells * (args.short + 1), f"{name}: {got} results"
    work = args.cells * (args.slow + args.short * args.fast)
    print(
        f"{args.cells} cells x (1 case of {args.slow:g}s + {args.short} of {args.fast:g}s), "
        f"env build {args.build:g}s each, {args.jobs} slots; {work:g} case-seconds in all"
    )
    print(f"  cell by cell (prepare, run, drain): {times['cells']:6.2f}s")
    print(f"  one pool (background builds):       {times['pool']:6.2f}s")
    print(f"  ratio pool/cell-by-cell:            {times['pool'] / times['cells']:.2f}x")
    print(
        f"  lower bound max(work/slots, slow+build): {max(work / args.jobs, args.slow + args.build):.2f}s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
