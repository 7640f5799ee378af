"""`cudnn-matrix bisect` bad input: one line on stderr, exit 2, nothing probed (no wheels needed)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
from usercli import cli, elsewhere

if TYPE_CHECKING:
    import subprocess
    from pathlib import Path

CELL = ["--cuda", "13.0", "--driver", "580", "--arch", "sm90"]


def main(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return cli(*argv, cwd=elsewhere(), timeout=120)


def _wheelhouse(tmp_path: Path) -> Path:
    folder = tmp_path / "wheels"
    folder.mkdir()
    for version in ("1.26.0", "1.27.0"):
        (folder / f"nvidia_cudnn_frontend-{version}-cp311-cp311-manylinux_2_28_x86_64.whl").touch()
    return folder


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--case", "pin_check.py", "--case", "b"],
            "bisect: name exactly one case with --case NAME",
        ),
        (
            ["--case", "pin_check.py", "--frontend", "1.26.0"],
            "bisect: --frontend is the bisected axis",
        ),
        (["--case", "pin_check.py", "--frontend-source", "current"], "--frontend-source fights"),
        (
            ["--case", "pin_check.py", "--good", "1.25.0"],
            "bisect: --good 1.25.0 is not a release in",
        ),
        (["--case", "pin_check.py", "--bad", "1.26.0"], "bisect: empty range"),
        (
            ["--case", "pin_check.py", "--arch", "sm80,sm90"],
            "bisect: the pins plan 2 cells, not one",
        ),
        # checked before the first probe: the case exists, each end plans its one cell
        (["--case", "nosuch.ipynb"], "--case nosuch.ipynb: matches none of the"),
        (
            ["--case", "pin_check.py", "--rules", "{rules}"],
            "fe 1.27.0 / cuda 13.0 / drv 580 / arch sm90: not this one",
        ),
        # the fixed pin's wheel is not in the wheelhouse: found before any probe builds
        (
            ["--case", "pin_check.py"],
            "--cudnn 9.13.0.50: nvidia-cudnn-cu13 has no release 9.13.0.50 in --wheelhouse",
        ),
        (
            ["--case", "pin_check.py", "--slower-than", "2"],
            "--slower-than RATIO and --unit UNIT go together",
        ),
        (
            ["--case", "pin_check.py", "--unit", "cell 3"],
            "--slower-than RATIO and --unit UNIT go together",
        ),
        (
            ["--case", "pin_check.py", "--slower-than", "2", "--unit", "x", "--repeats", "3"],
            "each probe runs --speed-repeats times (not --repeats)",
        ),
        (
            ["--case", "pin_check.py", "--slower-than", "0.5", "--unit", "x"],
            "expected a number from 1",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, extra: list[str], message: str) -> None:
    argv = ["bisect", "--axis", "frontend", "--good", "1.26.0", "--bad", "1.27.0"]
    argv += ["--cudnn", "9.13.0.50", *CELL, "--wheelhouse", str(_wheelhouse(tmp_path))]
    argv += ["--results", str(tmp_path / "b")]
    # a later flag wins over an earlier one (argparse), so extra can replace --good/--bad/--arch
    rules = tmp_path / "rules.toml"  # prunes the bad end only
    rules.write_text(
        '[[rule]]\nname = "no-1.27"\nselect = { frontend = ">=1.27" }\nwhen = { cuda = ">=12" }\n'
        'reason = "not this one"\ncite = "test"\nsource = "https://example.org"\n',
        encoding="utf-8",
    )
    proc = main([*argv, *(a.replace("{rules}", str(rules)) for a in extra)])
    err = proc.stderr.strip()
    assert proc.returncode == 2, err
    assert len(err.splitlines()) == 1
    assert message in err
    assert not (tmp_path / "b" / "probes").exists()  # nothing was probed


def test_a_folder_of_another_bisect_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "b"
    folder.mkdir()
    other = {"case": "pin_check.py", "axis": "frontend", "good": "1.20.0", "bad": "1.27.0"}
    (folder / "bisect.json").write_text(json.dumps(other))
    argv = ["bisect", "--axis", "frontend", "--good", "1.26.0", "--bad", "1.27.0"]
    argv += ["--case", "pin_check.py"]
    argv += ["--cudnn", "9.13.0.50", *CELL, "--wheelhouse", str(_wheelhouse(tmp_path))]
    proc = main([*argv, "--results", str(folder)])
    assert proc.returncode == 2
    assert "holds another bisect ({'good': '1.20.0'})" in proc.stderr
