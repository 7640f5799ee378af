"""The outcome policy table: complete for every Outcome, and the one source of JUnit and table output."""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from validate._compat import StrEnum
from validate.execute.runner import FAILING
from validate.model.outcome import (
    BAD_OUTCOMES,
    POLICY,
    Outcome,
    PolicyError,
    check_policy,
    policy,
)
from validate.model.results import CaseResult
from validate.report import render
from validate.report.model import RunInfo, merge_runs
from validate.report.store import build_report
from validate.report.table import Pivot, build_table

CELL = {"cudnn": "9.24.0.43", "frontend": "1.27.0", "cuda": "13.0", "driver": "580", "arch": "sm90"}


def _result(outcome: Outcome, **cell: str) -> CaseResult:
    ki = "KI-1" if outcome in (Outcome.XFAIL, Outcome.XPASS) else None
    return CaseResult(
        case=f"{outcome}.py",
        outcome=outcome,
        reason=f"why {outcome}",
        cell={**CELL, **cell},
        known_issue=ki,
    )


def test_real_table_is_complete() -> None:
    check_policy(Outcome, POLICY)
    assert set(POLICY) == set(Outcome)


def test_a_member_without_a_row_is_named() -> None:
    members = {**{o.name: o.value for o in Outcome}, "FLAKY": "flaky"}
    grown: type[StrEnum] = StrEnum("Grown", members)  # type: ignore[call-overload]  # functional API
    table = {grown(o.value): row for o, row in POLICY.items()}
    with pytest.raises(PolicyError, match=r"^Grown policy: FLAKY \('flaky'\) has no policy row$"):
        check_policy(grown, table)
    flaky = dataclasses.replace(POLICY[Outcome.FAIL], rank=len(POLICY))
    check_policy(grown, {**table, grown("flaky"): flaky})


def test_a_row_for_no_member_and_broken_rules_are_all_named() -> None:
    class Small(StrEnum):
        PASS = "pass"
        FAIL = "fail"

    table = {
        Small.PASS: POLICY[Outcome.PASS],
        Small.FAIL: dataclasses.replace(POLICY[Outcome.FAIL], blocking=False, rank=7),
    }
    with pytest.raises(PolicyError) as caught:
        check_policy(Small, {**table, Outcome.CRASH: POLICY[Outcome.CRASH]})
    message = str(caught.value)
    assert "'crash' is not a member of Small" in message
    assert "fail: blocking must equal bad or infra" in message
    assert "rank 7 is shared by pass, fail" in message


#: Today's JUnit mapping (GitLab and Jenkins read it): must not drift. A new outcome needs no entry.
JUNIT = {
    Outcome.PASS: None,
    Outcome.FAIL: "failure",
    Outcome.CRASH: "failure",
    Outcome.TIMEOUT: "failure",
    Outcome.SKIP: "skipped",
    Outcome.ERROR: "error",
    Outcome.XFAIL: "skipped",
    Outcome.XPASS: None,
}


def test_derived_sets_keep_todays_members() -> None:
    today = set(JUNIT)
    assert {Outcome.FAIL, Outcome.CRASH, Outcome.TIMEOUT} == BAD_OUTCOMES & today
    assert {Outcome.FAIL, Outcome.CRASH, Outcome.TIMEOUT, Outcome.ERROR} == FAILING & today
    assert {o for o in Outcome if policy(o).blocking} == FAILING
    assert {o for o in Outcome if policy(o).bad} == BAD_OUTCOMES
    assert {o for o in today if policy(o).rerun} == FAILING & today
    assert {o for o in today if policy(o).good} == {Outcome.PASS, Outcome.XPASS}


def test_junit_element_of_every_outcome_is_its_policy() -> None:
    runs = merge_runs([(RunInfo(run_id="r", path=Path()), [_result(o) for o in Outcome])])
    root = ET.fromstring(render(build_report(runs), "junit"))
    got: dict[str, str | None] = {}
    for case in root.iter("testcase"):
        children = [c.tag for c in case if c.tag != "system-out"]
        assert len(children) <= 1, children
        got[case.get("name", "").removesuffix(".py")] = children[0] if children else None
    assert got == {str(o): policy(o).junit for o in Outcome}
    assert {o: got[str(o)] for o in JUNIT} == JUNIT
    counts = {key: int(root.get(key, "-1")) for key in ("tests", "failures", "errors", "skipped")}
    elements = [policy(o).junit for o in Outcome]
    assert counts == {
        "tests": len(Outcome),
        "failures": elements.count("failure"),
        "errors": elements.count("error"),
        "skipped": elements.count("skipped"),
    }
    xfail = root.find("./testsuite/testcase[@name='xfail.py']/skipped")
    assert xfail is not None
    assert xfail.attrib == {"type": "xfail", "message": "xfail KI-1: why xfail"}


#: Today's table text of a cell holding one result of that outcome (a new outcome needs no entry).
CELL_TEXT = {
    Outcome.PASS: "✓ 1",
    Outcome.FAIL: "✕ 1/1",
    Outcome.CRASH: "✕ 1/1",
    Outcome.TIMEOUT: "✕ 1/1",
    Outcome.SKIP: "1 skip [1]",
    Outcome.ERROR: "! 1 error [1]",
    Outcome.XFAIL: "⚠ affected (KI-1)",
    Outcome.XPASS: "? 1 xpass",
}


@pytest.mark.parametrize("outcome", list(Outcome))
def test_table_symbol_and_status_come_from_the_policy(outcome: Outcome) -> None:
    runs = merge_runs([(RunInfo(run_id="r", path=Path()), [_result(outcome)])])
    table = build_table(runs.items, Pivot())
    (row,) = table.row_keys
    (col,) = table.col_keys
    cell = table.cell(row, col)
    rule = policy(outcome)
    assert cell.text  # every status shows in the cell
    assert cell.text.startswith(rule.symbol)
    assert cell.status == rule.status
    assert cell.text == CELL_TEXT.get(outcome, cell.text)


def test_one_cell_with_todays_outcomes() -> None:
    results = [_result(o) for o in CELL_TEXT]
    runs = merge_runs([(RunInfo(run_id="r", path=Path()), results)])
    table = build_table(runs.items, Pivot())
    (text,) = (c.text for c in table.cells.values())
    assert text == "✕ 3/8 · ! 1 error [1] · ⚠ affected (KI-1) · ? 1 xpass · 1 skip [2]"
