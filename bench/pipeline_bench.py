"""Emit a 10 000-cell matrix as a GitLab child pipeline and a GitHub workflow; shard 10 000 cells x
40 cases by longest processing time first and compare the makespan with the lower bound.

Run: python bench/pipeline_bench.py. Prints the seconds each emit takes (target <= 2 s) and, for
several shard counts, the predicted makespan, the bound max(mean load, longest unit) and their ratio
(target within 10 %). Durations are drawn from a fixed seed: 40 cases of 1 to 300 s. Not a test:
nothing here asserts a time.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

# Run from a checkout without installing: make the `validate` package next to bench/ importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from validate.config import Selectors
from validate.dispatch.ci import PipelineOptions, github_workflow, gitlab_pipeline, to_yaml
from validate.dispatch.runners import job_groups, load_runners, prune_without_runner
from validate.model.matrix import load_matrix
from validate.plan.rules import load_rules, plan_cells
from validate.plan.shard import assign, expected, lpt_bound


def _matrix(folder: Path) -> tuple[Path, Path]:
    cudnn = ", ".join(f'"9.{minor}.0.1"' for minor in range(10, 60))
    frontend = ", ".join(f'"1.{minor}.0"' for minor in range(10, 60))
    matrix, rules = folder / "big.toml", folder / "rules.toml"
    matrix.write_text(
        f'[axes]\ncudnn = [{cudnn}]\nfrontend = [{frontend}]\ncuda = ["13.0"]\n'
        'driver = ["580"]\narch = ["sm80", "sm90", "sm100", "sm120"]\n'
    )
    rules.write_text("")
    return matrix, rules


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        matrix_path, rules_path = _matrix(Path(tmp))
        start = time.perf_counter()
        plan = plan_cells(load_matrix(matrix_path), load_rules(rules_path), Selectors())
        planned_s = time.perf_counter() - start
        cells = len(plan.planned)
        runners = load_runners()
        for name, emit in (("gitlab", gitlab_pipeline), ("github", github_workflow)):
            start = time.perf_counter()
            pruned = prune_without_runner(plan, runners)
            doc, _ = emit(job_groups(pruned, runners), PipelineOptions())
            text = to_yaml(doc)
            took = time.perf_counter() - start
            print(
                f"emit {name}: {cells} cells ({len(pruned.planned)} with a runner) -> "
                f"{len(text) / 2**20:.1f} MiB in {took:.2f} s (plan {planned_s:.2f} s; target <= 2 s)"
            )
    rng = random.Random(15)
    durations = {f"case{i:02d}": rng.uniform(1, 300) for i in range(40)}
    units = [(f"cell{c:05d}", case) for c in range(10_000) for case in durations]
    costs = expected(units, durations)
    for total in (4, 16, 64, 256):
        start = time.perf_counter()
        shards = assign(units, durations, total)
        took = time.perf_counter() - start
        makespan = max(sum(expected(s, durations)) for s in shards)
        bound = lpt_bound(costs, total)
        print(
            f"shard {len(units)} units into {total:3d}: makespan {makespan:10.1f} s, bound "
            f"{bound:10.1f} s, ratio {makespan / bound:.4f} (target <= 1.10), {took:.2f} s"
        )


if __name__ == "__main__":
    main()
