"""A pytest suite as cases (`--tests PATH`): one result per test id, in each cell's environment.

- **Collection**: pytest with the selection (`--tests-select`, default the suite's own ini and
  addopts) in the cell's environment, the plugin (resources/run_pytest.py) recording every
  collected id and its markers; what could not be collected becomes results as
  execute/collection.py says (a module's `error`, or "needs a GPU" `skip` without one).
- **Shares** (the run): one pool job per slot, each a pytest process that collects the whole
  selection itself, as pytest-xdist's workers do, and runs its share (resources/shares.py:
  contiguous blocks in collection order, so module fixtures are mostly shared, dealt round robin
  so a slow family of tests is spread; balanced by the duration history where there is one), so
  no collection runs alone before the tests. Share 1 also reports the collection
  to the tool (its ids, markers, and the modules that failed to collect). A share whose process
  cannot collect while share 1 could takes its ids from share 1's list. After a crash, a poison
  report or a timeout, the ids left run in a fresh process (execute/batches.py). On a GPU host
  the `gpu_exclusive` tests are left out of the shares and run after them as one exclusive pool
  job (nothing else on the GPU); without a GPU there are no kernels to keep apart.
- **Every id once**: each share process cuts its part from its own collection, which is share 1's
  only where collection is deterministic (pytest-xdist refuses workers that collected
  differently). So the tool checks: when the last share ends, the ids of share 1's collection
  that got no result run in one more batch, and a second result for an id is stored only where
  it is worse than the first (the later line wins in a report, so never the more optimistic).
- **Resume**: ids that have a result in the store (same file content and pins) are not run again.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import importlib.metadata
import json
import logging
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from validate.execute.attempt import pin_error
from validate.execute.batches import (
    EXCLUSIVE_ENV,
    SHARE_ENV,
    SKIP_ENV,
    WEIGHTS_ENV,
    BatchRun,
    TestEnd,
)
from validate.execute.collection import (
    BatchedSuite,
    CollectedTest,
    collection_results,
    suite_problem,
)
from validate.execute.deaths import TOOL_KILLED, alone_job, find_deaths
from validate.execute.history import History
from validate.execute.ledger import host_cpus
from validate.execute.limits import case_timeout, cpp_build_limit, startup_limit
from validate.execute.pool import Job
from validate.execute.resources.shares import split
from validate.execute.runner import default_gpu_load
from validate.execute.slots import DEFAULT_GPU_LOAD, GPU_PER_CASE_MIB
from validate.execute.supervise import SUPERVISOR
from validate.model.outcome import POLICY, Outcome
from validate.model.results import CaseResult
from validate.plan.requirements import missing_modules

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from validate.env.target import ExecTarget
    from validate.execute.runner import RunOptions
    from validate.model.results import ResultStore

__all__ = ["SuiteRun", "pytest_requirement"]

log = logging.getLogger(__name__)

#: The backend a cell pins, for the case process to report against (as runner.py sets it).
EXPECT_BACKEND_ENV: Final = "CUDNN_MATRIX_EXPECT_BACKEND"


@functools.cache
def pytest_requirement(*, isolated: bool = True, base: str = "") -> str | None:
    """The pytest a cell environment gets with `--tests`. An isolated one: the tool's own
    version where it has one (recorded with the environment's pins). One layered on a base
    interpreter `base`: none where the base has pytest (the environment sees it through the
    base's site-packages; uv would not count it as installed and, offline, fail to find one),
    else `pytest`. The version each suite process ran is in its record's `session` line."""
    if not isolated:
        return None if base and not missing_modules(Path(base), ["pytest"]) else "pytest"
    try:
        return f"pytest=={importlib.metadata.version('pytest')}"
    except importlib.metadata.PackageNotFoundError:
        return "pytest"


class SuiteRun:
    """One cell's run of a suite: `jobs()` are its shares, one per slot (see the module doc);
    each test's end goes to `store` as it lands (`results` keeps them too)."""

    def __init__(
        self,
        suite: BatchedSuite,
        target: ExecTarget,
        options: RunOptions,
        store: ResultStore,
        *,
        slots: int,
        history: History | None = None,
        on_result: Callable[[CaseResult], None] | None = None,
    ) -> None:
        self.suite, self.target, self.options, self.store = suite, target, options, store
        self.slots = max(1, slots)
        self.history = history if history is not None else History.load(options.history)
        self._on_result = on_result
        self._lock = threading.Lock()
        self._storing = threading.Lock()  # one share's results judged and stored at a time
        self._files: dict[str, str] = {}
        self.results: list[CaseResult] = []
        self.paths: dict[str, str] = {}  # test id -> its file, from the collection
        self.folder = options.results_dir / "cases" / (target.cell_id or "local") / suite.kind
        self._events: list[Mapping[str, Any]] = []  # share 1's collection lines
        self._collected = threading.Event()  # share 1 collected, or could not
        self.tests: tuple[CollectedTest, ...] | None = None  # None: not (yet) collected
        self._skip: set[str] = set()
        self._weights: dict[str, float] = {}
        self._seen: dict[str, int] = {}  # test id -> its index in `results` (this run)
        self._shares_ended = 0

    def jobs(self) -> list[Job]:
        """One pool job per share. Share 1 collects the whole selection for the tool too (its
        items, its modules that failed to collect, or the suite's one result when nothing could
        be collected) and, on a GPU host, hands the `gpu_exclusive` tests to an exclusive job."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self._skip = self._stored()
        deaths = find_deaths(self.folder, self._skip)  # ids the tool died during (deaths.py)
        for ident, output in sorted(deaths.convicted.items()):  # died twice: its crash now
            self._problems([(ident, Outcome.CRASH, TOOL_KILLED)], str(output))
        self._skip.update(deaths.convicted, deaths.again)  # `again`: alone, before the shares
        self._weights = {k: v for k, v in self.history.durations.items() if "::" in k}
        if not self.suite.collects_in_shares:
            return [self._prepare_job(deaths.again)]
        (self.folder / "skip.txt").write_text(
            "".join(f"{i}\n" for i in sorted(self._skip)), encoding="utf-8"
        )
        (self.folder / "weights.json").write_text(json.dumps(self._weights), encoding="utf-8")
        gpu = load = 0.0
        if self.target.has_gpu:  # a share's load is not on record: as a case the history lacks
            gpu, load = GPU_PER_CASE_MIB, DEFAULT_GPU_LOAD
        jobs = []
        for k in range(1, self.slots + 1):
            job = Job(
                name=f"{self.suite.name} share {k}/{self.slots}",
                run=tuple,  # set below: the share's run needs its job
                cases=0,  # its tests are known once it has collected them: counted at its end
                gpu_mib=gpu,
                gpu_load=load,
            )
            job.run = functools.partial(self._share, k, job)
            jobs.append(job)

        return self._alone_first(deaths.again, jobs)

    def _alone_first(self, again: Sequence[str], jobs: list[Job]) -> list[Job]:
        """`jobs`, after one exclusive job running each id of `again` alone (deaths.py)."""
        if not again:
            return jobs

        def alone(ident: str, folder: str) -> None:
            self._batch(folder, [ident], runner=self._runner(ident)).run()

        gpu = GPU_PER_CASE_MIB if self.target.has_gpu else 0.0
        return [alone_job(self.suite.name, again, alone, jobs, gpu_mib=gpu)]

    def _runner(self, ident: str) -> str:
        return next((t.runner for t in self.tests or () if t.id == ident), "")

    def _prepare_job(self, again: Sequence[str]) -> Job:
        """A suite that does not collect in its shares (a C++ project): one pool job prepares
        it (its build, with the CPUs the ledger books for it, then the listing of its ids), and
        hands on one job per share of each runner's ids, after the ids the tool died during run
        alone. What could not be prepared is its results (a failed build: one `error`)."""
        cpus = max(1, int(host_cpus()))

        def run() -> Sequence[Job]:
            collected = self.suite.prepare(
                self.target,
                self.folder,
                cpus=cpus,
                timeout_s=startup_limit(
                    self.options.timeout_s, self.options.tests_startup_timeout_s
                ),
                build_timeout_s=cpp_build_limit(
                    self.options.timeout_s, self.options.cpp_build_timeout_s
                ),
            )
            self.tests = collected.tests
            self.paths = {t.id: t.file for t in collected.tests}
            if SUPERVISOR.stopped:  # the tool's stop killed the build: no verdict, a resume
                self._collected.set()  # builds again (a lease once stored "exited with -9")
                return ()
            self._problems(collected.problems, collected.log_path)
            self._collected.set()
            known = {t.id for t in collected.tests}
            return self._alone_first([i for i in again if i in known], self._id_shares())

        return Job(name=f"{self.suite.name}: build and list", run=run, cases=0, cpu=float(cpus))

    def _id_shares(self) -> list[Job]:
        """The listed ids not stored yet, one pool job per share of each runner's ids (shares.py
        `split`: contiguous blocks dealt round robin, balanced by the duration history)."""
        by_runner: dict[str, list[str]] = {}
        for test in self.tests or ():
            if test.id not in self._skip:
                by_runner.setdefault(test.runner, []).append(test.id)
        gpu, load = (GPU_PER_CASE_MIB, DEFAULT_GPU_LOAD) if self.target.has_gpu else (0.0, 0.0)
        jobs = []
        for n, (runner, ids) in enumerate(by_runner.items(), 1):
            parts = [p for p in split(ids, self._weights, self.slots) if p]
            for k, part in enumerate(parts, 1):
                batch = self._batch(f"r{n:02d}-share-{k:03d}", part, runner=runner)
                batch.assigned = len(part)
                jobs.append(
                    Job(
                        name=f"{self.suite.name} {Path(runner).name} share {k}/{len(parts)}",
                        run=functools.partial(self._run_part, batch),
                        cases=len(part),
                        gpu_mib=gpu,
                        gpu_load=load,
                    )
                )
        return jobs

    @staticmethod
    def _run_part(batch: BatchRun) -> Sequence[Job]:
        batch.run()
        return ()

    def content_key(self, test_id: str) -> str:
        """The test's file content, its id, how its draws are seeded (the suite's `draws`) and
        the cell's pins (as Case.content_key)."""
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
        draws = self.suite.draws
        text = "\0".join(
            [
                digest,
                test_id,
                *([f"draws={draws}"] if draws else []),
                *(f"{a}={v}" for a, v in sorted(self.target.cell.items())),
            ]
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

    def _limit(self, test_id: str) -> float:
        """A test's time limit: --timeout, raised to TIMEOUT_FLOOR times its last finished run.
        The start-up ("": imports, the collection of the selection, any wait between tests)
        gets limits.startup_limit: --tests-startup-timeout, else TIMEOUT_FLOOR x --timeout, at
        least limits.STARTUP_S. A per-test limit says nothing about how long 40,000 ids take to
        collect, and a hung collection still ends at a limit the user set."""
        if not test_id:
            return startup_limit(self.options.timeout_s, self.options.tests_startup_timeout_s)
        return case_timeout(self.options.timeout_s, self.history.finished_estimate(test_id))

    def _batch(
        self,
        name: str,
        ids: Sequence[str] | None,
        share: Mapping[str, str] | None = None,
        on_ends: Callable[[list[TestEnd]], object] | None = None,
        *,
        runner: str = "",
    ) -> BatchRun:
        return BatchRun(
            ids=ids,
            argv=self.suite.batch_argv(self.target.python, runner),
            process=self.suite.process,
            env=self._env(),
            cwd=self.suite.root,
            folder=self.folder / name,
            limit_s=self._limit,
            on_ends=on_ends or self._ended,
            share_env=share,
            check_env=self._pin_error,
            capture_cap=self.options.capture_cap,
            on_note=self._noted,
            on_collect=self._collection_lines if share and share[SHARE_ENV][:2] == "1/" else None,
        )

    def _share(self, k: int, job: Job) -> Sequence[Job]:
        """Run share k; `job.cases` becomes the number of results it stored (the progress)."""
        stored = [0]
        batches: list[BatchRun] = []

        def counted(ends: list[TestEnd]) -> None:
            new = self._ended(ends)
            stored[0] += new
            if new and job.moved is not None:
                job.moved()

        job.live = lambda: (stored[0], sum(b.assigned for b in batches))
        try:
            follow = self._run_share(k, counted, batches.append)
            self._last_share_ended(counted, batches.append)
            return follow
        finally:
            job.cases = stored[0]  # `live` stays: read while the pool still counts it running

    def _run_share(
        self,
        k: int,
        on_ends: Callable[[list[TestEnd]], None],
        started: Callable[[BatchRun], None],
    ) -> Sequence[Job]:
        share = {
            SHARE_ENV: f"{k}/{self.slots}",
            SKIP_ENV: str(self.folder / "skip.txt"),
            WEIGHTS_ENV: str(self.folder / "weights.json"),
            EXCLUSIVE_ENV: "1" if self.target.has_gpu else "0",
        }
        batch = self._batch(f"share-{k:03d}", None, share, on_ends)
        started(batch)
        try:
            assigned = batch.run()
        finally:
            if k == 1:
                self._collection_ended(batch)
        if assigned:
            return self._exclusive() if k == 1 else ()
        if k == 1 or not self._collected.wait(timeout=self.options.timeout_s) or not self.tests:
            return self._exclusive() if k == 1 else ()
        # this process could not collect while share 1 could: its share from share 1's list
        free = [t.id for t in self.tests if t.id not in self._skip and not self._alone(t)]
        parts = split(free, self._weights, self.slots)
        if k <= len(parts):
            again = self._batch(f"share-{k:03d}-again", parts[k - 1], None, on_ends)
            again.assigned = len(parts[k - 1])
            started(again)
            again.run()
        return ()

    def _last_share_ended(
        self, on_ends: Callable[[list[TestEnd]], None], started: Callable[[BatchRun], None]
    ) -> None:
        """After the last share: the ids of share 1's collection that no share ran (a process
        that collected differently cut other parts) run in one more batch; nothing is lost."""
        with self._lock:
            self._shares_ended += 1
            if self._shares_ended < self.slots or self.tests is None or SUPERVISOR.stopped:
                return
            left = [
                t.id
                for t in self.tests
                if t.id not in self._skip and t.id not in self._seen and not self._alone(t)
            ]
            collected = {t.id for t in self.tests}
            extra = sum(1 for i in self._seen if "::" in i and i not in collected)
        cell = self.target.cell_id or "local"
        if extra:
            why = "were run by a share process but not collected by share 1 (random ids?)"
            log.warning("cell %s: %d test ids %s", cell, extra, why)
        if not left:
            return
        why = "got no result from the shares (their processes collected differently): run now"
        log.warning("cell %s: %d test ids of the collection %s", cell, len(left), why)
        batch = self._batch("leftover", left, None, on_ends)
        batch.assigned = len(left)
        started(batch)
        batch.run()

    def _env(self) -> dict[str, str]:
        """The cell environment's variables, and the backend it pins (the plugin then reports
        what its process loaded, resources/run_pytest.py)."""
        env = self.target.process_env()
        if self.target.expected_backend:
            env[EXPECT_BACKEND_ENV] = self.target.expected_backend
        return env

    def _pin_error(self, env: Mapping[str, Any]) -> str | None:
        """Why what a suite process loaded is not the cell's pins (None: it is, or nothing is
        pinned): the check every case gets (resources/capture.py verify_pins)."""
        if "capture_error" in env:
            return None  # evidence that could not be gathered is not a verdict
        return pin_error(self.target, env)

    def _alone(self, test: CollectedTest) -> bool:
        return test.exclusive and self.target.has_gpu

    def _exclusive(self) -> Sequence[Job]:
        """The `gpu_exclusive` tests (on a GPU host) as one exclusive job: nothing beside it."""
        ids = [t.id for t in self.tests or () if self._alone(t) and t.id not in self._skip]
        if not ids:
            return ()
        batch = self._batch("exclusive", ids)

        def run() -> Sequence[Job]:
            batch.run()
            return ()

        return [
            Job(
                name=f"{self.suite.name} gpu_exclusive ({len(ids)} tests)",
                run=run,
                cases=len(ids),
                gpu_mib=GPU_PER_CASE_MIB,
                gpu_load=default_gpu_load(self.history),
                exclusive=True,
            )
        ]

    def _collection_lines(self, events: list[dict[str, Any]]) -> None:
        """Share 1's collection lines as they are read; at `collected`, the collection."""
        for event in events:
            if event.get("ev") == "session" and self.tests is None:  # its first process
                log.info(
                    "cell %s: %s with pytest %s on Python %s",
                    self.target.cell_id or "local",
                    self.suite.name,
                    event.get("pytest"),
                    event.get("python"),
                )
        self._events.extend(events)
        if any(e.get("ev") == "collected" for e in events) and self.tests is None:
            tests, problems = collection_results(self.suite, self.target, self._events)
            self.paths = {t.id: t.file for t in tests}
            self.tests = tests
            self._problems(problems, "")
            self._collected.set()

    def _collection_ended(self, batch: BatchRun) -> None:
        """Share 1 ended: without a collection, the suite's one result (skip or error)."""
        stopped = SUPERVISOR.stopped  # the tool's stop killed the collection: no verdict
        if (
            self.tests is None
            and batch.unassigned is not None
            and not self._collected.is_set()
            and not stopped
        ):
            returncode, log_path = batch.unassigned
            problem = suite_problem(self.suite, self.target, returncode, log_path)
            self._problems([problem], str(log_path))
        self._collected.set()

    def _problems(self, problems: Sequence[tuple[str, Outcome, str]], log_path: str) -> None:
        stamp = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        self._store_all(
            [
                CaseResult(
                    case=name,
                    outcome=outcome,
                    reason=reason,
                    cell_id=self.target.cell_id,
                    cell=dict(self.target.cell),
                    case_path=str(
                        self.suite.root
                        if name == self.suite.name
                        else self.suite.root / name.split("::", 1)[0]
                    ),
                    log_path=log_path,
                    run_id=self.options.run_id,
                    started_at=stamp,
                )
                for name, outcome, reason in problems
                if name not in self._skip
            ]
        )

    def _ended(self, ends: list[TestEnd]) -> int:
        """Store the ends; returns how many were ids without a result in this run yet."""
        results = []
        for end in ends:
            end = self.suite.judged(end, has_gpu=self.target.has_gpu)
            file = self.paths.get(end.id, end.id.split("::")[0])
            results.append(
                CaseResult(
                    case=end.id,
                    outcome=end.outcome,
                    reason=end.reason,
                    duration_s=round(end.duration_s, 3),
                    cell_id=self.target.cell_id,
                    cell=dict(self.target.cell),
                    case_path=str(self.suite.case_path(end.id, file)),
                    exit_code=end.exit_code,
                    signal=end.signal,
                    exception=end.exception,
                    tail=end.tail,
                    log_path=end.log_path,
                    started_at=end.started_at,
                    run_id=self.options.run_id,
                    content_key=self.content_key(end.id),
                    env=end.env or {},
                )
            )
            if end.outcome is not Outcome.SKIP:
                timed_out = end.outcome is Outcome.TIMEOUT
                self.history.record(end.id, end.duration_s, timed_out=timed_out)
        return self._store_all(results)

    def _noted(self, test_id: str, note: str) -> None:
        """A stored result's note (what its test left running): stored again (later line read)."""
        with self._storing, self._lock:
            index = self._seen.get(test_id)
            if index is None:
                return
            old = self.results[index]
            self.results[index] = old.with_(reason=f"{old.reason}; {note}".lstrip("; "))
            self.store.append(self.results[index])

    def _store_all(self, results: list[CaseResult]) -> int:
        """Store results together: one write and fsync where the store groups them
        (`append_many`), else one by one; none is reported before it is stored. A second result
        for an id of this run (two processes that collected differently both ran it) is stored
        only where it is worse than the first, and then takes its place in `results`; returns
        how many ids were new."""
        with self._storing:  # judged against what is stored, so two shares' repeats cannot race
            results = self._first_or_worse(results)
            if not results:
                return 0
            many = getattr(self.store, "append_many", None)
            if many is not None:
                many(results)
            else:
                for result in results:
                    self.store.append(result)
            new = self._register(results)
        if self._on_result is not None:
            for result in results:
                self._on_result(result)
        return new

    def _register(self, results: list[CaseResult]) -> int:
        new = 0
        with self._lock:
            for result in results:
                index = self._seen.get(result.case)
                if index is None:
                    self._seen[result.case] = len(self.results)
                    self.results.append(result)
                    new += 1
                else:
                    self.results[index] = result
        return new

    def _first_or_worse(self, results: list[CaseResult]) -> list[CaseResult]:
        with self._lock:
            if not any(r.case in self._seen for r in results):
                return results
            kept = []
            for result in results:
                index = self._seen.get(result.case)
                if index is None:
                    kept.append(result)
                    continue
                first = self.results[index]
                worse = POLICY[result.outcome].rank < POLICY[first.outcome].rank
                log.warning(
                    "%s: a second result in this run (%s after %s): %s",
                    result.case,
                    result.outcome,
                    first.outcome,
                    "stored, it is worse" if worse else "not stored",
                )
                if worse:
                    kept.append(result)
            return kept
