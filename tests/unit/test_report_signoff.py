"""Sign-off verdicts, baseline comparison and merging of stored runs (through the CLI too)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from validate.cli import main
from validate.judge.signoff import decide, summary
from validate.model.outcome import Outcome
from validate.model.results import CaseResult, ResultStore
from validate.report.model import RunInfo, merge_runs
from validate.report.store import load_runs

if TYPE_CHECKING:
    from collections.abc import Iterator

EXAMPLE = Path(__file__).parents[1] / "resources" / "runs" / "example"
CELL = {"cudnn": "9.25.1.1", "frontend": "1.27.0", "cuda": "13.0", "driver": "580", "arch": "sm90"}


def _r(outcome: str, case: str = "a.py", **kw: object) -> CaseResult:
    kw.setdefault("cell_id", "c1")
    return CaseResult(case=case, outcome=Outcome(outcome), cell=CELL, **kw)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _fresh_log_handler() -> Iterator[None]:
    """cli.main installs a stderr handler once; drop it so the next test's capsys stream is used."""
    yield
    logger = logging.getLogger("validate")
    for handler in [h for h in logger.handlers if h.get_name() == "cudnn-matrix"]:
        logger.removeHandler(handler)


@pytest.mark.parametrize(
    ("outcomes", "exit_code", "regressions", "errors", "notices"),
    [
        (["pass", "skip", "xfail"], 0, 0, 0, 0),
        (["pass", "xpass"], 0, 0, 0, 1),  # "fixed?" is a notice, not a regression
        (["pass", "fail"], 1, 1, 0, 0),
        (["crash"], 1, 1, 0, 0),
        (["timeout", "skip"], 1, 1, 0, 0),
        (["pass", "error"], 1, 0, 1, 0),  # infra: not signed off, labelled separately
        ([], 0, 0, 0, 0),
    ],
)
def test_verdict_table(
    outcomes: list[str], exit_code: int, regressions: int, errors: int, notices: int
) -> None:
    verdict = decide([_r(o, case=f"c{i}.py") for i, o in enumerate(outcomes)])
    assert verdict.exit_code == exit_code
    assert (len(verdict.regressions), len(verdict.errors), len(verdict.notices)) == (
        regressions,
        errors,
        notices,
    )
    text = summary(verdict)
    assert text.startswith("SIGNED OFF" if exit_code == 0 else "NOT SIGNED OFF")
    if errors:
        assert "infra errors (environment/harness, not the product): 1" in text


def _split(backend: str) -> list[CaseResult]:
    return [r for r in load_runs([EXAMPLE]).results if r.cell["cudnn"] == backend]


def test_baseline_compare_old_vs_new_backend() -> None:
    verdict = decide(_split("9.25.1.1"), baseline=_split("9.24.0.43"))
    diff = verdict.baseline
    assert diff is not None
    assert diff.changed_axes == ("cudnn",)
    kinds = {
        k: [
            (t.subject.cell["frontend"], t.subject.cell["arch"], t.subject.case) for t in diff.of(k)
        ]
        for k in (
            "new_failure",
            "unsupported",
            "new_error",
            "new_pass",
            "ki_fixed",
            "still_failing",
            "missing",
        )
    }
    nb26 = "26_layernorm_forward_training_and_backward_with_relu_bitmask.ipynb"
    repro = "repro_fusion_uid[graph-pygraph-auto]"
    assert kinds == {
        "new_failure": [],
        "unsupported": [("1.27.0", "sm100", "00_introduction.ipynb")],
        "new_error": [("1.26.0", "sm90", repro)],
        "new_pass": [("1.27.0", "sm90", nb26)],
        "ki_fixed": [("1.27.0", "sm100", nb26), ("1.27.0", "sm100", repro)],
        "still_failing": [],
        "missing": [],
    }
    assert [t.note for t in diff.of("ki_fixed")] == ["KI-1 no longer reproduces"] * 2
    assert not verdict.regressions
    assert len(verdict.blocking_transitions) == 1  # pass -> "graph not supported" is a regression
    assert verdict.exit_code == 1
    text = summary(verdict)
    assert "supported -> unsupported (passed in baseline, now skipped): 1" in text
    assert "known issues fixed: 2" in text


def test_supported_to_unsupported_alone_blocks_sign_off() -> None:
    before = [_r("pass", cell_id="old")]
    after = [_r("skip", reason="graph not supported")]
    assert decide(after).exit_code == 0  # a skip alone is as expected ...
    verdict = decide(after, baseline=before)
    assert verdict.exit_code == 1  # ... but not after the old backend ran it
    assert [t.kind for t in verdict.blocking_transitions] == ["unsupported"]


def test_new_failure_and_missing() -> None:
    before = [_r("pass", case="a.py"), _r("pass", case="gone.py")]
    after = [_r("fail", case="a.py", reason="max abs err 6.0")]
    diff = decide(after, baseline=before).baseline
    assert diff is not None
    assert [(t.kind, t.subject.case) for t in diff.transitions] == [
        ("new_failure", "a.py"),
        ("missing", "gone.py"),
    ]
    assert diff.of("new_failure")[0].note == "pass -> fail: max abs err 6.0"


def _store(folder: Path, results: list[CaseResult], meta: dict[str, str] | None = None) -> Path:
    store = ResultStore(folder / "results.jsonl")
    for r in results:
        store.append(r)
    if meta is not None:
        (folder / "run.json").write_text(json.dumps(meta))
    return folder


def test_merge_later_run_wins_in_order() -> None:
    first = [_r("crash", case="a.py"), _r("pass", case="b.py")]
    second = [_r("pass", case="a.py", run_id="2")]
    merged = merge_runs(
        [(RunInfo(run_id="1", path=Path()), first), (RunInfo(run_id="2", path=Path()), second)]
    )
    assert {r.case: str(r.outcome) for r in merged.results} == {"a.py": "pass", "b.py": "pass"}
    reverse = merge_runs(
        [(RunInfo(run_id="2", path=Path()), second), (RunInfo(run_id="1", path=Path()), first)]
    )
    assert {r.case: str(r.outcome) for r in reverse.results} == {"a.py": "crash", "b.py": "pass"}


def test_cli_merged_pair_of_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rerun = [
        r.with_(outcome=Outcome.PASS, reason="", run_id="rerun")
        for r in load_runs([EXAMPLE]).results
        if r.outcome in (Outcome.CRASH, Outcome.ERROR)
    ]
    second = _store(
        tmp_path / "runs" / "rerun", rerun, {"run_id": "rerun", "provenance": "test rerun"}
    )
    out = tmp_path / "compat.md"
    pair = ["report", "--prefer", "last", "--results"]  # a rerun of failures: the later wins
    rc = main([*pair, str(EXAMPLE), "--results", str(second), "--out", str(out)])
    assert rc == 0
    text = out.read_text()
    assert "| 9.24.0.43 | ✓ 3                | ✓ 3                 | ✓ 3" in text
    assert "run `rerun`" in text
    assert "\nSIGNED OFF: " in capsys.readouterr().err
    # reversed order: the example's crash is the later result again
    assert main([*pair, str(second), "--results", str(EXAMPLE), "--out", str(out)]) == 1


def test_cli_baseline_and_bug_reports(tmp_path: Path) -> None:
    old = _store(tmp_path / "old", _split("9.24.0.43"))
    new = _store(
        tmp_path / "new", [r for r in _split("9.25.1.1") if r.outcome is not Outcome.ERROR]
    )
    rc = main([
        "report", "--results", str(new), "--baseline", str(old), "--format", "json",
        "--out", str(tmp_path / "r.json"), "--bug-reports", str(tmp_path / "bugs"),
    ])  # fmt: skip
    assert rc == 1
    doc = json.loads((tmp_path / "r.json").read_text())
    kinds = sorted(t["kind"] for t in doc["verdict"]["baseline"]["transitions"])
    assert kinds == ["ki_fixed", "ki_fixed", "missing", "new_pass", "unsupported"]
    (bug,) = (tmp_path / "bugs").iterdir()
    text = bug.read_text()
    assert "00_introduction.ipynb` is rejected as unsupported with cuDNN backend 9.25.1.1" in text
    assert "- baseline: **pass** with [cudnn 9.24.0.43 / fe 1.27.0" in text


def test_cli_default_is_newest_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = tmp_path / "runs"
    _store(runs / "a", [_r("fail")])
    _store(runs / "b", [_r("pass")])
    assert main(["report", "--runs-dir", str(runs), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["run_id"] == "b"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--results", "/no/such/run"], "--results /no/such/run: no results.jsonl"),
        (["--runs-dir", "/no/such/dir"], "--runs-dir /no/such/dir: no stored run"),
        (["--results", str(EXAMPLE), "--pivot", "cudnn:gpu"], "--pivot 'cudnn:gpu'"),
        (["--results", str(EXAMPLE), "--cudnn", "1.0"], "selection leaves no stored results"),
        (
            ["--results", str(EXAMPLE), "--known-issues", "/no/ki.toml"],
            "--known-issues /no/ki.toml",
        ),
        (["--results", str(EXAMPLE), "--format", "pdf"], "invalid choice: 'pdf'"),
    ],
)
def test_bad_input_one_line_exit_2(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        rc = main(["report", *argv])
    except SystemExit as exc:  # argparse errors exit from the parser
        rc = int(exc.code or 0)
    err = capsys.readouterr().err
    assert rc == 2
    assert needle in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("selection", "expected"),
    [
        (["--cuda", "13"], 48),  # stored as "13.0": `plan --cuda 13` plans those cells too
        (["--cudnn", "9.24.0.43.0"], 12),
        (["--cudnn", "9.24.0.43,9.8.0.87", "--arch", "SM_90"], 12),
    ],
)
def test_cli_selection_compares_as_the_planner_does(
    selection: list[str], expected: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression (issue 11, 6c): report compared raw strings, so `--cuda 13` left nothing."""
    rc = main(["report", "--results", str(EXAMPLE), *selection, "--format", "json"])
    out = capsys.readouterr()
    assert rc != 2, out.err
    assert len(json.loads(out.out)["results"]) == expected


def test_cli_selection_on_an_axis_no_result_carries_leaves_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["report", "--results", str(EXAMPLE), "--python", "3.12"]) == 2
    err = capsys.readouterr().err
    assert "selection leaves no stored results (--python 3.12)" in err
