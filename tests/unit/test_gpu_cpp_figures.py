"""bench/gpu_cpp_figures.py over the committed C++ GPU reports (issue #39 item 4): the figures
committed beside each report are what the script prints from that report's own files, and a
direct run that was cut short gives no agreement or ratio for its binary."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_cpp_figures.py"


def _figures(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(folder)], capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize("name", ["2026-12-06-h100-cpp", "2026-12-07-h100-cpp-9.24"])
def test_the_committed_figures_are_the_scripts_output(name: str) -> None:
    folder = ROOT / "reports" / "gpu" / name
    proc = _figures(folder)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (folder / "figures.txt").read_text(encoding="utf-8")


def test_a_binary_ended_by_its_timeout_gives_no_agreement_and_no_ratio() -> None:
    """2026-12-07: `samples` was ended by `timeout 45` after Catch2 had written only the XML
    declaration; `tests` ran whole and agrees TEST_CASE by TEST_CASE."""
    out = _figures(ROOT / "reports" / "gpu" / "2026-12-07-h100-cpp-9.24").stdout
    samples, tests = out.split("== 9.24.0.43 samples:")[1].split("== 9.24.0.43 tests:")
    assert "binary rc 124" in samples
    assert "the binary's JUnit is incomplete (rc 124: its `timeout` ended it)" in samples
    assert "agree" not in samples
    assert "TEST_CASEs: tool 18, binary 18, both 18" in tests
    assert "agree (pass/fail/skip): 18 of 18" in tests
    assert "no ratio: the binaries' runs do not cover every cell and target the tool ran" in out
    assert "tool / direct binaries" not in out


def test_a_folder_without_the_archive_is_one_line_exit_2(tmp_path: Path) -> None:
    proc = _figures(tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"gpu_cpp_figures: {tmp_path / 'cpp.tgz'}: no such file"
