"""Runner pools (matrix/runners.toml): per GPU architecture, where its CI jobs and Slurm tasks
run; and the planned cells grouped by them (`job_groups`: one group per arch x environment, which
the CI emitter (dispatch/ci.py) and Slurm (dispatch/slurm.py) both fan out).

Data, read with one reader (datafile.read_toml, every problem located and reported at once). A
cell whose arch has no runner cannot run in a pipeline: `prune_without_runner` moves it to the
pruned cells with that reason, as a rule would.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from validate.datafile import Key, TomlErrors, read_toml
from validate.errors import ConfigError
from validate.model.axes import ARCHES, REGISTRY
from validate.model.matrix import MATRIX_DIR
from validate.plan.rules import Plan

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping
    from pathlib import Path

__all__ = [
    "DEFAULT_RUNNERS",
    "ENV_AXES",
    "JobGroup",
    "Runner",
    "Runners",
    "job_groups",
    "load_runners",
    "prune_without_runner",
]

DEFAULT_RUNNERS: Final = MATRIX_DIR / "runners.toml"
#: Keys a runner may carry; the Slurm ones (partition, constraint, gres, time) are read for the
#: Slurm emitter and kept as given.
_STR_LISTS: Final = ("tags", "runs_on")
_STRS: Final = ("image", "executor", "partition", "constraint", "gres", "time", "mem")
_INTS: Final = {"concurrency": 1, "gpus": 0}  # key -> least value
#: whole numbers a left-out key leaves to the cluster (None): key -> least value
_OPTIONAL_INTS: Final = {"cpus": 1}
_KEYS: Final = frozenset({*_STR_LISTS, *_STRS, *_INTS, *_OPTIONAL_INTS})
#: The axes whose values make an environment, in registry order.
ENV_AXES: Final = tuple(a.name for a in REGISTRY if a.env)


@dataclass(frozen=True, kw_only=True)
class Runner:
    """One arch's runner pool: GitLab tags, GitHub runs-on labels, the job image (none: the
    runner's own shell), cudnn-matrix's executor inside the job, jobs at once, GPUs per job."""

    arch: str
    tags: tuple[str, ...]
    runs_on: tuple[str, ...]
    image: str | None = None
    executor: str = "local"
    concurrency: int = 1
    gpus: int = 1
    partition: str | None = None
    constraint: str | None = None
    gres: str | None = None
    time: str | None = None
    #: Slurm --cpus-per-task and --mem: the CPUs and memory the tool's ledger books its cases
    #: on inside the task (it reads the task's CPU affinity and free memory); None: the cluster's
    #: default, often one CPU
    cpus: int | None = None
    mem: str | None = None


@dataclass(frozen=True, kw_only=True)
class Runners:
    path: Path
    by_arch: Mapping[str, Runner]

    def get(self, arch: str) -> Runner | None:
        return self.by_arch.get(arch)


def load_runners(path: Path | None = None, *, executors: Collection[str] = ()) -> Runners:
    """Read and check a runners file (default matrix/runners.toml); `executors`: the names that
    `executor` may take (empty: any)."""
    path = path or DEFAULT_RUNNERS
    doc = read_toml(path, what="runners")
    errors = doc.errors
    for unknown in sorted(set(doc.data) - {"runner"}):
        errors.add(Key.of(unknown), "unknown key (expected [runner.<arch>] tables)")
    table = doc.data.get("runner")
    if not isinstance(table, dict) or not table:
        errors.add(Key.of("runner"), "no [runner.<arch>] table (e.g. [runner.sm90])")
        table = {}
    runners: dict[str, Runner] = {}
    for arch, raw in table.items():
        key = Key.of("runner", arch)
        if arch not in ARCHES:
            errors.add(key, f"unknown arch (known: {', '.join(ARCHES)})")
            continue
        if not isinstance(raw, dict):
            errors.add(key, "expected a table")
            continue
        runner = _runner(errors, key, arch, raw, executors)
        if runner is not None:
            runners[arch] = runner
    errors.raise_if_any()
    return Runners(path=path, by_arch=runners)


def _runner(
    errors: TomlErrors,
    key: Key,
    arch: str,
    raw: Mapping[str, object],
    executors: Collection[str],
) -> Runner | None:
    before = len(errors.messages)
    for unknown in sorted(set(raw) - _KEYS):
        errors.add(key / unknown, f"unknown key (known: {', '.join(sorted(_KEYS))})")
    lists: dict[str, tuple[str, ...]] = {}
    for name in _STR_LISTS:
        value = raw.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            errors.add(key / name, "expected a list of non-empty strings")
            continue
        lists[name] = tuple(value)
    if not lists.get("tags"):
        errors.add(key / "tags", "missing: the runner tags its jobs need (e.g. ['gpu', 'sm90'])")
    strs: dict[str, str | None] = {}
    for name in _STRS:
        value = raw.get(name)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            errors.add(key / name, "expected a non-empty string")
            continue
        strs[name] = value
    executor = strs.get("executor") or "local"
    if executors and executor not in executors:
        errors.add(
            key / "executor", f"unknown executor {executor!r} (known: {', '.join(executors)})"
        )
    ints: dict[str, int] = {}
    for name, least in _INTS.items():
        value = raw.get(name, max(least, 1))
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            errors.add(key / name, f"expected a whole number of at least {least}")
            continue
        ints[name] = value
    optional: dict[str, int | None] = {}
    for name, least in _OPTIONAL_INTS.items():
        value = raw.get(name)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < least
        ):
            errors.add(key / name, f"expected a whole number of at least {least}")
            continue
        optional[name] = value
    if len(errors.messages) > before:
        return None
    tags = lists.get("tags", ())
    return Runner(
        arch=arch,
        tags=tags,
        runs_on=lists.get("runs_on") or tags,
        image=strs.get("image"),
        executor=executor,
        concurrency=ints["concurrency"],
        gpus=ints["gpus"],
        partition=strs.get("partition"),
        constraint=strs.get("constraint"),
        gres=strs.get("gres"),
        time=strs.get("time"),
        cpus=optional.get("cpus"),
        mem=strs.get("mem"),
    )


def prune_without_runner(plan: Plan, runners: Runners) -> Plan:
    """Cells whose arch has no runner move to the pruned ones, with that reason."""
    planned, pruned = [], list(plan.pruned)
    for cell in plan.planned:
        if runners.get(cell.arch) is None:
            pruned.append((cell, f"no runner for arch {cell.arch} in {runners.path.name}"))
        else:
            planned.append(cell)
    return Plan(planned=planned, pruned=pruned)


@dataclass(frozen=True, kw_only=True)
class JobGroup:
    """The cells of one arch and one environment: one job per shard."""

    runner: Runner
    env: tuple[tuple[str, str], ...]  # (axis, value) of the env axes the cells carry
    drivers: tuple[str, ...]
    cells: int

    @property
    def arch(self) -> str:
        return self.runner.arch


def job_groups(plan: Plan, runners: Runners) -> list[JobGroup]:
    """Planned cells grouped by (arch, environment), in plan order; every cell's arch has a runner
    (prune_without_runner first)."""
    groups: dict[tuple[str, tuple[tuple[str, str], ...]], list[str]] = {}
    count: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
    for cell in plan.planned:
        env = tuple((axis, getattr(cell, axis)) for axis in ENV_AXES if getattr(cell, axis))
        key = (cell.arch, env)
        drivers = groups.setdefault(key, [])
        if cell.driver not in drivers:
            drivers.append(cell.driver)
        count[key] = count.get(key, 0) + 1
    out = []
    for (arch, env), drivers in groups.items():
        runner = runners.get(arch)
        if runner is None:  # pragma: no cover - prune_without_runner removed these
            msg = f"no runner for arch {arch}"
            raise ConfigError(msg)
        out.append(JobGroup(runner=runner, env=env, drivers=tuple(drivers), cells=count[arch, env]))
    return out
