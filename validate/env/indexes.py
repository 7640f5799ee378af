"""Where the cell installs look for packages, as the installer itself would: the index pip or
uv is configured with (its settings files and variables), extra indexes, local find-links
folders, or the `--wheelhouse` alone; and the versions a simple index lists, asked once per
package and index in a process (env/versions.py checks the pins against them)."""

from __future__ import annotations

import configparser
import os
import shutil
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from validate._compat import tomllib
from validate.env.releases import IndexUnreachable, shown_url, simple_versions

__all__ = ["PYPI_SIMPLE", "TIMEOUT_S", "PackageSources", "configured_sources", "listing"]

PYPI_SIMPLE: Final = "https://pypi.org/simple/"
#: Seconds one index request may take: a check that waits longer than a user would is not kept.
TIMEOUT_S: Final = 5.0
_TRUE: Final = frozenset({"1", "true", "yes", "on", "y"})

_CACHE: dict[tuple[str, str], dict[str, bool] | None] = {}
_DEAD: dict[str, IndexUnreachable] = {}
_CACHE_LOCK = threading.Lock()


def listing(package: str, index: str) -> dict[str, bool] | None:
    """simple_versions, asked once per (package, index) in this process; an index that could
    not be asked is not asked again for the next package (one timeout, not one per package)."""
    key = (package, index)
    with _CACHE_LOCK:
        if index in _DEAD:
            raise _DEAD[index]
        if key not in _CACHE:
            try:
                _CACHE[key] = simple_versions(package, index, timeout=TIMEOUT_S)
            except IndexUnreachable as exc:
                _DEAD[index] = exc
                raise
        return _CACHE[key]


@dataclass(frozen=True, kw_only=True)
class PackageSources:
    """Where the installer looks for a package: index URLs (the first is the main one), and
    local find-links folders (the wheelhouse)."""

    installer: str
    indexes: tuple[str, ...] = ()
    folders: tuple[Path, ...] = ()
    wheelhouse: bool = False  # --wheelhouse: the only source (installs run with --no-index)

    def where(self) -> str:
        if self.wheelhouse:
            return f"--wheelhouse {self.folders[0]}"
        places = [shown_url(u) for u in self.indexes] + [str(p) for p in self.folders]
        more = f" (+{len(places) - 1} more)" if len(places) > 1 else ""
        return f"{places[0]}{more}" if places else "no index (no-index, no find-links)"


def _split(text: str | None, sep: str | None = None) -> list[str]:
    return [part for part in (text or "").split(sep) if part.strip()] if text else []


def _pip_settings() -> dict[str, str]:
    """pip's settings, as `pip install` reads them: its config files (global, user, site, then
    $PIP_CONFIG_FILE; [install] over [global]) under its PIP_* variables."""
    env_file = os.environ.get("PIP_CONFIG_FILE")
    files: list[Path] = []
    if env_file != os.devnull:
        xdg_dirs = os.environ.get("XDG_CONFIG_DIRS") or "/etc/xdg"
        files += [Path(d) / "pip" / "pip.conf" for d in xdg_dirs.split(":") if d]
        files.append(Path("/etc/pip.conf"))
        config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
        files += [Path.home() / ".pip" / "pip.conf", config_home / "pip" / "pip.conf"]
        files.append(Path(sys.prefix) / "pip.conf")
        files += [Path(env_file)] if env_file else []
    sections: dict[str, dict[str, str]] = {"global": {}, "install": {}}
    for path in files:
        parser = configparser.RawConfigParser()
        try:
            parser.read(path, encoding="utf-8")
        except (OSError, configparser.Error, UnicodeDecodeError):
            continue
        for name, values in sections.items():
            if parser.has_section(name):
                values.update({k.replace("_", "-"): v for k, v in parser.items(name)})
    settings = {**sections["global"], **sections["install"]}
    for key in ("index-url", "extra-index-url", "no-index", "find-links"):
        if (value := os.environ.get("PIP_" + key.upper().replace("-", "_"))) is not None:
            settings[key] = value
    return settings


def _uv_settings() -> dict[str, Any]:
    """uv's settings: its uv.toml files (system, then user; $UV_CONFIG_FILE instead of both;
    none with $UV_NO_CONFIG), top level and [pip], under its UV_* variables."""
    files: list[Path] = []
    if os.environ.get("UV_CONFIG_FILE"):
        files = [Path(os.environ["UV_CONFIG_FILE"])]
    elif not os.environ.get("UV_NO_CONFIG"):
        xdg_dirs = os.environ.get("XDG_CONFIG_DIRS") or "/etc/xdg"
        files += [Path(d) / "uv" / "uv.toml" for d in xdg_dirs.split(":") if d]
        files.append(Path("/etc/uv/uv.toml"))
        config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
        files.append(config_home / "uv" / "uv.toml")
    settings: dict[str, Any] = {}
    for path in files:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for table in (data, data.get("pip") or {}):
            for key in ("index-url", "extra-index-url", "find-links", "no-index"):
                if key in table:
                    settings[key] = table[key]
        for entry in data.get("index") or ():
            if isinstance(entry, dict) and entry.get("url"):
                key = "index-url" if entry.get("default") else "extra-index-url"
                old = settings.get(key)
                settings[key] = entry["url"] if key == "index-url" else [*(old or []), entry["url"]]
    env = os.environ
    if index := env.get("UV_DEFAULT_INDEX") or env.get("UV_INDEX_URL"):
        settings["index-url"] = index
    if extra := _split(env.get("UV_INDEX")) + _split(env.get("UV_EXTRA_INDEX_URL")):
        settings["extra-index-url"] = [
            e.rpartition("=")[2] if "=" in e.split("://")[0] else e for e in extra
        ]
    if env.get("UV_FIND_LINKS"):
        settings["find-links"] = _split(env["UV_FIND_LINKS"], ",")
    if env.get("UV_NO_INDEX"):
        settings["no-index"] = env["UV_NO_INDEX"]
    return settings


def _as_list(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value]
    return _split(str(value)) if value else []


def _installer(name: str) -> str:
    if name == "auto":
        return "uv" if shutil.which("uv") else "pip"
    return name


def configured_sources(installer: str, wheelhouse: Path | None) -> PackageSources:
    """Where the cell installs will look: the wheelhouse alone when given (`--no-index
    --find-links`), else the installer's configured index and extra indexes and its local
    find-links folders."""
    tool = _installer(installer)
    if wheelhouse is not None:
        return PackageSources(installer=tool, folders=(wheelhouse,), wheelhouse=True)
    settings = _pip_settings() if tool == "pip" else _uv_settings()
    no_index = (
        str(settings.get("no-index", "")).lower() in _TRUE or settings.get("no-index") is True
    )
    indexes: list[str] = []
    if not no_index:
        indexes = [str(settings.get("index-url") or PYPI_SIMPLE)]
        indexes += _as_list(settings.get("extra-index-url"))
    folders = []
    for link in _as_list(settings.get("find-links")):
        path = Path(link.removeprefix("file://")).expanduser()
        if "://" not in link.removeprefix("file://") and path.is_dir():
            folders.append(path)
    return PackageSources(installer=tool, indexes=tuple(indexes), folders=tuple(folders))
