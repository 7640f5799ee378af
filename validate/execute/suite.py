"""A pytest suite as cases (`--tests PATH`): one result per test id, in each cell's environment.

- **Collection** runs `pytest --collect-only` with the selection (`--tests-select`, default the
  suite's own addopts) in the cell's environment, with the plugin recording every collected id
  and its markers. A module that fails to collect is one `error` result named by its node id
  (its file) with the exception; the rest of the suite runs.
- **Needs a GPU**: where the host has no GPU and collection fails with text about CUDA or GPU
  availability (`_NEEDS_GPU`: the frontend's conftest asserts `torch.cuda.is_available()`), the
  whole suite (or that module) is one `skip` "needs a GPU", not an `error`. The same failure on a
  GPU host is an `error`: the evidence does not say "no GPU" there.
- **Batches**: the ids are cut into contiguous batches (collection order, so module fixtures
  are shared), one per pool slot, balanced by the duration history; the `gpu_exclusive` tests go
  into one batch of their own that the pool runs as an exclusive job. Each batch is one pool
  job running execute/batches.py's BatchRun. The collection is itself a pool job whose
  follow-up jobs are the batches.
- **Resume**: ids that have a result in the store (same file content and pins) are not run again.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import importlib.metadata
import math
import re
import shlex
import subprocess
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from validate.errors import ConfigError
from validate.execute.batches import BOOTSTRAP, BatchRun, TestEnd, plugin_env
from validate.execute.cases.pytest_suite import SUITE_PREFIX
from validate.execute.history import History
from validate.execute.pool import Job, Pool
from validate.execute.runner import TIMEOUT_FLOOR, default_gpu_load, run_pool
from validate.execute.slots import GPU_CAPACITY, GPU_PER_CASE_MIB
from validate.model.outcome import Outcome
from validate.model.results import CaseResult

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from validate.env.target import ExecTarget
    from validate.execute.runner import RunOptions
    from validate.model.results import ResultStore

__all__ = [
    "EXCLUSIVE_MARK",
    "Collected",
    "Suite",
    "SuiteRun",
    "collect",
    "pytest_requirement",
    "run_suite",
    "split_batches",
]

#: Tests with this marker run with nothing else on the GPU (the frontend's pytest.ini).
EXCLUSIVE_MARK: Final = "gpu_exclusive"
#: Collection output that says the suite needs a GPU to be collected at all.
_NEEDS_GPU: Final = re.compile(
    r"torch\.cuda\.is_available|cuda\.is_available\(\)|no NVIDIA driver|NVIDIA driver on your"
    r"|no CUDA-capable device|cudaErrorNoDevice|CUDA_ERROR_NO_DEVICE|CUDA is not available"
    r"|libcuda\.so|needs? a GPU",
    re.IGNORECASE,
)
_COLLECT_TAIL: Final = 30


@dataclass(frozen=True, kw_only=True)
class Suite:
    """A pytest root and the selection to run in it (pytest arguments: markers, -k, paths)."""

    root: Path
    select: tuple[str, ...] = ()

    @classmethod
    def from_flags(cls, path: Path, select: str | None) -> Suite:
        """`--tests PATH --tests-select "ARGS"`, checked: bad input is a ConfigError."""
        if not path.is_dir():
            msg = f"--tests {path}: not a folder (expected a pytest root, e.g. a checkout's test/python)"
            raise ConfigError(msg)
        try:
            args = tuple(shlex.split(select or ""))
        except ValueError as exc:
            msg = f"--tests-select {select!r}: {exc}"
            raise ConfigError(msg) from exc
        return cls(root=path.resolve(), select=args)

    @property
    def name(self) -> str:
        """The case name of results about the whole suite (it could not be collected)."""
        return f"{SUITE_PREFIX}{self.root.name}"

    def argv(self, python: Path, *extra: str) -> list[str]:
        """pytest with the plugin and the selection (the suite's own ini and addopts apply).
        No cache folder is written into the suite, and output is teed (not only captured), so
        a test that ends the process leaves its last lines in the batch's output file."""
        return [str(python), str(BOOTSTRAP), *self.select, "-p", "no:cacheprovider", *extra]


@dataclass(frozen=True, kw_only=True)
class CollectedTest:
    id: str  # the pytest node id: the case name, the same in every cell and run
    file: str  # relative to the suite root
    exclusive: bool = False


@dataclass(frozen=True, kw_only=True)
class Collected:
    """What the collection found: the tests, and results for what could not be collected (a
    module's `error`, or the whole suite's `skip`/`error`), each (case name, outcome, reason)."""

    tests: tuple[CollectedTest, ...] = ()
    problems: tuple[tuple[str, Outcome, str], ...] = ()
    log_path: str = ""


_EXC_LINE: Final = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)\b")


def _exception_line(text: str) -> str:
    """The exception a collection traceback ends with ("E   ModuleNotFoundError: ...", or an
    INTERNALERROR> line), else its last line."""
    lines = [
        ln.removeprefix("INTERNALERROR>").removeprefix("E ").strip()
        for ln in text.splitlines()
        if ln.strip()
    ]
    named = [ln for ln in lines if _EXC_LINE.match(ln)]
    found = named[-1] if named else (lines[-1] if lines else "")
    return found[:300]


def collect(suite: Suite, target: ExecTarget, folder: Path, timeout_s: float) -> Collected:
    """Collect the suite in the target's environment (see the module doc)."""
    from validate.execute.batches import _Record  # the same reader as the batches'

    folder.mkdir(parents=True, exist_ok=True)
    record_path, log_path = folder / "collect.jsonl", folder / "collect.log"
    record_path.unlink(missing_ok=True)
    env = plugin_env(target.process_env(), record_path)
    argv = suite.argv(target.python, "--collect-only", "-q")
    returncode: int | str
    with log_path.open("wb") as out:
        try:
            returncode = subprocess.run(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=suite.root,
                timeout=timeout_s,
                check=False,
                start_new_session=True,
            ).returncode
        except subprocess.TimeoutExpired:
            returncode = f"timed out after {timeout_s:g}s"
        except OSError as exc:
            returncode = f"could not start: {exc}"
    events = _Record(record_path).read()
    output = log_path.read_text(encoding="utf-8", errors="replace")
    no_gpu = not target.has_gpu
    if not any(e.get("ev") == "collected" for e in events):  # the suite as a whole failed
        tail = [ln for ln in output.splitlines() if ln.strip()][-_COLLECT_TAIL:]
        line = _exception_line("\n".join(tail)) or str(returncode)
        if no_gpu and _NEEDS_GPU.search(output):
            problem = (
                suite.name,
                Outcome.SKIP,
                f"needs a GPU: the suite cannot collect without one ({line})",
            )
        elif "No module named pytest" in output:
            problem = (suite.name, Outcome.ERROR, "pytest is not installed in the cell environment")
        else:
            why = returncode if isinstance(returncode, str) else f"exit status {returncode}"
            problem = (
                suite.name,
                Outcome.ERROR,
                f"pytest could not collect the suite ({why}): {line}",
            )
        return Collected(problems=(problem,), log_path=str(log_path))
    tests = tuple(
        CollectedTest(
            id=str(e["id"]),
            file=str(e.get("file") or str(e["id"]).split("::", 1)[0]),
            exclusive=EXCLUSIVE_MARK in (e.get("markers") or ()),
        )
        for e in events
        if e.get("ev") == "item"
    )
    problems = []
    for event in events:
        if event.get("ev") != "collect_error":
            continue
        text = str(event.get("text") or "")
        where = str(event.get("id") or suite.name)
        line = _exception_line(text)
        if no_gpu and _NEEDS_GPU.search(text):
            problems.append(
                (where, Outcome.SKIP, f"needs a GPU: {where} cannot collect without one ({line})")
            )
        else:
            problems.append((where, Outcome.ERROR, f"{where} failed to collect: {line}"))
    return Collected(tests=tests, problems=tuple(problems), log_path=str(log_path))


def split_batches(
    tests: Sequence[CollectedTest], slots: int, estimate: Callable[[str], float | None]
) -> list[tuple[list[CollectedTest], bool]]:
    """(tests, exclusive) batches: every `gpu_exclusive` test in one exclusive batch, the others
    in at most `slots` contiguous batches of about equal expected time (a test the history does
    not know counts as the mean of those it knows, else 1 s)."""
    shared = [t for t in tests if not t.exclusive]
    alone = [t for t in tests if t.exclusive]
    out: list[tuple[list[CollectedTest], bool]] = []
    if shared:
        known = [s for t in shared if (s := estimate(t.id)) is not None]
        default = sum(known) / len(known) if known else 1.0
        weights = [max(estimate(t.id) or default, 1e-3) for t in shared]
        count = max(1, min(slots, len(shared)))
        share = sum(weights) / count
        batch: list[CollectedTest] = []
        done = 0.0
        for test, weight in zip(shared, weights, strict=True):
            batch.append(test)
            done += weight
            if done >= share * (len(out) + 1) - 1e-9 and len(out) < count - 1:
                out.append((batch, False))
                batch = []
        if batch:
            out.append((batch, False))
    if alone:
        out.append((alone, True))
    return out


@functools.cache
def pytest_requirement() -> str:
    """The pytest a cell environment gets with `--tests`: the tool's own version where it has
    one (recorded with the environment's pins), else the newest."""
    try:
        return f"pytest=={importlib.metadata.version('pytest')}"
    except importlib.metadata.PackageNotFoundError:
        return "pytest"


class SuiteRun:
    """One cell's run of a suite: `job()` is the collection, whose follow-up jobs are the
    batches; each test's end goes to `store` as it lands (`results` keeps them too)."""

    def __init__(
        self,
        suite: Suite,
        target: ExecTarget,
        options: RunOptions,
        store: ResultStore,
        *,
        slots: int,
        history: History | None = None,
        on_result: Callable[[CaseResult], None] | None = None,
    ) -> None:
        self.suite, self.target, self.options, self.store = suite, target, options, store
        self.slots = slots
        self.history = history if history is not None else History.load(options.history)
        self._on_result = on_result
        self._lock = threading.Lock()
        self._files: dict[str, str] = {}
        self.results: list[CaseResult] = []
        self.paths: dict[str, str] = {}  # test id -> its file, from the collection
        self.folder = options.results_dir / "cases" / (target.cell_id or "local") / "pytest"

    def job(self) -> Job:
        """The collection as a pool job (it needs the environment's interpreter, like a case)."""
        return Job(name=f"collect {self.suite.name}", run=self._collect, cases=0)

    def _key(self, case: str) -> str:
        return f"{self.target.cell_id}::{case}"

    def content_key(self, test_id: str) -> str:
        """The test's file content, its id and the cell's pins (as Case.content_key)."""
        file = test_id.split("::", 1)[0]
        with self._lock:
            digest = self._files.get(file)
        if digest is None:
            try:
                digest = hashlib.sha256((self.suite.root / file).read_bytes()).hexdigest()
            except OSError:
                digest = "missing"
            with self._lock:
                self._files[file] = digest
        text = "\0".join(
            [digest, test_id, *(f"{a}={v}" for a, v in sorted(self.target.cell.items()))]
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def _stored(self) -> set[str]:
        """Case names of this cell with a result in the store that still holds (resume)."""
        mine = f"{self.target.cell_id}::"
        kept = set()
        for result in self.store:
            if result.key.startswith(mine) and (
                not result.content_key
                or "::" not in result.case
                or result.content_key == self.content_key(result.case)
            ):
                kept.add(result.case)
        return kept

    def _collect(self) -> Sequence[Job]:
        found = collect(self.suite, self.target, self.folder, self.options.timeout_s)
        stored = self._stored()
        for name, outcome, reason in found.problems:
            if name not in stored:
                self._store(
                    CaseResult(
                        case=name,
                        outcome=outcome,
                        reason=reason,
                        cell_id=self.target.cell_id,
                        cell=dict(self.target.cell),
                        case_path=str(self.suite.root / name.split("::", 1)[0]),
                        log_path=found.log_path,
                        run_id=self.options.run_id,
                        started_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                    )
                )
        todo = [t for t in found.tests if t.id not in stored]
        self.paths = {t.id: t.file for t in found.tests}
        batches = split_batches(todo, self.slots, self.history.estimate)
        return [self._batch_job(i, tests, alone) for i, (tests, alone) in enumerate(batches, 1)]

    def _limit(self, test_id: str) -> float:
        """A test's time limit: --timeout, raised to TIMEOUT_FLOOR times its last finished run."""
        took = self.history.finished_estimate(test_id) if test_id else None
        limit = self.options.timeout_s
        if took is not None and took * TIMEOUT_FLOOR > limit:
            limit = float(math.ceil(took * TIMEOUT_FLOOR))
        return limit

    def _batch_job(self, n: int, tests: list[CollectedTest], exclusive: bool) -> Job:
        ids = [t.id for t in tests]
        batch = BatchRun(
            ids=ids,
            argv=self.suite.argv(
                self.target.python, "--capture=tee-sys", "--continue-on-collection-errors"
            ),
            env=self.target.process_env(),
            cwd=self.suite.root,
            folder=self.folder / f"batch-{n:03d}",
            limit_s=self._limit,
            on_end=self._ended,
        )
        known = [self.history.estimate(i) for i in ids]
        estimate = (
            sum(k for k in known if k is not None) if all(k is not None for k in known) else None
        )
        gpu = load = 0.0
        if self.target.has_gpu:
            gpu, load = GPU_PER_CASE_MIB, default_gpu_load(self.history)

        def run() -> Sequence[Job]:
            batch.run()
            return ()

        return Job(
            name=f"{self.suite.name} batch {n} ({len(ids)} tests)",
            run=run,
            estimate_s=estimate,
            cases=len(ids),
            gpu_mib=gpu,
            gpu_load=load,
            exclusive=exclusive,
        )

    def _ended(self, end: TestEnd) -> None:
        result = CaseResult(
            case=end.id,
            outcome=end.outcome,
            reason=end.reason,
            duration_s=round(end.duration_s, 3),
            cell_id=self.target.cell_id,
            cell=dict(self.target.cell),
            case_path=str(self.suite.root / self.paths.get(end.id, end.id.split("::", 1)[0])),
            exit_code=end.exit_code,
            signal=end.signal,
            exception=end.exception,
            tail=end.tail,
            log_path=end.log_path,
            started_at=end.started_at,
            run_id=self.options.run_id,
            content_key=self.content_key(end.id),
        )
        if end.outcome is not Outcome.SKIP:
            self.history.record(end.id, end.duration_s, timed_out=end.outcome is Outcome.TIMEOUT)
        self._store(result)

    def _store(self, result: CaseResult) -> None:
        self.store.append(result)
        with self._lock:
            self.results.append(result)
        if self._on_result is not None:
            self._on_result(result)


def run_suite(
    suite: Suite,
    target: ExecTarget,
    options: RunOptions,
    store: ResultStore,
    *,
    on_change: Callable[..., None] | None = None,
) -> list[CaseResult]:
    """The `run --tests` path: the suite in a pool of `options.jobs` slots of its own."""
    history = History.load(options.history)
    run = SuiteRun(suite, target, options, store, slots=options.jobs, history=history)
    pool = Pool(
        options.jobs, gpu_load=GPU_CAPACITY if target.has_gpu else None, on_change=on_change
    )
    pool.submit([run.job()])
    pool.close()
    run_pool(pool)
    history.save()
    return run.results
