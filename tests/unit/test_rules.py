"""Rules as data: each embedded rule fires exactly where DOMAIN.md says, with its source; planning."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from packaging.version import Version

import validate
from validate.config import Selectors
from validate.errors import MatrixError
from validate.model.matrix import Cell, load_matrix
from validate.plan.rules import DEFAULT_RULES, Rule, apply_rules, cell_facts, load_rules, plan_cells

MATRICES = Path(__file__).resolve().parent.parent / "resources" / "matrices"
RULES = load_rules(None)
BY_NAME = {rule.name: rule for rule in RULES}


def _cell(cudnn: str, frontend: str, cuda: str, driver: str, arch: str) -> Cell:
    return Cell(cudnn=cudnn, frontend=frontend, cuda=cuda, driver=driver, arch=arch)


def _first(cell: Cell, python: str = "3.12") -> Rule | None:
    facts = cell_facts(cell, Version(python))
    return next((rule for rule in RULES if rule.matches(facts)), None)


def _matrix_file(tmp_path: Path, **axes: list[str]) -> Path:
    body = "\n".join(f"{axis} = {values!r}".replace("'", '"') for axis, values in axes.items())
    path = tmp_path / "matrix.toml"
    path.write_text(f"[axes]\n{body}\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("pins", "python", "expected"),
    [
        (("9.24.0.43", "1.27.0", "13.0", "580", "sm90"), "3.12", None),
        (("9.24.0.43", "1.27.0", "13.0", "570", "sm90"), "3.12", "cuda13-driver"),
        (("9.24.0.43", "1.27.0", "13.0", "580.65.05", "sm90"), "3.12", "cuda13-driver"),
        (("9.24.0.43", "1.27.0", "13.0", "580.65.06", "sm90"), "3.12", None),
        (("9.24.0.43", "1.27.0", "13.0", "fc-610@580", "sm90"), "3.12", None),
        (("9.24.0.43", "1.27.0", "12.9", "520", "sm90"), "3.12", "cuda12-driver"),
        (("9.24.0.43", "1.27.0", "12.9", "525.60.13", "sm90"), "3.12", None),
        (("9.24.0.43", "1.27.0", "12.9", "570", "sm70"), "3.12", None),
        (("9.24.0.43", "1.27.0", "13.0", "580", "sm70"), "3.12", "cuda13-arch"),
        (("9.24.0.43", "1.11.0", "13.0", "580", "sm90"), "3.12", "cuda13-frontend"),
        (("9.24.0.43", "1.12.0", "13.0", "580", "sm90"), "3.12", None),
        (("9.11.1.4", "1.27.0", "13.0", "580", "sm90"), "3.12", "cuda13-cudnn"),
        (("9.24.0.43", "1.27.0", "12.6", "570", "sm100"), "3.12", "blackwell-cuda"),
        (("9.24.0.43", "1.27.0", "12.8", "570", "sm120"), "3.12", None),
        (("9.24.0.43", "1.27.0", "12.8", "570.25", "sm120"), "3.12", "blackwell-driver"),
        (("9.6.0.74", "1.27.0", "12.9", "570", "sm100"), "3.12", "blackwell-cudnn"),
        (("9.7.0.66", "1.27.0", "12.9", "570", "sm100"), "3.12", None),
        (("9.24.0.43", "1.19.0", "12.9", "570", "sm90"), "3.12", "frontend-1.19.0-cuda12"),
        (("9.24.0.43", "1.19.0", "13.0", "580", "sm90"), "3.12", None),
        (("9.24.0.43", "1.19.1", "12.9", "570", "sm90"), "3.12", None),
        (("9.24.0.43", "1.29.0", "13.0", "580", "sm90"), "3.9", "frontend-python"),
        (("9.24.0.43", "1.28.0", "13.0", "580", "sm90"), "3.9", None),
        (("9.24.0.43", "1.29.0", "13.0", "580", "sm90"), "3.10", None),
        (
            ("9.24.0.43", "1.27.0", "13.0", "fc-610@580", "sm120"),
            "3.12",
            "forward-compat-datacenter",
        ),
        (
            ("9.24.0.43", "1.27.0", "13.0", "fc-610@580", "sm89"),
            "3.12",
            "forward-compat-datacenter",
        ),
        (("9.24.0.43", "1.27.0", "13.0", "fc-610@580", "sm100"), "3.12", None),
        (("9.24.0.43", "1.27.0", "13.0", "fc-610@570", "sm90"), "3.12", "forward-compat-major-13"),
        (("9.24.0.43", "1.27.0", "12.9", "fc-610@570", "sm90"), "3.12", None),
        (("9.24.0.43", "1.27.0", "12.9", "fc-580@520", "sm90"), "3.12", "forward-compat-major-12"),
    ],
)
def test_embedded_rules(pins: tuple[str, ...], python: str, expected: str | None) -> None:
    rule = _first(_cell(*pins), python)
    assert (rule.name if rule else None) == expected


def test_every_embedded_rule_has_reason_source_and_cite() -> None:
    assert len(BY_NAME) == len(RULES) >= 12
    for rule in RULES:
        assert rule.reason
        assert rule.cite
        assert rule.source.startswith("https://"), rule.name


def test_pruned_reason_names_the_rule_source(tmp_path: Path) -> None:
    path = _matrix_file(
        tmp_path,
        cudnn=["9.24.0.43"],
        frontend=["1.27.0"],
        cuda=["13.0"],
        driver=["570", "580"],
        arch=["sm90"],
    )
    plan = apply_rules(load_matrix(path), RULES)
    assert [c.driver for c in plan.planned] == ["580"]
    [(cell, reason)] = plan.pruned
    assert cell.driver == "570"
    assert reason == (
        "CUDA 13.0 needs driver >= 580.65.06 (found 570) [cuDNN 9.17.0 support matrix]"
    )


def test_planner_agrees_with_direct_evaluation(tmp_path: Path) -> None:
    axes = {
        "cudnn": ["9.6.0.74", "9.11.1.4", "9.24.0.43", "9.28.1.4"],
        "frontend": ["1.11.0", "1.19.0", "1.27.0", "1.32.0"],
        "cuda": ["12.6", "12.9", "13.0"],
        "driver": ["520", "570.25", "570", "580.65.05", "580", "fc-610@570", "fc-610@580"],
        "arch": ["sm70", "sm75", "sm86", "sm89", "sm90", "sm100", "sm120"],
    }
    python = "3.9"  # the base interpreter of these python-less cells
    matrix = load_matrix(_matrix_file(tmp_path, **axes))
    plan = apply_rules(matrix, RULES, python=Version(python))
    expected_planned = []
    expected_pruned = []
    for pins in itertools.product(*axes.values()):
        cell = _cell(*pins)
        rule = _first(cell, python)
        if rule is None:
            expected_planned.append(cell)
        else:
            expected_pruned.append((cell, rule.explain(cell, Version(python))))
    assert plan.planned == expected_planned
    assert plan.pruned == expected_pruned
    assert len(plan.planned) > 0
    assert {r.split(" [")[-1] for _, r in plan.pruned} >= {"NVIDIA/cudnn-frontend#207]"}


def test_small_matrix_include_and_exclude() -> None:
    matrix = load_matrix(MATRICES / "small.toml")
    plan = apply_rules(matrix, RULES)
    reasons = dict(plan.pruned)
    included = _cell("9.24.0.43", "1.11.0", "13.0", "580", "sm90")
    assert reasons[included].startswith("CUDA 13.0 needs frontend >= 1.12 (found 1.11.0)")
    excluded = _cell("9.6.0.74", "1.27.0", "12.9", "580.65.06", "sm90")
    assert reasons[excluded] == (
        "excluded by the matrix: not interesting here [small.toml:exclude[0]]"
    )
    assert len(plan.planned) + len(plan.pruned) == 73


def test_exclude_by_id_pattern(tmp_path: Path) -> None:
    keep = _cell("9.24.0.43", "1.27.0", "13.0", "580", "sm90")
    drop = _cell("9.24.0.43", "1.27.0", "13.0", "580", "sm100")
    path = _matrix_file(
        tmp_path,
        cudnn=["9.24.0.43"],
        frontend=["1.27.0"],
        cuda=["13.0"],
        driver=["580"],
        arch=["sm90", "sm100"],
    )
    path.write_text(
        path.read_text() + f'[[exclude]]\nid = "{drop.id[:6]}*"\nreason = "flaky runner"\n'
    )
    plan = apply_rules(load_matrix(path), RULES)
    assert plan.planned == [keep]
    assert [c for c, _ in plan.pruned] == [drop]


def test_selection_that_leaves_nothing_names_the_selectors() -> None:
    matrix = load_matrix(None)
    selectors = Selectors(values={"cuda": ("13.0",), "driver": ("570",)})
    with pytest.raises(MatrixError, match=r"selection \(--cuda 13\.0 --driver 570\) leaves no"):
        plan_cells(matrix, RULES, selectors)


def test_default_plan_for_the_release_backend() -> None:
    plan = plan_cells(load_matrix(None), RULES, Selectors(values={"cudnn": ("9.24.0.43",)}))
    assert {c.cudnn for c in plan.planned} == {"9.24.0.43"}
    assert len(plan.planned) + len(plan.pruned) == 73  # 3 x 2 x 3 x 4 + the 1.19.1 include
    assert all(re.search(r" \[.+\]$", reason) for _, reason in plan.pruned)


def test_rules_loader_reports_every_bad_rule(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"
    path.write_text(
        "[[rule]]\n"
        'name = "a"\n'
        'select = { cuda = "=>13" }\n'
        'when = { gpu = "h100" }\n'
        'reason = "needs {colour}"\n'
        'source = "https://example.invalid"\n'
        'cite = "x"\n'
        "[[rule]]\n"
        'name = "b"\n'
        'select = { arch = ["sm91"] }\n'
        'effect = "explode"\n'
        'reason = "r"\n',
        encoding="utf-8",
    )
    with pytest.raises(MatrixError) as info:
        load_rules(path)
    parts = str(info.value).split("; ")
    assert [p.split(": ")[0:2] for p in parts] == [
        [f"{path}:3", "rule[0](a).select.cuda"],
        [f"{path}:4", "rule[0](a).when.gpu"],
        [f"{path}:5", "rule[0](a).reason"],
        [f"{path}:11", "rule[1](b).effect"],
        [f"{path}:10", "rule[1](b).select.arch"],
        [f"{path}:8", "rule[1](b).source"],
        [f"{path}:8", "rule[1](b).cite"],
    ]
    assert "invalid specifier '=>13'" in parts[0]
    assert "unknown placeholder {colour}" in parts[2]


def test_default_rules_are_the_data_the_installed_package_carries() -> None:
    """With no --rules the tool reads the rules.toml its package carries, beside default.toml:
    validate/_matrix of the installed wheel (matrix/ beside validate/ only in an editable
    checkout); RULES above, what these tests check, are those."""
    package = Path(validate.__file__).resolve().parent
    assert DEFAULT_RULES.resolve().parent in (package / "_matrix", package.parent / "matrix")
    assert (DEFAULT_RULES.parent / "default.toml").is_file()


@pytest.mark.parametrize("rules", [[], RULES], ids=["no-rules", "embedded-rules"])
def test_a_one_cell_matrix_plans_its_cell(tmp_path: Path, rules: list[Rule]) -> None:
    path = _matrix_file(
        tmp_path, cudnn=["9.24.0.43"], frontend=["1.27.0"], cuda=["13.0"], driver=["580"],
        arch=["sm90"],
    )  # fmt: skip
    plan = apply_rules(load_matrix(path), rules)
    assert plan.planned == [_cell("9.24.0.43", "1.27.0", "13.0", "580", "sm90")]
    assert plan.pruned == []
