"""reports/ is generated only: the committed compat files equal a fresh render of the committed run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GPU_RUNS = sorted(REPO.glob("reports/gpu/*/validate/results.jsonl"))


@pytest.mark.parametrize(("fmt", "name"), [("md", "compat.md"), ("rst", "compat.rst")])
def test_committed_table_is_a_fresh_render(tmp_path: Path, fmt: str, name: str) -> None:
    assert GPU_RUNS, "no committed GPU run under reports/gpu/"
    run = GPU_RUNS[-1].parent.relative_to(REPO)
    out = tmp_path / name
    argv = [sys.executable, "-m", "validate", "report", "--results", str(run)]
    proc = subprocess.run(
        [*argv, "--format", fmt, "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr  # that run is not signed off: 51_sdpa_backward fails
    assert out.read_text(encoding="utf-8") == (REPO / "reports" / name).read_text(encoding="utf-8")
