"""`validate --tier` runs exactly the cells `plan --tier` lists, and run.json names the tier and the
planned cells it left out (a real run: a venv with real wheels, `--env current`, a tiny case)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from usercli import cli

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "tests" / "resources" / "scripts"
BACKEND, FRONTEND = "9.13.0.50", "1.27.0"  # in the shared wheelhouse (conftest.py)
MATRIX = f"""\
[axes]
cudnn = ["{BACKEND}"]
frontend = ["{FRONTEND}"]
cuda = ["12.9", "13.0"]
driver = ["570", "580"]
arch = ["sm80", "sm90"]

[tiers]
pr = {{ cover = "pairs", always = [{{ cuda = "newest", driver = "newest", arch = "newest" }}] }}
"""


def _tool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return cli(*args, cwd=cwd, timeout=300)


@pytest.mark.uv  # builds with uv itself
def test_validate_tier_runs_exactly_the_tier_and_records_the_left_out(
    wheelhouse: Path, tmp_path: Path
) -> None:
    base = tmp_path / "venv"
    subprocess.run(["uv", "venv", "--quiet", str(base)], check=True)
    python = base / "bin" / "python"
    wheels = [
        min(wheelhouse.glob(f"nvidia_cudnn_cu13-{BACKEND}-*.whl")),
        min(wheelhouse.glob(f"nvidia_cudnn_frontend-{FRONTEND}-*.whl")),
    ]
    install = ["uv", "pip", "install", "--quiet", "--python", str(python), "--no-index"]
    subprocess.run([*install, "--no-deps", *map(str, wheels)], check=True)
    matrix = tmp_path / "m.toml"
    matrix.write_text(MATRIX, encoding="utf-8")

    planned = _tool("plan", "--matrix", str(matrix), "--format", "json", cwd=tmp_path)
    tier = _tool("plan", "--matrix", str(matrix), "--tier", "pr", "--format", "json", cwd=tmp_path)
    assert planned.returncode == tier.returncode == 0, planned.stderr + tier.stderr
    all_ids = {row["id"] for row in json.loads(planned.stdout)}
    tier_ids = {row["id"] for row in json.loads(tier.stdout)}
    assert tier_ids < all_ids  # the tier leaves some planned cell out

    run_dir = tmp_path / "run"
    proc = _tool(
        *["validate", "--matrix", str(matrix), "--tier", "pr", "--env", "current"],
        *["--base-python", str(python), "--frontend-source", "current"],
        *["--cases", str(SCRIPTS / "pass_script.py"), "--results", str(run_dir)],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    ran = {json.loads(line)["cell_id"] for line in lines}
    assert ran == tier_ids
    meta = json.loads((run_dir / "run.json").read_text())
    assert set(meta["planned"]) == tier_ids
    assert meta["tier"]["name"] == "pr"
    assert {c["id"] for c in meta["tier"]["left_out"]} == all_ids - tier_ids
    assert meta["tier"]["covered"] == meta["tier"]["pairs"] > 0

    unknown = _tool("validate", "--matrix", str(matrix), "--tier", "weekly", cwd=tmp_path)
    assert unknown.returncode == 2
    assert f"--tier weekly: no such tier in {matrix}:8 (declared: pr)" in unknown.stderr
