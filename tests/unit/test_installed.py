"""The tests run the installed tool, not the checkout (issue #36: the suite imported the checkout's
`validate/`, and a wheel that lacked two packages passed it). Under a non-editable install the
package the tests import, and its embedded data, come from site-packages; the checkout's
`validate/` folder is not on the path. Where the checkout leaks onto sys.path (pytest's
`pythonpath = ["."]`, PYTHONPATH naming it) these fail.

The checkout is compared by its `validate/` folder, not as a prefix: nox's venvs (`.nox/`) live
inside the checkout folder, and the package installed there is the installed one.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from installedtool import CHECKOUT, SOURCE, editable_from, installed_dist, is_checkout

import validate
from validate.model.matrix import DEFAULT_MATRIX
from validate.plan.rules import DEFAULT_RULES


def _editable() -> bool:
    dist = installed_dist()
    return dist is not None and editable_from(dist) is not None


pytestmark = pytest.mark.skipif(
    _editable(), reason="cudnn-matrix is installed editable: the checkout is the installed tool"
)


def test_the_imported_package_is_the_installed_one_not_the_checkouts() -> None:
    here = Path(validate.__file__).resolve()
    assert not here.is_relative_to(SOURCE), (
        f"the tests import the checkout's package ({here}), not the installed one: the checkout "
        f"is on sys.path {sys.path}"
    )
    dist = installed_dist()
    assert dist is not None
    files = {Path(str(dist.locate_file(f))).resolve() for f in dist.files or ()}
    assert here in files, f"{here} is not a file of the installed {dist.metadata['Name']}"


def test_the_checkout_is_not_on_the_path() -> None:
    """Nothing on sys.path would find the checkout's package, whatever imported it first."""
    for entry in sys.path:
        assert not is_checkout(entry), f"{entry!r} on sys.path is the checkout {CHECKOUT}"
    spec = importlib.util.find_spec("validate")
    assert spec is not None
    assert spec.origin is not None
    assert not Path(spec.origin).resolve().is_relative_to(SOURCE), spec.origin


def test_the_default_data_is_the_installed_packages() -> None:
    """The matrix and rules the tool reads with no flag are the copies the wheel carries
    (validate/_matrix), not the checkout's matrix/ folder."""
    embedded = Path(validate.__file__).resolve().parent / "_matrix"
    assert DEFAULT_MATRIX.resolve() == embedded / "default.toml"
    assert DEFAULT_RULES.resolve() == embedded / "rules.toml"
    assert not DEFAULT_RULES.resolve().is_relative_to(CHECKOUT / "matrix")
