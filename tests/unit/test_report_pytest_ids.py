"""Pytest test ids in reports (issue #27): the case matrix summarised per test file, only the ids
that neither passed nor skipped listed with their evidence, JUnit named as pytest's junitxml
names node ids, known issues that name test ids by glob, and bisect's probe of one test id."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

import pytest

from validate.cli.bisect import _observation
from validate.judge.known_issues import apply_known_issues, case_matches, load_known_issues
from validate.model.outcome import Outcome
from validate.model.results import CaseResult, ResultStore, load_results
from validate.report import render
from validate.report.junit import node_names
from validate.report.store import build_report, load_runs

if TYPE_CHECKING:
    from pathlib import Path


def _cell(cudnn: str) -> dict[str, str]:
    return {"cudnn": cudnn, "frontend": "1.27.0", "cuda": "13.0", "driver": "580", "arch": "sm90"}


def _result(case: str, outcome: str, cudnn: str, **kw: object) -> CaseResult:
    return CaseResult(
        case=case,
        outcome=Outcome(outcome),
        cell=_cell(cudnn),
        cell_id=f"c{cudnn.replace('.', '')}",
        **kw,  # type: ignore[arg-type]
    )


MHA = "test/python/test_mhas.py"
CONV = "test/python/test_conv.py"
# (case, outcome at 9.24, outcome at 9.25); a failing one has its evidence folder
SUITE = [
    (f"{MHA}::test_sdpa[fp16-64]", "pass", "pass"),
    (f"{MHA}::test_sdpa[fp16-128]", "fail", "pass"),
    (f"{MHA}::test_sdpa[bf16-a/b]", "skip", "skip"),  # a "/" inside the parameters
    (f"{MHA}::TestCache::test_hit", "pass", "crash"),
    (f"{CONV}::test_conv[1]", "pass", "pass"),
    (f"{CONV}::test_conv[2]", "skip", "error"),
    ("26_layernorm.ipynb", "pass", "fail"),  # a notebook keeps its own row
]


def _run(tmp: Path) -> Path:
    run = tmp / "run"
    store = ResultStore(run / "results.jsonl")
    for case, *outcomes in SUITE:
        for cudnn, outcome in zip(("9.24.0.43", "9.25.1.1"), outcomes, strict=True):
            kw: dict[str, object] = {"reason": "why" if outcome != "pass" else ""}
            if outcome not in ("pass", "skip"):
                folder = run / "cases" / f"c{cudnn.replace('.', '')}" / case.replace("/", "_")
                folder.mkdir(parents=True)
                (folder / "output.log").write_text("E   boom\n", encoding="utf-8")
                kw["log_path"] = str(folder / "output.log")
            store.append(_result(case, outcome, cudnn, **kw))
    return run


def test_markdown_summarises_test_ids_per_file_and_lists_only_those_that_did_not_pass(
    tmp_path: Path,
) -> None:
    run = _run(tmp_path)
    report = build_report(load_runs([run]), link_base=tmp_path)
    text = render(report, "md")
    cases = text.split("## Cases", 1)[1].split("## Known issues", 1)[0]
    lines = cases.splitlines()
    # the notebook: a row of its own, as before
    assert any(line.startswith("| 26_layernorm.ipynb ") for line in lines)
    # the tests: one row per file, counts per cell
    conv = next(line for line in lines if line.startswith(f"| {CONV} "))
    mha = next(line for line in lines if line.startswith(f"| {MHA} "))
    assert [c.strip() for c in conv.strip("|").split("|")] == [CONV, "✓ 1 · skip 1", "! 1 · ✓ 1"]
    assert [c.strip() for c in mha.strip("|").split("|")] == [
        MHA,
        "✕ 1 · ✓ 2 · skip 1",
        "✕ 1 · ✓ 2 · skip 1",
    ]
    assert not any("::" in line for line in lines if line.startswith("|"))  # no test id rows
    listed = [line for line in lines if line.startswith("- ") and "::" in line]
    assert len(listed) == 3  # fail at 9.24, crash and error at 9.25; no pass, no skip
    fail = next(line for line in listed if "test_sdpa[fp16-128]" in line)
    assert fail.startswith(f"- ✕ fail: `{MHA}::test_sdpa[fp16-128]` at 9.24.0.43 (why): [")
    assert "](run/cases/c924043/test_python_test_mhas.py%3A%3Atest_sdpa%5Bfp16-128%5D)" in fail
    assert not any("fp16-64" in line or "bf16" in line for line in listed)


def test_html_and_json_carry_the_file_summary_and_leave_out_passed_test_ids(
    tmp_path: Path,
) -> None:
    run = _run(tmp_path)
    report = build_report(load_runs([run]), link_base=tmp_path)
    page = render(report, "html")
    assert f"<th>{CONV}</th>" in page
    assert "! 1 · ✓ 1" in page
    blob = page.split('id="report-data">', 1)[1].split("</script>", 1)[0]
    data = json.loads(blob)
    carried = {r["case"] for r in data["results"]}
    assert f"{MHA}::test_sdpa[fp16-64]" not in carried  # passed everywhere: counted only
    assert f"{MHA}::test_sdpa[fp16-128]" in carried  # failed at 9.24
    assert "26_layernorm.ipynb" in carried  # a notebook keeps its drill-down, pass or not
    assert sum(data["omitted"].values()) == 9  # 6 passes and 3 skips of test ids
    doc = json.loads(render(report, "json"))
    files = {row["file"]: row["cells"] for row in doc["case_matrix"]["files"]}
    assert files[CONV][1]["counts"] == {"error": 1, "pass": 1}
    assert [row["case"] for row in doc["case_matrix"]["rows"]] == ["26_layernorm.ipynb"]
    assert len(doc["results"]) == 14  # the data lists every result


@pytest.mark.parametrize(
    ("case", "names"),
    [
        (f"{MHA}::test_sdpa[fp16-64]", ("test.python.test_mhas", "test_sdpa[fp16-64]")),
        (f"{MHA}::TestCache::test_hit", ("test.python.test_mhas.TestCache", "test_hit")),
        ("test_x.py::test_y[a::b]", ("test_x.test_y[a", "b]")),  # as pytest splits it too
        ("26_layernorm.ipynb", None),
    ],
)
def test_node_names_are_pytest_junitxml_names(case: str, names: tuple[str, str] | None) -> None:
    assert node_names(case) == names


def test_junit_is_valid_xml_and_names_test_ids_as_pytest_does(tmp_path: Path) -> None:
    report = build_report(load_runs([_run(tmp_path)]))
    root = ET.fromstring(render(report, "junit"))
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == 14
    sdpa = [c for c in cases if c.get("name") == "test_sdpa[fp16-128]"]
    assert len(sdpa) == 2  # one per cell, told apart by the cell's part of the classname
    assert {c.get("classname") for c in sdpa} == {
        "cudnn-9_24_0_43.fe-1_27_0.cuda-13_0.drv-580.sm90.test.python.test_mhas",
        "cudnn-9_25_1_1.fe-1_27_0.cuda-13_0.drv-580.sm90.test.python.test_mhas",
    }
    notebook = next(c for c in cases if c.get("name") == "26_layernorm.ipynb")
    assert notebook.get("classname") == "cudnn-9_24_0_43.fe-1_27_0.cuda-13_0.drv-580.sm90"
    assert root.get("tests") == "14"
    assert root.get("failures") == "3"
    assert root.get("errors") == "1"


@pytest.mark.parametrize(
    ("case", "pattern", "expected"),
    [
        (f"{MHA}::test_sdpa[fp16-64]", f"{MHA}::test_sdpa[fp16-*]", True),
        (f"{MHA}::test_sdpa[fp16-64]", "test_mhas.py::test_sdpa[*]", True),
        (f"{MHA}::test_sdpa[fp16-64]", "test_mhas.py::*", True),
        (f"{MHA}::test_sdpa[bf16-a/b]", "test_mhas.py::test_sdpa[bf16-*]", True),  # "/" in params
        (f"{MHA}::test_sdpa[fp16-64]", "test_conv.py::*", False),
        (f"{MHA}::test_sdpa[fp16-64]", "test_mhas.py::test_sdpa[bf16-*]", False),
    ],
)
def test_a_known_issue_glob_names_test_ids(case: str, pattern: str, expected: bool) -> None:
    assert case_matches(case, pattern) is expected


def test_a_known_issue_on_test_ids_turns_their_failure_into_xfail(tmp_path: Path) -> None:
    db = tmp_path / "ki.toml"
    db.write_text(
        '[[issue]]\nid = "KI-9"\ntitle = "sdpa fp16 mismatch"\nbackend = ">=9.24,<9.25"\n'
        'cases = ["test_mhas.py::test_sdpa[fp16-*]"]\nsymptom = { outcomes = ["fail"] }\n',
        encoding="utf-8",
    )
    issues = load_known_issues(db)
    results = [
        _result(f"{MHA}::test_sdpa[fp16-128]", "fail", "9.24.0.43"),
        _result(f"{MHA}::test_sdpa[bf16-a/b]", "fail", "9.24.0.43"),
        _result(f"{MHA}::test_sdpa[fp16-128]", "fail", "9.25.1.1"),
    ]
    judged = apply_known_issues(results, issues)
    assert [(r.outcome, r.known_issue) for r in judged] == [
        (Outcome.XFAIL, "KI-9"),
        (Outcome.FAIL, None),  # not named
        (Outcome.FAIL, None),  # named, outside the range
    ]
    assert "KI-9 reproduces outside its declared range" in judged[2].ki_note


def test_a_bisect_probe_of_a_test_id_reads_that_test_among_its_suites(tmp_path: Path) -> None:
    run = tmp_path / "probe"
    store = ResultStore(run / "results.jsonl")
    store.append(_result(f"{MHA}::test_sdpa[fp16-64]", "pass", "9.24.0.43"))
    store.append(_result(f"{MHA}::test_sdpa[fp16-128]", "fail", "9.24.0.43", reason="mismatch"))
    latest = load_results([run])
    seen = _observation(latest, run, f"{MHA}::test_sdpa[fp16-128]")
    assert (seen.outcome, seen.reason) == ("fail", "mismatch")
    assert (
        _observation(latest, run).outcome.count("=") == 2
    )  # no case named: every outcome, as before


@pytest.mark.parametrize(
    ("cases", "heading", "html_heading", "column"),
    [
        (
            [f"{MHA}::test_sdpa[fp16-64]"],
            "Pytest tests, summarised per test file; columns: cells",
            "<h3>Pytest tests per test file</h3>",
            "test file",
        ),
        (
            ["samples/cpp/sdpa/fp16_cached.cpp::Cached sdpa", "test/cpp/a.cu::kernel"],
            "C++ test cases, summarised per source file; columns: cells",
            "<h3>C++ test cases per source file</h3>",
            "source file",
        ),
        (
            [f"{MHA}::test_sdpa[fp16-64]", "samples/cpp/sdpa/fp16_cached.cpp::Cached sdpa"],
            "Pytest tests and C++ test cases, summarised per file; columns: cells",
            "<h3>Pytest tests and C++ test cases per file</h3>",
            "file",
        ),
    ],
)
def test_the_per_file_summary_is_headed_by_the_kinds_it_holds(
    tmp_path: Path, cases: list[str], heading: str, html_heading: str, column: str
) -> None:
    """Pytest ids alone keep the heading the committed compat.md has; C++ TEST_CASEs (a source
    file of the C++ kind) are named as such, and a mix names both."""
    run = tmp_path / "run"
    store = ResultStore(run / "results.jsonl")
    for case in cases:
        store.append(_result(case, "pass", "9.24.0.43"))
    report = build_report(load_runs([run]), link_base=tmp_path)
    for fmt in ("md", "rst"):
        text = render(report, fmt)
        assert heading in text, text
        assert text.count("summarised per") == 1
    md = render(report, "md")
    header = next(ln for ln in md.splitlines() if ln.startswith(f"| {column} "))
    assert header.split("|")[1].strip() == column
    assert html_heading in render(report, "html")
