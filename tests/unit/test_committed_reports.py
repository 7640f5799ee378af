"""reports/ is generated only: the committed compat files equal a fresh render of the committed run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from usercli import cli

REPO = Path(__file__).resolve().parents[2]
# the run folders the committed table was rendered from (written by `nox -s docs_table`)
DOCS_RUNS = REPO / "reports" / "DOCS_RUNS"
# the --link-base that `nox -s docs_table` passes (noxfile.py DOCS_LINK_BASE): evidence links are
# "../" + the path from the repository root, whatever folder the render is written to
DOCS_LINK_BASE = ("--link-base", "../")


@pytest.fixture(scope="module")
def runs_here(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder that holds the committed runs at their paths from the repository root, where the
    render starts: its links are --link-base + the path from the folder it started in, and the
    checkout is no folder the tests start the tool in."""
    here = tmp_path_factory.mktemp("docs-runs")
    for run in DOCS_RUNS.read_text(encoding="utf-8").split():
        shutil.copytree(REPO / run, here / run, symlinks=True)
    return here


@pytest.mark.parametrize(
    ("fmt", "name"), [("md", "compat.md"), ("rst", "compat.rst"), ("html", "compat.html")]
)
def test_committed_table_is_a_fresh_render(
    tmp_path: Path, runs_here: Path, fmt: str, name: str
) -> None:
    noxfile = (REPO / "noxfile.py").read_text(encoding="utf-8")
    assert f"DOCS_LINK_BASE = {DOCS_LINK_BASE!r}".replace("'", '"') in noxfile
    runs = DOCS_RUNS.read_text(encoding="utf-8").split()
    assert runs, "reports/DOCS_RUNS names no run"
    for run in runs:  # committed GPU runs only, each a stored run folder
        assert run.startswith("reports/gpu/"), run
        assert (REPO / run / "results.jsonl").is_file(), run
    out = tmp_path / name
    argv = ["report", *(a for run in runs for a in ("--results", run))]
    proc = cli(*argv, "--format", fmt, "--out", str(out), *DOCS_LINK_BASE, cwd=runs_here)
    assert proc.returncode == 1, proc.stderr  # those runs are not signed off (regressions)
    assert out.read_text(encoding="utf-8") == (REPO / "reports" / name).read_text(encoding="utf-8")
