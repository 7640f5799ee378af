"""Re-runs: --resume keeps a result only for the same case content and pins; longest first."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from validate.env.target import ExecTarget
from validate.execute.cases import discover_cases
from validate.execute.runner import RunOptions, _longest_first, run_cases
from validate.model.results import ResultStore


def _scripts(folder: Path) -> list[Path]:
    paths = []
    for name in ("a.py", "b.py", "c.py"):
        path = folder / name
        path.write_text(f"print('VERDICT pass: {name}')\n")
        paths.append(path)
    return paths


def test_longest_first_unknown_first_ties_keep_order(tmp_path: Path) -> None:
    cases = discover_cases(_scripts(tmp_path))
    history = {"a.py": 1.0, "b.py": 9.0}
    assert [c.name for c in _longest_first(cases, history)] == ["c.py", "b.py", "a.py"]
    assert [c.name for c in _longest_first(cases, {})] == ["a.py", "b.py", "c.py"]


def test_resume_reruns_only_what_changed(tmp_path: Path) -> None:
    (tmp_path / "cases").mkdir()
    paths = _scripts(tmp_path / "cases")
    store = ResultStore(tmp_path / "run" / "results.jsonl")
    history = tmp_path / "durations.json"
    options = RunOptions(results_dir=tmp_path / "run", resume=True, history=history, jobs=2)
    target = ExecTarget(python=Path(sys.executable), cell_id="cell1", cell={"cudnn": "9.24.0.43"})

    first = run_cases(discover_cases(paths), target, options, store)
    assert [r.outcome.value for r in first] == ["pass", "pass", "pass"]
    assert sorted(k for k in json.loads(history.read_text()) if not k.startswith("#")) == [
        "a.py",
        "b.py",
        "c.py",
    ]

    again = run_cases(discover_cases(paths), target, options, store)
    assert len(store.path.read_text().splitlines()) == 3  # nothing re-ran
    assert [r.content_key for r in again] == [r.content_key for r in first]

    paths[1].write_text("print('VERDICT fail: changed')\n")
    changed = run_cases(discover_cases(paths), target, options, store)
    lines = [json.loads(line) for line in store.path.read_text().splitlines()]
    assert [line["case"] for line in lines[3:]] == ["b.py"]  # only the changed case ran
    assert {r.case: r.outcome.value for r in changed} == {
        "a.py": "pass",
        "b.py": "fail",
        "c.py": "pass",
    }

    other_pins = ExecTarget(
        python=Path(sys.executable), cell_id="cell2", cell={"cudnn": "9.25.1.1"}
    )
    run_cases(discover_cases(paths), other_pins, options, store)
    assert len(store.path.read_text().splitlines()) == 4 + 3  # a new pin set runs everything
