"""Issue #30 item 6: versions are printed as declared (`13.0`, `580`), never as numbers, and each
flag's error example is a value of that flag."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from usercli import cli, elsewhere

from validate.cli import main
from validate.cli.bisect import render
from validate.judge.bisect import bisect
from validate.model.axes import REGISTRY, parse_value
from validate.model.matrix import Cell
from validate.model.outcome import Outcome
from validate.model.results import CaseResult
from validate.plan.rules import Plan
from validate.workflow import cell_summary

if TYPE_CHECKING:
    from pathlib import Path


def test_the_cell_summary_prints_cuda_and_driver_as_declared() -> None:
    """tabulate reads "13.0" as the float 13 and prints it `13`, right-aligned, unless told not to."""
    cells = [
        Cell(cudnn="9.24.0.43", frontend="1.27.0", cuda="13.0", driver="580", arch="sm90"),
        Cell(cudnn="9.24.0.43", frontend="1.27.0", cuda="12.9", driver="570", arch="sm90"),
    ]
    results = [
        CaseResult(case="pin_check.py", outcome=Outcome.PASS, cell_id=c.id, cell=c.pins())
        for c in cells
    ]
    lines = cell_summary(results, Plan(planned=cells, pruned=[])).splitlines()
    header = [field.strip() for field in lines[0].strip("|").split("|")]
    rows = [line.strip("|").split("|") for line in lines[2:]]
    cuda, driver = header.index("cuda"), header.index("driver")
    assert [row[cuda].strip() for row in rows] == ["13.0", "12.9"]
    assert [row[driver].strip() for row in rows] == ["580", "570"]
    # text, so left-aligned like every other pin: "| 13.0   |", not "|   13   |"
    assert all(row[cuda].startswith(" 1") for row in rows), lines
    assert all(row[driver].startswith(" 5") for row in rows), lines


@pytest.mark.parametrize("name", ["cudnn", "frontend", "cuda"])
def test_a_bad_version_names_the_example_its_flag_shows_in_help(name: str) -> None:
    """The PEP 440 axes share one parser; its example was the cuDNN one for all three."""
    example = next(a.example for a in REGISTRY if a.name == name)
    with pytest.raises(ValueError, match="invalid version") as caught:
        parse_value(name, "latest")
    assert str(caught.value).endswith(f"(expected PEP 440, e.g. {example})")


def test_frontend_latest_is_refused_with_a_frontend_example() -> None:
    proc = cli("plan", "--frontend", "latest", cwd=elsewhere(), timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "cudnn-matrix: error: --frontend: invalid version 'latest' (expected PEP 440, e.g. 1.27.0)"
    ]


@pytest.mark.parametrize(
    ("axis", "candidates", "shown"),
    [
        ("cuda", ["12.8", "12.9", "13.0"], ["12.8", "12.9", "13.0"]),
        ("frontend", ["1.9", "1.10"], ["1.9", "1.10"]),
        # commits: a short sha that reads as a number ("12345678e012" is 1.23457e+19)
        ("frontend", ["0" * 40, "12345678e012" + "0" * 28], ["000000000000", "12345678e012"]),
    ],
)
def test_the_bisect_table_prints_candidates_as_declared(
    axis: str, candidates: list[str], shown: list[str]
) -> None:
    result = bisect(candidates, lambda c: "fail" if c == candidates[-1] else "pass")
    rows = [line for line in render(result, axis, None).splitlines() if line.startswith("|")]
    # as text, so left-aligned: "| 13.0 ", not "|   13 "
    assert [row.split("|")[1].rstrip() for row in rows[2:]] == [f" {text}" for text in shown]


def test_the_envs_table_prints_the_cuda_major_as_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Left-aligned like the other pins: "13  " under "cuda", not "  13"."""
    root = tmp_path / "envs" / "aaaa"
    root.mkdir(parents=True)
    manifest = {"pins": {"cuda_major": 13}, "backend": "9.24", "frontend": "1.27"}
    (root / "manifest.json").write_text(json.dumps(manifest))
    (root / ".complete").write_text("done\n")
    assert main(["envs", "--cache-dir", str(tmp_path), "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines[0]
    row = next(line for line in lines if line.startswith("aaaa"))
    for name, declared in (("backend", "9.24"), ("frontend", "1.27"), ("cuda", "13")):
        start = header.index(name)
        assert row[start:].startswith(declared + " "), (name, lines)
