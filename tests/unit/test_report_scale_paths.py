"""The report's paths for a million results (issue #27) keep what the plain ones did: the merge's
order and precedence, the pieces a cell's results are cut into, a results line read back as it
was written, and the known-issue check, sign-off and tables over results in any order."""

from __future__ import annotations

from pathlib import Path

import pytest

from validate.judge.known_issues import apply_known_issues, load_known_issues
from validate.judge.signoff import decide
from validate.model.outcome import Outcome
from validate.model.results import CaseResult, ResultStore, iter_results, result_key
from validate.report.case_matrix import build_case_matrix
from validate.report.model import (
    RunInfo,
    RunSet,
    StoredResult,
    case_names,
    cell_spans,
    merge_runs,
    sharing,
)
from validate.report.store import build_report
from validate.report.table import Pivot, build_table

OLD = {"cudnn": "9.9.0", "frontend": "1.0", "cuda": "12.9", "driver": "580", "arch": "sm90"}
NEW = {**OLD, "cudnn": "9.10.0"}  # newer by version, older as text


def _r(
    case: str, pins: dict[str, str], cell_id: str, outcome: str = "pass", **kw: object
) -> CaseResult:
    return CaseResult(case=case, outcome=Outcome(outcome), cell=pins, cell_id=cell_id, **kw)  # type: ignore[arg-type]


def test_merge_orders_interleaved_cells_by_version_then_cases_naturally() -> None:
    info = RunInfo(run_id="r", path=Path())
    loose = {"cudnn": "9.9.0", "frontend": "1.0", "arch": "sm80"}  # outside a matrix: no cell id
    results = [
        _r("t10.py", NEW, "n"),
        _r("t9.py", OLD, "o"),
        _r("t2.py", NEW, "n"),
        _r("t10.py", OLD, "o"),
        _r("x.py", loose, ""),
        _r("t2.py", OLD, "o"),
    ]
    merged = merge_runs([(info, results)])
    assert [(r.cell_id, r.case) for r in merged.results] == [
        ("o", "t2.py"),
        ("o", "t9.py"),
        ("o", "t10.py"),
        ("", "x.py"),  # no cuda pin ("?") sorts after 12.9
        ("n", "t2.py"),
        ("n", "t10.py"),
    ]
    assert all(type(item) is StoredResult and item.run is info for item in merged.items)


def test_merge_within_a_run_the_later_line_wins_and_across_runs_a_conflict_is_refused() -> None:
    first = RunInfo(run_id="1", path=Path("one"))
    again = [_r("a.py", OLD, "o", "fail"), _r("a.py", OLD, "o", "pass")]  # a rerun in one run
    merged = merge_runs([(first, again)], prefer="refuse")
    assert [str(r.outcome) for r in merged.results] == ["pass"]
    second = RunInfo(run_id="2", path=Path("two"))
    with pytest.raises(Exception, match=r"cell o x case a.py is pass in one but crash in two"):
        merge_runs([(first, again), (second, [_r("a.py", OLD, "o", "crash")])], prefer="refuse")
    last = merge_runs([(first, again), (second, [_r("a.py", OLD, "o", "crash")])], prefer="last")
    assert [
        (str(r.outcome), i.run.run_id) for r, i in zip(last.results, last.items, strict=True)
    ] == [("crash", "2")]


def test_cell_spans_cut_where_the_cell_changes_even_out_of_order() -> None:
    info = RunInfo(run_id="r", path=Path())
    rows = [_r("a", OLD, "o"), _r("b", OLD, "o"), _r("a", NEW, "n"), _r("c", OLD, "o")]
    items = [StoredResult(result=r, run=info) for r in rows]
    spans = cell_spans(items)
    assert [(head.cell_id, [i.result.case for i in span]) for head, span in spans] == [
        ("o", ["a", "b"]),
        ("n", ["a"]),
        ("o", ["c"]),
    ]
    assert cell_spans([]) == []
    # the table and the matrix count a cell whose results lie apart as one
    table = build_table(items, Pivot.parse("cudnn:frontend"))
    assert table.cell(("9.9.0",), ("1.0",)).keys == ("o::a", "o::b", "o::c")
    assert table.cell(("9.9.0",), ("1.0",)).counts == {"pass": 3}
    matrix = build_case_matrix(items)
    assert sorted(matrix.entries) == [("a", "n"), ("a", "o"), ("b", "o"), ("c", "o")]


def test_a_table_cell_keeps_footnotes_flaky_and_keys_of_a_cell_without_id() -> None:
    info = RunInfo(run_id="r", path=Path())
    rows = [
        _r("t.py::a", OLD, "", "skip", reason="needs sm100"),
        _r("t.py::b", OLD, "", "fail", attempts=("fail", "pass")),  # flaky
        _r("t.py::c", OLD, "", "error", reason="no driver"),
        _r("t.py::d", OLD, "", "skip", reason="needs sm100"),
        _r("t.py::e", OLD, "", "skip", reason="other"),
    ]
    items = [StoredResult(result=r, run=info) for r in rows]
    table = build_table(items, Pivot.parse("cudnn:frontend"))
    cell = table.cell(("9.9.0",), ("1.0",))
    assert cell.keys == tuple(result_key(r) for r in rows)
    assert cell.status == "error"
    assert cell.notes == (2, 1, 3)
    assert [(n.index, n.reason, n.count) for n in table.footnotes] == [
        (1, "needs sm100", 2),
        (2, "no driver", 1),
        (3, "other", 1),
    ]
    assert "≈ 1/5 flaky" in cell.text
    matrix = build_case_matrix(items)
    assert matrix.tests == ("t.py::b", "t.py::c")
    assert matrix.entries[("t.py::b", result_key(rows[1]).split("::", 1)[0])].status == "flaky"
    assert dict(next(iter(matrix.file_entries.values())).counts) == {
        "skip": 3,
        "flaky": 1,
        "error": 1,
    }


def test_a_stored_line_reads_back_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDNN_MATRIX_STATE_DIR", str(tmp_path / "keys"))
    file = tmp_path / "run" / "results.jsonl"
    written = [
        _r("a.py", OLD, "o", "fail", reason="boom", attempts=("fail", "fail"), units={"cell 1": 2}),
        _r("b.py", OLD, "o", "xpass", api_logs={"frontend": "f.log"}, env={"captured_in": "case"}),
        CaseResult(case="c.py", outcome=Outcome.SKIP),
    ]
    store = ResultStore(file)
    store.append_many(written)
    with file.open("ab") as out:
        out.write(b"   \n")  # a blank line is passed over, not named
    skipped: list[str] = []
    read = list(iter_results(file, skipped=skipped))
    assert read == written
    assert [r.to_dict() for r in read] == [r.to_dict() for r in written]
    # a result read keeps only the fields its line names, yet shows every one, in field order
    assert [list(r.to_dict()) for r in read] == [list(r.to_dict()) for r in written]
    assert (read[2].known_issue, read[2].attempts, read[2].reason) == (None, (), "")
    assert read[2].with_(reason="x") == written[2].with_(reason="x")
    assert read[2].cell is not read[2].env  # each default mapping its own
    assert skipped == []


def test_only_results_an_issue_names_are_judged_and_the_verdict_lists_them(tmp_path: Path) -> None:
    db = tmp_path / "ki.toml"
    db.write_text(
        '[[issue]]\nid = "KI-1"\ntitle = "t"\nbackend = ">=9.0"\ncases = ["k*.py"]\n'
        'symptom = { outcomes = ["fail"] }\n',
        encoding="utf-8",
    )
    issues = load_known_issues(db)
    rows = [
        _r("a.py", OLD, "o", "fail", reason="boom"),
        _r("k1.py", OLD, "o", "fail", reason="boom"),
        _r("k2.py", OLD, "o", "pass"),
        _r("b.py", OLD, "o", "crash", attempts=("crash", "pass")),
        _r("c.py", OLD, "o", "skip", reason="no NVIDIA GPU visible"),
    ]
    judged = apply_known_issues(rows, issues)
    assert judged[0] is rows[0]
    assert [str(r.outcome) for r in judged] == ["fail", "xfail", "xpass", "crash", "skip"]
    verdict = decide(judged)
    assert [r.case for r in verdict.regressions] == ["a.py"]
    assert [r.case for r in verdict.flaky] == ["b.py"]
    assert [r.case for r in verdict.notices] == ["k2.py"]
    assert verdict.counts == {"crash": 1, "fail": 1, "skip": 1, "xfail": 1, "xpass": 1}
    assert [r.case for r in verdict.no_gpu] == ["c.py"]


def test_pieces_are_cut_once_while_shared_and_forgotten_after() -> None:
    info = RunInfo(run_id="r", path=Path())
    items = tuple(StoredResult(result=_r(c, OLD, "o"), run=info) for c in ("a", "b"))
    with sharing(items):
        assert cell_spans(items) is cell_spans(items)
        assert case_names(items) is case_names(items) == {"a", "b"}
    assert cell_spans(items) is not cell_spans(items)  # nothing kept past the block
    build_report(RunSet(runs=(info,), items=items))
    assert cell_spans(items) is not cell_spans(items)
