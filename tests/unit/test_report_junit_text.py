"""The JUnit report is written as text (report/junit.py): it must be the text ElementTree writes
for the same elements, escape what XML needs escaped and drop what XML 1.0 cannot carry."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from validate.model.outcome import Outcome
from validate.model.results import CaseResult
from validate.plan.requirements import MISSING_MODULE_PREFIX, NO_GPU_PREFIXES
from validate.report import Report, render, write_report
from validate.report.model import RunInfo, merge_runs
from validate.report.store import build_report

PINS = {"cudnn": "9.24.0.43", "frontend": "1.27.0", "cuda": "13.0", "arch": "sm90"}
NAME = "quote \" apos ' ]]> <&> tab\tnl\n caf\u00e9 \u2715 \U0001f600 end"
#: reasons, tails and notes: what XML 1.0 cannot carry is dropped from them (not from names:
#: pytest writes node ids without control characters)
ODD = "ctl \x00\x07\x1b[31m " + NAME


def _report(flaky: str = "block") -> Report:
    cell: dict[str, Any] = {"cell_id": "c1", "cell": PINS}
    other: dict[str, Any] = {"cell_id": "c2", "cell": {**PINS, "arch": f'sm100<&"{NAME}'}}
    results = [
        CaseResult(case="a.py", outcome=Outcome.PASS, **cell),
        CaseResult(
            case=f"t/x.py::TestA::test_b[{NAME}\r]",
            outcome=Outcome.FAIL,
            reason=ODD,
            tail=ODD * 2,
            **cell,
        ),
        CaseResult(case="t/x.py::test_c", outcome=Outcome.CRASH, reason="", tail="", **cell),
        CaseResult(case="t/x.py::test_d", outcome=Outcome.ERROR, reason=ODD, **other),
        CaseResult(
            case="t/x.py::test_e",
            outcome=Outcome.FAIL,
            reason=ODD,
            tail=ODD,
            attempts=("fail", "pass"),
            **other,
        ),
        CaseResult(
            case="t/x.py::test_f",
            outcome=Outcome.ERROR,
            reason="\x1b",
            attempts=("error", "pass"),
            **other,
        ),
        CaseResult(
            case="t/x.py::test_g",
            outcome=Outcome.SKIP,
            reason=f"{NO_GPU_PREFIXES[0]} {ODD}",
            **cell,
        ),
        CaseResult(
            case="t/x.py::test_h",
            outcome=Outcome.SKIP,
            reason=f"{MISSING_MODULE_PREFIX} {ODD}",
            **other,
        ),
        CaseResult(
            case="t/x.py::test_i", outcome=Outcome.XFAIL, reason=ODD, known_issue="KI-1", **cell
        ),
        CaseResult(case="t/x.py::test_j", outcome=Outcome.XPASS, ki_note=ODD, **cell),
        CaseResult(case="t/x.py::test_k", outcome=Outcome.TIMEOUT, log_path=f"{ODD}.log", **cell),
    ]
    runs = merge_runs([(RunInfo(run_id="r", path=Path()), results)])
    return build_report(runs, flaky=flaky)  # type: ignore[arg-type]


@pytest.mark.parametrize("flaky", ["block", "warn"])
def test_text_is_what_elementtree_writes(flaky: str, tmp_path: Path) -> None:
    text = render(_report(flaky), "junit")
    declaration, comment, body = text.split("\n", 2)
    assert declaration == '<?xml version="1.0" encoding="UTF-8"?>'
    assert comment.startswith("<!-- NOT SIGNED OFF: ")  # the verdict line first
    assert ET.fromstring(f"<x>{comment}</x>").text is None  # a comment, well-formed
    root = ET.fromstring(body)  # well-formed
    assert ET.tostring(root, encoding="unicode") + "\n" == body  # and written as ET writes it
    write_report(_report(flaky), "junit", tmp_path / "r.xml")
    assert (tmp_path / "r.xml").read_text(encoding="utf-8") == text


def test_names_are_escaped_and_control_characters_dropped() -> None:
    text = render(_report(), "junit")
    body = text.split("\n", 2)[2]
    assert "]]>" not in text
    assert "\x1b" not in text
    assert "\x00" not in text
    root = ET.fromstring(body)
    names = {c.get("name"): c for c in root.iter("testcase")}
    odd = names[f"test_b[{NAME}\r]"]  # the node id's name, kept whole (attributes escaped)
    assert odd.get("classname", "").endswith(".t.x.TestA")
    failure = odd.find("failure")
    assert failure is not None
    clean = "ctl [31m " + NAME
    assert failure.get("message") == clean
    assert failure.text == clean * 2
    assert "caf\u00e9 \u2715 \U0001f600" in text  # written as is, not as references
    assert root.get("tests") == "11"
    assert {s.get("name", "").split(" / ")[-1] for s in root.iter("testsuite")} >= {"arch sm90"}


def test_no_results_is_an_empty_testsuites() -> None:
    report = build_report(merge_runs([(RunInfo(run_id="r", path=Path()), [])]))
    text = render(report, "junit")
    assert text.endswith(
        '<testsuites name="cudnn-matrix" tests="0" failures="0" '
        'errors="0" skipped="0" time="0.000" />\n'
    )
