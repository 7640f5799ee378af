"""Where the version check looks: the index pip or uv is configured with, read from their own
settings files and variables (env/indexes.py configured_sources), and what a simple index page
lists (env/releases.py simple_versions, on file:// pages written here)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from validate.env.indexes import PYPI_SIMPLE, configured_sources
from validate.env.releases import shown_url, simple_versions

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No pip or uv setting of this host: no PIP_*/UV_* variables, a home of its own."""
    import os

    for name in list(os.environ):
        if name.startswith(("PIP_", "UV_")):
            monkeypatch.delenv(name)
    for name in ("HOME", "XDG_CONFIG_HOME"):
        monkeypatch.setenv(name, str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "xdg"))
    return tmp_path


def test_pip_reads_its_config_file_and_its_variables(
    clean: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    links = clean / "links"
    links.mkdir()
    conf = clean / "pip.conf"
    conf.write_text(
        "[global]\nindex-url = http://mirror/simple/\nextra-index-url = http://b/simple "
        f"http://c/simple\n[install]\nfind-links = {links}\n"
    )
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    found = configured_sources("pip", None)
    assert found.indexes == ("http://mirror/simple/", "http://b/simple", "http://c/simple")
    assert found.folders == (links,)
    assert found.where() == "http://mirror/simple/ (+3 more)"
    monkeypatch.setenv("PIP_INDEX_URL", "http://user:secret@other/simple/")
    found = configured_sources("pip", None)
    assert found.indexes[0] == "http://user:secret@other/simple/"
    assert "secret" not in found.where()  # credentials never reach a message
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    assert configured_sources("pip", None).indexes == ()


def test_uv_reads_its_own_settings_not_pips(clean: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "http://pip-only/simple/")
    assert configured_sources("uv", None).indexes == (PYPI_SIMPLE,)
    toml = clean / "uv.toml"
    toml.write_text(
        '[[index]]\nurl = "http://extra/simple/"\n[[index]]\nurl = "http://main/simple/"\n'
        "default = true\n[pip]\nfind-links = []\n"
    )
    monkeypatch.setenv("UV_CONFIG_FILE", str(toml))
    assert configured_sources("uv", None).indexes == (
        "http://main/simple/",
        "http://extra/simple/",
    )
    monkeypatch.setenv("UV_DEFAULT_INDEX", "http://env/simple/")
    assert configured_sources("uv", None).indexes[0] == "http://env/simple/"


def test_the_wheelhouse_is_the_only_source_when_given(clean: Path) -> None:
    found = configured_sources("pip", clean)
    assert (found.indexes, found.folders, found.wheelhouse) == ((), (clean,), True)


def test_a_pep_503_page_lists_versions_and_yanked_files(tmp_path: Path) -> None:
    page = tmp_path / "simple" / "nvidia-cudnn-cu13"
    page.mkdir(parents=True)
    page.joinpath("index.html").write_text(
        '<a href="../../f/nvidia_cudnn_cu13-9.13.0.50-py3-none-manylinux_2_27_x86_64.whl#sha256=0">'
        "x</a>\n"
        '<a href="nvidia_cudnn_cu13-9.13.1.26-py3-none-manylinux_2_27_x86_64.whl" data-yanked="">'
        "y</a>\n"
        '<a href="nvidia_cudnn_cu12-9.1.0.70-py3-none-manylinux2014_x86_64.whl">other</a>\n'
        '<a href="nvidia-cudnn-cu13-9.0.0.1.tar.gz">sdist</a>\n'
    )
    index = (tmp_path / "simple").as_uri()
    assert simple_versions("nvidia_cudnn_cu13", index) == {
        "9.13.0.50": False,
        "9.13.1.26": True,
        "9.0.0.1": False,
    }
    assert simple_versions("nvidia-cudnn-frontend", index) is None  # no such project page
    assert shown_url("https://u:p@host:8443/simple/") == "https://host:8443/simple/"
