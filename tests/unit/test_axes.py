"""The axis registry: every axis declares its parsing, equality and parts, and the python axis
is a real one (ids, rules, selectors, environments) while matrices without it stay as they were."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import re
import sys
from pathlib import Path
from typing import Literal

import pytest
from packaging.version import Version

from validate.cli import build_parser
from validate.config import Selectors
from validate.env.sources import BackendSource, FrontendSource, Sources
from validate.env.venvs import EnvSpec, ensure_env
from validate.errors import EnvBuildError, MatrixError
from validate.execute.local import env_spec_for
from validate.model.axes import AXES, REGISTRY, axis_named, parse_value
from validate.model.matrix import Cell, expand, load_matrix
from validate.model.outcome import Outcome
from validate.model.results import CaseResult, cell_label
from validate.plan.rules import apply_rules, load_rules
from validate.report.junit import classname
from validate.workflow import ValidateConfig

RULES = load_rules(None)
CELL = Cell(cudnn="9.24.0.43", frontend="1.27.0", cuda="13.0", driver="580", arch="sm100")


def test_cell_fields_are_the_registry_axes_in_order() -> None:
    assert tuple(f.name for f in dataclasses.fields(Cell)) == AXES
    assert len({a.name for a in REGISTRY}) == len(REGISTRY)


@pytest.mark.parametrize(
    ("axis", "a", "b", "same"),
    [
        ("cuda", "13", "13.0", True),
        ("cudnn", "9.24.0.43", "9.24.0.43.0", True),
        ("cudnn", "9.24.0.43", "9.24.0.44", False),
        ("driver", "580.65.06", "580.65.6", True),
        ("driver", "580", "580.65.06", False),
        ("driver", "fc-610.43.02@580.65.06", "fc-610.43.2@580.65.6", True),
        ("driver", "580", "580.0", False),  # a branch is its newest release, not .0
        ("driver", "fc-610@580", "610", False),
        ("arch", "sm90", "sm90", True),
        ("arch", "sm90", "sm100", False),
        ("python", "3.12", "3.12.0", True),
        ("python", "3.12", "3.11", False),
        ("cuda", "?", "13.0", False),  # a result without the axis never equals a value
    ],
)
def test_registry_equality(axis: str, a: str, b: str, same: bool) -> None:
    assert axis_named(axis).same(a, b) is same


@pytest.mark.parametrize(
    ("raw", "expected"), [("3.12", "3.12"), (" 3.11 ", "3.11"), ("3.12.4", "3.12.4")]
)
def test_python_values_normalise(raw: str, expected: str) -> None:
    assert parse_value("python", raw) == expected


@pytest.mark.parametrize("raw", ["3", "python3.12", "2.7", "3.12;rm -rf /", "latest"])
def test_python_values_reject(raw: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"invalid python {raw!r}")):
        parse_value("python", raw)


def test_id_hashes_only_the_values_a_cell_carries() -> None:
    # printf 'cudnn=9.24.0.43;frontend=1.27.0;cuda=13.0;driver=580;arch=sm100' | sha256sum
    assert CELL.id == "6a44bd45b1"
    on_312 = dataclasses.replace(CELL, python="3.12")
    text = "cudnn=9.24.0.43;frontend=1.27.0;cuda=13.0;driver=580;arch=sm100;python=3.12"
    assert on_312.id == hashlib.sha256(text.encode()).hexdigest()[:10]
    assert list(on_312.pins()) == [*AXES]
    assert "python" not in CELL.pins()


def test_labels_and_junit_parts_come_from_the_registry() -> None:
    plain = CaseResult(case="x.py", outcome=Outcome.PASS, cell=CELL.pins())
    on_312 = plain.with_(cell={**CELL.pins(), "python": "3.12"})
    assert cell_label(plain) == "cudnn 9.24.0.43 / fe 1.27.0 / cuda 13.0 / drv 580 / arch sm100"
    assert cell_label(on_312) == f"{cell_label(plain)} / py 3.12"
    assert classname(plain) == "cudnn-9_24_0_43.fe-1_27_0.cuda-13_0.drv-580.sm100"
    assert classname(on_312) == f"{classname(plain)}.py-3_12"


def test_selector_flags_are_generated_from_the_registry(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = build_parser()
    args = parser.parse_args(["plan", "--python", "3.11,3.12", "--cuda", "13"])
    assert Selectors.from_args(args).values == {"cuda": ("13",), "python": ("3.11", "3.12")}
    with pytest.raises(SystemExit):
        parser.parse_args(["plan", "--help"])
    help_text = capsys.readouterr().out
    for axis in REGISTRY:
        assert f"--{axis.name} V[,V]" in help_text
        assert f"e.g. {axis.example})" in help_text


def _matrix(tmp_path: Path, extra: str = "", include: str = "") -> Path:
    path = tmp_path / "matrix.toml"
    path.write_text(
        "[axes]\n"
        'cudnn = ["9.24.0.43"]\nfrontend = ["1.27.0", "1.32.0"]\ncuda = ["13.0"]\n'
        f'driver = ["580"]\narch = ["sm90"]\n{extra}\n{include}',
        encoding="utf-8",
    )
    return path


def test_a_declared_python_axis_multiplies_the_cells(tmp_path: Path) -> None:
    matrix = load_matrix(_matrix(tmp_path, 'python = ["3.9", "3.12"]'))
    cells = expand(matrix)
    assert [(c.frontend, c.python) for c in cells] == [
        ("1.27.0", "3.9"),
        ("1.27.0", "3.12"),
        ("1.32.0", "3.9"),
        ("1.32.0", "3.12"),
    ]
    assert len({c.id for c in cells}) == 4


def test_rules_read_the_cells_python(tmp_path: Path) -> None:
    """frontend-python (frontend >= 1.29 needs Python >= 3.10) fires on the 3.9 cell only."""
    plan = apply_rules(load_matrix(_matrix(tmp_path, 'python = ["3.9", "3.12"]')), RULES)
    assert [(c.frontend, c.python) for c in plan.planned] == [
        ("1.27.0", "3.9"),
        ("1.27.0", "3.12"),
        ("1.32.0", "3.12"),
    ]
    [(cell, reason)] = plan.pruned
    assert (cell.frontend, cell.python) == ("1.32.0", "3.9")
    assert reason.startswith("frontend 1.32.0 needs Python >= 3.10 (the cell's Python is 3.9)")


def test_cells_without_python_use_the_base_python(tmp_path: Path) -> None:
    matrix = load_matrix(_matrix(tmp_path))
    assert [c.python for c in expand(matrix)] == ["", ""]
    old = apply_rules(matrix, RULES, python=Version("3.9"))
    [(cell, reason)] = old.pruned
    assert cell.frontend == "1.32.0"
    assert "(the cell's Python is 3.9)" in reason
    assert len(apply_rules(matrix, RULES, python=Version("3.12")).planned) == 2


def test_an_include_without_python_runs_on_each_python(tmp_path: Path) -> None:
    include = (
        '[[include]]\ncudnn = "9.24.0.43"\nfrontend = "1.19.1"\ncuda = "13.0"\n'
        'driver = "580"\narch = "sm90"\n'
    )
    plain = load_matrix(_matrix(tmp_path, include=include))
    assert [c.python for c in plain.include] == [""]
    spread = load_matrix(_matrix(tmp_path, 'python = ["3.11", "3.12"]', include))
    assert [c.python for c in spread.include] == ["3.11", "3.12"]
    selected = Selectors(values={"python": ("3.12",)}).narrow(plain)
    assert [c.python for c in selected.include] == ["3.12"]
    named = load_matrix(_matrix(tmp_path, 'python = ["3.12"]', include + 'python = "3.11"\n'))
    assert [c.python for c in named.include] == ["3.11"]
    assert Selectors(values={"python": ("3.12",)}).narrow(named).include == ()
    with pytest.raises(MatrixError, match=r"include\[0\]: missing 'arch'"):
        load_matrix(_matrix(tmp_path, include=include.replace('arch = "sm90"\n', "")))


def test_the_file_level_python_is_an_error_that_says_what_to_do(tmp_path: Path) -> None:
    path = _matrix(tmp_path)
    path.write_text('python = "3.12"\n' + path.read_text(), encoding="utf-8")
    with pytest.raises(MatrixError) as info:
        load_matrix(path)
    assert str(info.value).startswith(f"{path}:1: python: the file-level python is gone")
    assert 'python = ["3.12"]' in str(info.value)


def test_selecting_python_on_a_matrix_without_the_axis(tmp_path: Path) -> None:
    matrix = Selectors(values={"python": ("3.11", "3.12")}).narrow(load_matrix(_matrix(tmp_path)))
    assert [(c.frontend, c.python) for c in expand(matrix)] == [
        ("1.27.0", "3.11"),
        ("1.27.0", "3.12"),
        ("1.32.0", "3.11"),
        ("1.32.0", "3.12"),
    ]


def _spec(cell: Cell) -> EnvSpec:
    return env_spec_for(cell, ValidateConfig(), Sources())


def test_env_hash_names_python_only_when_the_cell_has_one() -> None:
    plain = EnvSpec(backend=BackendSource(kind="pypi", version="9.24.0.43"),
                    frontend=FrontendSource(kind="pypi", version="1.27.0"))  # fmt: skip
    keys = {"tool", "backend", "frontend", "cuda_major", "python", "extras", "base",
            "backend_deps", "tooling"}  # fmt: skip
    assert set(plain.to_dict()) == keys  # today's keys: today's hashes
    on_312 = dataclasses.replace(plain, python_version="3.12")
    assert on_312.to_dict() == {**plain.to_dict(), "python_version": "3.12"}
    assert _spec(dataclasses.replace(CELL, python="3.12")).python_version == "3.12"
    assert _spec(CELL).python_version is None


def test_selector_parse_errors_name_the_python_flag() -> None:
    ns = argparse.Namespace(python=["3.x"])
    with pytest.raises(Exception, match=r"--python: invalid python '3\.x'"):
        Selectors.from_args(ns)


@pytest.mark.parametrize("installer", [pytest.param("uv", marks=pytest.mark.uv), "pip"])
def test_a_python_this_host_lacks_is_one_line_before_anything_is_installed(
    installer: Literal["uv", "pip"], tmp_path: Path
) -> None:
    spec = EnvSpec(backend=BackendSource(kind="pypi", version="9.24.0.43"),
                   frontend=FrontendSource(kind="pypi", version="1.27.0"),
                   python_version="3.99")  # fmt: skip
    with pytest.raises(EnvBuildError) as info:
        ensure_env(spec, cache_dir=tmp_path, installer=installer)
    text = str(info.value)
    assert text.startswith("python 3.99 is not available on this host (")
    assert "\n" not in text
    assert "uv python install 3.99" in text


def test_the_current_environment_must_be_the_cells_python(tmp_path: Path) -> None:
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    spec = EnvSpec(backend=BackendSource(kind="current", version="9.24.0.43"),
                   frontend=FrontendSource(kind="current"), python_version=here)  # fmt: skip
    assert ensure_env(spec, cache_dir=tmp_path).python == Path(sys.executable)
    with pytest.raises(EnvBuildError, match=r"the cell asks for python 3\.99 but the current"):
        ensure_env(dataclasses.replace(spec, python_version="3.99"), cache_dir=tmp_path)
