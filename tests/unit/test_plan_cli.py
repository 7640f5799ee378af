"""`python -m validate plan` as a user runs it: real subprocesses, JSON shape, one-line bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from usercli import cli, elsewhere

if TYPE_CHECKING:
    import subprocess

REPO = Path(__file__).resolve().parents[2]
MATRICES = REPO / "tests" / "resources" / "matrices"
JSON_KEYS = ["id", "cudnn", "frontend", "cuda", "driver", "arch", "status", "reason"]


def _plan(*args: str) -> subprocess.CompletedProcess[str]:
    return cli("plan", *args, cwd=elsewhere(), timeout=60)


def test_json_lists_planned_and_pruned_cells_with_reasons() -> None:
    proc = _plan("--cudnn", "9.24.0.43", "--format", "json", "--show-pruned")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # nox merges stderr into stdout; JSON must stay parseable there
    rows = json.loads(proc.stdout)
    assert all(list(row) == JSON_KEYS for row in rows)
    statuses = [row["status"] for row in rows]
    assert set(statuses) == {"planned", "pruned"}
    assert statuses == sorted(statuses)  # planned first, then pruned
    assert {row["cudnn"] for row in rows} == {"9.24.0.43"}
    assert all(row["reason"] == "" for row in rows if row["status"] == "planned")
    pruned = {row["id"]: row["reason"] for row in rows if row["status"] == "pruned"}
    # cudnn 9.24.0.43 / fe 1.27.0 / cuda 13.0 / driver 570 / sm100, id = sha256(pins)[:10]
    cell = next(r for r in rows if r["frontend"] == "1.27.0" and r["driver"] == "570"
                and r["cuda"] == "13.0" and r["arch"] == "sm100")  # fmt: skip
    assert pruned[cell["id"]] == (
        "CUDA 13.0 needs driver >= 580.65.06 (found 570) [cuDNN 9.17.0 support matrix]"
    )
    assert "6a44bd45b1" in {row["id"] for row in rows if row["status"] == "planned"}


def test_json_without_show_pruned_has_only_planned() -> None:
    proc = _plan("--cudnn", "9.24.0.43", "--arch", "sm90", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert rows
    assert {row["status"] for row in rows} == {"planned"}
    assert {row["arch"] for row in rows} == {"sm90"}


def test_table_output_and_override_of_an_undeclared_value() -> None:
    proc = _plan(
        "--cudnn", "9.99.0.1", "--frontend", "1.27.0", "--cuda", "13.0", "--driver", "580",
        "--arch", "sm90,sm100", "--show-pruned",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == JSON_KEYS
    body = [line.split() for line in lines[2:]]
    assert [row[1:7] for row in body] == [
        ["9.99.0.1", "1.27.0", "13.0", "580", "sm90", "planned"],
        ["9.99.0.1", "1.27.0", "13.0", "580", "sm100", "planned"],
    ]
    assert "2 cells: 2 planned, 0 pruned" in proc.stderr


BAD_INPUTS = [
    pytest.param(
        ["--matrix", str(MATRICES / "malformed.toml")],
        ["malformed.toml", "malformed TOML", "line 3"],
        id="malformed-toml",
    ),
    pytest.param(
        ["--matrix", str(MATRICES / "unknown_key.toml")],
        ["unknown_key.toml:2", "colour", "unknown key"],
        id="unknown-key",
    ),
    pytest.param(
        ["--matrix", str(MATRICES / "unknown_axis.toml")],
        ["unknown_axis.toml:7", "axes.os", "unknown axis"],
        id="unknown-axis",
    ),
    pytest.param(
        ["--matrix", str(MATRICES / "bad_version.toml")],
        ["bad_version.toml:2", "axes.cudnn[1]", "'abc'"],
        id="invalid-version-file",
    ),
    pytest.param(
        ["--matrix", str(MATRICES / "injected_version.toml")],
        ["injected_version.toml:2", "axes.cudnn[0]", "'9.24;rm -rf /'"],
        id="injected-version-file",
    ),
    pytest.param(
        ["--matrix", str(MATRICES / "unknown_arch.toml")],
        ["unknown_arch.toml:6", "axes.arch[1]", "'sm91'"],
        id="unknown-arch-file",
    ),
    pytest.param(["--cudnn", "abc"], ["--cudnn", "'abc'"], id="invalid-version-flag"),
    pytest.param(
        ["--cudnn", "9.24;rm -rf /"], ["--cudnn", "'9.24;rm -rf /'"], id="injected-version-flag"
    ),
    pytest.param(["--arch", "sm91"], ["--arch", "'sm91'"], id="unknown-arch-flag"),
    pytest.param(
        ["--cuda", "13.0", "--driver", "570"],
        ["--cuda 13.0 --driver 570", "leaves no planned cell"],
        id="selection-leaves-nothing",
    ),
    pytest.param(
        ["--matrix", str(MATRICES / "absent.toml")],
        ["absent.toml", "cannot read matrix file"],
        id="missing-file",
    ),
    pytest.param(["--format", "xml"], ["--format", "'xml'"], id="bad-format"),
    pytest.param(
        ["--rules", str(REPO / "tests" / "resources" / "data" / "three_bad_rules.toml")],
        [
            "three_bad_rules.toml:5: rule[0](a).when.frontend: invalid specifier",
            "; ",
            "three_bad_rules.toml:16: rule[1](b).colour: unknown key",
            "three_bad_rules.toml:18: rule[2](c).cite: missing or empty",
        ],
        id="three-bad-rules",
    ),
]


@pytest.mark.parametrize(("args", "needles"), BAD_INPUTS)
def test_bad_input_is_one_line_exit_2(args: list[str], needles: list[str]) -> None:
    proc = _plan(*args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0]


def test_many_bad_entries_still_one_line() -> None:
    proc = _plan("--matrix", str(MATRICES / "many_errors.toml"))
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    assert line.count("many_errors.toml:") == 10


def test_python_selector_plans_cells_on_both_interpreters() -> None:
    proc = _plan("--cudnn", "9.24.0.43", "--arch", "sm90", "--python", "3.11,3.12",
                 "--format", "json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert all(list(row) == [*JSON_KEYS[:6], "python", *JSON_KEYS[6:]] for row in rows)
    pythons = [row["python"] for row in rows]
    assert set(pythons) == {"3.11", "3.12"}
    assert pythons.count("3.11") == pythons.count("3.12")
    plain = json.loads(_plan("--cudnn", "9.24.0.43", "--arch", "sm90", "--format", "json").stdout)
    assert len(rows) == 2 * len(plain)
    # the same pins on another interpreter are another cell; without --python, today's ids
    ids = {row["id"] for row in rows}
    assert len(ids) == len(rows)
    assert not ids & {row["id"] for row in plain}


def test_python_selector_in_the_table_and_a_bad_value() -> None:
    proc = _plan("--cudnn", "9.24.0.43", "--frontend", "1.27.0", "--cuda", "13.0",
                 "--driver", "580", "--arch", "sm90", "--python", "3.12")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == [*JSON_KEYS[:6], "python", *JSON_KEYS[6:]]
    assert lines[2].split()[1:8] == [
        "9.24.0.43",
        "1.27.0",
        "13.0",
        "580",
        "sm90",
        "3.12",
        "planned",
    ]
    bad = _plan("--python", "3.x")
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        "cudnn-matrix: error: --python: invalid python '3.x' "
        "(expected a CPython version like 3.12 or 3.12.4)"
    )


UNDECLARED = "no rule covers it"
SM89_WARNING = (
    "warning: --arch sm89: no rule covers it (default.toml declares sm80, sm90, sm100, sm120;"
    " no rule in rules.toml selects it); the run goes on with it"
)


def test_an_undeclared_platform_value_is_one_warning_and_the_plan_goes_on() -> None:
    """Issue #30 item 2: `--arch sm89` (not in default.toml, and no rule selects it: the rules
    select Blackwell archs, CUDA majors and forward compat) is planned, with one warning line."""
    proc = _plan("--cudnn", "9.24.0.43", "--arch", "sm89", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [SM89_WARNING]
    rows = json.loads(proc.stdout)
    assert rows
    assert {row["arch"] for row in rows} == {"sm89"}


def test_only_the_values_neither_the_matrix_nor_a_rule_covers_are_warned_about() -> None:
    """Declared values in another spelling (SM_90, 13 == 13.0), a CUDA a rule selects (14.0:
    `cuda >= 13`), a forward-compat driver (the forward-compat rules select it): silent. CUDA
    11.8 and driver 575: no rule selects them; one line each, in axis order."""
    proc = _plan(
        "--cudnn", "9.24.0.43", "--arch", "SM_90,sm100,sm89", "--cuda", "13,14.0,11.8",
        "--driver", "580,fc-620@580,575", "--format", "json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert [line.split(":")[1] for line in lines] == [
        " --cuda 11.8",
        " --driver 575",
        " --arch sm89",
    ]
    assert all(UNDECLARED in line for line in lines)
    planned = json.loads(proc.stdout)
    assert {row["arch"] for row in planned} == {"sm90", "sm100", "sm89"}


def test_a_rule_that_selects_the_value_covers_it(tmp_path: Path) -> None:
    rules = tmp_path / "ada_rules.toml"
    rules.write_text(
        "[[rule]]\n"
        'name = "ada"\n'
        'select = { arch = ["sm89"] }\n'
        'when = { cuda = "<11.8" }\n'
        'reason = "Ada ({arch}) needs CUDA >= 11.8"\n'
        'cite = "a test"\n'
        'source = "https://example.invalid/"\n'
    )
    args = ("--cudnn", "9.24.0.43", "--format", "json")
    proc = _plan(*args, "--arch", "sm89", "--rules", str(rules))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    # the same rules file says nothing about sm75: named in the warning with the file's name
    proc = _plan(*args, "--arch", "sm75", "--rules", str(rules))
    assert "--arch sm75: no rule covers it" in proc.stderr
    assert "no rule in ada_rules.toml selects it" in proc.stderr
