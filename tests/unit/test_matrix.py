"""The matrix model: value parsing, stable ids, loading (all errors at once), expansion, selectors."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from validate.config import Selectors
from validate.errors import ConfigError, MatrixError
from validate.model.matrix import DEFAULT_MATRIX, Cell, Driver, expand, load_matrix, parse_value

MATRICES = Path(__file__).resolve().parent.parent / "resources" / "matrices"


def _args(**values: list[str] | str | None) -> argparse.Namespace:
    base: dict[str, object] = {
        "matrix": None,
        "rules": None,
        "cudnn": None,
        "frontend": None,
        "cuda": None,
        "driver": None,
        "arch": None,
    }
    base.update(values)
    return argparse.Namespace(**base)


def test_cell_id_is_stable_across_machines() -> None:
    # printf 'cudnn=9.24.0.43;frontend=1.27.0;cuda=13.0;driver=580;arch=sm100' | sha256sum | cut -c1-10
    cell = Cell(cudnn="9.24.0.43", frontend="1.27.0", cuda="13.0", driver="580", arch="sm100")
    assert cell.id == "6a44bd45b1"
    assert Cell(**{**cell.pins(), "arch": "sm90"}).id != cell.id


@pytest.mark.parametrize(
    ("axis", "raw", "expected"),
    [
        ("cudnn", "9.24.0.43", "9.24.0.43"),
        ("cudnn", " v9.24.0.43 ", "9.24.0.43"),
        ("frontend", "1.27.0", "1.27.0"),
        ("cuda", "13.0", "13.0"),
        ("driver", "580", "580"),
        ("driver", "580.65.06", "580.65.06"),
        ("driver", "fc-610.43.02@580.100", "fc-610.43.02@580.100"),
        ("arch", "SM_90", "sm90"),
        ("arch", "sm120", "sm120"),
    ],
)
def test_parse_value_normalises(axis: str, raw: str, expected: str) -> None:
    assert parse_value(axis, raw) == expected


@pytest.mark.parametrize(
    ("axis", "raw", "message"),
    [
        ("cudnn", "abc", "invalid version 'abc'"),
        ("cudnn", "9.24;rm -rf /", "invalid version '9.24;rm -rf /'"),
        ("cuda", "", "invalid version ''"),
        ("driver", "latest", "invalid driver 'latest'"),
        ("driver", "fc-570@580", "newer than the kernel"),
        ("driver", "580;reboot", "invalid driver"),
        ("arch", "sm91", "unknown arch 'sm91'"),
        ("arch", "hopper", "unknown arch 'hopper'"),
        ("os", "linux", "unknown axis 'os'"),
        ("cudnn", 9.24, "expected a string"),
    ],
)
def test_parse_value_rejects(axis: str, raw: object, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_value(axis, raw)


@pytest.mark.parametrize(
    ("driver", "spec", "user_ok"),
    [
        ("580", ">=580.65.06", True),  # a branch compares as its newest release
        ("570", ">=580.65.06", False),
        ("570", ">=570.26", True),
        ("580.65.05", ">=580.65.06", False),
        ("580.65.06", ">=580.65.06", True),
        ("fc-610@570", ">=580.65.06", True),  # CUDA talks to the user-mode driver
    ],
)
def test_driver_comparisons_use_versions(driver: str, spec: str, *, user_ok: bool) -> None:
    assert SpecifierSet(spec).contains(Driver.parse(driver).user) is user_ok


def test_forward_compat_driver_keeps_both_sides() -> None:
    d = Driver.parse("fc-610@580")
    assert (d.forward_compat, d.display_user, d.display_kernel) == (True, "610", "580")
    assert d.kernel < d.user


def test_default_matrix_declares_the_issue_axes() -> None:
    m = load_matrix(None)
    assert m.path == DEFAULT_MATRIX
    assert m.values("cudnn") == ("9.19.0.56", "9.23.2.1", "9.24.0.43", "9.25.1.1", "9.28.1.4")
    assert m.values("cuda") == ("12.9", "13.0")
    assert m.values("driver") == ("570", "580", "fc-610@580")
    assert m.values("arch") == ("sm80", "sm90", "sm100", "sm120")
    assert m.include
    assert m.exclude


def test_expand_is_product_plus_includes_in_order(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text(
        '[axes]\ncudnn = ["9.24.0.43", "9.25.1.1"]\nfrontend = ["1.27.0"]\ncuda = ["13.0"]\n'
        'driver = ["580"]\narch = ["sm90", "sm100"]\n'
        '[[include]]\ncudnn = "9.24.0.43"\nfrontend = "1.27.0"\ncuda = "13.0"\ndriver = "580"\n'
        'arch = "sm90"\n'  # already in the product: not duplicated
        '[[include]]\ncudnn = "9.24.0.43"\nfrontend = "1.26.0"\ncuda = "12.9"\ndriver = "570"\n'
        'arch = "sm80"\n',
        encoding="utf-8",
    )
    cells = expand(load_matrix(path))
    assert [(c.cudnn, c.arch) for c in cells[:4]] == [
        ("9.24.0.43", "sm90"),
        ("9.24.0.43", "sm100"),
        ("9.25.1.1", "sm90"),
        ("9.25.1.1", "sm100"),
    ]
    assert len(cells) == 5
    assert cells[-1].frontend == "1.26.0"


def test_loader_reports_every_bad_entry_with_lines() -> None:
    path = MATRICES / "many_errors.toml"
    with pytest.raises(MatrixError) as info:
        load_matrix(path)
    text = str(info.value)
    assert "\n" not in text
    parts = text.split("; ")
    expected = [
        f"{path}:2: python: the file-level python is gone: declare the axis in [axes]",
        f"{path}:10: axes.gpu: unknown axis",
        f"{path}:5: axes.cudnn[1]: invalid version 'abc'",
        f"{path}:6: axes.frontend[1]: duplicate value '1.27.0'",
        f"{path}:7: axes.cuda: expected a non-empty list",
        f"{path}:8: axes.driver[1]: forward compat needs",
        f"{path}:8: axes.driver[2]: invalid driver 'latest'",
        f"{path}:9: axes.arch[1]: unknown arch 'hopper'",
        f"{path}:12: include[0]: missing 'driver'",
        f"{path}:18: exclude[0]: missing 'reason'",
    ]
    assert len(parts) == len(expected)
    for part, start in zip(parts, expected, strict=True):
        assert part.startswith(start), part


def test_malformed_toml_names_line_and_column() -> None:
    path = MATRICES / "malformed.toml"
    with pytest.raises(MatrixError, match=r"malformed\.toml:3: malformed TOML .*line 3, column 1"):
        load_matrix(path)


def test_missing_file_is_a_matrix_error(tmp_path: Path) -> None:
    with pytest.raises(MatrixError, match="cannot read matrix file"):
        load_matrix(tmp_path / "absent.toml")


def test_selectors_narrow_override_and_map_equal_versions() -> None:
    m = load_matrix(None)
    sel = Selectors.from_args(
        _args(cudnn=["9.24.0.43,9.99.0.1"], cuda=["13"], arch=["sm_90", "sm100"])
    )
    narrowed = sel.narrow(m)
    assert narrowed.values("cudnn") == ("9.24.0.43", "9.99.0.1")  # 9.99.0.1 overrides (added)
    assert narrowed.values("cuda") == ("13.0",)  # 13 == 13.0: the declared text is kept
    assert narrowed.values("arch") == ("sm90", "sm100")
    assert narrowed.values("frontend") == m.values("frontend")
    assert narrowed.include == ()  # the 1.19.1 / 12.9 include is outside the selection
    assert sel.describe() == "--cudnn 9.24.0.43,9.99.0.1 --cuda 13 --arch sm90,sm100"


def test_selectors_report_every_bad_flag_value() -> None:
    with pytest.raises(ConfigError) as info:
        Selectors.from_args(_args(cudnn=["abc"], arch=["sm91"]))
    assert str(info.value) == (
        "--cudnn: invalid version 'abc' (expected PEP 440, e.g. 9.24.0.43); "
        "--arch: unknown arch 'sm91' (known: sm70, sm75, sm80, sm86, sm89, sm90, sm100, sm120)"
    )
