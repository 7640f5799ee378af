"""The JSON report's results written from pieces (report/json_fast.py) are the text the json
module gives for each result's dict, whatever the result holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from validate.model.outcome import Outcome
from validate.model.results import CaseResult
from validate.report import Report, render, write_report
from validate.report.json_ import _result, report_dict
from validate.report.json_fast import FIELDS, CellLabels, ResultLines, compact
from validate.report.model import RunInfo, StoredResult, merge_runs
from validate.report.store import build_report

PINS = {"cudnn": "9.24.0.43", "frontend": "1.27.0", "cuda": "13.0", "arch": "sm90"}
ODD = 'ctl \x00\x07\x1b[31m quote " back \\ ]]> <&> caf\u00e9 \u2715 \U0001f600 \ud800 end'

RESULTS = [
    CaseResult(case="a.py", outcome=Outcome.PASS, cell_id="c1", cell=PINS),
    CaseResult(case="a.py", outcome=Outcome.PASS),  # no cell: the key names no pins
    CaseResult(
        case=f"t.py::test_x[{ODD}]",
        outcome=Outcome.FAIL,
        reason=ODD,
        tail=ODD * 3,
        log_path=f"cases/{ODD}/output.log",
        duration_s=float("nan"),
        cell_id="c1",
        cell=PINS,
        exit_code=1,
        signal="SIGSEGV",
        attempts=("fail", "pass"),
        known_issue=ODD,
        ki_note=ODD,
        contention=ODD,
    ),
    CaseResult(
        case="b.py",
        outcome=Outcome.FAIL,
        attempts=("fail", "fail", "pass"),
        flaky=True,
        cell_id="c2",
        cell={**PINS, "arch": ODD},
        duration_s=float("inf"),
        exit_code=-11,
    ),
    CaseResult(case="c.py", outcome=Outcome.PASS, duration_s=3, cell_id="c1", cell=PINS),
    # the fields written through the dict's way
    CaseResult(case="d.py", outcome=Outcome.ERROR, exception={"ename": ODD, "tb": [ODD]}),
    CaseResult(case="e.py", outcome=Outcome.PASS, env={"TOKEN": "secret", "X": ODD}),
    CaseResult(case="f.py", outcome=Outcome.PASS, api_logs={"frontend": ODD}, units={"u": 1.5}),
    CaseResult(case="g.py", outcome=Outcome.SKIP, cell_id="c3", cell={"cudnn": "9"}),
]
#: fields of a type the schema does not give them: still the dict's text
MISTYPED = [
    CaseResult(case="f.py", outcome=Outcome.SKIP, cell_id=5, cell=PINS),  # type: ignore[arg-type]
    CaseResult(case="g.py", outcome=Outcome.SKIP, reason=7, tail=None),  # type: ignore[arg-type]
    CaseResult(case="h.py", outcome=Outcome.SKIP, attempts=["skip"]),  # type: ignore[arg-type]
    CaseResult(case="i.py", outcome=Outcome.SKIP, cell={"cuda": 13, "arch": True}),  # type: ignore[dict-item]
    CaseResult(case="j.py", outcome=Outcome.SKIP, cell={"cuda": 13.0, "arch": 1}),  # type: ignore[dict-item]
    CaseResult(case="k.py", outcome=Outcome.PASS, duration_s=1, exit_code=True),  # bool is an int
    CaseResult(case="l.py", outcome=Outcome.PASS, duration_s=True, exit_code=1.0),  # type: ignore[arg-type]
    CaseResult(case="m.py", outcome=Outcome.PASS, duration_s=1.0, exit_code=1, flaky=1),  # type: ignore[arg-type]
]


def _report() -> Report:
    runs = merge_runs(
        [
            (RunInfo(run_id="r1", path=Path(f"/tmp/{ODD}")), RESULTS[:6]),
            (RunInfo(run_id="r2", path=Path("r2")), RESULTS[6:]),
        ]
    )
    return build_report(runs)


def test_fields_are_case_results() -> None:
    """A new CaseResult field sends every result the slow way: name it in FIELDS and the line."""
    assert tuple(CaseResult.__dataclass_fields__) == FIELDS


def test_each_line_is_the_encoded_dict() -> None:
    report = _report()
    labels = CellLabels()
    lines = ResultLines(_result)
    items = list(report.runs.items) * 2  # the second time from what was kept
    run = RunInfo(run_id="r", path=Path(ODD))
    items += [StoredResult(result=r, run=run) for r in MISTYPED * 2]
    for item in items:
        expected = "    " + compact(_result(item, labels.of(item.result)))
        assert lines.line(item) == expected, item.result.case


def test_a_result_read_from_its_line_takes_the_fast_way() -> None:
    """A result read back from a results line holds only the fields the line names
    (CaseResult.from_line): its JSON entry is still written from pieces, not the dict's way (the
    merge of the two speed-ups sent every stored result the slow way)."""
    slow: list[str] = []

    def counted(item: StoredResult, label: str) -> dict[str, object]:
        slow.append(item.result.case)
        return _result(item, label)

    run = RunInfo(run_id="r", path=Path("run"))
    lines = ResultLines(counted)
    labels = CellLabels()
    for written in RESULTS[:5]:
        read = CaseResult.from_line(json.loads(json.dumps(written.to_line())))
        assert len(read.__dict__) < len(FIELDS)  # a line leaves its default fields out
        item = StoredResult(result=read, run=run)
        assert lines.line(item) == "    " + compact(_result(item, labels.of(read)))
    assert slow == []


def test_report_is_the_document_and_round_trips(tmp_path: Path) -> None:
    report = _report()
    text = render(report, "json")
    doc = json.loads(text)
    assert doc == json.loads(json.dumps(report_dict(report), default=str))
    keys = {r["key"] for r in doc["results"]}
    assert any(ODD in k for k in keys)
    odd = next(r for r in doc["results"] if r["reason"] == ODD)
    assert odd["tail"] == ODD * 3
    assert odd["passed_on_rerun"] is True
    assert text.isascii()  # escaped, as json.dumps does
    write_report(report, "json", tmp_path / "r.json")
    assert (tmp_path / "r.json").read_text(encoding="utf-8") == text


@pytest.mark.parametrize("count", [0, 1, 10_001])
def test_batches_join_into_one_list(count: int) -> None:
    results = [
        CaseResult(case=f"t{i}.py", outcome=Outcome.PASS, cell_id="c", cell=PINS)
        for i in range(count)
    ]
    report = build_report(merge_runs([(RunInfo(run_id="r", path=Path()), results)]))
    doc = json.loads(render(report, "json"))
    assert [r["case"] for r in doc["results"]] == [r.case for r in results]


def test_a_report_failing_part_way_leaves_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: object) -> str:
        raise OSError(28, "No space left on device")

    out = tmp_path / "r.json"
    out.write_text("an older report", encoding="utf-8")
    monkeypatch.setattr(ResultLines, "line", broken)
    with pytest.raises(OSError, match="No space"):
        write_report(_report(), "json", out)
    assert not out.exists()  # not a report cut short
