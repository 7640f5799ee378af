"""`report` on a terminal: the real CLI on a real pseudo-terminal of a set size (TIOCSWINSZ) prints
the per-cell summary, footnotes and known issues within the width, and the verdict once; piped, it
prints the Markdown report to stdout and the verdict to stderr, as before."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from usercli import cli, command, on_a_terminal

if TYPE_CHECKING:
    import subprocess

REPO = Path(__file__).resolve().parents[2]
CPU_RUN = "tests/resources/runs/cpu"  # a real CPU-only run: one backend, 13 cells
DOCS_RUNS = tuple((REPO / "reports" / "DOCS_RUNS").read_text(encoding="utf-8").split())


def _results(runs: tuple[str, ...]) -> list[str]:
    return [a for run in runs for a in ("--results", run)]


@pytest.fixture(scope="module")
def here(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder `report` starts in: it holds the runs at the relative paths the tests name
    (the checkout is no folder the tests start the tool in)."""
    folder = tmp_path_factory.mktemp("report-terminal")
    for run in (CPU_RUN, *DOCS_RUNS):
        shutil.copytree(REPO / run, folder / run, symlinks=True)
    return folder


def _on_a_terminal(args: list[str], width: int, cwd: Path) -> tuple[int, str]:
    """Run `report` with stdin, stdout and stderr on one pseudo-terminal `width` columns wide."""
    return on_a_terminal(command("report", *args), width=width, cwd=cwd, timeout=120)


def _piped(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return cli("report", *args, cwd=cwd, timeout=None)


@pytest.mark.parametrize(("runs", "width"), [((CPU_RUN,), 80), ((CPU_RUN,), 132), (DOCS_RUNS, 100)])
def test_a_terminal_gets_the_summary_within_its_width_and_the_verdict_once(
    here: Path, runs: tuple[str, ...], width: int
) -> None:
    piped = _piped(_results(runs), here)
    verdict = piped.stderr.splitlines()[0]
    assert "SIGNED OFF" in verdict
    code, text = _on_a_terminal(_results(runs), width, here)
    assert code == piped.returncode
    lines = text.splitlines()
    too_wide = [line for line in lines if len(line) > width]
    assert too_wide == []
    # the verdict once (wrapped to the width: its first words start exactly one line)
    assert sum(line.startswith(verdict[:30]) for line in lines) == 1
    assert sum("SIGNED OFF" in line for line in lines) == 1
    # the per-cell summary is there; the case x cell matrix and the Markdown page are not
    assert "## Cases" not in text
    assert "Rows: cases" not in text
    assert "# cuDNN frontend x backend compatibility" not in text
    assert "--out FILE" in text
    if runs == (CPU_RUN,):  # 13 cells: one line each where the grid does not fit
        grid_rows = [line for line in lines if line.startswith("9.24.0.43 · fe ")]
        assert len(grid_rows) == 13
    else:  # the GPU run's grid fits 100 columns: it is printed as a table
        assert any(line.startswith("| 9.22.0.52 |") for line in lines)


def test_piped_output_is_the_markdown_report_and_the_verdict_on_stderr(here: Path) -> None:
    proc = _piped(_results((CPU_RUN,)), here)
    assert proc.stdout.startswith("# cuDNN frontend x backend compatibility\n")
    for section in ("## Cases", "## Known issues", "## Sign-off"):
        assert section in proc.stdout
    assert proc.stderr.startswith("NOT SIGNED OFF — no GPU: 223 GPU cases skipped")
    assert max(map(len, proc.stdout.splitlines())) > 1000  # the wide matrix, as documented
