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
import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat
import pytest
from usercli import cli

from validate.env.target import ExecTarget
from validate.execute.cases import discover_cases
from validate.execute.runner import RunOptions, run_cases
from validate.model.results import ResultStore, load_results

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Mapping

pytestmark = pytest.mark.slow

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
        assert "1 candidate, 0 confirmed, 0 were load, 1 could not be re-measured" in text
        assert "⏱" not in text


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
