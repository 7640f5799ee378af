"""A tier run's reports: the tier and its left-out cells in the sources, and the known-issue
columns of cells the tier left out as "not run", never "not reproduced" or blank."""

from __future__ import annotations

import json
from pathlib import Path

from packaging.specifiers import SpecifierSet

from validate.judge.known_issues import KnownIssue, Symptom
from validate.model.outcome import Outcome
from validate.model.results import CaseResult
from validate.report import render
from validate.report.ki_table import KIState
from validate.report.model import RunInfo, merge_runs
from validate.report.store import build_report

KI = KnownIssue(
    id="KI-9",
    title="synthetic: the repro crashes on 9.24",
    backend=SpecifierSet(">=9.24,<9.25"),
    frontend=SpecifierSet(""),
    archs=frozenset({"sm100"}),
    cases=("repro*",),
    symptom=Symptom(outcomes=frozenset({Outcome.CRASH})),
)


def _result(cudnn: str, arch: str) -> CaseResult:
    cell = {"cudnn": cudnn, "frontend": "1.27.0", "cuda": "13.0", "driver": "580", "arch": arch}
    return CaseResult(
        case="repro.py", outcome=Outcome.PASS, cell=cell, cell_id=f"{cudnn}-{arch}", run_id="r1"
    )


def _left(cudnn: str, arch: str) -> dict[str, str]:
    return {
        "id": f"{cudnn}-{arch}",
        "cudnn": cudnn,
        "frontend": "1.27.0",
        "cuda": "13.0",
        "driver": "580",
        "arch": arch,
    }


def _meta(*left: dict[str, str]) -> dict[str, object]:
    return {"run_id": "r1", "tier": {"name": "pr", "cells": 1, "left_out": list(left)}}


def test_left_out_cells_are_not_run_in_the_known_issue_table_and_named_in_sources() -> None:
    ran = [_result("9.23.0.1", "sm100")]
    meta = _meta(_left("9.24.0.43", "sm100"), _left("9.23.0.1", "sm90"))
    runs = merge_runs([(RunInfo(run_id="r1", path=Path(), meta=meta), ran)])
    report = build_report(runs, known_issues=[KI])
    (row,) = report.ki_table.rows
    states = {c.column.label: c.state for c in row.cells}
    assert states == {
        "9.23.0.1 · sm100": KIState.NOT_REPRODUCED,  # it ran and passed
        "9.23.0.1 · sm90": KIState.NOT_RUN,
        "9.24.0.43 · sm100": KIState.NOT_RUN,  # inside the range: unknown, not "not reproduced"
    }
    text = render(report, "md")
    assert "tier: pr: 1 cells ran; 2 planned cells left out (not run): 9.24.0.43-sm100, " in text
    assert "· not run: the tier that ran left these cells out" in text
    assert 'class="ki ki-not_run"' in render(report, "html")
    assert "not_run" in [
        s["state"] for s in json.loads(render(report, "json"))["known_issue_states"]
    ]


def test_a_left_out_cell_that_another_merged_run_ran_counts_as_run() -> None:
    first: tuple[RunInfo, list[CaseResult]] = (
        RunInfo(run_id="r1", path=Path("a"), meta=_meta(_left("9.24.0.43", "sm100"))),
        [],
    )
    second = (RunInfo(run_id="r2", path=Path("b")), [_result("9.24.0.43", "sm100")])
    report = build_report(merge_runs([first, second]), known_issues=[KI])
    (row,) = report.ki_table.rows
    assert [c.state for c in row.cells] == [KIState.NOT_REPRODUCED]
    assert "not run: the tier" not in render(report, "md")
