"""The compatibility table from the stored example run: exact Markdown text, sort order, pivots."""

from __future__ import annotations

from pathlib import Path

import pytest

from validate.errors import ConfigError
from validate.report.store import load_known_issue_db, load_runs
from validate.report.table import Pivot, build_table
from validate.report.text import table_text

EXAMPLE = Path(__file__).parents[1] / "resources" / "runs" / "example"

EXPECTED_MD = """\
| cuDNN     | fe 1.26.0 / sm90    | fe 1.26.0 / sm100   | fe 1.27.0 / sm90   | fe 1.27.0 / sm100                         |
|-----------|---------------------|---------------------|--------------------|-------------------------------------------|
| 9.8.0.87  | ✓ 1 · 2 skip [1,2]  | ✓ 1 · 2 skip [1,2]  | ✓ 1 · 2 skip [1,2] | ✓ 1 · 2 skip [1,2]                        |
| 9.19.0.56 | ✓ 3                 | ✓ 3                 | ✓ 3                | ✓ 3                                       |
| 9.24.0.43 | ✓ 3                 | ✓ 3                 | ✕ 1/3              | ⚠ affected (KI-1) · ✓ 1                   |
| 9.25.1.1  | ! 1 error [3] · ✓ 2 | ✓ 3                 | ✓ 3                | ✓ 2 · 1 skip [4] · fixed in 9.25.0 (KI-1) |

- [1] skip: backend 9.8.0 below the notebook's floor 9.13.0 (asserts cudnn.backend_version() >= 91300) (4 results)
- [2] skip: requires backend >= 9.13 (4 results)
- [3] error: pin not honoured: loaded 9.19.0.56 from /usr/lib/x86_64-linux-gnu/libcudnn.so.9, expected 9.25.1.1 (1 result)
- [4] skip: graph not supported: cudnnGraphNotSupportedError: No valid engine configs for Matmul_ (1 result)"""


def _table(pivot: str = "cudnn:frontend,arch", *, known_issues: bool = True) -> str:
    runs = load_runs([EXAMPLE])
    kis = load_known_issue_db(None, runs.runs) if known_issues else ()
    return table_text(build_table(runs.items, Pivot.parse(pivot), kis))


def test_markdown_table_exact_text() -> None:
    assert _table() == EXPECTED_MD


def test_backends_sorted_by_version_not_string() -> None:
    rows = [line.split("|")[1].strip() for line in _table().splitlines()[2:6]]
    assert rows == ["9.8.0.87", "9.19.0.56", "9.24.0.43", "9.25.1.1"]
    assert sorted(rows) != rows  # a string sort would put 9.19 before 9.8


def test_fixed_in_flag_needs_the_database() -> None:
    text = _table(known_issues=False)
    assert "fixed in" not in text
    assert "⚠ affected (KI-1)" in text  # from the results' own xfail verdicts


def test_pivot_case_rows_backend_columns() -> None:
    lines = _table("case:cudnn").splitlines()
    cells = [[c.strip() for c in line.split("|")[1:-1]] for line in lines[:5]]
    assert cells[0] == [
        "case",
        "cuDNN 9.8.0.87",
        "cuDNN 9.19.0.56",
        "cuDNN 9.24.0.43",
        "cuDNN 9.25.1.1",
    ]
    assert cells[2] == ["00_introduction.ipynb", "✓ 4", "✓ 4", "✓ 4", "✓ 3 · 1 skip [1]"]
    assert cells[3][1:] == [
        "4 skip [2]",
        "✓ 4",
        "✕ 1/4 · ⚠ affected (KI-1)",
        "✓ 4 · fixed in 9.25.0 (KI-1)",
    ]
    assert cells[4][0] == "repro_fusion_uid[graph-pygraph-auto]"


@pytest.mark.parametrize(
    "text", ["cudnn", "cudnn:", ":arch", "cudnn:gpu", "cudnn:cudnn", "cudnn,arch:arch"]
)
def test_bad_pivot_is_a_config_error(text: str) -> None:
    with pytest.raises(ConfigError, match="--pivot"):
        Pivot.parse(text)


def test_report_reads_the_run_snapshot_with_the_known_issues_loader() -> None:
    """The report has no known-issue model of its own: it reads the run's snapshot of the DB
    with validate.judge.known_issues (not the default DB), and that table is the expected one."""
    from validate.judge.known_issues import KnownIssue, load_known_issues

    runs = load_runs([EXAMPLE])
    kis = load_known_issue_db(None, runs.runs)
    assert all(type(k) is KnownIssue for k in kis)
    assert kis == tuple(load_known_issues(EXAMPLE / "known_issues.toml"))
    assert [(k.id, k.fixed_in, str(k.backend)) for k in kis] == [("KI-1", "9.25.0", "<9.25,>=9.24")]
    assert len(load_known_issues()) > len(kis)  # the default DB would be a different one
    assert table_text(build_table(runs.items, known_issues=kis)) == EXPECTED_MD


def test_a_cell_that_passed_beside_cases_skipped_for_want_of_a_gpu_is_unproven() -> None:
    """A no-GPU run (the real CPU run): the cells whose pin check passed while every GPU case
    skipped for want of a GPU are `unproven` (amber on the page), not `pass` (green); a GPU
    run's cells that only skipped for a declared reason stay `pass`."""
    cpu = load_runs([EXAMPLE.parent / "cpu"])
    statuses = {c.status for c in build_table(cpu.items).cells.values()}
    assert "pass" not in statuses
    assert "unproven" in statuses
    example = build_table(load_runs([EXAMPLE]).items)
    assert example.cell(("9.8.0.87",), ("1.26.0", "sm90")).status == "pass"  # skips: a floor
