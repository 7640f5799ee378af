"""JUnit (parsed with xml.etree), JSON schema v1, RST and the single-file HTML, from stored results."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from validate.model.outcome import Outcome
from validate.model.results import CaseResult
from validate.report import FORMATS, Report, render
from validate.report.json_ import REPORT_SCHEMA
from validate.report.model import RunInfo, StoredResult, merge_runs
from validate.report.store import build_report, load_known_issue_db, load_runs

EXAMPLE = Path(__file__).parents[1] / "resources" / "runs" / "example"


def _example(link_base: Path | None = None) -> Report:
    runs = load_runs([EXAMPLE])
    return build_report(
        runs, known_issues=load_known_issue_db(None, runs.runs), link_base=link_base
    )


def test_junit_counts_parsed() -> None:
    root = ET.fromstring(render(_example(), "junit"))
    assert root.tag == "testsuites"
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == 48 == int(root.get("tests", "0"))
    assert len(root.findall(".//failure")) == 1 == int(root.get("failures", "0"))
    assert len(root.findall(".//error")) == 1 == int(root.get("errors", "0"))
    # 9 skips + 2 xfails are reported as skipped
    assert len(root.findall(".//skipped")) == 11 == int(root.get("skipped", "0"))
    assert len(root.findall("./testsuite")) == 16  # one suite per cell
    per_suite = sum(int(s.get("tests", "0")) for s in root.findall("./testsuite"))
    assert per_suite == 48


def test_junit_failure_carries_log_tail_and_cell_classname() -> None:
    root = ET.fromstring(render(_example(), "junit"))
    failed = [c for c in root.iter("testcase") if c.find("failure") is not None]
    assert len(failed) == 1
    case = failed[0]
    assert case.get("classname") == "cudnn-9_24_0_43.fe-1_27_0.cuda-13_0.drv-580_95_05.sm90"
    failure = case.find("failure")
    assert failure is not None
    assert failure.get("type") == "crash"
    out = case.findtext("system-out") or ""
    assert "DeadKernelError: Kernel died" in out
    assert "KI-1 reproduces outside its declared range" in out


def test_junit_strips_control_characters() -> None:
    result = CaseResult(
        case="ansi.py", outcome=Outcome.FAIL, reason="bad\x1b[31m red", tail="\x00\x07x"
    )
    runs = merge_runs([(RunInfo(run_id="r", path=Path()), [result])])
    root = ET.fromstring(render(build_report(runs), "junit"))
    assert root.get("failures") == "1"


def test_json_schema_version_and_shape() -> None:
    doc = json.loads(render(_example(), "json"))
    assert doc["schema"] == REPORT_SCHEMA == "cudnn-matrix/report/v2"
    assert next(iter(doc)) == "verdict"
    assert doc["pivot"] == {"rows": ["cudnn"], "cols": ["frontend", "arch"]}
    assert [r["key"] for r in doc["table"]["rows"]] == [
        ["9.8.0.87"],
        ["9.19.0.56"],
        ["9.24.0.43"],
        ["9.25.1.1"],
    ]
    assert len(doc["results"]) == 48
    assert doc["verdict"]["signed_off"] is False
    assert doc["verdict"]["exit_code"] == 1
    assert doc["verdict"]["counts"] == {"crash": 1, "error": 1, "pass": 35, "skip": 9, "xfail": 2}
    assert doc["known_issues"][0]["id"] == "KI-1"
    statuses = {c["status"] for row in doc["table"]["rows"] for c in row["cells"]}
    assert statuses == {"pass", "regression", "known", "error"}
    keys = {r["key"] for r in doc["results"]}
    assert all(
        k in keys for row in doc["table"]["rows"] for c in row["cells"] for k in c["results"]
    )


def test_rst_has_grid_and_footnotes() -> None:
    text = render(_example(), "rst")
    assert "========= " in text
    assert "- [4] skip: graph not supported" in text


def test_html_is_self_contained(tmp_path: Path) -> None:
    page = render(_example(link_base=tmp_path), "html")
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)
    assert '<link rel="stylesheet"' not in page
    assert page.count("<script") == 2  # the JSON data and the inline script
    assert 'class="cell st-regression"' in page
    data = page.split('id="report-data">', 1)[1].split("</script>", 1)[0]
    parsed = json.loads(data)
    assert len(parsed["results"]) == 48
    crash = next(r for r in parsed["results"] if r["outcome"] == "crash")
    hrefs = {log["name"]: log["href"] for log in crash["logs"]}
    assert set(hrefs) == {"output", "frontend", "backend"}
    assert (tmp_path / hrefs["backend"]).resolve().is_file()  # relative link that resolves


def test_html_escapes_script_in_results() -> None:
    evil = CaseResult(
        case="x.py", outcome=Outcome.FAIL, reason="</script><script>alert(1)</script>"
    )
    runs = merge_runs([(RunInfo(run_id="r", path=Path()), [evil])])
    page = render(build_report(runs), "html")
    assert page.count("<script") == 2


def test_html_footnotes_are_whole() -> None:
    """The md table cuts a footnote's reason at 110 characters ("…"); the page shows it whole."""
    reason = "graph not supported: " + "a very long backend message, " * 8 + "the end"
    skip = CaseResult(case="x.py", outcome=Outcome.SKIP, reason=reason)
    runs = merge_runs([(RunInfo(run_id="r", path=Path()), [skip])])
    report = build_report(runs)
    assert "…" in render(report, "md").split("- [1] skip: ", 1)[1].splitlines()[0]
    notes = render(report, "html").split('<ul class="notes">', 1)[1].split("</ul>", 1)[0]
    assert f"[1] skip: {reason} (1 result)" in notes
    assert "…" not in notes


def test_html_environments_are_stored_once_and_read_back_whole() -> None:
    """Each result's environment is a list of interned parts (the results of a cell share most of
    theirs); put back together as the page's script does, every one equals the stored one."""
    report = _example()
    page = render(report, "html")
    data = json.loads(page.split('id="report-data">', 1)[1].split("</script>", 1)[0])
    parts = data["env_parts"]
    for item, result in zip(report.runs.items, data["results"], strict=True):
        env: dict[str, object] = {}
        for n in result["env"]:
            path, value = parts[n]
            at = env
            for key in path[:-1]:
                at = at.setdefault(key, {})  # type: ignore[assignment]
            at[path[-1]] = value
        assert env == json.loads(json.dumps(dict(item.result.env), default=str))
    assert any(r["env"] for r in data["results"])
    assert len(parts) < sum(len(r["env"]) for r in data["results"])  # shared parts held once


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_renders_a_merged_pair(fmt: str) -> None:
    base = load_runs([EXAMPLE])
    later = [
        s.result.with_(outcome=Outcome.PASS, reason="", run_id="later")
        for s in base.items
        if s.result.outcome in (Outcome.CRASH, Outcome.ERROR)
    ]
    runs = merge_runs([(base.runs[0], base.results), (RunInfo(run_id="later", path=Path()), later)])
    report = build_report(runs)
    assert report.verdict.exit_code == 0
    assert render(report, fmt)  # type: ignore[arg-type]


def test_stored_result_resolves_moved_run_folder(tmp_path: Path) -> None:
    rel = "cases/abc/x.py/output.log"
    (tmp_path / rel).parent.mkdir(parents=True)
    (tmp_path / rel).write_text("hi")
    item = StoredResult(
        result=CaseResult(case="x.py", outcome=Outcome.PASS),
        run=RunInfo(run_id="r", path=tmp_path),
    )
    assert item.resolve(rel) == tmp_path / rel
    assert item.resolve(f"/elsewhere/runs/r/{rel}") == tmp_path / rel
    assert item.resolve("/nowhere/at/all.log") is None
