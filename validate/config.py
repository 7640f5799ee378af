"""The options of a command, built once and passed down. Selectors: the shared `--matrix/--rules/--cudnn/...` flags, checked once and applied to a Matrix."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from validate.errors import ConfigError
from validate.model.axes import AXES, axis_named, parse_value
from validate.model.outcome import FLAKY_POLICIES

if TYPE_CHECKING:
    import argparse
    from collections.abc import Mapping, Sequence

    from validate.model.matrix import Matrix
    from validate.model.outcome import FlakyPolicy

__all__ = ["Selectors", "ValidateConfig", "split_list"]


def split_list(values: Sequence[str] | None) -> list[str]:
    """Flatten repeatable, comma-separated flag values: ['a,b', 'c'] -> ['a', 'b', 'c']."""
    out: list[str] = []
    for value in values or ():
        out.extend(part.strip() for part in value.split(",") if part.strip())
    return out


@dataclass(frozen=True, kw_only=True)
class Selectors:
    """Which matrix and rules to load and, per axis, the values to keep (or add when undeclared)."""

    matrix: Path | None = None
    rules: Path | None = None
    values: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Selectors:
        """Build from parsed selector flags; every bad value is reported at once, naming its flag."""
        values: dict[str, tuple[str, ...]] = {}
        problems: list[str] = []
        for axis in AXES:
            given = getattr(args, axis, None) or ()
            if any(not part.strip() for text in given for part in text.split(",")):
                shown = ", ".join(repr(text) for text in given)
                problems.append(
                    f"--{axis}: empty value in {shown} (an unset variable?); name the values, "
                    "or leave the flag out to keep the matrix's"
                )
                continue
            raw = split_list(given)
            if not raw:
                continue
            good: list[str] = []
            for item in raw:
                try:
                    good.append(parse_value(axis, item))
                except ValueError as exc:
                    problems.append(f"--{axis}: {exc}")
            values[axis] = tuple(dict.fromkeys(good))
        if problems:
            raise ConfigError("; ".join(problems))
        matrix, rules = getattr(args, "matrix", None), getattr(args, "rules", None)
        return cls(
            matrix=Path(matrix) if matrix else None,
            rules=Path(rules) if rules else None,
            values=values,
        )

    def narrow(self, matrix: Matrix) -> Matrix:
        """Keep only the selected values per axis; a value the matrix does not declare is added."""
        chosen: dict[str, tuple[str, ...]] = {}
        for axis, wanted in self.values.items():
            declared, same = matrix.values(axis), axis_named(axis).same
            picked = (next((d for d in declared if d and same(d, w)), w) for w in wanted)
            chosen[axis] = tuple(dict.fromkeys(picked))
        return matrix.with_axes(chosen) if chosen else matrix

    def to_dict(self) -> dict[str, Any]:
        return {
            "matrix": str(self.matrix) if self.matrix else None,
            "rules": str(self.rules) if self.rules else None,
            "values": {axis: list(vals) for axis, vals in self.values.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Selectors:
        return cls(
            matrix=Path(data["matrix"]) if data.get("matrix") else None,
            rules=Path(data["rules"]) if data.get("rules") else None,
            values={axis: tuple(vals) for axis, vals in (data.get("values") or {}).items()},
        )

    def describe(self) -> str:
        """The selection as flags, e.g. `--cudnn 9.24.0.43 --arch sm100`."""
        return " ".join(f"--{axis} {','.join(vals)}" for axis, vals in self.values.items())


#: A case's limit without --timeout (execute/limits.py derives every other limit from it).
DEFAULT_TIMEOUT_S: Final = 600.0
#: --speed-budget: seconds of alone re-runs the speed stage may spend (validate/remeasure.py)
DEFAULT_SPEED_BUDGET_S: Final = 600.0


@dataclass(frozen=True, kw_only=True)
class ValidateConfig:
    """Everything `validate` needs, checked once from the command line."""

    selectors: Selectors = field(default_factory=Selectors)
    cases: tuple[Path, ...] = ()
    samples: Path | None = None
    tests: Path | None = None  # --tests: a pytest root, one result per test id (execute/suite.py)
    tests_select: str | None = None  # --tests-select: its pytest selection, as typed
    #: --tests-startup-timeout: a pytest process's start-up limit (None: limits.startup_limit)
    tests_startup_timeout_s: float | None = None
    cpp: Path | None = None  # --cpp: a CMake project with Catch2 tests, one result per TEST_CASE
    cpp_targets: tuple[str, ...] = ()  # --cpp-target: the CMake targets to build (none: all)
    cpp_catch2: Path | None = None  # --cpp-catch2: a Catch2 source folder or archive
    cpp_build_timeout_s: float | None = None  # --cpp-build-timeout (None: limits.cpp_build_limit)
    case_names: tuple[str, ...] = ()  # --case: names or fnmatch patterns to keep
    executor: str = "local"  # a name in execute.EXECUTORS; workflow.run resolves "auto" once
    base_image: str | None = None  # docker: the cell images' base (env.builder.base_image_for)
    env_mode: str = "isolated"  # "isolated" | "current" | "system-site-packages"
    base_python: str = sys.executable
    backend_source: str | None = None
    backend_store: Path | None = None  # unpacked backends, one subfolder per version
    frontend_source: str | None = None
    extras: tuple[str, ...] = ()
    wheelhouse: Path | None = None
    cache_dir: Path | None = None
    installer: str = "auto"
    backend_deps: bool = True  # install the backend wheel's own deps (nvidia-cublas)
    jobs: int | None = None
    gpus: tuple[int, ...] | None = None  # --gpus: the GPUs the pool books (None: all it sees)
    timeout_s: float = DEFAULT_TIMEOUT_S  # --timeout; every limit: execute/limits.py
    #: --capture-cap: bytes of output kept per case process (execute/launch.py; 0: all)
    capture_cap: int = 2 * 1024 * 1024
    reruns: int = 0
    results_dir: Path | None = None
    resume: bool = False
    api_logs: bool = True
    flaky: FlakyPolicy = "block"  # sign-off policy for flaky results (model.outcome)
    require_gpu: bool = False  # --require-gpu: GPU cases skipped for want of a GPU exit 1
    known_issues: Path | None = None
    shard: str | None = None  # --shard i/n (plan.shard.ShardSpec): this run's part of the units
    durations: Path | None = None  # --durations: case seconds for --shard (default: history)
    argv: tuple[str, ...] = ()
    tier: str | None = None  # --tier: only the cells of this [tiers] entry (plan.tiers)
    #: speed (judge/speed.py): a unit this much and this many seconds slower than in a cell one
    #: axis apart is a candidate, re-run alone `speed_repeats` times per cell (0: none), as many
    #: of them as `speed_budget_s` seconds of re-runs hold (validate/remeasure.py)
    slower_ratio: float = 1.5
    slower_min_s: float = 1.0
    speed_repeats: int = 3
    speed_budget_s: float = DEFAULT_SPEED_BUDGET_S
    #: What env.versions.resolve_versions found (run.json's `versions`); None: not resolved yet
    versions: Mapping[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types; `from_dict(to_dict())` gives an equal config."""
        out: dict[str, Any] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name == "selectors":
                value = value.to_dict()
            elif item.name in _PATHS:
                value = str(value) if value is not None else None
            elif item.name == "gpus" and value is not None:
                value = list(value)
            elif isinstance(value, tuple):
                value = [str(v) for v in value]
            out[item.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ValidateConfig:
        known = {item.name for item in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            msg = f"config: unknown option {unknown[0]!r} (known: {', '.join(sorted(known))})"
            raise ConfigError(msg)
        values: dict[str, Any] = {}
        for name, value in data.items():
            if name == "selectors":
                value = Selectors.from_dict(value)
            elif name in _PATHS:
                value = Path(value) if value is not None else None
            elif name == "cases":
                value = tuple(Path(v) for v in value)
            elif name == "gpus" and value is not None:
                value = tuple(int(v) for v in value)
            elif name == "flaky" and value not in FLAKY_POLICIES:
                msg = f"config: flaky {value!r}: expected one of {', '.join(FLAKY_POLICIES)}"
                raise ConfigError(msg)
            elif isinstance(value, list):
                value = tuple(value)
            values[name] = value
        return cls(**values)


#: ValidateConfig fields that hold one path (or None).
_PATHS: Final = frozenset(
    {
        "samples",
        "tests",
        "cpp",
        "cpp_catch2",
        "wheelhouse",
        "backend_store",
        "cache_dir",
        "results_dir",
        "known_issues",
        "durations",
    }
)
