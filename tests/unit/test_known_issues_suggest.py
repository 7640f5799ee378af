"""`cudnn-matrix known-issues suggest` on synthetic runs written with the real ResultStore."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from validate.cli import main
from validate.judge.known_issues import load_known_issues
from validate.model.outcome import Outcome
from validate.model.results import CaseResult, ResultStore

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

ISSUE = """\
[[issue]]
id = "KI-9"
title = "synthetic: the repro crashes"
backend = "{backend}"
frontend = "{frontend}"
archs = {archs}
cases = ["repro*"]
symptom = {{ outcomes = ["crash"] }}
fixed_in = "9.25.0"
refs = ["https://example.invalid/9"]
"""

G, B = Outcome.PASS, Outcome.CRASH


@pytest.fixture(autouse=True)
def _state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run keys under tmp_path; and drop the stderr handler cli.main installs, so the next
    test's capsys stream is used."""
    monkeypatch.setenv("CUDNN_MATRIX_STATE_DIR", str(tmp_path / "state"))
    yield
    logger = logging.getLogger("validate")
    for handler in [h for h in logger.handlers if h.get_name() == "cudnn-matrix"]:
        logger.removeHandler(handler)


def _run(folder: Path, rows: list[tuple[str, str, str, Outcome]]) -> Path:
    """A sealed run folder: one repro.py result per (cudnn, frontend, arch, outcome)."""
    store = ResultStore(folder / "results.jsonl")
    for cudnn, fe, arch, outcome in rows:
        cell = {"cudnn": cudnn, "frontend": fe, "cuda": "13.0", "driver": "580", "arch": arch}
        store.append(
            CaseResult(
                case="repro.py",
                outcome=outcome,
                cell=cell,
                cell_id=f"{cudnn}-{fe}-{arch}",
                run_id=folder.name,
                reason="Kernel died" if outcome is B else "",
            )
        )
    store.seal()
    return folder


def _suggest(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    runs: list[list[tuple[str, str, str, Outcome]]],
    *,
    backend: str = ">=9.24,<9.25",
    frontend: str = "",
    archs: str = "[]",
) -> tuple[int, str]:
    db = tmp_path / "ki.toml"
    db.write_text(ISSUE.format(backend=backend, frontend=frontend, archs=archs), encoding="utf-8")
    folders = [str(_run(tmp_path / f"run-{i}", rows)) for i, rows in enumerate(runs)]
    rc = main(["known-issues", "suggest", "--results", *folders, "--known-issues", str(db)])
    return rc, capsys.readouterr().out


def _entry(tmp_path: Path, out: str) -> dict[str, object]:
    """The printed entry, read back with the database's own loader."""
    file = tmp_path / "suggested.toml"
    file.write_text(out, encoding="utf-8")
    (ki,) = load_known_issues(file)
    return {
        "backend": ki.backend,
        "frontend": ki.frontend,
        "archs": sorted(ki.archs),
        "fixed_in": ki.fixed_in,
    }


FE = "1.27.0"


@pytest.mark.parametrize(
    ("runs", "declared", "backend", "fixed_in", "says"),
    [
        pytest.param(
            [
                [("9.22.0.52", FE, "sm90", G), ("9.24.0.43", FE, "sm90", B)],
                [("9.25.1.1", FE, "sm90", B), ("9.26.0.51", FE, "sm90", G)],
            ],
            {},
            ">=9.24,<9.26.0.51",
            "9.26.0.51",
            [
                (
                    "#   backend upper bound: reproduces above <9.25; last bad 9.25.1.1:\n"
                    "#     - repro.py @ cudnn 9.25.1.1 · fe 1.27.0 · sm90 (crash, run run-1)\n"
                    "#   first good after it: 9.26.0.51:\n"
                    "#     - repro.py @ cudnn 9.26.0.51 · fe 1.27.0 · sm90 (pass, run run-1)\n"
                ),
                "fixed_in 9.25.0: reproduces at 9.25.1.1, after it",
            ],
            id="upper-widened-to-first-good",
        ),
        pytest.param(
            [[("9.24.0.43", FE, "sm90", B), ("9.25.1.1", FE, "sm90", B)]],
            {},
            ">=9.24",
            None,
            [
                "first good after it: unknown (no pass seen above it), so the upper bound is left open"
            ],
            id="upper-widened-open",
        ),
        pytest.param(
            [
                [
                    ("9.21.0.82", FE, "sm90", G),
                    ("9.22.0.52", FE, "sm90", G),
                    ("9.24.0.43", FE, "sm90", B),
                ]
            ],
            {"backend": ">=9.20,<9.25"},
            ">=9.24.0.43,<9.25",
            "9.25.0",
            [
                (
                    "#   backend lower bound: passes at the lower end of >=9.20,<9.25; "
                    "last good 9.22.0.52:\n"
                    "#     - repro.py @ cudnn 9.22.0.52 · fe 1.27.0 · sm90 (pass, run run-0)\n"
                    "#   first bad 9.24.0.43:\n"
                    "#     - repro.py @ cudnn 9.24.0.43 · fe 1.27.0 · sm90 (crash, run run-0)\n"
                ),
            ],
            id="lower-tightened",
        ),
        pytest.param(
            [[("9.19.0.56", FE, "sm90", B), ("9.24.0.43", FE, "sm90", B)]],
            {},
            ">=9.19.0.56,<9.25",
            "9.25.0",
            ["reproduces below >=9.24; first bad 9.19.0.56:", "last good before it: unknown"],
            id="lower-widened-unknown",
        ),
    ],
)
def test_backend_bounds(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    runs: list[list[tuple[str, str, str, Outcome]]],
    declared: dict[str, str],
    backend: str,
    fixed_in: str | None,
    says: list[str],
) -> None:
    rc, out = _suggest(tmp_path, capsys, runs, **declared)
    assert rc == 1
    entry = _entry(tmp_path, out)
    assert str(entry["backend"]) == str(SpecifierSet(backend))
    assert entry["fixed_in"] == fixed_in
    for text in says:
        assert text in out


def test_archs_widened(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = [[("9.24.0.43", FE, "sm100", B), ("9.24.0.43", FE, "sm90", B)]]
    rc, out = _suggest(tmp_path, capsys, runs, archs='["sm100"]')
    assert rc == 1
    entry = _entry(tmp_path, out)
    assert entry["archs"] == ["sm100", "sm90"]
    assert str(entry["backend"]) == "<9.25,>=9.24"  # the range held
    assert (
        "archs: reproduces on sm90, outside sm100:\n#     - repro.py @ cudnn 9.24.0.43 · fe 1.27.0 · sm90"
        in out
    )


def test_frontend_widened(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = [[("9.24.0.43", "1.26.0", "sm90", B), ("9.24.0.43", "1.25.0", "sm90", G)]]
    rc, out = _suggest(tmp_path, capsys, runs, frontend=">=1.27")
    assert rc == 1
    assert str(_entry(tmp_path, out)["frontend"]) == ">=1.26.0"
    assert "frontend lower bound: reproduces below >=1.27; first bad 1.26.0:" in out
    assert "last good before it: 1.25.0:" in out


def test_versions_compare_as_versions_not_strings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # string order would put 9.100 before 9.24 and 9.9 after 9.25
    runs = [
        [("9.9.0.1", FE, "sm90", G), ("9.24.0.43", FE, "sm90", B), ("9.100.0.1", FE, "sm90", G)]
    ]
    rc, out = _suggest(tmp_path, capsys, runs, backend=">=9.0,<9.200")
    assert rc == 1
    entry = _entry(tmp_path, out)
    assert str(entry["backend"]) == "<9.100.0.1,>=9.24.0.43"
    assert entry["fixed_in"] == "9.100.0.1"
    assert Version("9.100.0.1") > Version("9.24.0.43")


def test_no_contradiction_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = [
        [("9.22.0.52", FE, "sm90", G), ("9.24.0.43", FE, "sm90", B), ("9.25.1.1", FE, "sm90", G)]
    ]
    rc, out = _suggest(tmp_path, capsys, runs)
    assert rc == 0
    assert out.startswith("no known issue is contradicted by the evidence (1 issue(s), 3 result(s)")
    assert "[[issue]]" not in out


def test_pass_inside_range_without_any_reproduction(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out = _suggest(tmp_path, capsys, [[("9.24.0.43", FE, "sm90", G)]])
    assert rc == 1
    assert "the evidence gives no bound (unknown)" in out
    assert str(_entry(tmp_path, out)["backend"]) == "<9.25,>=9.24"  # printed unchanged


def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run(tmp_path / "run", [("9.24.0.43", FE, "sm90", B)])
    args = ["known-issues", "suggest", "--results", str(run)]
    assert main([*args, "--known-issues", str(tmp_path / "missing.toml")]) == 2
    assert main(["known-issues", "suggest", "--results", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert "missing.toml: no such file" in err
    assert "Traceback" not in err


def test_cells_a_tier_left_out_do_not_narrow_a_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A PR tier ran only 9.24.0.43 of the declared range (9.21 and 9.22 were left out, not run):
    no result is no evidence, so the lower bound is not tightened to what ran (#28)."""
    rc, out = _suggest(tmp_path, capsys, [[("9.24.0.43", FE, "sm90", B)]], backend=">=9.20,<9.25")
    assert rc == 0, out
    assert out.startswith("no known issue is contradicted by the evidence (1 issue(s), 1 result(s)")
    assert "[[issue]]" not in out  # nothing suggested: the range stays as declared
