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

- a release only some of a value's CUDA majors have (cu13, not cu12): one warning line; those
  cells will be `error`.

Where the installer looks: env/indexes.py (one request per package and index per process, with
a short timeout). Nothing here builds an environment or writes a file: workflow.run and
slurm.run call it (the CLI hands it down) once the input files are read, before the run folder.
"""

from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final

from packaging.version import InvalidVersion, Version

from validate.env.indexes import PackageSources, configured_sources, listing
from validate.env.releases import IndexUnreachable, shown_url, wheelhouse_versions
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

__all__ = ["resolve_versions"]

log = logging.getLogger(__name__)

FRONTEND_PACKAGE: Final = "nvidia-cudnn-frontend"


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
            listed = listing(package, index) or {}
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
