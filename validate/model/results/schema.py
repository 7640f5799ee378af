"""CaseResult, the one record a results line holds, and the small questions asked of it."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, replace
from functools import lru_cache
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from validate.model.axes import pins_label
from validate.model.outcome import Outcome, policy
from validate.textsafe import redact_obj

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "SCHEMA_VERSION",
    "CaseResult",
    "axis_value",
    "cell_label",
    "is_bad",
    "is_good",
    "result_key",
]

#: Bump when a field changes meaning; readers accept any version <= this one.
SCHEMA_VERSION = 2  # 2: every line carries a MAC (`mac`) under the run key


@dataclass(frozen=True, kw_only=True)
class CaseResult:
    """One case run in one cell: verdict, reason and the evidence kept for it."""

    case: str  # case name, e.g. "26_layernorm....ipynb" or "repro_fusion_uid.py::pygraph"
    outcome: Outcome
    reason: str = ""
    duration_s: float = 0.0
    cell_id: str = ""  # "" when run outside a matrix (plain `run`)
    cell: Mapping[str, str] = field(default_factory=dict)  # the pins: cudnn, frontend, cuda, ...
    case_path: str = ""
    exit_code: int | None = None
    signal: str | None = None  # "SIGSEGV", "SIGABRT", ...
    exception: Mapping[str, Any] | None = None  # ename, evalue, cell_index, traceback tail
    tail: str = ""  # bounded stdout/stderr tail
    log_path: str = ""  # full output on disk
    api_logs: Mapping[str, str] = field(default_factory=dict)  # {"frontend": path, "backend": path}
    env: Mapping[str, Any] = field(default_factory=dict)  # captured inside the case process
    attempts: tuple[str, ...] = ()  # outcomes of reruns, first run first
    flaky: bool = False
    known_issue: str | None = None  # KI id matched by the known-issues check
    ki_note: str = ""  # e.g. "KI-1 reproduces outside its declared range"
    started_at: str = ""  # ISO 8601, UTC
    run_id: str = ""
    content_key: str = ""  # hash of case content + pins, for --resume / result cache
    #: the contention its first attempt met when that one failed or timed out beside other cases
    #: and it ran again alone, e.g. "timed out at 300 s beside 17 other cases (GPU 98% busy);
    #: passed alone in 97 s" (execute/runner.py); "" when it was judged as it first ran
    contention: str = ""
    #: seconds per timed unit, start-up excluded (judge/speed.py compares them across cells): a
    #: notebook's code cells ("cell 7", nbclient's kernel-side timestamps), a script's own
    #: `CUDNN_MATRIX_TIME <unit> <seconds>` lines (execute/cases/script.py) else its whole run
    #: ("script"), a test's call phase; {} in results from before this field
    units: Mapping[str, float] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """Identity of a result inside a run: cell and case."""
        return f"{self.cell_id}::{self.case}"

    def with_(self, **changes: Any) -> CaseResult:
        """Copy with fields replaced."""
        return replace(self, **changes)

    def fields(self) -> dict[str, Any]:
        """Every field by name, in field order, not copied further: a result read from a line
        keeps only the fields the line names (`from_line`), the others read from the class."""
        own = self.__dict__
        return own if len(own) == len(_ORDER) else _TEMPLATE | own

    def to_dict(self) -> dict[str, Any]:
        # field by field rather than dataclasses.asdict, which deep-copies through copy.deepcopy
        # and was most of the cost of writing and reporting a million results (issue #27)
        data = _TEMPLATE | self.__dict__  # every field, in their order (from_line keeps only some)
        data["outcome"] = str(self.outcome)
        data["attempts"] = list(self.attempts)
        data["cell"] = dict(self.cell)
        data["units"] = dict(self.units)
        data["api_logs"] = dict(self.api_logs)
        data["exception"] = None if self.exception is None else _plain(self.exception)
        # the case's captured environment, redacted again here (the capture hides secrets in the
        # case process): every copy (results line, result.json, --json) goes through to_dict
        data["env"] = redact_obj(dict(self.env)) if self.env else {}
        data["schema"] = SCHEMA_VERSION
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CaseResult:
        if _LINE_KEYS.issuperset(data):  # a results line: its fields, its schema and MAC
            return cls.from_line(dict(data))
        return cls.from_line({k: v for k, v in data.items() if k in _FIELDS})

    @classmethod
    def from_line(cls, fields: dict[str, Any]) -> CaseResult:
        """A result made of `fields` (a decoded results line, which it takes over and changes:
        no copy) without __init__'s 22 frozen setattr calls: this runs once per stored result, a
        million times for one report of a pytest suite (issue #27). Only the fields the line
        names are kept in the instance (a field left at its plain default is read from the
        class): half the memory of a full set, and each pass over a million results touches
        that much less. A mapping field the line leaves out (units, env, api_logs) reads one
        shared, read-only empty mapping from the class, and the instance's dict is a compact
        copy: the decoded object's table was sized for the MAC and schema it no longer holds
        (together a sixth of a report's memory at a million results)."""
        fields.pop("schema", None)
        fields.pop("mac", None)
        outcome = fields["outcome"]
        # a dict lookup, not Outcome(value)
        fields["outcome"] = _OUTCOME_OF[outcome] if outcome in _OUTCOME_OF else Outcome(outcome)
        if "attempts" in fields:
            fields["attempts"] = tuple(fields["attempts"])
        if "case" not in fields:
            msg = "a result needs a case"
            raise TypeError(msg)
        units = fields.get("units")
        if units:
            fields["units"] = {str(k): float(v) for k, v in units.items()}
        result = object.__new__(cls)
        object.__setattr__(result, "__dict__", dict(fields))
        return result

    def to_line(self) -> dict[str, Any]:
        """`to_dict` without the fields left at their empty default (None, "", [], {}, False),
        but for the ones a results line always names: what the store writes, ~40% shorter;
        `from_dict` gives the defaults back."""
        return {
            k: v
            for k, v in self.to_dict().items()
            if k in _ALWAYS or not (v is None or v is False or (type(v) in _EMPTY and not v))
        }


_ORDER: Final = tuple(CaseResult.__dataclass_fields__)  # as asdict orders them
_FIELDS: Final = frozenset(_ORDER)
_LINE_KEYS: Final = _FIELDS | {"schema", "mac"}
_DEFAULTS: Final = {
    name: f.default
    for name, f in CaseResult.__dataclass_fields__.items()
    if f.default is not MISSING
}
_FACTORIES: Final = tuple(
    (name, f.default_factory)
    for name, f in CaseResult.__dataclass_fields__.items()
    if f.default_factory is not MISSING
)
#: the fields whose default factory makes an empty dict
_MAPPINGS: Final = tuple(name for name, make in _FACTORIES if make is dict)
#: what a result made by from_line reads for a mapping field its line left out: one empty
#: mapping for all of them, read-only so that no result can change another's
EMPTY_MAPPING: Final[Mapping[str, Any]] = MappingProxyType({})
for _name in _MAPPINGS:
    setattr(CaseResult, _name, EMPTY_MAPPING)
_TEMPLATE: Final = {
    name: _DEFAULTS.get(name, EMPTY_MAPPING if name in _MAPPINGS else None) for name in _ORDER
}
_OUTCOME_OF: Final = {str(o): o for o in Outcome}
_ALWAYS: Final = frozenset({"case", "outcome", "cell_id", "cell", "schema"})
_EMPTY: Final = (str, list, dict)


def _plain(value: Any) -> Any:
    """A copy of nested dicts and lists (what asdict gave), so a caller may change it."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def axis_value(result: CaseResult, axis: str) -> str:
    """The value of a matrix axis (or the case name) for one result."""
    if axis == "case":
        return result.case
    return str(result.cell.get(axis, "?"))


def cell_label(result: CaseResult) -> str:
    """Human label of a result's cell, e.g. 'cudnn 9.24.0.43 / fe 1.27.0 / cuda 13.0 / ...'."""
    if not result.cell:
        return result.cell_id or "no cell"
    return _label(tuple(result.cell.items()))


@lru_cache(maxsize=4096)  # one label per cell, asked once per result of a large run
def _label(pins: tuple[tuple[str, str], ...]) -> str:
    return pins_label(dict(pins))


def result_key(result: CaseResult) -> str:
    """Identity of a result across runs: cell (id, or pins when run outside a matrix) and case."""
    cell = result.cell_id or ";".join(f"{k}={v}" for k, v in sorted(result.cell.items()))
    return f"{cell}::{result.case}"


def is_bad(result: CaseResult) -> bool:
    """fail, crash or timeout: the outcomes that count against the product (policy `bad`)."""
    return policy(result.outcome).bad


def is_good(result: CaseResult) -> bool:
    """pass or xpass: the case works (policy `good`)."""
    return policy(result.outcome).good
