"""Speed evidence end to end on the CPU (issue 29): real case processes whose speed depends on their
cell, in real `validate` and `bisect` runs over a backend store of real backend libraries.

The case (tests/resources/speed/slow_from.py) sleeps longer from one backend on: a real slowdown.
A stand-in for load makes its first run in one cell slower once (a flag file it takes), as
neighbours would: a slowdown that only the crowded main run shows. No figure here is a wall-clock
assertion: the sleeps are 5x apart and the floors far below them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat
import pytest
from proctags import default_sigint
from usercli import cli, start

from validate.env.target import ExecTarget
from validate.execute.cases import discover_cases
from validate.execute.runner import RunOptions, run_cases
from validate.model.results import ResultStore, load_results

if TYPE_CHECKING:
    from collections.abc import Mapping

# slowdowns told from load on the host's CPUs: run by itself (noxfile.py's ALONE step)
pytestmark = [pytest.mark.slow, pytest.mark.alone]

ROOT = Path(__file__).resolve().parents[2]
CASE = ROOT / "tests" / "resources" / "speed" / "slow_from.py"
CELL = ["--frontend", "1.27.0", "--cuda", "13.0", "--driver", "580", "--arch", "sm90"]
#: store folder -> the real backend whose libraries it holds (the pin check reads M.m.p only)
STORE = {
    "9.12.0.46": "9.12.0.46",
    "9.13.0.50": "9.13.0.50",
    "9.13.0.51": "9.13.0.50",
    "9.13.0.52": "9.13.0.50",
}
SPEED = {"SPEED_FAST_S": "0.3", "SPEED_SLOW_S": "1.5", "SPEED_SLOW_FROM": "9.13.0.51"}


@pytest.fixture(scope="module")
def store(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A backend store of four releases: the dispatcher and libcudnn_graph of real wheels."""
    root = tmp_path_factory.mktemp("speed-store")
    for folder, version in STORE.items():
        (wheel,) = wheelhouse.glob(f"nvidia_cudnn_cu13-{version}-*.whl")
        lib = root / folder / "lib"
        lib.mkdir(parents=True)
        with zipfile.ZipFile(wheel) as archive:
            for name in ("libcudnn.so.9", "libcudnn_graph.so.9"):
                (lib / name).write_bytes(archive.read(f"nvidia/cudnn/lib/{name}"))
    return root


@pytest.fixture(scope="module")
def envs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("speed-envs")


def _speed(
    command: str, store: Path, wheelhouse: Path, envs: Path, *args: str, env: Mapping[str, str]
) -> subprocess.CompletedProcess[str]:
    """`cudnn-matrix COMMAND` over the slowed case, started in the envs' folder."""
    argv = [command, *CELL, "--backend-store", str(store)]
    argv += ["--wheelhouse", str(wheelhouse), "--no-backend-deps", "--cache-dir", str(envs)]
    argv += ["--cases", str(CASE), *args]
    return cli(*argv, cwd=envs, env={**os.environ, **SPEED, **env})


def test_a_real_slowdown_is_confirmed_and_one_of_load_is_dropped(
    store: Path, wheelhouse: Path, envs: Path, tmp_path: Path
) -> None:
    loaded = tmp_path / "load"
    loaded.mkdir()
    (loaded / "9.13.0.50").touch()  # its first run in that cell (the main run's) is slowed once
    run = tmp_path / "run"
    proc = _speed(
        "validate",
        store,
        wheelhouse,
        envs,
        *("--cudnn", "9.12.0.46,9.13.0.50,9.13.0.51", "--results", str(run)),
        *("--slower-ratio", "2", "--slower-min-s", "0.5", "--speed-repeats", "2"),
        env={"SPEED_LOAD_ONCE": str(loaded), "SPEED_LOAD_S": "1.5"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not list(loaded.iterdir())  # the main run took the load
    assert (
        "speed: 2 candidates, 1 confirmed, 1 were load (>= 2x and >= 0.5 s slower than a cell "
        "one axis apart); 2 quiet repeats per cell, min of repeats"
    ) in proc.stdout
    # one line per re-measured candidate, confirmed first
    lines = proc.stdout.splitlines()
    at = lines.index(next(line for line in lines if line.startswith("speed: ")))
    assert lines[at + 1].startswith(
        "  confirmed: slow_from.py work: cudnn 9.13.0.51 vs 9.12.0.46: main run "
    )
    assert lines[at + 2].startswith(
        "  load: slow_from.py work: cudnn 9.13.0.50 vs 9.12.0.46: main run "
    )
    main = {r.cell["cudnn"]: r for r in load_results([run])}
    assert sorted(main) == ["9.12.0.46", "9.13.0.50", "9.13.0.51"]
    assert all(r.outcome == "pass" for r in main.values())  # evidence, no outcome changed
    assert set(main["9.13.0.50"].units) == {"setup", "work"}
    data = json.loads((run / "speed.json").read_text())
    found = {
        (f["fast_pins"]["cudnn"], f["slow_pins"]["cudnn"], f["unit"]): f
        for f in data["check"]["findings"]
    }
    assert {k: f["status"] for k, f in found.items()} == {
        ("9.12.0.46", "9.13.0.51", "work"): "confirmed",
        ("9.12.0.46", "9.13.0.50", "work"): "load",
    }
    real = found[("9.12.0.46", "9.13.0.51", "work")]
    assert len(real["slow_repeats_s"]) == len(real["fast_repeats_s"]) == 2
    assert real["ratio_min"] == pytest.approx(
        min(real["slow_repeats_s"]) / min(real["fast_repeats_s"]), abs=1e-3
    )
    for folder in (*real["slow_folders"], *real["fast_folders"]):  # each repeat's evidence
        assert (run / folder / "output.log").is_file(), folder
        assert "CUDNN_MATRIX_TIME work" in (run / folder / "output.log").read_text()
    for i in (1, 2):  # each repeat is a run folder of its own, sealed
        repeat = load_results([run / "speed" / f"r{i}"])
        assert len(repeat) == 3
        assert (run / "speed" / f"r{i}" / "results.key").is_file()
    report = _report(run, "--slower-ratio", "2", "--slower-min-s", "0.5")
    assert "| 9.13.0.51 | ✓ 1 · ⏱ [s1]" in report
    assert "| 9.13.0.50 | ✓ 1                |" in report
    assert "2 candidates, 1 confirmed, 1 were load" in report


def _report(run: Path, *args: str) -> str:
    proc = cli("report", "--results", str(run), *args, cwd=run.parent)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_thresholds_are_honoured(store: Path, wheelhouse: Path, envs: Path, tmp_path: Path) -> None:
    """5x slower by 1.2 s: no candidate under a 6x ratio, nor under a 2 s floor."""
    for flags in (("--slower-ratio", "6"), ("--slower-min-s", "2")):
        run = tmp_path / flags[0].strip("-")
        proc = _speed(
            "validate",
            store,
            wheelhouse,
            envs,
            *("--cudnn", "9.13.0.50,9.13.0.51", "--results", str(run), *flags),
            env={},
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "\nspeed: 0 candidates, 0 confirmed, 0 were load" in proc.stdout
        assert not (run / "speed").exists()  # nothing re-run
        assert json.loads((run / "speed.json").read_text())["check"]["candidates"] == 0
        # the report's own thresholds re-judge the same results: now a candidate, never
        # re-measured, so counted and not reported
        text = _report(run, "--slower-ratio", "2", "--slower-min-s", "0.5")
        assert "1 candidate, 0 confirmed, 0 were load, 1 not re-measured (unconfirmed" in text
        assert "⏱" not in text


def _keys(folder: Path) -> list[str]:
    return sorted(r.cell["cudnn"] for r in load_results([folder]))


def test_only_the_unit_slower_beyond_load_is_re_measured(
    store: Path, wheelhouse: Path, envs: Path, tmp_path: Path
) -> None:
    """9.13.0.50's first run is crowded (its whole process 4x, start-up included), so its work
    unit is 4x 9.12's in the main run; 9.13.0.51's is truly 5x. Only the true one is re-run: the
    crowded cell's start-up shows the load that explains its unit (judge/speed.py load_factor)."""
    crowd = tmp_path / "crowd"
    crowd.mkdir()
    (crowd / "9.13.0.50").touch()
    run = tmp_path / "run"
    proc = _speed(
        "validate",
        store,
        wheelhouse,
        envs,
        *("--cudnn", "9.12.0.46,9.13.0.50,9.13.0.51", "--results", str(run)),
        *("--slower-ratio", "2", "--slower-min-s", "0.5", "--speed-repeats", "2"),
        env={"SPEED_CROWD_ONCE": str(crowd), "SPEED_CROWD_X": "4", "SPEED_START_S": "0.6"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not list(crowd.iterdir())  # the main run was crowded
    main = {r.cell["cudnn"]: r.units["work"] for r in load_results([run])}
    assert main["9.13.0.50"] >= 2 * main["9.12.0.46"] + 0.5  # slower by both thresholds, raw
    for i in (1, 2):  # the two cells of the one candidate, never the crowded one
        assert _keys(run / "speed" / f"r{i}") == ["9.12.0.46", "9.13.0.51"]
    assert "speed: 1 candidate, 1 confirmed, 0 were load (" in proc.stdout
    assert "re-measuring 1 (the largest ratios beyond load that fit --speed-budget 600 s): " in (
        proc.stderr
    )
    assert "1 case in 2 cells, 2 times each alone, 4 runs, expected " in proc.stderr


def test_the_budget_bounds_the_stage_and_says_what_it_left(
    store: Path, wheelhouse: Path, envs: Path, tmp_path: Path
) -> None:
    """A budget smaller than one candidate's re-runs: none is re-run, and the candidate is
    reported as not re-measured, not as cleared."""
    run = tmp_path / "run"
    proc = _speed(
        "validate",
        store,
        wheelhouse,
        envs,
        *("--cudnn", "9.12.0.46,9.13.0.51", "--results", str(run)),
        *("--slower-ratio", "2", "--slower-min-s", "0.5", "--speed-budget", "0.5"),
        env={},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not (run / "speed").exists()
    assert (
        "speed: 1 candidate, 0 confirmed, 0 were load, 1 not re-measured (unconfirmed, not cleared)"
    ) in proc.stdout
    assert (
        "re-measuring none (no candidate's re-runs fit --speed-budget 0.5 s); 1 left not "
        "re-measured"
    ) in proc.stdout
    data = json.loads((run / "speed.json").read_text())
    assert data["check"]["not_remeasured"] == 1
    assert data["budget_s"] == 0.5


def test_resume_continues_the_speed_stage(
    store: Path, wheelhouse: Path, envs: Path, tmp_path: Path
) -> None:
    """Interrupted after its first re-run was stored, `--resume` keeps every stored re-run (the
    same signed lines) and runs only the others, rather than measuring every one again. The stage
    may run two re-runs at once (two slots), so one or more can end before the interrupt lands:
    the test counts what was kept rather than assuming one."""
    run = tmp_path / "run"
    args = ["--cudnn", "9.12.0.46,9.13.0.51", "--results", str(run), "--speed-repeats", "2"]
    args += ["--slower-ratio", "2", "--slower-min-s", "0.5"]
    argv = ["validate", *CELL, "--backend-store", str(store)]
    argv += ["--wheelhouse", str(wheelhouse), "--no-backend-deps", "--cache-dir", str(envs)]
    argv += ["--cases", str(CASE), *args]
    first = run / "speed" / "r1" / "results.jsonl"
    with start(
        *argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **SPEED},
        start_new_session=True,
        cwd=envs,
        preexec_fn=default_sigint,
    ) as proc:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if first.is_file() and first.read_bytes().count(b"\n") >= 1:
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the run ended before its first re-run was stored"
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    files = [run / "speed" / f"r{i}" / "results.jsonl" for i in (1, 2)]
    kept = [f.read_bytes() if f.is_file() else b"" for f in files]
    n_kept = sum(k.count(b"\n") for k in kept)
    assert 1 <= n_kept < 4, err  # the re-runs that ended before the interrupt, not all four
    resumed = _speed("validate", store, wheelhouse, envs, *args, "--resume", env={})
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    for f, k in zip(files, kept, strict=True):  # kept, not measured again: new lines follow
        assert f.read_bytes().startswith(k)
    msg = f"speed: {n_kept} of 4 runs already stored (--resume); running the rest"
    assert msg in resumed.stderr, resumed.stderr
    for i in (1, 2):  # every repeat complete, each (case, cell) once
        assert _keys(run / "speed" / f"r{i}") == ["9.12.0.46", "9.13.0.51"]
        assert len((run / "speed" / f"r{i}" / "results.jsonl").read_bytes().splitlines()) == 2
    assert "speed: 1 candidate, 1 confirmed, 0 were load (" in resumed.stdout
    # once more: every re-run is stored, nothing runs again and the finding stands
    stored = [(run / "speed" / f"r{i}" / "results.jsonl").read_bytes() for i in (1, 2)]
    again = _speed("validate", store, wheelhouse, envs, *args, "--resume", env={})
    assert again.returncode == 0, again.stdout + again.stderr
    assert "speed: 4 of 4 runs already stored (--resume)" in again.stderr
    assert [(run / "speed" / f"r{i}" / "results.jsonl").read_bytes() for i in (1, 2)] == stored
    assert "speed: 1 candidate, 1 confirmed, 0 were load (" in again.stdout


def test_bisect_finds_the_first_slow_release(
    store: Path, wheelhouse: Path, envs: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "bisect"
    proc = _speed(
        "bisect",
        store,
        wheelhouse,
        envs,
        *("--axis", "cudnn", "--good", "9.12.0.46", "--bad", "9.13.0.52", "--case", CASE.name),
        *("--slower-than", "2", "--unit", "work", "--slower-min-s", "0.5"),
        *("--speed-repeats", "2", "--results", str(folder)),
        env={},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "first bad: 9.13.0.51" in proc.stdout
    assert "last good: 9.13.0.50" in proc.stdout
    assert "bad = slower (the outcome at --bad)" in proc.stdout
    state = json.loads((folder / "bisect.json").read_text())
    assert state["candidates"] == list(STORE)
    verdicts = {p["candidate"]: p["observations"][0]["outcome"] for p in state["probes"]}
    assert verdicts == {
        "9.12.0.46": "not slower",
        "9.13.0.52": "slower",
        "9.13.0.50": "not slower",
        "9.13.0.51": "slower",
    }
    for version in STORE:  # each probe: its repeats, each a validate run of that case alone
        assert sorted(p.name for p in (folder / "probes" / version).iterdir()) == ["r1", "r2"]


def test_notebook_cells_and_script_sections_are_timed(tmp_path: Path) -> None:
    """The units a case process records, start-up excluded: a notebook's code cells (nbclient's
    kernel-side timestamps), a script's own sections, a plain script's whole run."""
    cases = tmp_path / "cases"
    cases.mkdir()
    nb = nbformat.v4.new_notebook()  # type: ignore[no-untyped-call]
    nb.cells = [
        nbformat.v4.new_markdown_cell("# timed"),  # type: ignore[no-untyped-call]
        nbformat.v4.new_code_cell("import time\ntime.sleep(0.4)"),  # type: ignore[no-untyped-call]
        nbformat.v4.new_code_cell("x = 1"),  # type: ignore[no-untyped-call]
    ]
    nbformat.write(nb, cases / "timed.ipynb")  # type: ignore[no-untyped-call]
    (cases / "plain.py").write_text("import time\ntime.sleep(0.3)\n", encoding="utf-8")
    (cases / "sections.py").write_text(
        'print("CUDNN_MATRIX_TIME fwd 1.25")\nprint("CUDNN_MATRIX_TIME bwd 0.5")\n',
        encoding="utf-8",
    )
    out = tmp_path / "run"
    options = RunOptions(timeout_s=60, jobs=1, results_dir=out, api_logs=False)
    store = ResultStore(out / "results.jsonl")
    got = {
        r.case: r
        for r in run_cases(
            discover_cases([cases]), ExecTarget(python=Path(sys.executable)), options, store
        )
    }
    assert all(r.outcome == "pass" for r in got.values()), got
    timed = got["timed.ipynb"]
    assert set(timed.units) == {"cell 1", "cell 2"}  # code cells only, by their index
    assert 0.4 <= timed.units["cell 1"] < timed.duration_s  # no kernel start-up in it
    assert got["sections.py"].units == {"fwd": 1.25, "bwd": 0.5}
    assert set(got["plain.py"].units) == {"script"}
    assert 0.3 <= got["plain.py"].units["script"] < got["plain.py"].duration_s
    assert {r.case: r.units for r in load_results([out])} == {
        name: dict(r.units) for name, r in got.items()
    }
