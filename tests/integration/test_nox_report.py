"""`nox -s report` prints the verdict once (issue #36, item 7): it renders five formats of the
newest run, and each render used to print the verdict and its skip list. Real nox over a copy of
the project (noxfile, package, data) whose reports/runs/ holds the committed CPU run."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
CPU_RUN = REPO / "tests" / "resources" / "runs" / "cpu"
NOX = shutil.which("nox")
_PROJECT = ("noxfile.py", "pyproject.toml", "setup.py", "README.md", "validate", "matrix", "images")


@pytest.mark.skipif(NOX is None, reason="nox is not on PATH (pip install nox uv)")
def test_nox_report_prints_the_verdict_once(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    for name in _PROJECT:
        source = REPO / name
        if source.is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
            shutil.copytree(source, project / name, ignore=ignore)
        else:
            shutil.copy2(source, project / name)
    run = project / "reports" / "runs" / "cpu"
    shutil.copytree(CPU_RUN, run)
    assert NOX is not None
    proc = subprocess.run(
        [NOX, "--envdir", str(tmp_path / "nox"), "-f", str(project / "noxfile.py"), "-s", "report"],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    for suffix in (".md", ".rst", ".json", ".junit.xml", ".html"):
        assert (run / f"compat{suffix}").stat().st_size > 0, suffix
    verdicts = [line for line in output.splitlines() if line.startswith("NOT SIGNED OFF")]
    verdict = (
        "NOT SIGNED OFF — no GPU: 223 GPU cases skipped; pins verified in 7 environments "
        "(7 pass, 223 skip; flaky: block)"
    )
    assert verdicts == [verdict], output
    skip_lists = [line for line in output.splitlines() if line.startswith("no GPU: skipped")]
    assert len(skip_lists) == 1, output
