"""`report` on a terminal: the real CLI on a real pseudo-terminal of a set size (TIOCSWINSZ) prints
the per-cell summary, footnotes and known issues within the width, and the verdict once; piped, it
prints the Markdown report to stdout and the verdict to stderr, as before."""

from __future__ import annotations

import fcntl
import os
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CPU_RUN = "tests/resources/runs/cpu"  # a real CPU-only run: one backend, 13 cells
DOCS_RUNS = tuple((REPO / "reports" / "DOCS_RUNS").read_text(encoding="utf-8").split())


def _results(runs: tuple[str, ...]) -> list[str]:
    return [a for run in runs for a in ("--results", run)]


def _on_a_terminal(args: list[str], width: int) -> tuple[int, str]:
    """Run `report` with stdin, stdout and stderr on one pseudo-terminal `width` columns wide."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, width, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "validate", "report", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=REPO,
        env=env,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 1 << 16)
        except OSError:  # EIO: every holder of the terminal's other end closed it
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    code = proc.wait(timeout=120)
    return code, b"".join(chunks).decode("utf-8").replace("\r\n", "\n")


def _piped(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "validate", "report", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize(("runs", "width"), [((CPU_RUN,), 80), ((CPU_RUN,), 132), (DOCS_RUNS, 100)])
def test_a_terminal_gets_the_summary_within_its_width_and_the_verdict_once(
    runs: tuple[str, ...], width: int
) -> None:
    piped = _piped(_results(runs))
    verdict = piped.stderr.splitlines()[0]
    assert "SIGNED OFF" in verdict
    code, text = _on_a_terminal(_results(runs), width)
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


def test_piped_output_is_the_markdown_report_and_the_verdict_on_stderr() -> None:
    proc = _piped(_results((CPU_RUN,)))
    assert proc.stdout.startswith("# cuDNN frontend x backend compatibility\n")
    for section in ("## Cases", "## Known issues", "## Sign-off"):
        assert section in proc.stdout
    assert proc.stderr.startswith("NOT SIGNED OFF — no GPU: 223 GPU cases skipped")
    assert max(map(len, proc.stdout.splitlines())) > 1000  # the wide matrix, as documented
