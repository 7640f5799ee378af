"""Compatibility rules as data: load `rules.toml`, then prune the matrix's cells, each with its reason."""

from __future__ import annotations

import functools
import logging
import platform
import string
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Final

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from validate._compat import StrEnum
from validate.datafile import Key, TomlErrors, read_toml
from validate.errors import MatrixError
from validate.model.axes import ARCHES, AXES, REGISTRY, FieldKind, axis_named
from validate.model.matrix import MATRIX_DIR, Cell, Matrix

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from validate.config import Selectors

__all__ = [
    "DEFAULT_RULES",
    "FIELDS",
    "Condition",
    "Effect",
    "Plan",
    "Rule",
    "apply_rules",
    "base_python",
    "cell_facts",
    "load_rules",
    "plan_cells",
    "undeclared",
]

log = logging.getLogger(__name__)

DEFAULT_RULES: Final = MATRIX_DIR / "rules.toml"
#: The platform axes whose selector values are checked against the data: a value there that no
#: file knows is a plan the rules cannot judge. cudnn and frontend are products under test (their
#: versions come from their sources); python is the interpreter found.
_PLATFORM_AXES: Final = ("cuda", "driver", "arch")

#: Condition fields a rule may test, and the axis each one is read from (the registry's fields).
FIELDS: Final[Mapping[str, str]] = {f: axis.name for axis in REGISTRY for f in axis.fields}
_KINDS: Final[Mapping[str, FieldKind]] = {
    f: kind for axis in REGISTRY for f, kind in axis.fields.items()
}
#: Placeholders a reason may use: the cell id and what each axis fills (its example shows the names).
_REASON_FIELDS: Final = frozenset(
    {"id", *(name for axis in REGISTRY for name in axis.reason_fields(axis.example))}
)
_RULE_KEYS: Final = frozenset({"name", "select", "when", "effect", "reason", "source", "cite"})


class Effect(StrEnum):
    """What a matching rule does to a cell."""

    PRUNE = "prune"


@dataclass(frozen=True, kw_only=True)
class Condition:
    """One test on one field: a PEP 440 specifier, an arch set (or its complement), or a flag."""

    field: str
    spec: SpecifierSet | None = None
    arches: frozenset[str] | None = None
    negate: bool = False
    flag: bool | None = None

    def test(self, value: object) -> bool:
        if value is None:  # an optional axis the cell has no value (and no default) for
            return False
        if self.spec is not None:
            assert isinstance(value, Version)
            return self.spec.contains(value, prereleases=True)
        if self.arches is not None:
            return (value in self.arches) != self.negate
        return value == self.flag


@dataclass(frozen=True, kw_only=True)
class Rule:
    """A cell matching every `select` and `when` condition gets `effect`, explained by `reason` [cite]."""

    name: str
    select: tuple[Condition, ...]
    when: tuple[Condition, ...]
    effect: Effect
    reason: str
    source: str
    cite: str

    @property
    def conditions(self) -> tuple[Condition, ...]:
        return self.select + self.when

    def matches(self, facts: Mapping[str, object]) -> bool:
        """Direct per-cell evaluation (the planner uses precompiled per-axis sets instead)."""
        return all(c.test(facts.get(c.field)) for c in self.conditions)

    def explain(self, cell: Cell, python: Version | None = None) -> str:
        """The reason for `cell`; `python` fills {python} for a cell without one (default: this one)."""
        return f"{self.reason.format_map(_reason_fields(cell, python))} [{self.cite}]"


@dataclass(frozen=True, kw_only=True)
class Plan:
    """Planned cells and pruned cells with the reason each was dropped, in expansion order."""

    planned: list[Cell]
    pruned: list[tuple[Cell, str]]


def base_python() -> Version:
    """The Python of the interpreter running the tool: what cells without a python value use."""
    return Version(platform.python_version())


def _defaults(python: Version | None) -> dict[str, str]:
    """Values the rules read for an optional axis a cell leaves unset: python = the base python."""
    return {"python": str(python or base_python())}


@functools.cache
def _axis_facts(axis: str, value: str) -> Mapping[str, object]:
    """The condition fields one axis value provides; parsed once per value, not per cell."""
    return axis_named(axis).facts(value) if value else {}


def cell_facts(cell: Cell, python: Version | None = None) -> dict[str, object]:
    """Every condition field of one cell (for direct evaluation and tests); `python` is the
    interpreter a cell without a python value uses (default: this one)."""
    defaults = _defaults(python)
    facts: dict[str, object] = {}
    for axis in AXES:
        facts.update(_axis_facts(axis, getattr(cell, axis) or defaults.get(axis, "")))
    return facts


def _reason_fields(cell: Cell, python: Version | None) -> dict[str, str]:
    defaults = _defaults(python)
    fields: dict[str, str] = {"id": cell.id}
    for axis in REGISTRY:
        if value := getattr(cell, axis.name) or defaults.get(axis.name, ""):
            fields.update(axis.reason_fields(value))
        else:
            fields[axis.name] = ""
    return fields


def _condition(errors: TomlErrors, key: Key, name: str, raw: object) -> Condition | None:
    if name not in FIELDS:
        errors.add(key, f"unknown field (known: {', '.join(FIELDS)})")
        return None
    kind = _KINDS[name]
    if kind == "version":
        if isinstance(raw, str) and raw.strip():
            try:
                return Condition(field=name, spec=SpecifierSet(raw))
            except InvalidSpecifier:
                pass
        errors.add(key, f"invalid specifier {raw!r} (expected PEP 440, e.g. '>=13,<14')")
        return None
    if kind == "flag":
        if isinstance(raw, bool):
            return Condition(field=name, flag=raw)
        errors.add(key, f"expected true or false, got {raw!r}")
        return None
    negate = isinstance(raw, dict) and set(raw) == {"not_in"}
    items = raw["not_in"] if negate and isinstance(raw, dict) else raw
    items = [items] if isinstance(items, str) else items
    if not isinstance(items, list) or not items or not all(isinstance(a, str) for a in items):
        errors.add(key, f"expected an arch list or {{not_in = [...]}}, got {raw!r}")
        return None
    unknown = [a for a in items if a not in ARCHES]
    if unknown:
        errors.add(key, f"unknown arch {unknown[0]!r} (known: {', '.join(ARCHES)})")
        return None
    return Condition(field=name, arches=frozenset(items), negate=negate)


def _conditions(errors: TomlErrors, key: Key, raw: object) -> tuple[Condition, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        errors.add(key, f"expected a table of field = condition, got {raw!r}")
        return ()
    found = (_condition(errors, key / name, name, value) for name, value in raw.items())
    return tuple(c for c in found if c is not None)


def _text(errors: TomlErrors, key: Key, raw: object) -> str:
    if isinstance(raw, str) and raw.strip():
        return raw.strip()
    errors.add(key, f"missing or empty (got {raw!r}): every rule needs reason, source and cite")
    return ""


def _check_reason(errors: TomlErrors, key: Key, reason: str) -> None:
    try:
        names = {f for _, f, _, _ in string.Formatter().parse(reason) if f is not None}
    except ValueError as exc:
        errors.add(key, f"bad template {reason!r}: {exc}")
        return
    unknown = sorted(names - _REASON_FIELDS)
    if unknown:
        known = ", ".join(sorted(_REASON_FIELDS))
        errors.add(key, f"unknown placeholder {{{unknown[0]}}} (known: {known})")


def load_rules(path: Path | None = None) -> list[Rule]:
    """Load and check a rules file (default: the embedded `matrix/rules.toml`)."""
    path = path or DEFAULT_RULES
    doc = read_toml(path, what="rules")
    data, errors = doc.data, doc.errors
    for unknown in sorted(set(data) - {"rule"}):
        errors.add(Key.of(unknown), "unknown key (expected [[rule]] tables)")
    raw_rules = data.get("rule", [])
    if not isinstance(raw_rules, list) or not all(isinstance(r, dict) for r in raw_rules):
        errors.add(Key.of("rule"), "expected an array of tables ([[rule]])")
        raw_rules = []
    rules: list[Rule] = []
    names: set[str] = set()
    for i, entry in enumerate(raw_rules):
        name = entry.get("name")
        key = Key.of("rule", i)
        key = key.named(name) if isinstance(name, str) else key
        for unknown in sorted(set(entry) - _RULE_KEYS):
            errors.add(key / unknown, f"unknown key (known: {', '.join(sorted(_RULE_KEYS))})")
        name = _text(errors, key / "name", name)
        if name in names:
            errors.add(key / "name", f"duplicate rule name {name!r}")
        names.add(name)
        effect_raw = entry.get("effect", "prune")
        effect = Effect.PRUNE
        if effect_raw not in {e.value for e in Effect}:
            errors.add(key / "effect", f"unknown effect {effect_raw!r} (known: prune)")
        select = _conditions(errors, key / "select", entry.get("select"))
        when = _conditions(errors, key / "when", entry.get("when"))
        if not entry.get("select") and not entry.get("when"):
            errors.add(key, "has no conditions; it would prune every cell")
        reason = _text(errors, key / "reason", entry.get("reason"))
        _check_reason(errors, key / "reason", reason)
        source, cite = (
            _text(errors, key / "source", entry.get("source")),
            _text(errors, key / "cite", entry.get("cite")),
        )
        rules.append(
            Rule(
                name=name,
                select=select,
                when=when,
                effect=effect,
                reason=reason,
                source=source,
                cite=cite,
            )
        )
    errors.raise_if_any()
    return rules


@functools.cache
def _template_axes(reason: str) -> tuple[str, ...] | None:
    """The axes a reason template reads (driver_* come from the driver); None when it uses {id}."""
    names = {f for _, f, _, _ in string.Formatter().parse(reason) if f}
    if "id" in names:
        return None
    return tuple(a.name for a in REGISTRY if names & a.reason_fields(a.example).keys())


@dataclass(frozen=True, kw_only=True, eq=False)
class _Matcher:
    """A rule or exclusion compiled against one matrix: the axis values it matches, per axis."""

    allowed: Mapping[str, frozenset[str]]
    id_patterns: tuple[str, ...]
    rule: Rule | None
    text: str
    _memo: dict[tuple[str, ...], str] = field(default_factory=dict)

    def explain(self, cell: Cell, python: Version | None) -> str:
        """The reason, formatted once per distinct combination of the axes its template uses."""
        if self.rule is None:
            return self.text
        axes = _template_axes(self.rule.reason)
        if axes is None:
            return self.rule.explain(cell, python)
        key = tuple(getattr(cell, axis) for axis in axes)
        if (text := self._memo.get(key)) is None:
            text = self._memo[key] = self.rule.explain(cell, python)
        return text

    def hits_id(self, cell: Cell) -> bool:
        return not self.id_patterns or any(fnmatchcase(cell.id, p) for p in self.id_patterns)

    def allows(self, pins: Mapping[str, str]) -> bool:
        return all(pins[axis] in values for axis, values in self.allowed.items())


def _compile(matrix: Matrix, rules: Sequence[Rule], defaults: Mapping[str, str]) -> list[_Matcher]:
    domain = {
        a: tuple(dict.fromkeys([*matrix.values(a), *(getattr(c, a) for c in matrix.include)]))
        for a in AXES
    }

    def facts(axis: str, value: str) -> Mapping[str, object]:
        return _axis_facts(axis, value or defaults.get(axis, ""))

    matchers: list[_Matcher] = []
    for rule in rules:
        allowed = {
            axis: frozenset(
                v
                for v in domain[axis]
                if all(
                    c.test(facts(axis, v).get(c.field))
                    for c in rule.conditions
                    if FIELDS[c.field] == axis
                )
            )
            for axis in AXES
        }
        if all(allowed.values()):  # else no cell of this matrix can match it (python, often)
            matchers.append(_Matcher(allowed=allowed, id_patterns=(), rule=rule, text=""))
    for ex in matrix.exclude:
        allowed = {
            axis: frozenset(
                v
                for v in domain[axis]
                if any(fnmatchcase(v, p) for p in ex.patterns.get(axis, ("*",)))
            )
            for axis in AXES
        }
        text = f"excluded by the matrix: {ex.reason} [{ex.where}]"
        matchers.append(
            _Matcher(allowed=allowed, id_patterns=ex.patterns.get("id", ()), rule=None, text=text)
        )
    return matchers


def apply_rules(matrix: Matrix, rules: Sequence[Rule], *, python: Version | None = None) -> Plan:
    """Expand the matrix and split it into planned cells and pruned cells with the first reason.

    The rules read each cell's python; a cell without one runs on the base interpreter, `python`
    (default: the interpreter running this), and the rules read that.
    """
    matchers = _compile(matrix, rules, _defaults(python))
    planned: list[Cell] = []
    pruned: list[tuple[Cell, str]] = []

    def place(cell: Cell, candidates: list[_Matcher]) -> None:
        hit = next((m for m in candidates if m.hits_id(cell)), None)
        if hit is None:
            planned.append(cell)
        else:
            pruned.append((cell, hit.explain(cell, python)))

    # Walk the product axis by axis in registry order, keeping at each step only the matchers
    # that still allow every value chosen so far: a rule is tested once per axis value, not per cell.
    levels = [(axis, matrix.values(axis)) for axis in AXES]
    # A value every remaining matcher allows keeps the list as it is (most values of most axes).
    narrows = {
        axis: {v: any(v not in m.allowed[axis] for m in matchers) for v in values}
        for axis, values in levels
    }
    # An axis with one value that no matcher restricts is fixed once, not walked (python, often).
    pins = {axis: values[0] for axis, values in levels if len(values) == 1}
    pins = {axis: v for axis, v in pins.items() if not narrows[axis][v]}
    levels = [(axis, values) for axis, values in levels if axis not in pins]

    def walk(depth: int, candidates: list[_Matcher]) -> None:
        axis, values = levels[depth]
        last = depth == len(levels) - 1
        for v in values:
            pins[axis] = v
            kept = (
                [m for m in candidates if v in m.allowed[axis]] if narrows[axis][v] else candidates
            )
            if last:
                place(Cell(**pins), kept)
            else:
                walk(depth + 1, kept)

    if levels:
        walk(0, matchers)
    else:  # every axis has one value that no matcher restricts: one cell
        place(Cell(**pins), matchers)
    if matrix.include:
        seen = {*planned, *(c for c, _ in pruned)}
        for cell in matrix.include:
            if cell not in seen:
                seen.add(cell)
                full = {axis: getattr(cell, axis) for axis in AXES}
                place(cell, [m for m in matchers if m.allows(full)])
    return Plan(planned=planned, pruned=pruned)


def _selects(rule: Rule, axis: str, value: str) -> bool:
    """Whether the rule is about cells with this value: it has `select` conditions on the axis
    and the value meets them all (its `when` only names the broken combination among those)."""
    own = [c for c in rule.select if FIELDS[c.field] == axis]
    facts = _axis_facts(axis, value)
    return bool(own) and all(c.test(facts.get(c.field)) for c in own)


def undeclared(matrix: Matrix, rules: Sequence[Rule], selectors: Selectors) -> list[str]:
    """One line per platform value on the command line that no rule covers: the matrix file does
    not declare it (in [axes] or an [[include]]) and no rule's `select` picks it. Such a cell is
    planned and may pass, but nothing the project knows says it should: `--arch sm89` against a
    matrix of sm80/sm90/sm100/sm120 whose rules select only Blackwell archs, CUDA majors and
    forward compat."""
    rules_file = (selectors.rules or DEFAULT_RULES).name
    lines: list[str] = []
    for axis in _PLATFORM_AXES:
        same = axis_named(axis).same
        declared = tuple(
            dict.fromkeys([*matrix.values(axis), *(getattr(c, axis) for c in matrix.include)])
        )
        for value in selectors.values.get(axis, ()):
            if any(d and same(d, value) for d in declared):
                continue
            if any(_selects(rule, axis, value) for rule in rules):
                continue
            lines.append(
                f"warning: --{axis} {value}: no rule covers it ({matrix.path.name} declares "
                f"{', '.join(d for d in declared if d)}; no rule in {rules_file} selects it); "
                "the run goes on with it"
            )
    return lines


def plan_cells(
    matrix: Matrix, rules: Sequence[Rule], selectors: Selectors, *, python: Version | None = None
) -> Plan:
    """Narrow the matrix by the selectors, apply the rules; a plan with no cell left is an error.
    `python` is the base interpreter's version, for cells without a python value. A platform
    value no rule covers is a warning (`undeclared`), not an error: the run goes on."""
    for line in undeclared(matrix, rules, selectors):
        log.warning("%s", line)
    plan = apply_rules(selectors.narrow(matrix), rules, python=python)
    if not plan.planned:
        chosen = selectors.describe() or "no selectors"
        why = (
            f"; first pruned: {plan.pruned[0][0].label}: {plan.pruned[0][1]}" if plan.pruned else ""
        )
        msg = f"selection ({chosen}) leaves no planned cell in {matrix.path} ({len(plan.pruned)} pruned{why})"
        raise MatrixError(msg)
    return plan
