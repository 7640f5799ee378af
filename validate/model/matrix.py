"""The matrix model: cells with stable ids, and the checked TOML loader (every bad entry at once).

Which axes exist, and how each value is parsed and compared, is the registry in `model/axes.py`.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Final

from validate.datafile import Key, TomlErrors, read_toml
from validate.model.axes import ARCHES, AXES, REGISTRY, Driver, axis_named, parse_value, pins_label

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "ARCHES",
    "AXES",
    "DEFAULT_MATRIX",
    "MATRIX_DIR",
    "AxisValues",
    "Cell",
    "Driver",
    "Exclude",
    "Matrix",
    "Tier",
    "env_pins",
    "expand",
    "load_matrix",
    "parse_value",
]

#: Axes every matrix declares; the others (python) are optional.
_REQUIRED: Final = tuple(a.name for a in REGISTRY if not a.optional)
_OPTIONAL: Final = frozenset(a.name for a in REGISTRY if a.optional)


#: The embedded data lives next to the package in a source checkout or editable install:
#: <repo>/matrix/default.toml and <repo>/matrix/rules.toml.
def _matrix_dir() -> Path:
    """The data folder: `matrix/` of the checkout (editable installs, nox, images), else the copy
    a wheel carries as `validate/_matrix` (pyproject's package-dir maps it from `matrix/`)."""
    here = Path(__file__).resolve().parents[1]  # validate/
    checkout = here.parent / "matrix"
    return checkout if (checkout / "default.toml").is_file() else here / "_matrix"


MATRIX_DIR: Final = _matrix_dir()
DEFAULT_MATRIX: Final = MATRIX_DIR / "default.toml"

_TOP_KEYS: Final = frozenset({"axes", "include", "exclude", "tiers"})
#: How a tier picks its cells: every planned cell, or a covering array of the value pairs.
COVER_MODES: Final = ("all", "pairs")
#: The words an `always` entry may give instead of a version: the first/last by the axis's order.
_ENDS: Final = ("oldest", "newest")
#: The file-level `python = "3.12"` of earlier matrices: nothing ran it; the python axis replaced it.
_OLD_PYTHON: Final = (
    'the file-level python is gone: declare the axis in [axes], e.g. python = ["3.12"] (the'
    " cells' environments are built with it and the rules read it), or leave it out (the cells"
    " and the rules use the base interpreter)"
)


@dataclass(frozen=True, kw_only=True, order=True)
class Cell:
    """One combination of pins, one field per registry axis (model/axes.py). Values are the
    normalised strings; "" for an optional axis the cell has no value for."""

    cudnn: str
    frontend: str
    cuda: str
    driver: str
    arch: str
    python: str = ""  # "" = the base interpreter (not part of the id)

    @property
    def id(self) -> str:
        """Short hash of the pins: the same on every machine and Python version. Only the values
        a cell carries are hashed, so a matrix without optional axes keeps its historic ids."""
        text = ";".join(f"{axis}={value}" for axis, value in self.pins().items())
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    def pins(self) -> dict[str, str]:
        """The values the cell carries, in registry order (an unset optional axis is left out)."""
        return {axis: value for axis in AXES if (value := getattr(self, axis))}

    @property
    def label(self) -> str:
        return pins_label(self.pins())


def env_pins(cell: Cell, defaults: Mapping[str, str] | None = None) -> dict[str, str]:
    """The one environment key: the cell's values of the axes the registry marks `env` (what is
    installed), in registry order; driver and arch are not among them. Every executor's
    `env_key` and `images build` derive from these, so an axis marked `env` reaches every kind
    of environment (tests/unit/test_executors.py checks each registered executor).

    An optional axis the cell leaves out takes its value from `defaults` (an image is made for
    a Python: `env.images.IMAGE_DEFAULTS`), else it is left out (a venv on the host's Python).
    """
    defaults = defaults or {}
    return {
        axis.name: value
        for axis in REGISTRY
        if axis.env and (value := getattr(cell, axis.name) or defaults.get(axis.name, ""))
    }


def _spread(includes: Mapping[Cell, str], axis: str, values: tuple[str, ...]) -> dict[Cell, str]:
    """Included cells that leave the optional `axis` out run on each of its `values`."""
    out: dict[Cell, str] = {}
    for cell, reason in includes.items():
        spread = [replace(cell, **{axis: v}) for v in values] if not getattr(cell, axis) else [cell]
        for one in spread:
            out.setdefault(one, reason)
    return out


@dataclass(frozen=True, kw_only=True)
class AxisValues:
    """One axis of a loaded matrix: its name and its normalised values in declared order."""

    name: str
    values: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Exclude:
    """An `[[exclude]]` entry: fnmatch patterns per axis (and on the cell id), with its reason."""

    patterns: Mapping[str, tuple[str, ...]]
    reason: str
    where: str


@dataclass(frozen=True, kw_only=True)
class Tier:
    """A `[tiers]` entry: a named subset of the planned cells (plan/tiers.py chooses it).

    `always` holds patterns, one table of axis = value each ("newest"/"oldest" or a version); an
    axis a pattern leaves out is free, and the tier holds at least one planned cell per pattern.
    `where` is ``file:line`` of the entry, `always_where` the same per pattern, for messages."""

    name: str
    cover: str
    always: tuple[Mapping[str, str], ...] = ()
    where: str = ""
    always_where: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Matrix:
    """A loaded matrix file: the declared axes, extra cells and excluded patterns."""

    path: Path
    axes: Mapping[str, AxisValues]
    include: tuple[Cell, ...] = ()
    exclude: tuple[Exclude, ...] = ()
    include_reasons: Mapping[Cell, str] = field(default_factory=dict)
    tiers: Mapping[str, Tier] = field(default_factory=dict)
    #: ``file:line`` of the [tiers] table (or the file), for an unknown --tier.
    tiers_where: str = ""

    def values(self, axis: str) -> tuple[str, ...]:
        """The declared values; an optional axis the matrix leaves out has the one value ""."""
        found = self.axes.get(axis)
        return found.values if found is not None else ("",)

    def with_axes(self, values: Mapping[str, tuple[str, ...]]) -> Matrix:
        """A copy whose named axes hold exactly `values`; includes outside them are dropped
        (an include without a value for an optional axis runs on each of its values)."""
        axes = dict(self.axes)
        reasons = {c: self.include_reasons.get(c, "") for c in self.include}
        for name, vals in values.items():
            axes[name] = AxisValues(name=name, values=vals)
            if name in _OPTIONAL:
                reasons = _spread(reasons, name, vals)
        keep = {
            c: r for c, r in reasons.items() if all(getattr(c, a) in axes[a].values for a in values)
        }
        return replace(self, axes=axes, include=tuple(keep), include_reasons=keep)


def expand(matrix: Matrix) -> list[Cell]:
    """The product of the axes followed by the included cells (duplicates dropped, order kept)."""
    product = (
        Cell(**dict(zip(AXES, values, strict=True)))
        for values in itertools.product(*(matrix.values(axis) for axis in AXES))
    )
    return list(dict.fromkeys(itertools.chain(product, matrix.include)))


#: Input scale: an axis longer than this is refused with this limit (a matrix of that size is a
#: mistake or an attack, and would take minutes to plan).
MAX_AXIS_VALUES: Final = 10_000


def _values(errors: TomlErrors, key: Key, axis: str, raw: object) -> tuple[str, ...]:
    if not isinstance(raw, list) or not raw:
        errors.add(key, f"expected a non-empty list of strings, got {raw!r}")
        return ()
    if len(raw) > MAX_AXIS_VALUES:
        errors.add(
            key,
            f"{len(raw)} values, more than the limit of {MAX_AXIS_VALUES} per axis; "
            "split the matrix or narrow it",
        )
        return ()
    spec = axis_named(axis)
    seen: dict[object, str] = {}  # identity (13 == 13.0) -> the first spelling: O(n), not O(n^2)
    for i, item in enumerate(raw):
        try:
            value = parse_value(axis, item)
        except ValueError as exc:
            errors.add(key / i, str(exc))
            continue
        try:
            ident: object = spec.key(value)
        except ValueError:
            ident = value
        if ident in seen:
            errors.add(key / i, f"duplicate value {item!r} (the same {axis} as {seen[ident]!r})")
            continue
        seen[ident] = value
    return tuple(seen.values())


def _entries(errors: TomlErrors, name: str, raw: object) -> list[dict[str, object]]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(e, dict) for e in raw):
        errors.add(Key.of(name), f"expected an array of tables ([[{name}]]), got {raw!r}")
        return []
    return raw


def _includes(errors: TomlErrors, raw: object) -> dict[Cell, str]:
    """Each include names one value per axis; an optional axis it leaves out is spread later."""
    out: dict[Cell, str] = {}
    for i, entry in enumerate(_entries(errors, "include", raw)):
        key = Key.of("include", i)
        for unknown in sorted(set(entry) - {*AXES, "reason"}):
            errors.add(
                key / unknown, f"unknown key (expected the axes {', '.join(AXES)} and reason)"
            )
        pins: dict[str, str] = {}
        complete = True
        for axis in AXES:
            if axis not in entry:
                if axis in _REQUIRED:
                    errors.add(key, f"missing {axis!r} (an include names one value per axis)")
                    complete = False
                continue
            try:
                pins[axis] = parse_value(axis, entry[axis])
            except ValueError as exc:
                errors.add(key / axis, str(exc))
                complete = False
        if complete:
            out[Cell(**pins)] = str(entry.get("reason", "included by the matrix"))
    return out


def _excludes(errors: TomlErrors, raw: object) -> tuple[Exclude, ...]:
    out: list[Exclude] = []
    for i, entry in enumerate(_entries(errors, "exclude", raw)):
        key = Key.of("exclude", i)
        patterns: dict[str, tuple[str, ...]] = {}
        for name, value in entry.items():
            if name == "reason":
                continue
            if name not in {*AXES, "id"}:
                errors.add(key / name, "unknown key (expected axes, id, reason)")
                continue
            items = value if isinstance(value, list) else [value]
            texts = [p.strip() for p in items if isinstance(p, str) and p.strip()]
            if not items or len(texts) != len(items):
                errors.add(key / name, f"expected a pattern or list of patterns, got {value!r}")
                continue
            patterns[name] = tuple(p.lower() if name == "arch" else p for p in texts)
        reason = entry.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            errors.add(key, "missing 'reason' (every exclusion says why)")
        elif not patterns:
            errors.add(key, "names no axis pattern; it would exclude everything")
        else:
            out.append(
                Exclude(patterns=patterns, reason=reason.strip(), where=f"{errors.path.name}:{key}")
            )
    return tuple(out)


def _where(errors: TomlErrors, key: Key) -> str:
    line = errors.line_of(key)
    return f"{errors.path}:{line}" if line else str(errors.path)


def _always(errors: TomlErrors, key: Key, raw: object) -> tuple[dict[str, str], ...]:
    """`always = [{ cudnn = "newest", frontend = "1.32.0" }, ...]`: values parsed as the axis's."""
    if not isinstance(raw, list):
        errors.add(key, f"expected a list of tables of axis = value, got {raw!r}")
        return ()
    out: list[dict[str, str]] = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict) or not entry:
            errors.add(key / i, f"expected a table of axis = value, got {entry!r}")
            continue
        pins: dict[str, str] = {}
        for axis, value in entry.items():
            if axis not in AXES:
                errors.add(key / i / axis, f"unknown axis (known: {', '.join(AXES)})")
            elif value in _ENDS:
                pins[axis] = value
            else:
                try:
                    pins[axis] = parse_value(axis, value)
                except ValueError as exc:
                    errors.add(key / i / axis, f"{exc} (or one of {', '.join(_ENDS)})")
        out.append(pins)
    return tuple(out)


def _tiers(errors: TomlErrors, raw: object) -> dict[str, Tier]:
    """`[tiers]`: `name = "all"` or `name = { cover = "pairs"|"all", always = [...] }`."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        errors.add(Key.of("tiers"), f"expected a table of tiers, got {raw!r}")
        return {}
    out: dict[str, Tier] = {}
    for name, body in raw.items():
        key = Key.of("tiers", name)
        spec = {"cover": body} if isinstance(body, str) else body
        if not isinstance(spec, dict):
            errors.add(
                key,
                f"expected a cover mode or a table {{ cover = ..., always = [...] }}, got {body!r}",
            )
            continue
        for unknown in sorted(set(spec) - {"cover", "always"}):
            errors.add(key / unknown, "unknown key (expected cover, always)")
        cover = spec.get("cover", "all")
        if cover not in COVER_MODES:
            where = key if isinstance(body, str) else key / "cover"
            errors.add(where, f"unknown cover mode {cover!r} (expected {' or '.join(COVER_MODES)})")
            continue
        always = _always(errors, key / "always", spec.get("always", []))
        out[name] = Tier(
            name=name,
            cover=str(cover),
            always=always,
            where=_where(errors, key),
            always_where=tuple(_where(errors, key / "always" / i) for i in range(len(always))),
        )
    return out


def load_matrix(path: Path | None = None) -> Matrix:
    """Load and check a matrix file (default: the embedded `matrix/default.toml`)."""
    path = path or DEFAULT_MATRIX
    doc = read_toml(path, what="matrix")
    data, errors = doc.data, doc.errors
    for unknown in sorted(set(data) - _TOP_KEYS):
        known = f"unknown key (expected {', '.join(sorted(_TOP_KEYS))})"
        errors.add(Key.of(unknown), _OLD_PYTHON if unknown == "python" else known)
    raw_axes = data.get("axes")
    axes: dict[str, AxisValues] = {}
    if not isinstance(raw_axes, dict):
        errors.add(Key.of("axes"), f"missing [axes] table with {', '.join(_REQUIRED)}")
        raw_axes = {}
    for unknown in sorted(set(raw_axes) - set(AXES)):
        errors.add(Key.of("axes", unknown), f"unknown axis (known: {', '.join(AXES)})")
    for axis in AXES:
        key = Key.of("axes", axis)
        if axis not in raw_axes:
            if raw_axes and axis in _REQUIRED:
                errors.add(key, "missing axis")
            continue
        axes[axis] = AxisValues(name=axis, values=_values(errors, key, axis, raw_axes[axis]))
    includes = _includes(errors, data.get("include"))
    for axis in (a for a in AXES if a in _OPTIONAL and a in axes):
        includes = _spread(includes, axis, axes[axis].values)
    excludes = _excludes(errors, data.get("exclude"))
    tiers = _tiers(errors, data.get("tiers"))
    errors.raise_if_any()
    return Matrix(
        path=path,
        axes=axes,
        include=tuple(includes),
        exclude=excludes,
        include_reasons=includes,
        tiers=tiers,
        tiers_where=_where(errors, Key.of("tiers")),
    )
