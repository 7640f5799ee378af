"""Version pins resolved before any work (issue #30 item 1).

Each cuDNN and frontend version a run would install is checked against what its source offers:
the package index the installer is configured with (pip's or uv's index-url, extra indexes and
find-links: their settings files and variables, read here as the installer reads them), the
`--wheelhouse`, or the `--backend-store`. A wheel or library folder given as `--backend-source`
is checked against every planned cell's cudnn, a checkout's ref against its tags.

- a version no source has: bad input, one line naming the nearest versions there are (exit 2);
- a partial flag value (`--cudnn 9.24`): the newest release it names (finals first, yanked ones
  never), logged and stored in run.json (`versions.resolved`); a partial value in a matrix file
  is refused with its candidates (a file says what it means);
- an index that cannot be asked: one line that the pins were not checked, and the run goes on
  with them as given.

One request per package and index per process (`_listing` caches), with a short timeout.
Nothing here builds an environment or writes a file: the CLI calls it before the run starts.
"""

from __future__ import annotations

import bisect
import configparser
import logging
import os
import shutil
import sys
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from packaging.version import InvalidVersion, Version

from validate._compat import tomllib
from validate.env.releases import IndexUnreachable, shown_url, simple_versions, wheelhouse_versions
from validate.env.sources import BackendStore, Sources, backend_package
from validate.errors import ConfigError, EnvBuildError
from validate.model.axes import axis_named
from validate.model.matrix import load_matrix
from validate.plan.host import python_version_of
from validate.plan.rules import apply_rules, load_rules

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from validate.config import ValidateConfig
    from validate.model.matrix import Cell

__all__ = ["PackageSources", "configured_sources", "resolve_versions"]

log = logging.getLogger(__name__)

PYPI_SIMPLE: Final = "https://pypi.org/simple/"
FRONTEND_PACKAGE: Final = "nvidia-cudnn-frontend"
#: Seconds one index request may take: a check that waits longer than a user would is not kept.
TIMEOUT_S: Final = 5.0
_TRUE: Final = frozenset({"1", "true", "yes", "on", "y"})

_CACHE: dict[tuple[str, str], dict[str, bool] | None] = {}
_DEAD: dict[str, IndexUnreachable] = {}
_CACHE_LOCK = threading.Lock()


def _listing(package: str, index: str) -> dict[str, bool] | None:
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


@dataclass(frozen=True, kw_only=True)
class _Offer:
    """What one source has of one package: every version and the usable (not yanked) ones;
    `versions` None when it could not be asked (`why`)."""

    package: str
    where: str
    versions: tuple[Version, ...] | None
    usable: frozenset[Version] = frozenset()
    why: str = ""


def _offer(package: str, sources: PackageSources) -> _Offer:
    where = sources.where()
    found: dict[Version, bool] = {}
    for folder in sources.folders:
        found.update(dict.fromkeys(map(Version, wheelhouse_versions(folder, package)), False))
    for index in sources.indexes:
        try:
            listed = _listing(package, index) or {}
        except IndexUnreachable as exc:
            return _Offer(package=package, where=shown_url(index), versions=None, why=str(exc))
        for text, yanked in listed.items():
            version = Version(text)
            found[version] = found.get(version, True) and yanked
    usable = frozenset(v for v, yanked in found.items() if not yanked)
    return _Offer(package=package, where=where, versions=tuple(sorted(found)), usable=usable)


def _store_offer(store: BackendStore, cuda_major: int | None) -> _Offer:
    found = sorted(
        {
            Version(e.version)
            for e in store.entries
            if cuda_major is None or e.cuda_major in (None, cuda_major)
        }
    )
    return _Offer(
        package="backend",
        where=f"{store.flag} {store.root}",
        versions=tuple(found),
        usable=frozenset(found),
    )


def _nearest(wanted: Version, versions: Sequence[Version]) -> str:
    """The releases either side of `wanted` (two each), pre-releases only when it is one."""
    pool = [v for v in versions if wanted.is_prerelease or not v.is_prerelease] or list(versions)
    at = bisect.bisect_left(pool, wanted)
    near = pool[max(0, at - 2) : at + 2]
    return ", ".join(map(str, near)) if near else "none"


def _partial(wanted: Version, offer: _Offer) -> list[Version]:
    """The usable releases a partial version names (`9.24` -> every 9.24.x.y), newest last."""
    if wanted.pre or wanted.post or wanted.dev or wanted.local:
        return []
    head = wanted.release
    hits = [
        v for v in offer.usable if len(v.release) > len(head) and v.release[: len(head)] == head
    ]
    finals = [v for v in hits if not v.is_prerelease]
    return sorted(finals or hits)


@dataclass(kw_only=True)
class _Check:
    """One run's resolution: problems (bad input), resolved flag values, unchecked sources."""

    problems: list[str] = field(default_factory=list)
    resolved: dict[str, dict[str, str]] = field(default_factory=dict)
    unchecked: dict[str, str] = field(default_factory=dict)  # where -> why

    warnings: list[str] = field(default_factory=list)

    def where_is(self, wanted: Version, offers: Iterable[_Offer]) -> str:
        """ "all" offers list `wanted`, "some" do, "none" does, or "unknown": none of those
        that answered has it, and one could not be asked (noted in `unchecked`)."""
        have = lack = unknown = 0
        for offer in offers:
            if offer.versions is None:
                self.unchecked.setdefault(offer.where, offer.why)
                unknown += 1
            elif wanted in offer.versions:
                have += 1
            else:
                lack += 1
        if not lack:
            return "all"
        if have:
            return "some"
        return "unknown" if unknown else "none"

    def _lacking(self, wanted: Version, offers: Sequence[_Offer]) -> str:
        offer = next(o for o in offers if o.versions is not None and wanted not in o.versions)
        assert offer.versions is not None
        lacks = (
            f"no backend {wanted}"
            if offer.package == "backend"
            else f"{offer.package} has no release {wanted}"
        )
        return f"{lacks} in {offer.where} (nearest: {_nearest(wanted, offer.versions)})"

    def missing(self, what: str, wanted: Version, offers: Sequence[_Offer]) -> None:
        """Bad input: no source has it."""
        self.problems.append(f"{what}: {self._lacking(wanted, offers)}")

    def partly(self, what: str, wanted: Version, offers: Sequence[_Offer]) -> None:
        """One CUDA major's package has it, another's not: the cells of the other are errors."""
        self.warnings.append(
            f"warning: {what}: {self._lacking(wanted, offers)}; the cells that need it will be "
            "errors (exclude them, or choose a release it has)"
        )


class _Resolver:
    """The offers of the run's sources, each listed once."""

    def __init__(self, config: ValidateConfig) -> None:
        self.config = config
        self.backend_from_package = (
            config.env_mode != "current"
            and (config.backend_source is None or _is_version(config.backend_source))
            and config.backend_store is None
        )
        self.frontend_from_package = config.frontend_source is None or _is_version(
            config.frontend_source
        )
        self.store = BackendStore(config.backend_store) if config.backend_store else None
        self.sources = configured_sources(config.installer, config.wheelhouse)
        self._offers: dict[str, _Offer] = {}

    def package(self, name: str) -> _Offer:
        if name not in self._offers:
            self._offers[name] = _offer(name, self.sources)
        return self._offers[name]

    def backend(self, cuda_majors: Iterable[int]) -> list[_Offer]:
        """What offers a cudnn value for these CUDA majors ([] when nothing is checked)."""
        if self.store is not None:
            majors: list[int | None] = [*sorted(set(cuda_majors))] or [None]
            return [_store_offer(self.store, m) for m in majors]
        if not self.backend_from_package:
            return []
        return [self.package(backend_package(m)) for m in sorted(set(cuda_majors))]

    def offers(self, axis: str, cuda_majors: Iterable[int]) -> list[_Offer]:
        if axis == "cudnn":
            return self.backend(cuda_majors)
        return [self.package(FRONTEND_PACKAGE)] if self.frontend_from_package else []


def _is_version(text: str) -> bool:
    try:
        Version(text.strip())
    except InvalidVersion:
        return False
    return text.strip()[:1].isdigit()


def _majors(values: Iterable[str]) -> set[int]:
    return {int(Version(v).release[0]) for v in values if v}


def _flag_values(resolver: _Resolver, check: _Check, values: dict[str, tuple[str, ...]]) -> None:
    """Check the --cuda, --cudnn and --frontend values (and a version given as
    --backend-source/--frontend-source); a partial --cudnn/--frontend value is resolved."""
    config = resolver.config
    matrix = load_matrix(config.selectors.matrix)
    cudas = values.get("cuda") or (*matrix.values("cuda"), *(c.cuda for c in matrix.include))
    if resolver.backend_from_package:
        for cuda in values.get("cuda", ()):
            try:
                backend_package(int(Version(cuda).release[0]))
            except ConfigError as exc:
                check.problems.append(f"--cuda {cuda}: {exc}")
    majors = {m for m in _majors(cudas) if m in (12, 13)}
    for axis, source_flag, source in (
        ("cudnn", "--backend-source", config.backend_source),
        ("frontend", "--frontend-source", config.frontend_source),
    ):
        offers = resolver.offers(axis, majors)
        if axis in values:
            picked = (_one_flag_value(check, axis, f"--{axis}", v, offers) for v in values[axis])
            values[axis] = tuple(dict.fromkeys(picked))
        if source and _is_version(source) and check.where_is(Version(source), offers) == "none":
            check.missing(f"{source_flag} {source}", Version(source), offers)


def _one_flag_value(
    check: _Check, axis: str, flag: str, text: str, offers: Sequence[_Offer]
) -> str:
    """The value to run: `text`, or the newest release a partial `text` names."""
    wanted = Version(text)
    found = check.where_is(wanted, offers)
    if found == "some":
        check.partly(f"{flag} {text}", wanted, offers)
    if found != "none":
        return text
    hits = [_partial(wanted, offer) for offer in offers]
    common = sorted(set.intersection(*(set(h) for h in hits)) if hits else set())
    chosen = (common or sorted({v for h in hits for v in h}))[-1:] if any(hits) else []
    if not chosen:
        check.missing(f"{flag} {text}", wanted, offers)
        return text
    value = str(chosen[0])
    packages = ", ".join(dict.fromkeys(o.package for o in offers))
    log.info(
        "%s %s: resolved to %s, the newest %s release of %s in %s",
        flag,
        text,
        value,
        text,
        packages,
        offers[0].where,
    )
    check.resolved.setdefault(axis, {})[text] = value
    return value


def _planned(config: ValidateConfig) -> list[Cell]:
    """The planned cells of the (resolved) selection, without --tier (a tier is a subset)."""
    selectors = config.selectors
    matrix, rules = load_matrix(selectors.matrix), load_rules(selectors.rules)
    plan = apply_rules(
        selectors.narrow(matrix), rules, python=python_version_of(config.base_python)
    )
    return list(plan.planned)


def _cell_values(
    resolver: _Resolver, check: _Check, cells: Sequence[Cell], flags: Mapping[str, tuple[str, ...]]
) -> None:
    """The planned cells' matrix-file values (flag values were checked already), each against
    the packages of the CUDA majors it is planned with."""
    where = str(load_matrix(resolver.config.selectors.matrix).path)
    planned: dict[tuple[str, str], set[int]] = {}
    for cell in cells:
        for axis in ("cudnn", "frontend"):
            value, same = getattr(cell, axis), axis_named(axis).same
            if not any(same(value, f) for f in flags.get(axis, ())):
                planned.setdefault((axis, value), set()).add(int(Version(cell.cuda).release[0]))
    for (axis, value), majors in planned.items():
        if axis == "cudnn" and resolver.store is not None:
            continue  # a store's missing version is that cell's `error` (README: backend store)
        try:
            offers = resolver.offers(axis, majors)
        except ConfigError as exc:  # a CUDA major no backend wheel has
            check.problems.append(f"{where}: {axis} {value}: {exc}")
            continue
        wanted = Version(value)
        found = check.where_is(wanted, offers)
        if found == "some":
            check.partly(f"{where}: {axis} {value}", wanted, offers)
        if found != "none":
            continue
        hits = sorted({v for offer in offers for v in _partial(wanted, offer)})
        if hits:
            named = ", ".join(map(str, hits[-4:]))
            check.problems.append(
                f"{where}: {axis} {value} is not a release; write the full version "
                f"(in {offers[0].where}: {named})"
            )
        else:
            check.missing(f"{where}: {axis} {value}", wanted, offers)


def _sources_fit(config: ValidateConfig, cells: Sequence[Cell], check: _Check) -> None:
    """A --backend-source wheel or folder is every cell's backend: each cell's cudnn must be
    its version; a --frontend-source checkout's ref must exist (parsed now, not mid-run)."""
    sources = Sources(config.backend_source, config.frontend_source, store=config.backend_store)
    sources.frontend()
    if config.backend_source is None or config.backend_store is not None:
        return
    for cell in cells:
        try:
            sources.backend(cell.cudnn, cell.cuda)
        except EnvBuildError as exc:
            check.problems.append(f"--backend-source: {exc}")
            return


def resolve_versions(config: ValidateConfig) -> ValidateConfig:
    """The config with its version flags resolved and `versions` set to what run.json records;
    ConfigError (one line) for a version its source does not have."""
    if config.versions is not None:  # resolved once already (a container's copy of the config)
        return config
    resolver = _Resolver(config)
    check = _Check()
    values = dict(config.selectors.values)
    _flag_values(resolver, check, values)
    if check.problems:
        raise ConfigError("; ".join(check.problems))
    resolved = replace(config, selectors=replace(config.selectors, values=values))
    cells = _planned(resolved)
    _sources_fit(resolved, cells, check)
    _cell_values(resolver, check, cells, values)
    if check.problems:
        raise ConfigError("; ".join(dict.fromkeys(check.problems)))
    for line in dict.fromkeys(check.warnings):
        log.warning("%s", line)
    if check.unchecked:
        where, why = next(iter(check.unchecked.items()))
        log.warning(
            "warning: could not check the versions against %s (%s); going on with the pins as given",
            where,
            why,
        )
    record: dict[str, Any] = {
        "source": resolver.sources.where(),
        "checked": not check.unchecked,
        "resolved": check.resolved,
    }
    if check.unchecked:
        record["unchecked"] = dict(check.unchecked)
    return replace(resolved, versions=record)
