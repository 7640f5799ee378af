"""Numbers: nan, inf and out-of-range values of every numeric flag are exit 2 naming the flag."""

from __future__ import annotations

from pathlib import Path

import pytest
from usercli import cli

SCRIPTS = Path(__file__).resolve().parents[1] / "resources" / "scripts"

#: (command prefix, flag) for every numeric flag of the CLI.
FLAGS = [
    (("run", str(SCRIPTS / "pass_script.py")), "--timeout"),
    (("run", str(SCRIPTS / "pass_script.py")), "--jobs"),
    (("run", str(SCRIPTS / "pass_script.py")), "--reruns"),
    (("validate", "--cudnn", "9.24.0.43"), "--timeout"),
    (("validate", "--cudnn", "9.24.0.43"), "--jobs"),
    (("validate", "--cudnn", "9.24.0.43"), "--reruns"),
    (("envs", "prune"), "--older-than"),
]
BAD = ["nan", "inf", "1e400", "-1", "1e12", "3;rm -rf /"]


@pytest.mark.parametrize(("prefix", "flag"), FLAGS, ids=[f"{p[0]}{f}" for p, f in FLAGS])
@pytest.mark.parametrize("value", BAD)
def test_bad_number_is_one_line_exit_2(
    tmp_path: Path, prefix: tuple[str, ...], flag: str, value: str
) -> None:
    results = ["--results", str(tmp_path / "run")] if prefix[0] in ("run", "validate") else []
    proc = cli(
        *prefix,
        *results,
        f"{flag}={value}",
        cwd=tmp_path,
        env={"CUDNN_MATRIX_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert flag in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "run").exists()  # nothing ran, nothing was written
