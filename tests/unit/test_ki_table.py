"""The known-issues section: every state from synthetic results, exact Markdown, every format."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from validate.judge.known_issues import KnownIssue, Symptom
from validate.model.outcome import Outcome
from validate.model.results import CaseResult
from validate.report import Report, render
from validate.report.ki_table import KIState, ki_bands
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
    fixed_in="9.25.0",
)


def _result(
    case: str, outcome: Outcome, cudnn: str, arch: str, *, reason: str = "", known_issue: str = ""
) -> CaseResult:
    cell = {"cudnn": cudnn, "frontend": "1.27.0", "cuda": "13.0", "driver": "580", "arch": arch}
    return CaseResult(
        case=case,
        outcome=outcome,
        cell=cell,
        cell_id=f"{cudnn}-{arch}",
        run_id="r1",
        reason=reason,
        known_issue=known_issue or None,
    )


#: One column per state: not covered, outside, affected, not reproduced, fixed.
RESULTS = [
    _result("other.py", Outcome.PASS, "9.22.0.52", "sm100"),
    _result("repro.py", Outcome.SKIP, "9.22.0.52", "sm100"),
    _result("repro.py", Outcome.CRASH, "9.24.0.43", "sm90", reason="Kernel died"),
    _result("repro.py", Outcome.XFAIL, "9.24.0.43", "sm100", known_issue="KI-9"),
    _result("repro.py", Outcome.XPASS, "9.24.1.1", "sm100", known_issue="KI-9"),
    _result("repro.py", Outcome.PASS, "9.25.1.1", "sm100"),
]

EXPECTED_MD = """\
## Known issues

Rows: the known-issue database; columns: the backends seen (fe 1.27.0 in every column).

| known issue   | declared                                     | 9.22.0.52 · sm100   | 9.24.0.43 · sm90   | 9.24.0.43 · sm100   | 9.24.1.1 · sm100   | 9.25.1.1 · sm100   |
|---------------|----------------------------------------------|---------------------|--------------------|---------------------|--------------------|--------------------|
| KI-9          | cuDNN >=9.24,<9.25 · sm100 · fixed in 9.25.0 | —                   | ✕ outside range    | ⚠ affected          | ○ not reproduced   | ✓ fixed            |

- KI-9: synthetic: the repro crashes on 9.24

Reproduced outside the declared range:

- KI-9 at 9.24.0.43 · sm90: arch sm90 not in sm100 (repro.py)

Legend: ⚠ affected: reproduced inside the declared range · ✕ outside range: reproduced outside \
the declared range, frontends or archs (the database is wrong there: `cudnn-matrix known-issues \
suggest`) · ✓ fixed: passed at or after fixed_in · ○ not reproduced: a case the issue names ran \
and passed · — not covered: no case the issue names ran there
"""


def _report(results: list[CaseResult] = RESULTS) -> Report:
    runs = merge_runs([(RunInfo(run_id="r1", path=Path()), results)])
    return build_report(runs, known_issues=[KI])


def test_markdown_section_exact_text() -> None:
    text = render(_report(), "md")
    section = text.split("## Known issues", 1)[1].split("## Sign-off", 1)[0]
    assert "## Known issues" + section == EXPECTED_MD + "\n"


def test_main_table_comes_first_and_is_unchanged_by_the_section() -> None:
    text = render(_report(), "md")
    assert text.index("| cuDNN ") < text.index("## Known issues") < text.index("## Sign-off")


@pytest.mark.parametrize(
    ("results", "state"),
    [
        ([_result("repro.py", Outcome.ERROR, "9.24.0.43", "sm100")], KIState.NOT_COVERED),
        # a crash in range with another symptom still counts (the table's "affected")
        ([_result("repro.py", Outcome.FAIL, "9.24.0.43", "sm100")], KIState.AFFECTED),
        # outside the range a failure counts only with the issue's symptom
        ([_result("repro.py", Outcome.FAIL, "9.24.0.43", "sm90")], KIState.NOT_COVERED),
        ([_result("repro.py", Outcome.CRASH, "9.26.0.1", "sm100")], KIState.OUTSIDE),
        ([_result("repro.py", Outcome.PASS, "9.19.0.56", "sm100")], KIState.NOT_REPRODUCED),
        ([_result("repro.py", Outcome.PASS, "9.25.1.1", "sm90")], KIState.NOT_REPRODUCED),
        (
            [
                _result("repro.py", Outcome.PASS, "9.24.0.43", "sm100"),
                _result("repro2.py", Outcome.XFAIL, "9.24.0.43", "sm100", known_issue="KI-9"),
            ],
            KIState.AFFECTED,
        ),
    ],
)
def test_cell_state(results: list[CaseResult], state: KIState) -> None:
    (row,) = _report(results).ki_table.rows
    assert [c.state for c in row.cells] == [state]


def test_json_carries_states_and_evidence() -> None:
    doc = json.loads(render(_report(), "json"))
    (ki,) = doc["known_issues"]
    assert ki["declared"] == {
        "backend": ">=9.24,<9.25",
        "frontend": "",
        "archs": ["sm100"],
        "fixed_in": "9.25.0",
    }
    cells = [(c["cudnn"], c["arch"], c["state"], c["evidence"]) for c in ki["cells"]]
    assert cells == [
        ("9.22.0.52", "sm100", "not_covered", []),
        ("9.24.0.43", "sm90", "outside_range", ["9.24.0.43-sm90::repro.py"]),
        ("9.24.0.43", "sm100", "affected", ["9.24.0.43-sm100::repro.py"]),
        ("9.24.1.1", "sm100", "not_reproduced", ["9.24.1.1-sm100::repro.py"]),
        ("9.25.1.1", "sm100", "fixed", ["9.25.1.1-sm100::repro.py"]),
    ]
    assert all(c["frontend"] == "1.27.0" for c in ki["cells"])
    # "not run" is listed only where a tier left cells out (tests/unit/test_tier_report.py)
    states = [str(s) for s in KIState if s is not KIState.NOT_RUN]
    assert [s["state"] for s in doc["known_issue_states"]] == states


def test_junit_properties_per_suite() -> None:
    root = ET.fromstring(render(_report(), "junit"))
    props = {
        p.get("name"): p.get("value")
        for suite in root.findall("./testsuite")
        for p in suite.findall("./properties/property")
    }
    assert props == {
        "flaky_policy": "block",  # every suite carries the sign-off's flaky policy first
        "ki.KI-9.9_22_0_52.fe-1_27_0.sm100": "not_covered",
        "ki.KI-9.9_24_0_43.fe-1_27_0.sm90": "outside_range",
        "ki.KI-9.9_24_0_43.fe-1_27_0.sm100": "affected",
        "ki.KI-9.9_24_1_1.fe-1_27_0.sm100": "not_reproduced",
        "ki.KI-9.9_25_1_1.fe-1_27_0.sm100": "fixed",
    }
    for suite in root.findall("./testsuite"):
        assert suite[0].tag == "properties"  # the schema wants it before the testcases


def test_rst_section_is_a_grid() -> None:
    text = render(_report(), "rst")
    section = text.split("Known issues\n------------\n", 1)[1].split("Sign-off\n", 1)[0]
    assert "=============  " in section
    assert "KI-9           cuDNN >=9.24,<9.25 · sm100 · fixed in 9.25.0" in section
    assert "✕ outside range" in section


def test_html_section_colours_each_state() -> None:
    page = render(_report(), "html")
    section = page.split("<h2>Known issues</h2>", 1)[1].split("<h2>Sign-off</h2>", 1)[0]
    for state in KIState:
        if state is not KIState.NOT_RUN:  # tests/unit/test_tier_report.py
            assert f'class="ki ki-{state}"' in section
    assert "9.24.0.43-sm90::repro.py" in section  # evidence in the tooltip


def test_no_database_says_so() -> None:
    runs = merge_runs([(RunInfo(run_id="r1", path=Path()), RESULTS)])
    text = render(build_report(runs), "md")
    assert "## Known issues\n\nNo known-issue database was given.\n" in text


def test_a_database_given_at_report_time_judges_the_verdict_too() -> None:
    """A crash the run stored as a regression, inside the range of an issue the report's database
    declares: the table says affected and the sign-off counts it as xfail, not as a regression."""
    crash = _result("repro.py", Outcome.CRASH, "9.24.0.43", "sm100", reason="Kernel died")
    runs = merge_runs([(RunInfo(run_id="r1", path=Path()), [crash])])
    without = build_report(runs)
    assert without.verdict.counts.get(Outcome.CRASH) == 1
    assert not without.verdict.signed_off
    judged = build_report(runs, known_issues=[KI])
    assert judged.verdict.counts.get(Outcome.XFAIL) == 1
    assert judged.verdict.signed_off


def _band(results: list[CaseResult]) -> str:
    (band,) = ki_bands(_report(results).ki_table)
    return band.text


def test_band_says_where_it_reproduced_and_where_it_was_fixed() -> None:
    """One line per issue from the evidence, not from the declaration: the backends it reproduced
    on (a span of consecutive backends seen), the frontends and archs, the first newer backend
    where its cases passed, and where no newer result backs that fix."""
    assert _band(RESULTS) == (
        "KI-9: affected 9.24.0.43 with frontend 1.27.0 on sm90, sm100; fixed in 9.24.1.1 "
        "(no newer result for fe 1.27.0 on sm90); outside the declared range "
        "(cuDNN >=9.24,<9.25 · sm100 · fixed in 9.25.0)"
    )
    crashes = [_result("repro.py", Outcome.CRASH, v, "sm100") for v in ("9.24.0.43", "9.24.1.1")]
    inside = [*crashes, _result("repro.py", Outcome.PASS, "9.25.1.1", "sm100")]
    assert (
        _band(inside)
        == "KI-9: affected 9.24.0.43\N{EN DASH}9.24.1.1 with frontend 1.27.0 on sm100; fixed in 9.25.1.1"
    )


def test_band_never_claims_more_than_the_evidence() -> None:
    # a passing backend between two that reproduce: a list, not a span
    gap = [
        _result("repro.py", Outcome.CRASH, "9.24.0.43", "sm100"),
        _result("repro.py", Outcome.PASS, "9.24.1.1", "sm100"),
        _result("repro.py", Outcome.CRASH, "9.24.2.1", "sm100"),
    ]
    assert "affected 9.24.0.43, 9.24.2.1 with" in _band(gap)
    # two archs named, but one of the backends passed on one of them
    mixed = [
        _result("repro.py", Outcome.CRASH, "9.24.0.43", "sm100"),
        _result("repro.py", Outcome.CRASH, "9.24.1.1", "sm120"),
        _result("repro.py", Outcome.PASS, "9.24.1.1", "sm100"),
    ]
    assert "on sm100, sm120 (not in every combination: see the table)" in _band(mixed)
    newest = [_result("repro.py", Outcome.CRASH, "9.24.0.43", "sm100")]
    assert _band(newest).endswith("not fixed in any backend run (9.24.0.43 is the newest)")
    later_skip = [*newest, _result("repro.py", Outcome.SKIP, "9.25.1.1", "sm100")]
    assert _band(later_skip).endswith("no backend after 9.24.0.43 ran its cases")


@pytest.mark.parametrize(
    ("results", "words"),
    [
        (
            [_result("repro.py", Outcome.SKIP, "9.24.0.43", "sm100")],
            "not covered: no case it names",
        ),
        (
            [_result("repro.py", Outcome.PASS, "9.19.0.56", "sm100")],
            "not reproduced: its cases passed in 1 of 1 columns",
        ),
        (
            [_result("repro.py", Outcome.PASS, "9.25.1.1", "sm100")],
            "not reproduced; its cases passed from 9.25.1.1 on (fixed in 9.25.0)",
        ),
    ],
)
def test_band_where_it_did_not_reproduce(results: list[CaseResult], words: str) -> None:
    assert _band(results).startswith(f"KI-9: {words}")
