"""The matrix model: axes, cells with stable ids, and the checked TOML loader (every bad entry at once)."""

from __future__ import annotations

import hashlib
import itertools
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Final

from packaging.version import InvalidVersion, Version

from validate.datafile import Key, TomlErrors, read_toml

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "ARCHES",
    "AXES",
    "DEFAULT_MATRIX",
    "MATRIX_DIR",
    "Axis",
    "Cell",
    "Driver",
    "Exclude",
    "Matrix",
    "expand",
    "load_matrix",
    "parse_value",
]

#: Axis names in their canonical order; a cell id hashes the pins in this order.
AXES: Final = ("cudnn", "frontend", "cuda", "driver", "arch")

#: Known GPU architectures (compute capability X.Y -> smXY); anything else is an input error.
#: sm70 (Volta) is kept so that "CUDA 13 dropped Volta" is a rule that can fire.
ARCHES: Final = ("sm70", "sm75", "sm80", "sm86", "sm89", "sm90", "sm100", "sm120")


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

_DRIVER_NUM = re.compile(r"\d{3,4}(?:\.\d{1,3}){0,2}")
_FC = re.compile(r"fc-(?P<user>[^@]+)@(?P<kernel>.+)")
#: A bare branch ("580") stands for the newest release of that branch when compared.
_BRANCH_TOP: Final = "99999"
_TOP_KEYS: Final = frozenset({"python", "axes", "include", "exclude"})


@dataclass(frozen=True, kw_only=True, order=True)
class Cell:
    """One combination of pins. Values are the strings as declared (versions normalised by the loader)."""

    cudnn: str
    frontend: str
    cuda: str
    driver: str
    arch: str

    @property
    def id(self) -> str:
        """Short hash of the pins: the same on every machine and Python version."""
        text = ";".join(f"{axis}={getattr(self, axis)}" for axis in AXES)
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    def pins(self) -> dict[str, str]:
        return {axis: getattr(self, axis) for axis in AXES}

    @property
    def label(self) -> str:
        return f"cudnn {self.cudnn} / fe {self.frontend} / cuda {self.cuda} / drv {self.driver} / {self.arch}"


@dataclass(frozen=True, kw_only=True)
class Driver:
    """A driver pin: a branch ("580"), a release ("580.65.06") or forward compat ("fc-610@580")."""

    text: str
    user: Version
    kernel: Version
    forward_compat: bool

    @classmethod
    def parse(cls, text: str) -> Driver:
        """Parse and check one driver value; raises ValueError with the reason."""
        text = text.strip()
        if m := _FC.fullmatch(text):
            user, kernel = _driver_version(m["user"]), _driver_version(m["kernel"])
            if user <= kernel:
                msg = f"forward compat needs a user-mode driver newer than the kernel one: {text!r}"
                raise ValueError(msg)
            return cls(text=text, user=user, kernel=kernel, forward_compat=True)
        version = _driver_version(text)
        return cls(text=text, user=version, kernel=version, forward_compat=False)

    @property
    def display_user(self) -> str:
        return self.text.split("@")[0].removeprefix("fc-")

    @property
    def display_kernel(self) -> str:
        return self.text.rsplit("@", 1)[-1]


def _driver_version(text: str) -> Version:
    if not _DRIVER_NUM.fullmatch(text):
        msg = f"invalid driver {text!r} (expected a branch like 580, a release like 580.65.06, or fc-610@580)"
        raise ValueError(msg)
    return Version(f"{text}.{_BRANCH_TOP}" if "." not in text else text)


def parse_value(axis: str, raw: object) -> str:
    """Check one axis value and return its normalised text; raises ValueError naming the problem."""
    if not isinstance(raw, str):
        msg = f"expected a string, got {type(raw).__name__} {raw!r}"
        raise ValueError(msg)  # noqa: TRY004 - one error type for every bad value keeps callers simple
    text = raw.strip()
    match axis:
        case "cudnn" | "frontend" | "cuda":
            try:
                return str(Version(text))
            except InvalidVersion:
                msg = f"invalid version {raw!r} (expected PEP 440, e.g. 9.24.0.43)"
                raise ValueError(msg) from None
        case "driver":
            return Driver.parse(text).text
        case "arch":
            arch = text.lower().replace("_", "")
            if arch not in ARCHES:
                msg = f"unknown arch {raw!r} (known: {', '.join(ARCHES)})"
                raise ValueError(msg)
            return arch
        case _:
            msg = f"unknown axis {axis!r} (known: {', '.join(AXES)})"
            raise ValueError(msg)


@dataclass(frozen=True, kw_only=True)
class Axis:
    """One axis of the matrix: its name and its normalised values in declared order."""

    name: str
    values: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Exclude:
    """An `[[exclude]]` entry: fnmatch patterns per axis (and on the cell id), with its reason."""

    patterns: Mapping[str, tuple[str, ...]]
    reason: str
    where: str


@dataclass(frozen=True, kw_only=True)
class Matrix:
    """A loaded matrix file: axes, the Python the cells use, extra cells and excluded patterns."""

    path: Path
    python: Version
    axes: Mapping[str, Axis]
    include: tuple[Cell, ...] = ()
    exclude: tuple[Exclude, ...] = ()
    include_reasons: Mapping[Cell, str] = field(default_factory=dict)

    def values(self, axis: str) -> tuple[str, ...]:
        return self.axes[axis].values

    def with_axes(self, values: Mapping[str, tuple[str, ...]]) -> Matrix:
        """A copy whose named axes hold exactly `values`; includes outside them are dropped."""
        axes = dict(self.axes)
        for name, vals in values.items():
            axes[name] = Axis(name=name, values=vals)
        keep = tuple(
            c for c in self.include if all(getattr(c, a) in axes[a].values for a in values)
        )
        return replace(self, axes=axes, include=keep)


def expand(matrix: Matrix) -> list[Cell]:
    """The product of the axes followed by the included cells (duplicates dropped, order kept)."""
    product = (
        Cell(cudnn=a, frontend=b, cuda=c, driver=d, arch=e)
        for a, b, c, d, e in itertools.product(*(matrix.values(axis) for axis in AXES))
    )
    return list(dict.fromkeys(itertools.chain(product, matrix.include)))


def _values(errors: TomlErrors, key: Key, axis: str, raw: object) -> tuple[str, ...]:
    if not isinstance(raw, list) or not raw:
        errors.add(key, f"expected a non-empty list of strings, got {raw!r}")
        return ()
    out: list[str] = []
    for i, item in enumerate(raw):
        try:
            value = parse_value(axis, item)
        except ValueError as exc:
            errors.add(key / i, str(exc))
            continue
        if value in out:
            errors.add(key / i, f"duplicate value {item!r}")
        out.append(value)
    return tuple(dict.fromkeys(out))


def _entries(errors: TomlErrors, name: str, raw: object) -> list[dict[str, object]]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(e, dict) for e in raw):
        errors.add(Key.of(name), f"expected an array of tables ([[{name}]]), got {raw!r}")
        return []
    return raw


def _includes(errors: TomlErrors, raw: object) -> dict[Cell, str]:
    out: dict[Cell, str] = {}
    for i, entry in enumerate(_entries(errors, "include", raw)):
        key = Key.of("include", i)
        for unknown in sorted(set(entry) - {*AXES, "reason"}):
            errors.add(key / unknown, "unknown key (expected the five axes and reason)")
        pins: dict[str, str] = {}
        for axis in AXES:
            if axis not in entry:
                errors.add(key, f"missing {axis!r} (an include names one value per axis)")
                continue
            try:
                pins[axis] = parse_value(axis, entry[axis])
            except ValueError as exc:
                errors.add(key / axis, str(exc))
        if len(pins) == len(AXES):
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


def _python(errors: TomlErrors, raw: object) -> Version:
    if isinstance(raw, str):
        try:
            return Version(raw)
        except InvalidVersion:
            pass
    errors.add(Key.of("python"), f'invalid version {raw!r} (expected a string, e.g. "3.12")')
    return Version("3.12")


def load_matrix(path: Path | None = None) -> Matrix:
    """Load and check a matrix file (default: the embedded `matrix/default.toml`)."""
    path = path or DEFAULT_MATRIX
    doc = read_toml(path, what="matrix")
    data, errors = doc.data, doc.errors
    for unknown in sorted(set(data) - _TOP_KEYS):
        errors.add(Key.of(unknown), f"unknown key (expected {', '.join(sorted(_TOP_KEYS))})")
    python = _python(errors, data.get("python", "3.12"))
    raw_axes = data.get("axes")
    axes: dict[str, Axis] = {}
    if not isinstance(raw_axes, dict):
        errors.add(Key.of("axes"), f"missing [axes] table with {', '.join(AXES)}")
        raw_axes = {}
    for unknown in sorted(set(raw_axes) - set(AXES)):
        errors.add(Key.of("axes", unknown), f"unknown axis (known: {', '.join(AXES)})")
    for axis in AXES:
        key = Key.of("axes", axis)
        if axis not in raw_axes:
            if raw_axes:
                errors.add(key, "missing axis")
            continue
        axes[axis] = Axis(name=axis, values=_values(errors, key, axis, raw_axes[axis]))
    includes = _includes(errors, data.get("include"))
    excludes = _excludes(errors, data.get("exclude"))
    errors.raise_if_any()
    return Matrix(
        path=path,
        python=python,
        axes=axes,
        include=tuple(includes),
        exclude=excludes,
        include_reasons=includes,
    )
