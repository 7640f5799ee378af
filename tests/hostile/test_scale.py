"""Input scale: a 10^6-value axis is refused at once with its stated limit (no hang), and an axis
at the limit plans (duplicates are found with a set, not by scanning a list)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from usercli import cli

from validate.datafile import MAX_DATA_BYTES
from validate.model.matrix import MAX_AXIS_VALUES

if TYPE_CHECKING:
    import subprocess
    from pathlib import Path


def _matrix(path: Path, cudnn_values: int, *, dupe: bool = False) -> Path:
    values = [f'"9.{13 + i // 1000}.{i % 1000}.1"' for i in range(cudnn_values)]
    if dupe:
        values[-1] = '"9.13.0.1.0"'  # the same version as the first one
    axes = 'frontend = ["1.27.0"]\ncuda = ["13.0"]\ndriver = ["580"]\narch = ["sm90"]\n'
    path.write_text(f"[axes]\ncudnn = [{','.join(values)}]\n{axes}")
    return path


def _plan(matrix: Path) -> subprocess.CompletedProcess[str]:
    """`cudnn-matrix plan --matrix NAME` started in the matrix's folder."""
    return cli(
        *("plan", "--matrix", matrix.name, "--format", "json"),
        cwd=matrix.parent,
        timeout=60,  # a hang fails here; the wall time itself is not asserted
    )


def test_a_million_values_are_refused_with_the_limit(tmp_path: Path) -> None:
    matrix = _matrix(tmp_path / "big.toml", 1_000_000)
    assert matrix.stat().st_size > MAX_DATA_BYTES
    proc = _plan(matrix)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert f"limit of {MAX_DATA_BYTES // 2**20} MiB" in proc.stderr


@pytest.mark.parametrize("dupe", [False, True])
def test_an_axis_at_the_value_limit_plans(tmp_path: Path, dupe: bool) -> None:
    proc = _plan(_matrix(tmp_path / "m.toml", MAX_AXIS_VALUES, dupe=dupe))
    if dupe:
        assert proc.returncode == 2
        assert "duplicate value '9.13.0.1.0' (the same cudnn as '9.13.0.1')" in proc.stderr
    else:
        assert proc.returncode == 0, proc.stderr[-500:]
        assert len(json.loads(proc.stdout)) == MAX_AXIS_VALUES  # every value planned once


def test_one_value_over_the_axis_limit_is_refused(tmp_path: Path) -> None:
    proc = _plan(_matrix(tmp_path / "m.toml", MAX_AXIS_VALUES + 1))
    assert proc.returncode == 2
    assert f"more than the limit of {MAX_AXIS_VALUES} per axis" in proc.stderr
