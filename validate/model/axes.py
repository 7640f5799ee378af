"""The axis registry: one entry per matrix axis says how its values are parsed, compared and shown.

Adding an axis is one `Axis` entry in `REGISTRY` (plus a `Cell` field of the same name): the loader,
the selectors (`--<axis>`), the rules, the cell id, the reports and the environment spec read it from
here. An `optional` axis may be left out of a matrix; a cell without a value for it keeps the id it
had before the axis existed, because the id hashes only the values a cell carries.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from validate.model.order import value_key, version

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from packaging.version import Version

__all__ = [
    "ARCHES",
    "AXES",
    "REGISTRY",
    "Axis",
    "Driver",
    "FieldKind",
    "axis_named",
    "parse_value",
    "pins_label",
]

#: Known GPU architectures (compute capability X.Y -> smXY); anything else is an input error.
#: sm70 (Volta) is kept so that "CUDA 13 dropped Volta" is a rule that can fire.
ARCHES: Final = ("sm70", "sm75", "sm80", "sm86", "sm89", "sm90", "sm100", "sm120")

#: What kind of condition a rule writes on a field: a PEP 440 specifier, an arch set, a flag.
FieldKind = Literal["version", "arch", "flag"]

_DRIVER_NUM = re.compile(r"\d{3,4}(?:\.\d{1,3}){0,2}")
_FC = re.compile(r"fc-(?P<user>[^@]+)@(?P<kernel>.+)")
#: A bare branch ("580") stands for the newest release of that branch when compared.
_BRANCH_TOP: Final = "99999"
_PYTHON = re.compile(r"3\.\d{1,3}(?:\.\d{1,3})?")


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
        parsed = _driver_version(text)
        return cls(text=text, user=parsed, kernel=parsed, forward_compat=False)

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
    return version(f"{text}.{_BRANCH_TOP}" if "." not in text else text)


# --- per-kind behaviour -------------------------------------------------------------------------


def _version_parser(example: str) -> Callable[[str], str]:
    """A version axis's parse: its error's example is that axis's own (`--frontend latest` says
    e.g. 1.27.0, not a cuDNN version)."""

    def parse(text: str) -> str:
        try:
            return str(version(text))
        except ValueError:  # InvalidVersion
            msg = f"invalid version {text!r} (expected PEP 440, e.g. {example})"
            raise ValueError(msg) from None

    return parse


def _parse_driver(text: str) -> str:
    return Driver.parse(text).text


def _parse_arch(text: str) -> str:
    arch = text.lower().replace("_", "")
    if arch not in ARCHES:
        msg = f"unknown arch {text!r} (known: {', '.join(ARCHES)})"
        raise ValueError(msg)
    return arch


def _parse_python(text: str) -> str:
    if not _PYTHON.fullmatch(text):
        msg = f"invalid python {text!r} (expected a CPython version like 3.12 or 3.12.4)"
        raise ValueError(msg)
    return str(version(text))


def _driver_key(text: str) -> object:
    d = Driver.parse(text)
    return (d.user, d.kernel, d.forward_compat)


def _driver_facts(text: str) -> Mapping[str, object]:
    d = Driver.parse(text)
    return {"driver": d.user, "driver_kernel": d.kernel, "forward_compat": d.forward_compat}


def _driver_placeholders(text: str) -> Mapping[str, str]:
    d = Driver.parse(text)
    return {"driver": text, "driver_user": d.display_user, "driver_kernel": d.display_kernel}


@dataclass(frozen=True, kw_only=True)
class Axis:
    """One matrix axis: how a value is read, compared, sorted and shown, and what it changes."""

    name: str
    title: str  # report column/row title, e.g. "cuDNN"
    prefix: str  # short prefix of a value in report headers, e.g. "fe " -> "fe 1.27.0"
    short: str  # name in a cell label, e.g. "fe" -> "cudnn 9.24.0.43 / fe 1.27.0 / ..."
    junit: str  # JUnit classname part before the value ("fe-" -> "fe-1_27_0"); "" for none
    example: str  # shown in --help
    env: bool  # whether the value changes what is installed in the cell's environment
    optional: bool = False  # a matrix may leave it out; cells without a value keep today's id
    parse: Callable[[str], str]  # check and normalise one value; ValueError names the problem
    key: Callable[[str], object] = version  # same key == same pin (13 == 13.0)
    sort_key: Callable[[str], object] = value_key
    #: Condition fields rules may test on this axis, each with its kind (default: the axis itself).
    fields: Mapping[str, FieldKind]
    facts: Callable[[str], Mapping[str, object]]  # the value of each field for one axis value
    #: Reason placeholders this axis fills; default `{<name>}` with the value.
    placeholders: Callable[[str], Mapping[str, str]] | None = None

    def same(self, a: str, b: str) -> bool:
        """Whether two normalised values mean the same pin (9.24.0.43 == 9.24.0.43.0)."""
        if a == b:
            return True
        try:
            return self.key(a) == self.key(b)
        except ValueError:  # InvalidVersion and bad drivers: not a pin of this axis, so not equal
            return False

    def reason_fields(self, value: str) -> Mapping[str, str]:
        return self.placeholders(value) if self.placeholders else {self.name: value}


def _version_axis(
    name: str, *, title: str, prefix: str, short: str, junit: str, example: str
) -> Axis:
    return Axis(
        name=name,
        title=title,
        prefix=prefix,
        short=short,
        junit=junit,
        example=example,
        env=True,
        parse=_version_parser(example),
        fields={name: "version"},
        facts=lambda text: {name: version(text)},
    )


#: The axes in canonical order: a cell id hashes its values in this order, reports sort by it.
REGISTRY: Final[tuple[Axis, ...]] = (
    _version_axis(
        "cudnn", title="cuDNN", prefix="cuDNN ", short="cudnn", junit="cudnn-", example="9.24.0.43"
    ),
    _version_axis(
        "frontend", title="frontend", prefix="fe ", short="fe", junit="fe-", example="1.27.0"
    ),
    _version_axis(
        "cuda", title="CUDA", prefix="CUDA ", short="cuda", junit="cuda-", example="13.0"
    ),
    Axis(
        name="driver",
        title="driver",
        prefix="drv ",
        short="drv",
        junit="drv-",
        example="580",
        env=False,  # the host's driver; docker cells add a compat layer from it (images.py)
        parse=_parse_driver,
        key=_driver_key,
        # driver: the user-mode driver CUDA talks to; driver_kernel differs only under forward compat
        fields={"driver": "version", "driver_kernel": "version", "forward_compat": "flag"},
        facts=_driver_facts,
        placeholders=_driver_placeholders,
    ),
    Axis(
        name="arch",
        title="arch",
        prefix="",
        short="arch",
        junit="",
        example="sm90",
        env=False,
        parse=_parse_arch,
        key=str,
        fields={"arch": "arch"},
        facts=lambda text: {"arch": text},
    ),
    Axis(
        name="python",
        title="Python",
        prefix="py ",
        short="py",
        junit="py-",
        example=f"{sys.version_info.major}.{sys.version_info.minor}",
        env=True,
        optional=True,
        parse=_parse_python,
        fields={"python": "version"},
        facts=lambda text: {"python": version(text)},
    ),
)

#: Axis names in their canonical order.
AXES: Final = tuple(axis.name for axis in REGISTRY)
_BY_NAME: Final = {axis.name: axis for axis in REGISTRY}


def axis_named(name: str) -> Axis:
    """The registry entry for `name`; ValueError for an unknown axis."""
    try:
        return _BY_NAME[name]
    except KeyError:
        msg = f"unknown axis {name!r} (known: {', '.join(AXES)})"
        raise ValueError(msg) from None


def parse_value(axis: str, raw: object) -> str:
    """Check one axis value and return its normalised text; raises ValueError naming the problem."""
    entry = axis_named(axis)
    if not isinstance(raw, str):
        msg = f"expected a string, got {type(raw).__name__} {raw!r}"
        raise ValueError(msg)  # noqa: TRY004 - one error type for every bad value keeps callers simple
    return entry.parse(raw.strip())


def pins_label(pins: Mapping[str, str]) -> str:
    """Human label of a cell's pins: 'cudnn 9.24.0.43 / fe 1.27.0 / cuda 13.0 / drv 580 / arch sm90'."""
    return " / ".join(f"{a.short} {pins[a.name]}" for a in REGISTRY if pins.get(a.name))
