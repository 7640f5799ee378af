"""The case x cell matrix (md, rst, html, json) and flaky results in sign-off, table and JUnit,
over synthetic results written as real run folders."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

import pytest
from usercli import cli

from validate.judge.signoff import decide, passed_on_rerun, summary
from validate.model.outcome import Outcome
from validate.model.results import CaseResult, ResultStore
from validate.report import render
from validate.report.store import build_report, load_runs

if TYPE_CHECKING:
    from pathlib import Path

    from validate.model.outcome import FlakyPolicy


def _cell(cudnn: str, frontend: str = "1.27.0") -> dict[str, str]:
    return {"cudnn": cudnn, "frontend": frontend, "cuda": "13.0", "driver": "580", "arch": "sm90"}


def _result(case: str, outcome: str, cudnn: str, **kw: object) -> CaseResult:
    cell_id = f"c{cudnn.replace('.', '')}"
    kw.setdefault("log_path", f"/gone/elsewhere/cases/{cell_id}/{case}/output.log")
    return CaseResult(
        case=case,
        outcome=Outcome(outcome),
        cell=_cell(cudnn),
        cell_id=cell_id,
        **kw,  # type: ignore[arg-type]
    )


def _run(tmp: Path, results: list[CaseResult], *, evidence: bool = True) -> Path:
    """A run folder as validate writes it: results.jsonl and each case's folder with its log."""
    run = tmp / "run"
    store = ResultStore(run / "results.jsonl")
    for r in results:
        store.append(r)
        if evidence and r.log_path:
            log = run / "cases" / r.cell_id / r.case / "output.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(f"{r.case}: {r.outcome}\n", encoding="utf-8")
    return run


# (outcome, attempts, api_logs) -> the entry's text and whether it passed
ENTRIES = [
    ("pass", (), False, "✓", True),
    ("fail", ("fail", "fail"), True, "✕ fail", False),
    ("crash", ("crash",), False, "✕ crash", False),
    ("timeout", ("timeout",), False, "✕ timeout", False),
    ("error", ("error", "error"), True, "! error", False),
    ("xfail", (), False, "⚠ xfail", False),
    ("xpass", (), False, "? xpass", False),
    ("skip", (), False, "skip", False),
    ("fail", ("fail", "pass"), True, "≈ fail", False),  # passed on the API-log re-run
    ("error", ("error", "pass"), False, "≈ error", False),  # passed on a --reruns re-run
]


@pytest.mark.parametrize(("outcome", "attempts", "logs", "text", "passed"), ENTRIES)
def test_each_entry_shows_its_outcome_and_links_its_evidence(
    tmp_path: Path, outcome: str, attempts: tuple[str, ...], logs: bool, text: str, passed: bool
) -> None:
    api = {"frontend": "/gone/fe.log"} if logs else {}
    results = [
        _result("a.py", "pass", "9.24.0.43"),
        _result("a.py", outcome, "9.25.1.1", attempts=attempts, api_logs=api),
    ]
    report = build_report(load_runs([_run(tmp_path, results)]), link_base=tmp_path)
    assert report.cases is not None
    assert [c.label for c in report.cases.columns] == ["9.24.0.43", "9.25.1.1"]  # only cudnn varies
    assert report.cases.common == ("fe 1.27.0", "CUDA 13.0", "drv 580", "sm90")
    entry = report.cases.entry("a.py", report.cases.columns[1])
    assert entry is not None
    assert (entry.text, entry.passed) == (text, passed)
    md = render(report, "md")
    matrix = md.split("## Cases", 1)[1].split("## Known issues", 1)[0]
    row = next(line for line in matrix.splitlines() if line.startswith("| a.py"))
    folder = "run/cases/c92511/a.py"
    if passed:
        assert re.fullmatch(r"\| a\.py +\| ✓ +\| ✓ +\|", row), row
        assert "[e1]" not in matrix
    else:
        assert f"{text} [e1]" in row
        # the footnote links the case's folder relative to the page (link_base)
        assert f"- [e1] {text}: `a.py` at 9.25.1.1" in matrix
        assert f"[cases/c92511/a.py]({folder})" in matrix
    page = render(report, "html")
    links = re.findall(r'<a href="([^"]+)">([^<]+)</a>', page.split("<h2>Cases</h2>", 1)[1])
    assert links == ([] if passed else [(folder, text)])
    doc = json.loads(render(report, "json"))["case_matrix"]
    cell = doc["rows"][0]["cells"][1]
    assert (cell["text"], cell["flaky"], cell["outcome"]) == (text, "≈" in text, outcome)
    assert cell["evidence"] == folder


def test_no_evidence_folder_no_footnote_and_not_run_is_a_dash(tmp_path: Path) -> None:
    results = [
        _result("a.py", "skip", "9.24.0.43", log_path=""),  # skipped before it ran: no folder
        _result("b.py", "fail", "9.25.1.1"),
    ]
    report = build_report(load_runs([_run(tmp_path, results)]), link_base=tmp_path)
    md = render(report, "md").split("## Cases", 1)[1].split("## Known issues", 1)[0]
    rows = {line.split("|")[1].strip(): line for line in md.splitlines() if line.startswith("| ")}
    assert [c.strip() for c in rows["a.py"].split("|")[2:4]] == ["skip", "—"]
    assert [c.strip() for c in rows["b.py"].split("|")[2:4]] == ["—", "✕ fail [e1]"]
    assert md.count("- [e") == 1
    rst = render(report, "rst")
    assert "`cases/c92511/b.py <run/cases/c92511/b.py>`__" in rst


def test_link_base_prefixes_the_path_from_the_current_folder(tmp_path: Path) -> None:
    run = _run(tmp_path, [_result("b.py", "crash", "9.25.1.1")])
    out = tmp_path / "site" / "page.md"
    here = ["--results", str(run.relative_to(tmp_path)), "--out", "site/page.md"]
    proc = cli("report", *here, "--link-base", "https://x.org/m/", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    text = out.read_text(encoding="utf-8")
    assert "(https://x.org/m/run/cases/c92511/b.py)" in text
    # without --link-base: relative to the page's folder
    cli("report", *here, cwd=tmp_path)
    assert "(../run/cases/c92511/b.py)" in out.read_text(encoding="utf-8")


# flaky policy table: (outcome, attempts, policy) -> signed off, regressions, errors, flaky
FLAKY = [
    ("fail", ("fail", "pass"), "block", False, 0, 0, 1),
    ("fail", ("fail", "pass"), "warn", True, 0, 0, 1),
    ("crash", ("crash", "crash", "pass"), "warn", True, 0, 0, 1),  # a later --reruns pass
    ("error", ("error", "pass"), "warn", True, 0, 0, 1),
    ("error", ("error", "pass"), "block", False, 0, 0, 1),
    ("fail", ("fail", "fail"), "warn", False, 1, 0, 0),  # failed every time: a regression
    ("error", ("error", "error"), "warn", False, 0, 1, 0),
    ("pass", ("pass",), "block", True, 0, 0, 0),
    ("pass", ("fail", "pass"), "block", True, 0, 0, 0),  # stored as a pass: not flaky here
    ("xfail", (), "block", True, 0, 0, 0),
]


@pytest.mark.parametrize(("outcome", "attempts", "flaky", "ok", "regr", "err", "n"), FLAKY)
def test_flaky_policy_table(
    outcome: str,
    attempts: tuple[str, ...],
    flaky: FlakyPolicy,
    ok: bool,
    regr: int,
    err: int,
    n: int,
) -> None:
    results = [
        _result("a.py", "pass", "9.24.0.43"),
        _result("b.py", outcome, "9.24.0.43", attempts=attempts, api_logs={"frontend": "x"}),
    ]
    verdict = decide(results, flaky=flaky)
    assert (verdict.signed_off, len(verdict.regressions), len(verdict.errors)) == (ok, regr, err)
    assert len(verdict.flaky) == n == int(passed_on_rerun(results[1]))
    text = summary(verdict)
    head = text.splitlines()[0]
    assert head.startswith("SIGNED OFF" if ok else "NOT SIGNED OFF")
    assert head.endswith(f"(flaky: {flaky})")
    section = [line for line in text.splitlines() if line.startswith("≈ flaky")]
    effect = "blocks sign-off" if flaky == "block" else "does not block"
    assert section == (
        [f"≈ flaky: failed, then passed on a re-run (--flaky {flaky}: {effect}): 1"] if n else []
    )
    if n:
        which = "the API-log re-run" if attempts[1] == "pass" else "a re-run"
        assert f"↳ {outcome}, then pass on {which} (attempts {'/'.join(attempts)})" in text
        assert "regressions" not in text
        assert "infra errors" not in text


@pytest.mark.parametrize("flaky", ["block", "warn"])
def test_flaky_in_table_json_and_junit(tmp_path: Path, flaky: FlakyPolicy) -> None:
    results = [
        _result("a.py", "pass", "9.25.1.1"),
        _result("b.py", "fail", "9.25.1.1", attempts=("fail", "pass"), api_logs={"be": "x"}),
        _result("c.py", "fail", "9.25.1.1", attempts=("fail", "fail")),
    ]
    report = build_report(load_runs([_run(tmp_path, results)]), flaky=flaky)
    assert report.table.body() == [["9.25.1.1", "✕ 1/3 · ≈ 1/3 flaky"]]
    doc = json.loads(render(report, "json"))
    verdict = doc["verdict"]
    assert verdict["flaky"] == ["c92511::b.py"]
    assert verdict["regressions"] == ["c92511::c.py"]
    assert (verdict["flaky_policy"], verdict["flaky_blocks"]) == (flaky, flaky == "block")
    assert [r["passed_on_rerun"] for r in doc["results"]] == [False, True, False]
    assert doc["table"]["rows"][0]["cells"][0]["status"] == "regression"
    root = ET.fromstring(render(report, "junit"))
    suite = root.find("testsuite")
    assert suite is not None
    policy = suite.find("properties/property[@name='flaky_policy']")
    assert policy is not None
    assert policy.get("value") == flaky
    case = root.find(".//testcase[@name='b.py']")
    assert case is not None
    props = {p.get("name"): p.get("value") for p in case.iterfind("properties/property")}
    assert props == {"flaky": "true", "attempts": "fail/pass"}
    if flaky == "block":
        assert case.find("failure") is not None
        assert root.get("failures") == "2"
    else:  # counted as passed, the failure kept as Surefire's flakyFailure
        assert case.find("failure") is None
        assert case.find("flakyFailure") is not None
        assert root.get("failures") == "1"


@pytest.mark.parametrize(("flaky", "code"), [("block", 1), ("warn", 0)])
def test_report_cli_flaky_option(tmp_path: Path, flaky: str, code: int) -> None:
    run = _run(tmp_path, [_result("b.py", "fail", "9.25.1.1", attempts=("fail", "pass"))])
    proc = cli("report", "--results", str(run), "--flaky", flaky, cwd=tmp_path, timeout=None)
    assert proc.returncode == code, proc.stderr
    assert proc.stderr.splitlines()[0].endswith(f"(flaky: {flaky})")
    bad = cli("report", "--results", str(run), "--flaky", "maybe", cwd=tmp_path, timeout=None)
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("argv", "policy"), [([], "block"), (["--flaky", "warn"], "warn")])
def test_validate_flaky_option_reaches_the_config(argv: list[str], policy: str) -> None:
    from validate.cli import build_parser
    from validate.cli.validate import config_from_args

    args = build_parser().parse_args(["validate", *argv])
    config = config_from_args(args, ["validate", *argv])
    assert config.flaky == policy
    assert type(config).from_dict(json.loads(json.dumps(config.to_dict()))).flaky == policy


def test_config_refuses_an_unknown_flaky_policy() -> None:
    from validate.config import ValidateConfig
    from validate.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^config: flaky 'maybe': expected one of block, warn$"):
        ValidateConfig.from_dict({"flaky": "maybe"})


@pytest.mark.parametrize(
    ("fmt", "shown"),
    [
        ("md", r"(set CUDNN\_ATTR\_MODE\_ \*x\* \[y\] |z|)"),
        ("rst", r"(set CUDNN\_ATTR\_MODE\_ \*x\* [y] \|z\|)"),
    ],
)
def test_reasons_in_footnotes_are_plain_text(tmp_path: Path, fmt: str, shown: str) -> None:
    """A reason's markup characters are escaped: `CUDNN_ATTR_MODE_` is no rst reference."""
    result = _result("b.py", "fail", "9.25.1.1", reason="set CUDNN_ATTR_MODE_ *x* [y] |z|")
    report = build_report(load_runs([_run(tmp_path, [result])]), link_base=tmp_path)
    text = render(report, "md" if fmt == "md" else "rst")
    (line,) = (ln for ln in text.splitlines() if ln.startswith("- [e1]"))
    assert shown in line
