"""Tiers (plan/tiers.py): the pair cover is complete (checked by brute force), deterministic, honours
`always`, and bad declarations are one line with file:line, exit 2."""

from __future__ import annotations

import itertools
import json
import os
import random
from typing import TYPE_CHECKING

import pytest
from usercli import cli, elsewhere

from validate.config import Selectors
from validate.errors import MatrixError
from validate.model.matrix import load_matrix
from validate.plan.rules import load_rules, plan_cells
from validate.plan.tiers import choose_pairs, select_tier

if TYPE_CHECKING:
    import subprocess
    from pathlib import Path

AXES5 = ("cudnn", "frontend", "cuda", "driver", "arch")


def _pairs(rows: list[tuple[int, ...]]) -> set[tuple[int, int, int, int]]:
    """Every (axis i, value, axis j, value) that some row holds: the brute-force reference."""
    return {(i, r[i], j, r[j]) for r in rows for i, j in itertools.combinations(range(len(r)), 2)}


def _generated(seed: int, axes: int, values: int, cells: int) -> list[tuple[int, ...]]:
    """A planned-cell set: a random sample of the product (the rest stands for pruned cells)."""
    rnd = random.Random(seed)
    sizes = [rnd.randint(2, values) for _ in range(axes)]
    rows = {tuple(rnd.randrange(n) for n in sizes) for _ in range(cells)}
    return sorted(rows)


@pytest.mark.parametrize(
    ("seed", "axes", "values", "cells"),
    [(1, 2, 10, 100), (2, 3, 4, 30), (3, 5, 6, 500), (4, 8, 10, 3000), (5, 8, 3, 200)],
)
def test_generated_matrices_every_pair_is_covered(
    seed: int, axes: int, values: int, cells: int
) -> None:
    rows = _generated(seed, axes, values, cells)
    chosen, pairs, covered, bound = choose_pairs(rows)
    picked = [rows[k] for k in chosen]
    assert _pairs(picked) == _pairs(rows)
    assert pairs == covered == len(_pairs(rows))
    # the bound: the most value pairs of any two axes (each chosen cell covers one of them)
    most = max(len({(r[i], r[j]) for r in rows}) for i, j in itertools.combinations(range(axes), 2))
    assert bound == most <= len(chosen)
    assert len(chosen) < len(rows) or len(rows) <= most
    assert choose_pairs(rows) == (chosen, pairs, covered, bound)  # same input, same cells


def test_seeds_are_chosen_first() -> None:
    rows = _generated(7, 4, 5, 200)
    seeds = [[len(rows) - 1], [3, 4]]
    chosen, *_ = choose_pairs(rows, seeds)
    assert chosen[0] == len(rows) - 1
    assert chosen[1] in {3, 4}
    assert _pairs([rows[k] for k in chosen]) == _pairs(rows)


def _default_plan() -> tuple[object, object]:
    matrix = load_matrix(None)
    return matrix, plan_cells(matrix, load_rules(None), Selectors())


def test_default_pr_tier_covers_every_pair_of_the_planned_cells_and_always() -> None:
    matrix, plan = _default_plan()
    choice = select_tier(matrix, plan, "pr")  # type: ignore[arg-type]
    planned = plan.planned  # type: ignore[attr-defined]
    full = _pairs([tuple(getattr(c, a) for a in AXES5) for c in planned])
    got = _pairs([tuple(getattr(c, a) for a in AXES5) for c in choice.cells])
    assert got == full
    assert choice.pairs == choice.covered == len(full)
    assert len(choice.cells) + len(choice.left_out) == len(planned)
    assert len(choice.cells) < len(planned) // 4
    ids = {c.id for c in choice.cells}
    assert ids.isdisjoint(c.id for c in choice.left_out)
    # always: the newest frontend on the newest backend, the oldest backend with 1.26.0
    cudnns = sorted({c.cudnn for c in planned}, key=lambda v: tuple(map(int, v.split("."))))
    assert any(c.cudnn == cudnns[-1] and c.frontend == "1.32.0" for c in choice.cells)
    assert any(c.cudnn == cudnns[0] and c.frontend == "1.26.0" for c in choice.cells)
    assert "100 %" in choice.summary(len(planned))


def _plan_cli(*args: str, seed: str = "0") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    return cli("plan", *args, cwd=elsewhere(), env=env, timeout=60)


def test_plan_tier_is_the_same_under_any_hash_seed_and_prints_coverage() -> None:
    one = _plan_cli("--tier", "pr", "--format", "json", seed="1")
    two = _plan_cli("--tier", "pr", "--format", "json", seed="12345")
    assert one.returncode == two.returncode == 0, one.stderr
    assert one.stdout == two.stdout
    rows = json.loads(one.stdout)
    table = _plan_cli("--tier", "pr")
    assert table.returncode == 0, table.stderr
    assert f"pr: {len(rows)} of " in table.stderr
    assert "% of " in table.stderr
    assert "lower bound" in table.stderr
    everything = _plan_cli("--tier", "nightly", "--format", "json")
    assert len(json.loads(everything.stdout)) > len(rows)


def _matrix(tmp_path: Path, tiers: str) -> Path:
    path = tmp_path / "m.toml"
    path.write_text(
        "[axes]\n"
        'cudnn = ["9.19.0.56", "9.24.0.43"]\n'
        'frontend = ["1.26.0", "1.32.0"]\n'
        'cuda = ["12.9", "13.0"]\n'
        'driver = ["580"]\n'
        'arch = ["sm80", "sm90"]\n'
        "\n[tiers]\n" + tiers + "\n[[exclude]]\n"
        'cudnn = "9.19.*"\nfrontend = "1.32.*"\nreason = "not with the old backend"\n',
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize(
    ("tiers", "tier", "line", "needle"),
    [
        ('pr = { cover = "triples" }\n', "pr", 9, "unknown cover mode 'triples'"),
        ('pr = "pairs"\nnightly = "some"\n', "pr", 10, "unknown cover mode 'some'"),
        ('pr = "pairs"\n', "weekly", 8, "(declared: pr)"),
        (
            (
                'pr = { cover = "pairs", always = [\n  { arch = "sm80" },\n'
                '  { cudnn = "9.19.0.56", frontend = "1.32.0" },\n] }\n'
            ),
            "pr",
            11,
            "always cell (cudnn=9.19.0.56, frontend=1.32.0) is not planned",
        ),
        ('pr = { cover = "pairs", always = [{ gpu = "x" }] }\n', "pr", 9, "unknown axis"),
    ],
)
def test_bad_tier_declarations_are_one_line_with_file_line_exit_2(
    tmp_path: Path, tiers: str, tier: str, line: int, needle: str
) -> None:
    path = _matrix(tmp_path, tiers)
    proc = _plan_cli("--matrix", str(path), "--tier", tier)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert f"{path}:{line}:" in lines[0] or f"{path}:{line} " in lines[0]
    assert needle in lines[0]


def test_always_pruned_names_the_reason(tmp_path: Path) -> None:
    path = _matrix(
        tmp_path, 'pr = { cover = "pairs", always = [{ cudnn = "oldest", frontend = "newest" }] }\n'
    )
    matrix = load_matrix(path)
    plan = plan_cells(matrix, load_rules(None), Selectors())
    match = r"m\.toml:9: tier 'pr': always cell .* the plan prunes it"
    with pytest.raises(MatrixError, match=match) as excinfo:
        select_tier(matrix, plan, "pr")
    assert "not with the old backend" in str(excinfo.value)


def test_a_selection_runs_its_part_of_the_one_tier() -> None:
    """A CI job or Slurm group selects its arch/driver and gets exactly the tier's cells there."""
    whole = json.loads(_plan_cli("--tier", "pr", "--format", "json").stdout)
    part = _plan_cli("--tier", "pr", "--arch", "sm90", "--driver", "580", "--format", "json")
    assert part.returncode == 0, part.stderr
    want = [r for r in whole if r["arch"] == "sm90" and r["driver"] == "580"]
    assert json.loads(part.stdout) == want
    assert want


def test_emitted_pipeline_jobs_run_the_tier(tmp_path: Path) -> None:
    out = tmp_path / "ci.yml"
    proc = _plan_cli("--tier", "pr", "--emit", "gitlab", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text(encoding="utf-8")
    assert 'CUDNN_MATRIX_ARGS: "--tier pr"' in text
    assert "# tier pr: " in text
    assert "100 % of" in text
    full = _plan_cli("--tier", "nightly", "--emit", "gitlab")
    assert "--tier nightly" in full.stdout
