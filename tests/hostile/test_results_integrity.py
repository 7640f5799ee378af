"""Results integrity: forged, torn and unreadable lines in results.jsonl, and newer schemas.

Through the real CLI (`cudnn-matrix run`, `report`) as a user runs it; the forging case is a real
case process that appends to the run's results.jsonl while the run is live.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from usercli import cli

from validate.model.outcome import Outcome
from validate.model.results import CaseResult, ResultStore, RunKey, read_results

HOSTILE = Path(__file__).resolve().parents[1] / "resources" / "hostile"
SCRIPTS = Path(__file__).resolve().parents[1] / "resources" / "scripts"


def _stored(run: Path) -> dict[str, str]:
    return {r.case: str(r.outcome) for r in read_results(run / "results.jsonl").results}


def test_a_line_a_case_appends_is_detected_and_never_counted(tmp_path: Path) -> None:
    cases = tmp_path / "cases"
    cases.mkdir()
    shutil.copy(HOSTILE / "victim.py", cases / "a_victim.py")
    shutil.copy(HOSTILE / "forger.py", cases / "z_forger.py")  # runs second: the store exists
    run = tmp_path / "run"
    ran = cli(
        "run", str(cases), "--jobs", "1", "--results", str(run), "--no-api-logs", cwd=tmp_path
    )
    assert ran.returncode == 1, ran.stderr
    lines = (run / "results.jsonl").read_text().splitlines()
    assert len(lines) == 5  # the forger's three lines (one torn) and the tool's two
    assert _stored(run) == {"a_victim.py": "fail", "z_forger.py": "fail"}  # no forged pass
    assert (run / "results.key").is_file()  # sealed at the end of the run

    report = cli("report", "--results", str(run), "--format", "json", cwd=tmp_path)
    assert report.returncode == 1  # two failures: not signed off, whatever the forger wrote
    body = json.loads(report.stdout)
    counted = {(r["case"], r["outcome"]) for r in body["results"]}
    assert counted == {("a_victim.py", "fail"), ("z_forger.py", "fail")}
    warned = [line for line in report.stderr.splitlines() if "skipped" in line]
    assert len(warned) == 3, report.stderr
    assert any(":1: MAC does not verify" in w or "MAC does not verify" in w for w in warned)
    assert all("results.jsonl:" in w for w in warned)
    assert "Traceback" not in report.stderr


def test_a_torn_last_line_never_swallows_the_next_append(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "results.jsonl")
    store.append(CaseResult(case="a.py", outcome=Outcome.PASS))
    with store.path.open("a") as fh:
        fh.write('{"case": "half')  # a kill mid-write, or a case writing a fragment
    store.append(CaseResult(case="b.py", outcome=Outcome.FAIL))
    read = read_results(store.path)
    assert [(r.case, str(r.outcome)) for r in read.results] == [("a.py", "pass"), ("b.py", "fail")]
    assert read.skipped == [f"{store.path}:2: not a JSON object (torn or foreign line)"]


BAD_LINES = {
    "bad_utf8": (b'{"case": "\xff\xfe", "outcome": "pass"}', "not valid UTF-8"),
    "json_list": (b'["case", "pass"]', "a JSON list, not a result object"),
    "json_string": (b'"pass"', "a JSON str, not a result object"),
    "no_outcome": (b'{"case": "x.py"}', "field 'outcome' missing"),
    "mistyped": (b'{"case": "x.py", "outcome": "pass", "duration_s": "long"}', "wrong type"),
    "unknown_outcome": (b'{"case": "x.py", "outcome": "great"}', "not a result"),
}


@pytest.mark.parametrize("kind", sorted(BAD_LINES))
def test_unreadable_lines_are_skipped_with_file_and_line(tmp_path: Path, kind: str) -> None:
    raw, why = BAD_LINES[kind]
    file = tmp_path / "results.jsonl"
    legacy = CaseResult(case="ok.py", outcome=Outcome.PASS).to_dict()
    legacy["schema"] = 1  # a run from before lines were signed: no key, no MACs
    file.write_bytes(json.dumps(legacy).encode() + b"\n" + raw + b"\n")
    read = read_results(file)
    assert [r.case for r in read.results] == ["ok.py"]
    assert len(read.skipped) == 1
    assert read.skipped[0].startswith(f"{file}:2: ")
    assert why in read.skipped[0]


def test_resume_reruns_the_cases_of_unreadable_lines(tmp_path: Path) -> None:
    cases = tmp_path / "cases"
    cases.mkdir()
    for name in ("a_pass.py", "b_pass.py"):
        shutil.copy(SCRIPTS / "pass_script.py", cases / name)
    run = tmp_path / "run"
    first = cli("run", str(cases), "--results", str(run), "--no-api-logs", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    file = run / "results.jsonl"
    lines = file.read_bytes().splitlines()
    b_line = next(i for i, line in enumerate(lines) if b"b_pass.py" in line)
    lines[b_line] = lines[b_line].replace(b'"outcome":"pass"', b'"outcome":7')  # mistyped
    file.write_bytes(b"\n".join(lines) + b"\n")
    again = cli("run", str(cases), "--results", str(run), "--resume", "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert _stored(run) == {"a_pass.py": "pass", "b_pass.py": "pass"}
    read = read_results(file)
    assert len(file.read_text().splitlines()) == 3  # b_pass.py ran again; a_pass.py did not
    assert sorted(r.case for r in read.results) == ["a_pass.py", "b_pass.py"]
    assert len(read.skipped) == 1


def test_a_run_written_by_a_newer_schema_is_refused_in_one_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    store = ResultStore(run / "results.jsonl")
    store.append(CaseResult(case="a.py", outcome=Outcome.PASS))
    store.seal()
    future = CaseResult(case="b.py", outcome=Outcome.PASS).to_dict()
    future["schema"] = 99
    future["mac"] = RunKey.for_run(run).sign(future)
    with store.path.open("a") as fh:
        fh.write(json.dumps(future) + "\n")
    report = cli("report", "--results", str(run), cwd=tmp_path)
    assert report.returncode == 2
    assert report.stderr.count("\n") == 1, report.stderr
    assert "newer cudnn-matrix (results schema 99" in report.stderr
    # the run folder is named from the folder the command ran in
    assert f"{store.path.relative_to(tmp_path)}:2" in report.stderr


def test_lines_of_a_keyed_run_without_their_key_are_not_counted(tmp_path: Path) -> None:
    """A signed run folder that lost its key (killed elsewhere) is unverifiable, not trusted."""
    run = tmp_path / "run"
    store = ResultStore(run / "results.jsonl")
    store.append(CaseResult(case="a.py", outcome=Outcome.PASS))
    store.seal()
    (run / "results.key").unlink()
    read = read_results(run / "results.jsonl")
    assert read.results == []
    assert "key is missing" in read.skipped[0]
