"""Slowdown bug reports (issue 39): `report --bug-reports` writes one issue-form report per case
confirmed slower in a newer release. Checked on the committed H200 speed runs (read only): the
figures are parsed back out of the written reports and held against the runs' own speed.json
and results.jsonl, read here without the tool."""

from __future__ import annotations

import json
import shlex
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version
from usercli import cli

from validate.judge.bisect import Observation, bisect
from validate.judge.speed import Thresholds, slower_class

REPO = Path(__file__).resolve().parents[2]
SPEED = REPO / "reports" / "gpu" / "2026-12-04-h200-speed"
RUNS = (SPEED / "forward" / "validate", SPEED / "backward" / "validate")
FORWARD = "60_causal_conv1d_forward.ipynb"


def _report(tmp_path: Path, *runs: Path, extra: tuple[str, ...] = ()) -> list[Path]:
    """`report --bug-reports bugs` over `runs` (the installed tool, started in tmp_path); the
    slowdown reports it wrote."""
    bugs = tmp_path / "bugs"
    argv = ["report", "--out", "r.md", *(a for run in runs for a in ("--results", str(run)))]
    proc = cli(*argv, "--bug-reports", bugs.name, *extra, cwd=tmp_path, timeout=None)
    assert proc.returncode == 0, proc.stderr  # every case passed: signed off
    return sorted(bugs.glob("*__slower.md")) if bugs.is_dir() else []


def _stored(run: Path) -> dict[str, Any]:
    """What the run holds, read as plain JSON: each cell's backend and each result's case path
    and recorded environment, the confirmed findings, each (case, cell, unit)'s quiet repeats."""
    cells, results = {}, {}
    for line in (run / "results.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        cells[record["cell_id"]] = record["cell"]["cudnn"]
        results[record["cell"]["cudnn"]] = record
    speed = json.loads((run / "speed.json").read_text(encoding="utf-8"))
    repeats: dict[tuple[str, str, str], list[float]] = {}
    for m in speed["measurements"]:
        for units, outcome in zip(m["units"], m["outcomes"], strict=True):
            for unit, seconds in units.items():
                if outcome == "pass":
                    repeats.setdefault((m["case"], cells[m["cell_id"]], unit), []).append(seconds)
    confirmed = [f for f in speed["check"]["findings"] if f["status"] == "confirmed"]
    meta = json.loads((run / "run.json").read_text(encoding="utf-8"))
    count = int(speed["check"]["repeats"])
    return {
        "repeats": repeats,
        "confirmed": confirmed,
        "results": results,
        "meta": meta,
        "count": count,
    }


def _table(text: str) -> dict[tuple[str, str], list[str]]:
    """(unit, release) -> the row's cells, from the report's Markdown table."""
    lines = [ln for ln in text.splitlines() if ln.startswith("| ")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert head[:5] == ["unit", "cudnn", "min s", "median s", "repeats"], head
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[1:]]
    return {(row[0], row[1]): row for row in rows}


def test_committed_speed_runs_get_one_report_per_slow_case(tmp_path: Path) -> None:
    written = _report(tmp_path, *RUNS)
    by_case = {
        p.read_text(encoding="utf-8").splitlines()[0].split()[2].rstrip(":"): p for p in written
    }
    stored = [_stored(run) for run in RUNS]
    cases = {f["case"] for s in stored for f in s["confirmed"]}
    assert written, "no slowdown bug report written"
    assert sorted(by_case) == sorted(cases) == [FORWARD, "61_causal_conv1d_backward.ipynb"]
    for data in stored:
        case = data["confirmed"][0]["case"]
        text = by_case[case].read_text(encoding="utf-8")
        rows = _table(text)
        # every confirmed unit on every release it was measured on, and nothing else
        wanted = {
            (f["unit"], f[f"{side}_pins"]["cudnn"])
            for f in data["confirmed"]
            for side in ("fast", "slow")
        }
        assert set(rows) == wanted
        for (unit, release), row in rows.items():
            seconds = data["repeats"][(case, release, unit)]
            low, median, n = float(row[2]), float(row[3]), int(row[4])
            assert low == pytest.approx(min(seconds), abs=5e-5)
            assert median == pytest.approx(statistics.median(seconds), abs=5e-5)
            assert n == len(seconds) == data["count"]  # every repeat passed and timed it
        for f in data["confirmed"]:  # the ratio of minima, slower against faster release
            slow, fast = f["slow_pins"]["cudnn"], f["fast_pins"]["cudnn"]
            ratio = min(data["repeats"][(case, slow, f["unit"])]) / min(
                data["repeats"][(case, fast, f["unit"])]
            )
            shown = rows[(f["unit"], slow)][7]
            assert f"{ratio:.2f}x vs {fast}" in shown, (shown, ratio)
        # the first slow release: the oldest slow one above the newest fast one below it
        slow_releases = sorted({Version(f["slow_pins"]["cudnn"]) for f in data["confirmed"]})
        fast = max(
            v
            for v in {Version(f["fast_pins"]["cudnn"]) for f in data["confirmed"]}
            if v < slow_releases[0]
        )
        for unit in {f["unit"] for f in data["confirmed"]}:
            line = f"- {unit}: first slow release not bisected; measured: {fast} fast, {slow_releases[0]} slow"
            assert line in text
        assert f"slower with cuDNN {slow_releases[0]} than {fast}" in text.splitlines()[0]
        # the issue form, its environment from the run's provenance
        host = data["meta"]["host"]
        for heading in ("**Describe the bug**", "**Expected behavior**", "**System Environment",
                        "**API logs**", "**To Reproduce**", "**Additional context**"):  # fmt: skip
            assert heading in text
        assert f"- GPU arch: sm90 ({host['gpus'][0]['name']}, compute capability 9.0)" in text
        assert f"- cuda driver version: {host['driver_version']}" in text
        assert "- cudnn_frontend version: 1.27.0" in text
        # the repro: validate both releases with the repeats, then each bare, with its libraries
        result = data["results"][str(slow_releases[0])]
        (command,) = [ln for ln in text.splitlines() if ln.startswith("cudnn-matrix validate")]
        argv = shlex.split(command)
        for flag, value in (
            ("--cudnn", f"{fast},{slow_releases[0]}"),
            ("--case", case),
            ("--cases", result["case_path"]),
            ("--speed-repeats", str(data["count"])),
            ("--env", "current"),
        ):
            assert argv[argv.index(flag) + 1] == value, flag
        bare = [ln for ln in text.splitlines() if ln.startswith("time env ")]
        assert len(bare) == 2
        for line, release in zip(bare, (str(fast), str(slow_releases[0])), strict=True):
            env = data["results"][release]["env"]["env"]
            assert shlex.split(line)[2:5] == [
                f"LD_LIBRARY_PATH={env['LD_LIBRARY_PATH']}",
                f"LD_PRELOAD={env['LD_PRELOAD']}",
                "jupyter",
            ]
            assert line.endswith(f"jupyter execute {result['case_path']}")


def _copy(run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    return copy


def _quiet(copy: Path, units: tuple[str, ...]) -> None:
    """The slower cells' quiet repeats of `units` made equal to the faster cell's: the
    candidates stay (the main run is untouched) but the re-measurement no longer bears them out."""
    path = copy / "speed.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    fast = {f["fast_cell"] for f in data["check"]["findings"]}
    (reference,) = [m for m in data["measurements"] if m["cell_id"] in fast]
    for m in data["measurements"]:
        if m["cell_id"] not in fast:
            for mine, theirs in zip(m["units"], reference["units"], strict=True):
                mine.update({u: theirs[u] for u in units})
    path.write_text(json.dumps(data), encoding="utf-8")


def test_candidates_the_quiet_repeats_do_not_bear_out_get_no_report(tmp_path: Path) -> None:
    copy = _copy(RUNS[0], tmp_path)
    _quiet(copy, ("cell 14", "cell 18"))
    assert _report(tmp_path, copy) == []
    speed = (tmp_path / "r.md").read_text(encoding="utf-8")
    assert "4 candidates, 0 confirmed, 4 were load" in speed  # they were candidates


def test_a_run_without_quiet_repeats_gets_no_report(tmp_path: Path) -> None:
    copy = _copy(RUNS[0], tmp_path)
    (copy / "speed.json").unlink()
    shutil.rmtree(copy / "speed")
    assert _report(tmp_path, copy) == []
    assert "4 candidates" in (tmp_path / "r.md").read_text(encoding="utf-8")
    assert "not re-measured, none reported" in (tmp_path / "r.md").read_text(encoding="utf-8")


def test_only_the_confirmed_units_are_in_the_report(tmp_path: Path) -> None:
    copy = _copy(RUNS[0], tmp_path)
    _quiet(copy, ("cell 14",))
    (written,) = _report(tmp_path, copy)
    rows = _table(written.read_text(encoding="utf-8"))
    assert {unit for unit, _ in rows} == {"cell 18"}
    assert "(cell 18)" in written.read_text(encoding="utf-8")


def _speed_bisect(unit: str, first_slow: str, **extra: Any) -> dict[str, Any]:
    """A bisect.json as `bisect --slower-than 1.5 --unit UNIT` writes it, made by the real bisect
    logic with made-up probe times: every release from `first_slow` on 20 s, the rest 0.2 s."""
    candidates = ["9.22.0.52", "9.23.0.39", "9.23.1.3", "9.23.2.1", "9.24.0.43"]

    def times(release: str) -> list[float]:
        return [20.0, 21.0, 22.0] if Version(release) >= Version(first_slow) else [0.2, 0.3]

    def probe(release: str) -> Observation:
        got, why = slower_class(unit, times(release), times(candidates[0]), Thresholds())
        return Observation(outcome=got, reason=why, folder=f"/tmp/b/probes/{release}/r1")

    result = bisect(candidates, probe)
    return {
        "case": FORWARD, "axis": "cudnn", "good": candidates[0], "bad": candidates[-1],
        "repeats": 1, "source": "backend store /tmp/kit/store", "candidates": candidates,
        "probes": [p.to_dict() for p in result.probes], "unit": unit, "slower_than": 1.5,
        "slower_min_s": 1.0, "speed_repeats": 3,
        "pins": {"frontend": "1.27.0", "cuda": "13.0", "driver": "580", "arch": "sm90"},
        "result": result.to_dict(), "suggested_issue": None, **extra,
    }  # fmt: skip


def _first_slow_lines(path: Path) -> dict[str, str]:
    return {
        ln.split(":", 1)[0][2:]: ln.split(": ", 1)[1]
        for ln in path.read_text(encoding="utf-8").splitlines()
        if ln.startswith("- cell ")
    }


def test_a_given_speed_bisect_gives_the_first_slow_release(tmp_path: Path) -> None:
    folder = tmp_path / "b"
    folder.mkdir()
    state = _speed_bisect("cell 18", "9.23.1.3")
    (folder / "bisect.json").write_text(json.dumps(state), encoding="utf-8")
    (written,) = _report(tmp_path, RUNS[0], extra=("--bisect", str(folder)))
    lines = _first_slow_lines(written)
    assert lines["cell 18"].startswith(
        "first slow release: 9.23.1.3 (bisected with `bisect --slower-than 1.5`: last fast "
        "9.23.0.39; 3 candidates between 9.22.0.52 and 9.24.0.43 from backend store "
        "/tmp/kit/store; `b/bisect.json`); measured: 9.22.0.52 fast, 9.24.0.43 slow"
    )
    assert lines["cell 14"].startswith("first slow release not bisected; measured:")
    text = written.read_text(encoding="utf-8")
    for probe in state["probes"]:  # each probe's class and its figures under the line
        obs = probe["observations"][0]
        assert f"  - {probe['candidate']}: {obs['outcome']} ({obs['reason']})" in text


def test_a_stored_speed_bisect_is_found_in_its_default_folder(tmp_path: Path) -> None:
    from validate.judge.bisect import folder_name  # bisect's own default folder (cli/bisect.py)

    folder = (
        tmp_path
        / "reports"
        / "bisect"
        / folder_name(FORWARD, "cudnn", "9.22.0.52", "9.24.0.43", "cell 14")
    )
    folder.mkdir(parents=True)
    state = _speed_bisect("cell 14", "9.24.0.43")
    (folder / "bisect.json").write_text(json.dumps(state), encoding="utf-8")
    other = (
        tmp_path
        / "reports"
        / "bisect"
        / folder_name(FORWARD, "cudnn", "9.22.0.52", "9.24.0.43", "cell 18")
    )
    other.mkdir()  # cell 18's bisect, of another frontend: not this slowdown's
    wrong = _speed_bisect("cell 18", "9.23.0.39")
    wrong["pins"]["frontend"] = "1.32.0"
    (other / "bisect.json").write_text(json.dumps(wrong), encoding="utf-8")
    (written,) = _report(tmp_path, RUNS[0])
    lines = _first_slow_lines(written)
    assert lines["cell 14"].startswith("first slow release: 9.24.0.43 (bisected with")
    assert lines["cell 18"].startswith("first slow release not bisected; measured:")


@pytest.mark.parametrize(
    ("bisect", "bug_reports", "said"),
    [
        ('{"probes": []}', False, "add --bug-reports DIR"),
        (None, True, "not a readable bisect.json"),
        ('{"probes": [{"candidate": "9.23.0.39"}]}', True, "not a bisect.json as `bisect` writes"),
        ('{"probes": [], "result": {"first_bad": "9.24.0.43"}}', True, "not a bisect.json as"),
    ],
)
def test_a_bad_bisect_flag_is_bad_input(
    tmp_path: Path, bisect: str | None, bug_reports: bool, said: str
) -> None:
    """One line, exit 2, nothing written: --bisect without --bug-reports, a missing or a
    malformed bisect.json."""
    (tmp_path / "b").mkdir()
    if bisect is not None:
        (tmp_path / "b" / "bisect.json").write_text(bisect, encoding="utf-8")
    argv = ["report", "--results", str(RUNS[0])]
    argv += ["--out", "r.md", "--bisect", "b"] + (["--bug-reports", "bugs"] if bug_reports else [])
    proc = cli(*argv, cwd=tmp_path, timeout=None)
    assert proc.returncode == 2, proc.stderr
    assert said in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "r.md").exists()
    assert not list(tmp_path.glob("bugs/*.md"))


def test_a_unit_slower_only_in_the_older_release_is_no_slow_case() -> None:
    """A speed-up (the newer release faster) is confirmed as 'slower in the older one', and is
    nothing to send upstream: no slow case, while the same finding turned round is one."""
    from validate.judge.speed import Candidate, Finding, SpeedCheck
    from validate.report.slowcase import slow_cases

    pins = {"cuda": "13.0", "driver": "580", "arch": "sm90", "frontend": "1.27.0"}

    def finding(slow: str, fast: str) -> Finding:
        candidate = Candidate(
            case="x.py", unit="script", axis="cudnn", fast_cell=f"c{fast}", slow_cell=f"c{slow}",
            fast_pins={**pins, "cudnn": fast}, slow_pins={**pins, "cudnn": slow},
            fast_s=1.0, slow_s=9.0,
        )  # fmt: skip
        return Finding(
            candidate=candidate,
            status="confirmed",
            fast_repeats=(1.0, 1.1),
            slow_repeats=(9.0, 9.5),
        )

    def check(*findings: Finding) -> SpeedCheck:
        return SpeedCheck(thresholds=Thresholds(), repeats=2, findings=findings)

    assert slow_cases(check(finding(slow="9.22.0.52", fast="9.24.0.43"))) == []
    (case,) = slow_cases(check(finding(slow="9.24.0.43", fast="9.22.0.52")))
    assert case.boundary("script") == ("9.22.0.52", "9.24.0.43")
    assert slow_cases(None) == []
