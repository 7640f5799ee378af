"""The CLI follows its own table (issue #36, item 7): no option taken by a prefix of its name, an
--out suffix that names another format (or none) refused, global options accepted after the
sub-command, a bad --tier named at the flag. The real CLI in a real process, from a folder that is
not the checkout."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from usercli import cli

if TYPE_CHECKING:
    import subprocess

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "tests" / "resources" / "runs" / "example"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return cli(*args, cwd=cwd, timeout=120)


def _one_line_exit_2(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


@pytest.mark.parametrize(
    "argv",
    [
        ("plan", "--cudn", "9.24.0.43"),  # --cudnn
        ("plan", "--show-p"),  # --show-pruned
        ("report", "--results", str(EXAMPLE), "--form", "json"),  # --format
        ("--verb", "plan"),  # --verbose
        ("envs", "list", "--cache", "x"),  # --cache-dir
    ],
)
def test_no_option_is_taken_by_a_prefix(tmp_path: Path, argv: tuple[str, ...]) -> None:
    line = _one_line_exit_2(_cli(*argv, cwd=tmp_path))
    assert "unrecognized arguments" in line
    assert argv[-1] in line or argv[-2] in line


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--out", "x.pdf"), "--out x.pdf: the suffix names no report format"),
        (("--out", "x"), "--out x: the suffix names no report format"),
        (
            ("--format", "html", "--out", "x.md"),
            "--out x.md: the suffix names md, not --format html",
        ),
        (("--format", "md", "--out", "x.json"), "the suffix names json, not --format md"),
        (("--format", "json", "--out", "x.junit.xml"), "names junit, not --format json"),
    ],
)
def test_an_out_suffix_that_names_another_format_is_refused(
    tmp_path: Path, args: tuple[str, ...], needle: str
) -> None:
    line = _one_line_exit_2(_cli("report", "--results", str(EXAMPLE), *args, cwd=tmp_path))
    # a path flag is made absolute where it is parsed (relative to the caller's folder)
    assert needle.replace("--out ", f"--out {tmp_path}/") in line
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (("--out", "r.json"), "r.json"),
        (("--out", "r.xml"), "r.xml"),
        (("--format", "junit", "--out", "r.junit.xml"), "r.junit.xml"),
        (("--format", "md", "--out", "r.txt"), "r.txt"),  # a suffix that names no other format
    ],
)
def test_an_out_suffix_that_agrees_is_written(
    tmp_path: Path, args: tuple[str, ...], name: str
) -> None:
    proc = _cli("report", "--results", str(EXAMPLE), *args, cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    assert (tmp_path / name).stat().st_size > 0


def test_global_options_are_accepted_after_the_sub_command(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    for argv in (
        ("envs", "list", "--cache-dir", str(cache)),
        ("envs", "--cache-dir", str(cache), "list"),
    ):
        proc = _cli(*argv, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == f"no environments in {cache / 'envs'}"
    proc = _cli("envs", "prune", "--all", "--cache-dir", str(cache), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("removed 0 of 0 environments")
    # -v (more logging) after the command, and after a command's action
    quiet = _cli("plan", "--cudnn", "9.24.0.43", "--arch", "sm90", cwd=tmp_path)
    loud = _cli("plan", "--cudnn", "9.24.0.43", "--arch", "sm90", "-vv", cwd=tmp_path)
    assert quiet.returncode == loud.returncode == 0, loud.stderr
    assert quiet.stdout == loud.stdout
    proc = _cli("envs", "list", "-v", "--cache-dir", str(cache), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_a_bad_tier_is_named_at_the_flag(tmp_path: Path) -> None:
    line = _one_line_exit_2(_cli("plan", "--tier", "foo", cwd=tmp_path))
    assert line.startswith("cudnn-matrix: error: --tier foo: no such tier in "), line
    assert "default.toml:" in line
    assert "(declared: " in line


@pytest.mark.parametrize(
    "command",
    ["plan", "validate", "envs", "run", "report", "known-issues", "images", "bisect"],
)
def test_every_help_has_the_exit_code_of_a_bisect_whose_ends_agree(
    tmp_path: Path, command: str
) -> None:
    """Exit 6 (bisect: both ends gave the same outcome) is a row of every --help's table and of
    the README's, not folded into 2 ("nothing run or written")."""
    proc = _cli(command, "--help", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout[proc.stdout.index("exit codes:") :]
    (row,) = [line for line in table.splitlines() if line.startswith("  6 ")]
    assert "same outcome" in row
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "\n| 6 | `bisect` only: both ends of the range gave the same outcome" in readme
