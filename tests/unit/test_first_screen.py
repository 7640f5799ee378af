"""The first screen is the verdict (issue #36, item 6): every text format of `report` puts the
verdict line first and the table right after it; JSON's first key is the verdict and JUnit opens
with it; on a terminal `report` starts with it and fits the width; `validate`'s end does both."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from usercli import cli, command, on_a_terminal

from validate.config import Selectors
from validate.judge.signoff import decide, verdict_line
from validate.model.matrix import load_matrix
from validate.model.results import load_results
from validate.plan.rules import load_rules, plan_cells
from validate.workflow import RunOutcome, describe

if TYPE_CHECKING:
    import subprocess

REPO = Path(__file__).resolve().parents[2]
CPU_RUN = REPO / "tests" / "resources" / "runs" / "cpu"  # a real CPU-only run, 13 cells
EXAMPLE = REPO / "tests" / "resources" / "runs" / "example"
#: the committed GPU runs, by absolute path: the tool starts in the test's folder, not the checkout
DOCS_RUNS = tuple(
    str(REPO / run) for run in (REPO / "reports" / "DOCS_RUNS").read_text(encoding="utf-8").split()
)


def _report(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return cli("report", *args, cwd=cwd, timeout=300)


def _verdict(runs: tuple[str, ...], cwd: Path) -> str:
    proc = _report(*(a for r in runs for a in ("--results", r)), cwd=cwd)
    return proc.stderr.splitlines()[0]


@pytest.mark.parametrize("runs", [(str(CPU_RUN),), DOCS_RUNS], ids=["cpu", "committed-gpu"])
@pytest.mark.parametrize("fmt", ["md", "rst"])
def test_text_formats_lead_with_the_verdict_then_the_table(
    tmp_path: Path, runs: tuple[str, ...], fmt: str
) -> None:
    out = tmp_path / f"compat.{fmt}"
    proc = _report(*(a for r in runs for a in ("--results", r)), "--out", out.name, cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    verdict = next(line for line in proc.stderr.splitlines() if "SIGNED OFF" in line)
    lines = out.read_text(encoding="utf-8").splitlines()
    first = next(i for i, line in enumerate(lines) if "SIGNED OFF" in line)
    assert first <= 5, lines[: first + 1]  # under the title, in its text block
    assert lines[first].strip() == verdict
    starts = ("| cuDNN", "=====")  # a Markdown table's header, an rst grid's top rule
    table = next(i for i, line in enumerate(lines) if i > first and line.startswith(starts))
    assert table <= first + 6, lines[first : table + 1]  # then the table
    assert next(i for i, line in enumerate(lines) if line.startswith(("run `", "   run `"))) > table


def test_json_and_junit_open_with_the_verdict(tmp_path: Path) -> None:
    verdict = _verdict((str(EXAMPLE),), tmp_path)
    out = tmp_path / "r.json"
    assert _report("--results", str(EXAMPLE), "--out", out.name, "-q", cwd=tmp_path).returncode == 1
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert next(iter(doc)) == "verdict"
    assert doc["verdict"]["line"] == verdict
    out = tmp_path / "r.junit.xml"
    assert _report("--results", str(EXAMPLE), "--out", out.name, cwd=tmp_path).returncode == 1
    head = out.read_text(encoding="utf-8").splitlines()[:2]
    assert head[1] == f"<!-- {verdict} -->"


def _on_a_terminal(args: list[str], width: int, cwd: Path) -> str:
    """`cudnn-matrix ARGS` started in `cwd` on a terminal `width` columns wide: what it shows."""
    return on_a_terminal(command(*args), width=width, cwd=cwd, timeout=120)[1]


@pytest.mark.parametrize("runs", [(str(CPU_RUN),), DOCS_RUNS], ids=["cpu", "committed-gpu"])
def test_report_on_a_terminal_starts_with_the_verdict(
    tmp_path: Path, runs: tuple[str, ...]
) -> None:
    verdict = _verdict(runs, tmp_path)
    text = _on_a_terminal(["report", *(a for r in runs for a in ("--results", r))], 80, tmp_path)
    lines = text.splitlines()
    assert lines[0] == verdict[:80].rsplit(" ", 1)[0] or lines[0] == verdict, lines[:3]
    assert [line for line in lines if len(line) > 80] == []
    assert sum("SIGNED OFF" in line for line in lines) == 1


def test_validate_end_leads_with_the_verdict_and_fits_the_terminal() -> None:
    """What `validate` prints at its end (workflow.describe), from the real CPU run's results:
    the verdict line first, then the cells; within 80 columns one line per cell."""
    results = tuple(load_results([CPU_RUN]))
    plan = plan_cells(
        load_matrix(None), load_rules(None), Selectors(values={"cudnn": ("9.24.0.43",)})
    )
    ran = {r.cell_id for r in results}
    assert ran <= {c.id for c in plan.planned}
    outcome = RunOutcome(
        run_id="cpu", folder=CPU_RUN, plan=plan, results=results, verdict=decide(results)
    )
    verdict = verdict_line(outcome.verdict)
    wide = describe(outcome).splitlines()
    assert wide[0] == verdict
    assert wide[1].startswith("| cell ")
    assert max(map(len, wide)) > 80  # the table as it is: 160 columns
    narrow = describe(outcome, 80).splitlines()
    assert narrow[0] == verdict[:80].rsplit(" ", 1)[0]
    assert [line for line in narrow if len(line) > 80] == []
    for cell_id in ran:
        assert sum(line.startswith(f"{cell_id} 9.24.0.43 / ") for line in narrow) == 1
    assert narrow[-1] == f"results: {CPU_RUN}"[:80] or narrow[-1].startswith("    ")
