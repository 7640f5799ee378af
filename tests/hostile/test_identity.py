"""Identity: two cases with one result key are refused naming both; equivalent matrix values are
one value (reported as duplicates); an empty selector value is an error, never a wider plan."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from usercli import cli

if TYPE_CHECKING:
    import subprocess

SCRIPTS = Path(__file__).resolve().parents[1] / "resources" / "scripts"


def _one_line_exit_2(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr


def test_two_variants_with_one_name_are_refused_naming_both(tmp_path: Path) -> None:
    """The false SIGNED OFF: one variant failed, one passed, the report kept the pass."""
    folder = tmp_path / "cases"
    folder.mkdir()
    (folder / "v.py").write_text("import sys\nsys.exit(0 if sys.argv[1:] == ['ok'] else 1)\n")
    (folder / "cases.toml").write_text(
        '[[case]]\nname = "v"\nscript = "v.py"\nargs = ["bad"]\n\n'
        '[[case]]\nname = "v"\nscript = "v.py"\nargs = ["ok"]\n'
    )
    proc = cli("run", str(folder), "--results", str(tmp_path / "run"), cwd=tmp_path)
    manifest = folder / "cases.toml"
    _one_line_exit_2(proc, "'v'", f"{manifest}:1 (case[0])", f"{manifest}:6 (case[1])")
    assert not (tmp_path / "run" / "results.jsonl").exists()


def test_a_variant_and_a_file_with_one_name_are_refused(tmp_path: Path) -> None:
    folder = tmp_path / "cases"
    folder.mkdir()
    (folder / "v.py").write_text("print('VERDICT pass')\n")
    (folder / "other.py").write_text("print('VERDICT pass')\n")
    (folder / "cases.toml").write_text('[[case]]\nname = "other.py"\nscript = "v.py"\n')
    proc = cli("run", str(folder), "--results", str(tmp_path / "run"), cwd=tmp_path)
    _one_line_exit_2(proc, "'other.py'", str(folder / "other.py"), "case[0]")


def test_the_same_case_named_in_two_cases_flags_is_refused(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        folder.mkdir()
        (folder / "same.py").write_text("print('VERDICT pass')\n")
    proc = cli(
        "run",
        str(a / "same.py"),
        str(b / "same.py"),
        "--results",
        str(tmp_path / "r"),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr  # different files: named by their relative paths


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--cudnn", ""), ("--frontend", " "), ("--cuda", ","), ("--arch", "sm90,"), ("--driver", "")],
)
def test_an_empty_selector_value_is_an_error_naming_the_flag(
    flag: str, value: str, tmp_path: Path
) -> None:
    proc = cli("plan", "--cudnn", "9.24.0.43", f"{flag}={value}", cwd=tmp_path)
    _one_line_exit_2(proc, flag, "empty")


@pytest.mark.parametrize(
    ("axis", "values"),
    [
        ("cudnn", '["9.24.0.43", "9.24.0.43.0"]'),
        ("cuda", '["13", "13.0"]'),
        ("frontend", '["1.27", "1.27.0"]'),
    ],
)
def test_equivalent_matrix_values_are_reported_as_duplicates(
    tmp_path: Path, axis: str, values: str
) -> None:
    axes = {
        "cudnn": '["9.24.0.43"]',
        "frontend": '["1.27.0"]',
        "cuda": '["13.0"]',
        "driver": '["580"]',
        "arch": '["sm90"]',
    }
    axes[axis] = values
    matrix = tmp_path / "m.toml"
    matrix.write_text("[axes]\n" + "".join(f"{k} = {v}\n" for k, v in axes.items()))
    proc = cli("plan", "--matrix", str(matrix), cwd=tmp_path)
    _one_line_exit_2(proc, f"{matrix}:", "duplicate", axis)
