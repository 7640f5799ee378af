"""Which cudnn-matrix the tests run: the installed one (issue #36: the suite imported the checkout's
`validate/`, and a wheel that lacked two packages passed it). tests/conftest.py takes the checkout
off sys.path with these; tests/unit/test_installed.py checks what the tests then import."""

from __future__ import annotations

import importlib.metadata
import json
import sys
from pathlib import Path

#: The checkout's root folder: where `python -m pytest` is started, and nothing the tests import.
CHECKOUT = Path(__file__).resolve().parents[1]
#: The checkout's package folder: a module imported from under it is the checkout's, not the
#: installed tool (nox's venvs live in the checkout too, under .nox/: only this folder counts).
SOURCE = CHECKOUT / "validate"


def is_checkout(entry: str) -> bool:
    """Whether a sys.path entry names the checkout's root ("" is the current folder)."""
    try:
        return Path(entry or ".").resolve() == CHECKOUT
    except OSError:
        return False


def installed_dist() -> importlib.metadata.Distribution | None:
    """The installed cudnn-matrix, looked up past the checkout (whose root may hold a stale
    cudnn_matrix.egg-info from an in-tree build)."""
    path = [entry for entry in sys.path if not is_checkout(entry)]
    return next(iter(importlib.metadata.distributions(name="cudnn-matrix", path=path)), None)


def editable_from(dist: importlib.metadata.Distribution) -> Path | None:
    """The folder an editable install points at (PEP 610's direct_url.json), else None."""
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    if not direct.get("dir_info", {}).get("editable", False):
        return None
    url: str = direct.get("url", "")
    return Path(url.removeprefix("file://")).resolve()
