"""Compatibility rules as data: load `rules.toml`, then prune the matrix's cells, each with its reason."""

from __future__ import annotations

import functools
import string
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Final

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from validate._compat import StrEnum
from validate.datafile import Key, TomlErrors, read_toml
from validate.errors import MatrixError
from validate.model.matrix import ARCHES, AXES, MATRIX_DIR, Cell, Driver, Matrix

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
    "cell_facts",
    "load_rules",
    "plan_cells",
]

DEFAULT_RULES: Final = MATRIX_DIR / "rules.toml"

#: Condition fields a rule may test, and the axis each one is read from (None: the matrix's python).
FIELDS: Final[Mapping[str, str | None]] = {
    "cudnn": "cudnn",
    "frontend": "frontend",
    "cuda": "cuda",
    "driver": "driver",  # the user-mode driver (what CUDA talks to)
    "driver_kernel": "driver",  # the kernel-mode driver (differs only under forward compat)
    "forward_compat": "driver",
    "arch": "arch",
    "python": None,
}
_VERSION_FIELDS: Final = frozenset(
    {"cudnn", "frontend", "cuda", "driver", "driver_kernel", "python"}
)
#: Placeholders a reason may use.
_REASON_FIELDS: Final = frozenset({*AXES, "id", "python", "driver_user", "driver_kernel"})
_DRIVER_FIELDS: Final = frozenset({"driver_user", "driver_kernel"})
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
        return all(c.test(facts[c.field]) for c in self.conditions)

    def explain(self, cell: Cell, python: Version) -> str:
        return f"{self.reason.format_map(_reason_fields(cell, python))} [{self.cite}]"


@dataclass(frozen=True, kw_only=True)
class Plan:
    """Planned cells and pruned cells with the reason each was dropped, in expansion order."""

    planned: list[Cell]
    pruned: list[tuple[Cell, str]]


@functools.cache
def _driver(text: str) -> Driver:
    return Driver.parse(text)


@functools.cache
def _axis_facts(axis: str, value: str) -> dict[str, object]:
    """The condition fields one axis value provides; parsed once per value, not per cell."""
    match axis:
        case "driver":
            d = _driver(value)
            return {"driver": d.user, "driver_kernel": d.kernel, "forward_compat": d.forward_compat}
        case "arch":
            return {"arch": value}
        case _:
            return {axis: Version(value)}


def cell_facts(cell: Cell, python: Version) -> dict[str, object]:
    """Every condition field of one cell (for direct evaluation and tests)."""
    facts: dict[str, object] = {"python": python}
    for axis, value in cell.pins().items():
        facts.update(_axis_facts(axis, value))
    return facts


def _reason_fields(cell: Cell, python: Version) -> dict[str, str]:
    d = _driver(cell.driver)
    return {
        **cell.pins(),
        "id": cell.id,
        "python": str(python),
        "driver_user": d.display_user,
        "driver_kernel": d.display_kernel,
    }


def _condition(errors: TomlErrors, key: Key, name: str, raw: object) -> Condition | None:
    if name not in FIELDS:
        errors.add(key, f"unknown field (known: {', '.join(FIELDS)})")
        return None
    if name in _VERSION_FIELDS:
        if isinstance(raw, str) and raw.strip():
            try:
                return Condition(field=name, spec=SpecifierSet(raw))
            except InvalidSpecifier:
                pass
        errors.add(key, f"invalid specifier {raw!r} (expected PEP 440, e.g. '>=13,<14')")
        return None
    if name == "forward_compat":
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
    return tuple(a for a in AXES if a in names or (a == "driver" and names & _DRIVER_FIELDS))


@dataclass(frozen=True, kw_only=True)
class _Matcher:
    """A rule or exclusion compiled against one matrix: the axis values it matches, per axis."""

    allowed: tuple[frozenset[str], ...]
    id_patterns: tuple[str, ...]
    rule: Rule | None
    text: str
    _memo: dict[tuple[str, ...], str] = field(default_factory=dict)

    def explain(self, cell: Cell, python: Version) -> str:
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


def _compile(matrix: Matrix, rules: Sequence[Rule]) -> list[_Matcher]:
    domain = {
        a: tuple(dict.fromkeys([*matrix.values(a), *(getattr(c, a) for c in matrix.include)]))
        for a in AXES
    }
    matchers: list[_Matcher] = []
    for rule in rules:
        if not all(c.test(matrix.python) for c in rule.conditions if FIELDS[c.field] is None):
            continue
        allowed = tuple(
            frozenset(
                v
                for v in domain[axis]
                if all(
                    c.test(_axis_facts(axis, v)[c.field])
                    for c in rule.conditions
                    if FIELDS[c.field] == axis
                )
            )
            for axis in AXES
        )
        matchers.append(_Matcher(allowed=allowed, id_patterns=(), rule=rule, text=""))
    for ex in matrix.exclude:
        allowed = tuple(
            frozenset(
                v
                for v in domain[axis]
                if any(fnmatchcase(v, p) for p in ex.patterns.get(axis, ("*",)))
            )
            for axis in AXES
        )
        text = f"excluded by the matrix: {ex.reason} [{ex.where}]"
        matchers.append(
            _Matcher(allowed=allowed, id_patterns=ex.patterns.get("id", ()), rule=None, text=text)
        )
    return matchers


def apply_rules(matrix: Matrix, rules: Sequence[Rule]) -> Plan:
    """Expand the matrix and split it into planned cells and pruned cells with the first reason."""
    matchers = _compile(matrix, rules)
    planned: list[Cell] = []
    pruned: list[tuple[Cell, str]] = []
    py = matrix.python

    def place(cell: Cell, candidates: list[_Matcher]) -> None:
        hit = next((m for m in candidates if cell.arch in m.allowed[4] and m.hits_id(cell)), None)
        if hit is None:
            planned.append(cell)
        else:
            pruned.append((cell, hit.explain(cell, py)))

    cudnn, frontend, cuda, driver, arch = (matrix.values(a) for a in AXES)
    seen: set[Cell] = set()
    for a in cudnn:
        m1 = [m for m in matchers if a in m.allowed[0]]
        for b in frontend:
            m2 = [m for m in m1 if b in m.allowed[1]]
            for c in cuda:
                m3 = [m for m in m2 if c in m.allowed[2]]
                for d in driver:
                    m4 = [m for m in m3 if d in m.allowed[3]]
                    for e in arch:
                        place(Cell(cudnn=a, frontend=b, cuda=c, driver=d, arch=e), m4)
    if matrix.include:
        seen.update(planned)
        seen.update(c for c, _ in pruned)
        for cell in matrix.include:
            if cell not in seen:
                seen.add(cell)
                pins = cell.pins()
                place(
                    cell,
                    [
                        m
                        for m in matchers
                        if all(pins[x] in m.allowed[i] for i, x in enumerate(AXES[:4]))
                    ],
                )
    return Plan(planned=planned, pruned=pruned)


def plan_cells(matrix: Matrix, rules: Sequence[Rule], selectors: Selectors) -> Plan:
    """Narrow the matrix by the selectors, apply the rules; a plan with no cell left is an error."""
    plan = apply_rules(selectors.narrow(matrix), rules)
    if not plan.planned:
        chosen = selectors.describe() or "no selectors"
        why = (
            f"; first pruned: {plan.pruned[0][0].label}: {plan.pruned[0][1]}" if plan.pruned else ""
        )
        msg = f"selection ({chosen}) leaves no planned cell in {matrix.path} ({len(plan.pruned)} pruned{why})"
        raise MatrixError(msg)
    return plan
