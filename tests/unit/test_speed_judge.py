"""Speed along one axis (issue 29): candidates, the quiet re-measurement's findings, the units a
case process records, and the Speed section of every report format. The end-to-end runs on real
processes are tests/integration/test_speed.py."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, Any

import pytest

from validate.execute.cases.script import time_lines
from validate.execute.classify import ExecResult
from validate.execute.units import units_of
from validate.judge.speed import (
    Measurement,
    Thresholds,
    candidates,
    judge,
    load_factor,
    one_axis,
    select,
    slower_class,
)
from validate.model.outcome import Outcome
from validate.model.results import CaseResult, ResultStore, load_results
from validate.report import render
from validate.report.store import build_report, load_runs

if TYPE_CHECKING:
    from pathlib import Path

PINS = {"cudnn": "9.22.0.52", "frontend": "1.27.0", "cuda": "13.0", "driver": "580", "arch": "sm90"}


def _result(cell_id: str, units: dict[str, float], **pins: str) -> CaseResult:
    return CaseResult(
        case="61_causal_conv1d_backward.ipynb",
        outcome=Outcome(pins.pop("outcome", "pass")),
        cell_id=cell_id,
        cell={**PINS, **pins},
        units=units,
    )


@pytest.mark.parametrize(
    ("other", "axis"),
    [
        ({"cudnn": "9.24.0.43"}, "cudnn"),
        ({"frontend": "1.28.0"}, "frontend"),
        ({"cudnn": "9.24.0.43", "frontend": "1.28.0"}, None),  # two axes apart
        ({"cuda": "12.9"}, None),  # another axis: not a backend or frontend comparison
        ({}, None),  # the same cell
    ],
)
def test_one_axis(other: dict[str, str], axis: str | None) -> None:
    assert one_axis(PINS, {**PINS, **other}) == axis


def test_candidates_need_both_thresholds_one_axis_apart_and_passes() -> None:
    results = [
        _result("a", {"cell 3": 43.0, "cell 4": 0.2, "cell 5": 10.0}),
        _result("b", {"cell 3": 99.0, "cell 4": 0.9, "cell 5": 14.0}, cudnn="9.24.0.43"),
        # two axes from a: compared with b only (one axis from b), where it is not slower
        _result("c", {"cell 3": 99.5}, cudnn="9.24.0.43", frontend="1.28.0"),
        # slower still, but failed: its times say nothing
        _result("d", {"cell 3": 300.0}, cudnn="9.25.1.1", outcome="fail"),
    ]
    found = candidates(results, Thresholds())
    # cell 4: 4.5x but 0.7 s; cell 5: 4 s but 1.4x; cell 3: 2.3x and 56 s
    assert [(c.unit, c.fast_cell, c.slow_cell, c.axis) for c in found] == [
        ("cell 3", "a", "b", "cudnn")
    ]
    assert found[0].ratio == pytest.approx(99 / 43)
    # the thresholds are the caller's: a lower floor takes cell 4, a lower ratio cell 5
    units = {c.unit for c in candidates(results, Thresholds(ratio=1.5, min_s=0.5))}
    assert units == {"cell 3", "cell 4"}
    units = {c.unit for c in candidates(results, Thresholds(ratio=1.3, min_s=1.0))}
    assert units == {"cell 3", "cell 5"}
    assert candidates(results, Thresholds(ratio=3.0, min_s=1.0)) == []


def _measured(cell: str, *seconds: float, unit: str = "cell 3") -> Measurement:
    return Measurement(
        case="61_causal_conv1d_backward.ipynb",
        cell_id=cell,
        units=tuple({unit: s} for s in seconds),
        outcomes=("pass",) * len(seconds),
        folders=tuple(f"speed/r{i}/cases/{cell}/x" for i in range(1, len(seconds) + 1)),
    )


def test_judge_keeps_a_flag_only_where_the_minimum_of_the_quiet_repeats_holds() -> None:
    results = [
        _result("a", {"cell 3": 43.0}),
        _result("b", {"cell 3": 99.0}, cudnn="9.24.0.43"),
        _result("c", {"cell 3": 113.0}, cudnn="9.25.1.1"),
        _result("d", {"cell 3": 182.0}, cudnn="9.26.0.1"),
    ]
    measured = [
        _measured("a", 41.0, 40.0, 44.0),
        _measured("b", 45.0, 90.0, 42.0),  # once slow, the minimum is not: load
        _measured("c", 101.0, 100.0, 104.0),  # slower than a in every repeat: confirmed
        # d: every repeat failed, so no time: it could not be re-measured
        Measurement(
            case=results[0].case, cell_id="d", units=({"cell 3": 5.0},), outcomes=("fail",)
        ),
    ]
    check = judge(results, measured, Thresholds(), repeats=3)
    status = {(f.candidate.fast_cell, f.candidate.slow_cell): f.status for f in check.findings}
    assert status == {
        ("a", "b"): "load",
        ("a", "c"): "confirmed",  # b and c: 1.14x in the main run, no candidate
        ("a", "d"): "unmeasured",
        ("b", "d"): "unmeasured",
        ("c", "d"): "unmeasured",
    }
    (ac,) = check.confirmed
    assert ac.figures("slow") == (100.0, 101.0)
    assert ac.figures("fast") == (40.0, 41.0)
    assert ac.ratio == pytest.approx(2.5)
    assert check.summary().startswith(
        "5 candidates, 1 confirmed, 1 were load, 3 could not be re-measured (>= 1.5x and >= 1 s"
    )
    # no re-measurement at all: nothing is confirmed, the candidates are only counted
    unmeasured = judge(results, None, Thresholds())
    assert not unmeasured.confirmed
    assert "not re-measured, none reported" in unmeasured.summary()


def test_a_slowdown_the_start_up_load_explains_is_no_candidate() -> None:
    """A crowded run stretches its whole process: the start-up (the seconds outside every timed
    unit) 3x as the unit 3x is load; a unit 10x beside a 3x start-up is still a candidate."""
    fast = _result("a", {"work": 0.5}).with_(duration_s=2.0)  # start-up 1.5 s
    crowded = _result("b", {"work": 1.5}, cudnn="9.24.0.43").with_(duration_s=6.0)  # 4.5 s
    assert load_factor(crowded, fast) == pytest.approx(3.0)
    assert load_factor(fast, crowded) == 1.0  # a quieter slow side is never credited
    assert candidates([fast, crowded], Thresholds()) == []
    slow = _result("c", {"work": 5.0}, cudnn="9.25.1.1").with_(duration_s=9.5)  # 4.5 s
    (found,) = candidates([fast, slow], Thresholds())
    assert (found.slow_cell, found.ratio) == ("c", 10.0)
    assert found.load == pytest.approx(3.0)
    assert found.beyond_load == pytest.approx(10 / 3)
    # a start-up too short to measure load by (a plain script's) credits none
    short = _result("d", {"work": 1.5}, cudnn="9.24.0.43").with_(duration_s=1.9)
    assert load_factor(short, _result("a", {"work": 0.5}).with_(duration_s=0.8)) == 1.0


def test_the_budget_re_measures_the_largest_ratios_and_counts_the_rest() -> None:
    """Two findings: u slower on 9.24 (under two frontends: two pairs of cells that say the same)
    and v slower on 9.25. The strongest pair of each finding comes first, so v's (10x) goes
    before u's second pair (25x); what does not fit is not re-measured, never "load"."""
    same = {"u": 1.0, "v": 4.0}
    results = [
        _result("f1", same, frontend="1.26.0"),
        _result("s1", {"u": 30.0, "v": 4.0}, cudnn="9.24.0.43", frontend="1.26.0"),
        _result("f2", same, frontend="1.27.0"),
        _result("s2", {"u": 25.0, "v": 4.0}, cudnn="9.24.0.43", frontend="1.27.0"),
        _result("g", same, frontend="1.28.0"),
        _result("h", {"u": 1.0, "v": 40.0}, cudnn="9.25.1.1", frontend="1.28.0"),
    ]
    found = candidates(results, Thresholds())
    assert [(c.unit, c.fast_cell, c.slow_cell) for c in found] == [
        ("u", "f1", "s1"),
        ("u", "f2", "s2"),
        ("v", "g", "h"),
    ]
    case = results[0].case
    cost = {(r.case, r.cell_id): 10.0 for r in results}
    # 3 repeats of 10 s for each new (case, cell): 60 s a pair of cells
    sel = select(found, cost, budget_s=130.0, repeats=3)
    assert [(c.unit, c.fast_cell, c.slow_cell) for c in sel.chosen] == [
        ("u", "f1", "s1"),
        ("v", "g", "h"),
    ]
    assert [(c.fast_cell, c.slow_cell) for c in sel.left] == [("f2", "s2")]
    assert sel.runs == ((case, "f1"), (case, "s1"), (case, "g"), (case, "h"))
    assert sel.expected_s == 40.0  # one repeat of the four runs
    # an ample budget takes all; a budget of 0 none; a pair whose cells are chosen is free
    assert len(select(found, cost, budget_s=1e6, repeats=3).chosen) == 3
    assert select(found, cost, budget_s=0.0, repeats=3).chosen == ()
    assert len(select(found, {**cost, (case, "f2"): 0, (case, "s2"): 0}, 130.0, 3).chosen) == 3
    # judged with only the chosen cells re-measured: the pair left is counted, never judged
    measured = [
        Measurement(case=case, cell_id=cell, units=(same, same), outcomes=("pass", "pass"))
        for cell in ("f1", "s1", "g", "h")
    ]
    check = judge(results, measured, Thresholds(), repeats=2)
    assert (check.count("load"), check.count("unmeasured"), check.left_out) == (2, 1, 1)
    assert check.summary().startswith(
        "3 candidates, 0 confirmed, 2 were load, 1 not re-measured (unconfirmed, not cleared) ("
    )
    assert len(check.lines()) == 3  # the summary and the two re-measured, not the one left


def test_slower_class_is_the_bisect_predicate() -> None:
    rule = Thresholds(ratio=2.0, min_s=0.5)
    assert slower_class("work", [1.6, 1.5, 3.0], [0.3, 0.4], rule)[0] == "slower"
    assert slower_class("work", [0.35, 2.0], [0.3, 0.4], rule)[0] == "not slower"  # min: load
    assert slower_class("work", [0.7], [0.3], rule)[0] == "not slower"  # 2.3x but 0.4 s
    outcome, reason = slower_class("work", [], [0.3], rule)
    assert (outcome, reason.split(" (")[0]) == ("error", "work: no time from this candidate")


def test_units_survive_the_store_and_older_results_load_without_them(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "results.jsonl")
    store.append(_result("a", {"cell 3": 43.25}))
    old = _result("b", {}).to_dict()
    del old["units"]  # a line from before the field
    store._write(json.dumps({**old, "mac": store.key.sign(old)}).encode())
    got = {r.cell_id: r for r in load_results([tmp_path])}
    assert got["a"].units == {"cell 3": 43.25}
    assert got["b"].units == {}


def test_script_time_lines_and_the_whole_script(tmp_path: Path) -> None:
    log = tmp_path / "output.log"
    log.write_text(
        "CUDNN_MATRIX_TIME conv_fwd 1.84\nnoise CUDNN_MATRIX_TIME x 3\nCUDNN_MATRIX_TIME bad 1s\n"
        "CUDNN_MATRIX_TIME conv_bwd 2e-1\nCUDNN_MATRIX_TIME conv_fwd 1.5\n",
        encoding="utf-8",
    )
    assert time_lines(log) == {"conv_fwd": 1.5, "conv_bwd": 0.2}
    timed = ExecResult(kind="script", returncode=0, log_path=log, report={"run_s": 9.0})
    assert units_of(timed) == {"conv_fwd": 1.5, "conv_bwd": 0.2}
    plain = tmp_path / "plain.log"
    plain.write_text("hello\n", encoding="utf-8")
    whole = ExecResult(kind="script", returncode=0, log_path=plain, report={"run_s": 0.25})
    assert units_of(whole) == {"script": 0.25}
    notebook = ExecResult(
        kind="notebook", returncode=0, report={"units": {"cell 0": 0.5, "cell 1": "x"}}
    )
    assert units_of(notebook) == {"cell 0": 0.5}  # a value that is no number is left out


def _run_folder(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    store = ResultStore(run / "results.jsonl")
    store.append(_result("a", {"cell 3": 43.0}))
    store.append(_result("b", {"cell 3": 99.0}, cudnn="9.24.0.43"))
    store.append(_result("c", {"cell 3": 104.0}, cudnn="9.25.1.1"))
    store.seal()
    measured = [
        _measured("a", 41.0, 40.0, 44.0),
        _measured("b", 95.0, 97.0, 96.0),
        _measured("c", 42.0, 41.5, 43.0),  # c was slow only under load
    ]
    data = {"measurements": [m.to_dict() for m in measured], "check": {"repeats": 3}}
    (run / "speed.json").write_text(json.dumps(data), encoding="utf-8")
    return run


def _report(run: Path, fmt: Any, **kwargs: Any) -> str:
    report = build_report(load_runs([run]), link_base=run.parent, **kwargs)
    return render(report, fmt)


def test_every_format_has_the_speed_section(tmp_path: Path) -> None:
    run = _run_folder(tmp_path)
    md = _report(run, "md")
    assert "| 9.24.0.43 | ✓ 1 · ⏱ [s1]" in md  # the docs table marks the slower cell
    assert "| 9.25.1.1  | ✓ 1                |" in md  # load alone: no mark
    assert (
        "- [s1] ⏱ slower: 61_causal_conv1d_backward.ipynb cell 3: 2.38x slower in cudnn "
        "9.24.0.43 than in cudnn 9.22.0.52 (min of repeats 95.00 s vs 40.00 s)"
    ) in md
    section = md[md.index("## Speed") : md.index("## Cases")]
    assert "2 candidates, 1 confirmed, 1 were load (>= 1.5x and >= 1 s slower" in section
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in section.splitlines()
        if line.startswith("| 61_")
    ]
    assert [row[2:] for row in rows] == [
        [
            "cudnn 9.24.0.43 (b)",
            "cudnn 9.22.0.52 (a)",
            "99.00 / 43.00",  # the main run
            "95.00 / 96.00 (n=3)",  # min / median of the quiet repeats
            "40.00 / 41.00 (n=3)",
            "2.38x",
            "confirmed",
        ],
        [
            "cudnn 9.25.1.1 (c)",
            "cudnn 9.22.0.52 (a)",
            "104.00 / 43.00",
            "41.50 / 42.00 (n=3)",
            "40.00 / 41.00 (n=3)",
            "1.04x",
            "dropped: load",
        ],
    ]
    assert (
        "- 61_causal_conv1d_backward.ipynb cell 3, b vs a: [speed/r1/cases/b/x](run/speed/r1/cases/b/x)"
        in section
    )  # the evidence folders, slower cell first
    rst = _report(run, "rst")
    assert "Speed\n-----" in rst
    assert "2 candidates, 1 confirmed, 1 were load" in rst
    doc = json.loads(_report(run, "json"))
    confirmed = [f for f in doc["speed"]["findings"] if f["status"] == "confirmed"]
    assert [(f["slow_cell"], f["fast_cell"]) for f in confirmed] == [("b", "a")]
    assert confirmed[0]["slow_min_s"] == 95.0
    assert confirmed[0]["slow_median_s"] == 96.0
    assert confirmed[0]["ratio_min"] == pytest.approx(2.375)
    assert confirmed[0]["slow_folders"][0] == str(run / "speed/r1/cases/b/x")
    assert doc["speed"]["load"] == 1
    junit = ET.fromstring(_report(run, "junit"))
    props = {
        (suite.get("name", "").split(" / ")[0], p.get("name")): p.get("value", "")
        for suite in junit.iter("testsuite")
        for p in suite.iter("property")
    }
    assert props[("cudnn 9.24.0.43", "speed.61_causal_conv1d_backward.ipynb.cell 3")].startswith(
        "61_causal_conv1d_backward.ipynb cell 3: 2.38x slower"
    )
    assert ("cudnn 9.25.1.1", "speed.61_causal_conv1d_backward.ipynb.cell 3") not in props
    page = _report(run, "html")
    assert "<h2>Speed</h2>" in page
    assert '<a href="run/speed/r1/cases/b/x">speed/r1/cases/b/x</a>' in page


def test_report_thresholds_rejudge_the_stored_repeats(tmp_path: Path) -> None:
    run = _run_folder(tmp_path)
    # main run: b 99/43 = 2.30x, c 104/43 = 2.42x slower than a; c re-measured: load
    strict = json.loads(_report(run, "json", slower=Thresholds(ratio=2.4, min_s=1.0)))
    assert (strict["speed"]["candidates"], strict["speed"]["confirmed"]) == (1, 0)
    assert strict["speed"]["findings"][0]["slow_cell"] == "c"
    floor = json.loads(_report(run, "json", slower=Thresholds(ratio=1.5, min_s=60.0)))
    assert floor["speed"]["candidates"] == 1  # 56 s and 61 s slower: only c is 60 s slower

    # a run folder without speed.json: candidates are counted, none shown as a finding
    (run / "speed.json").unlink()
    md = _report(run, "md")
    assert "⏱" not in md
    assert (
        "2 candidates (>= 1.5x and >= 1 s slower than a cell one axis apart); not re-measured" in md
    )
