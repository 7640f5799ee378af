"""A pytest suite (`--tests PATH --tests-select ARGS`) and its collection in a cell's environment.

- `Suite`: the root and the selection, and the pytest command (resources/run_pytest.py, the
  plugin's bootstrap) every suite process runs.
- The collection's results: a module that fails to collect is one `error` named by its node id
  (its file) with the exception. Where the host has no GPU and the failure's text is about CUDA
  or GPU availability (plan/requirements.py `no_gpu_skip`, the
  rule every kind shares: the frontend's conftest asserts `torch.cuda.is_available()`), the suite (or that module) is one `skip` "needs a GPU"; the same
  failure on a GPU host is an `error`: nothing there says "no GPU".
- `collect` runs the collection alone (`--collect-only`), for a caller that needs the ids first;
  a run collects inside its shares instead (execute/suite.py).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

from validate.errors import ConfigError
from validate.execute import launch
from validate.execute.batches import BOOTSTRAP, RESEED, RESEED_PLUGIN, plugin_env
from validate.execute.cases.pytest_suite import SUITE_PREFIX
from validate.model.outcome import Outcome
from validate.plan.requirements import no_gpu_skip

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from validate.env.target import ExecTarget
    from validate.execute.batches import TestEnd
    from validate.execute.placement import Placement

__all__ = [
    "EXCLUSIVE_MARK",
    "BatchedSuite",
    "Collected",
    "CollectedTest",
    "Suite",
    "collect",
    "collection_results",
    "suite_problem",
]

#: Tests with this marker run with nothing else on the GPU (the frontend's pytest.ini).
EXCLUSIVE_MARK: Final = "gpu_exclusive"
_COLLECT_TAIL: Final = 30


class BatchedSuite(Protocol):
    """What the shared batches (execute/suite.py, execute/batches.py) need of a batched kind's
    suite: a pytest suite (`Suite`) or a C++ project's test binaries (execute/catch2_suite.py).

    Two ways to its ids: a suite that `collects_in_shares` (pytest) has each share process
    collect the whole selection itself and cut its part, as pytest-xdist's workers do; any
    other is `prepare`d once per cell in a pool job of its own (a build, then a listing) and
    its ids are then dealt to shares, each run by the process `batch_argv(python, runner)`
    starts (one `runner` per binary). Either way every id runs under a durable start marker
    (resources/markers.py) and the batches name what a dead or hung process was running."""

    @property
    def root(self) -> Path:
        """Its folder: a test id's file is relative to it."""
        ...

    @property
    def name(self) -> str:
        """The case name of results about the whole suite (it could not be collected)."""
        ...

    @property
    def process(self) -> str:
        """The batch process, in a crash's reason: "pytest process", "test binary"."""
        ...

    @property
    def collects_in_shares(self) -> bool:
        """True: each share process collects the selection itself (pytest); False: `prepare`."""
        ...

    @property
    def kind(self) -> str:
        """The folder of its batches under the cell's evidence folder: "pytest", "cpp"."""
        ...

    @property
    def draws(self) -> str:
        """How its tests' random draws are seeded, part of each result's content key (a result
        drawn another way is run again on --resume); "" where the tool seeds nothing."""
        ...

    def batch_argv(self, python: Path, runner: str) -> list[str]:
        """The command of a batch process over ids of `runner` (the record's and the ids' files
        come in its environment, execute/batches.py `plugin_env`)."""
        ...

    def prepare(
        self,
        target: ExecTarget,
        folder: Path,
        *,
        cpus: int,
        timeout_s: float,
        build_timeout_s: float | None = None,
    ) -> Collected:
        """The suite's ids for the cell `target` (a build with `cpus` parallel jobs, ended at
        `build_timeout_s`, and a listing ended at `timeout_s`, their files under `folder`), or
        the results of what could not be prepared."""
        ...

    def case_path(self, test_id: str, file: str) -> Path:
        """A test's stored case path (its file; a C++ test case's binary, for the repro line)."""
        ...

    def judged(self, end: TestEnd, *, has_gpu: bool) -> TestEnd:
        """A test's end as the kind judges it beyond the batches (a C++ failure that says it
        wanted a GPU, on a host without one, is that skip)."""
        ...


@dataclass(frozen=True, kw_only=True)
class Suite:
    """A pytest root and the selection to run in it (pytest arguments: markers, -k, paths)."""

    root: Path
    select: tuple[str, ...] = ()
    process: str = "pytest process"
    collects_in_shares: bool = True
    kind: str = "pytest"

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

    @property
    def draws(self) -> str:
        """The plugin's reseeding (resources/run_pytest.py `_Reseed`), unless the selection
        blocks it with `-p no:cudnn_matrix_reseed` (then each draw is its process's)."""
        blocked = any(f"no:{RESEED_PLUGIN}" in arg for arg in self.select)
        return "process" if blocked else RESEED

    def batch_argv(self, python: Path, runner: str) -> list[str]:  # noqa: ARG002 - one runner
        """A share or batch process: output teed, and a module that fails to collect is its own
        `error` (share 1 reports it) while the rest runs."""
        return self.argv(python, "--capture=tee-sys", "--continue-on-collection-errors")

    def prepare(
        self,
        target: ExecTarget,
        folder: Path,
        *,
        cpus: int,  # noqa: ARG002 - the protocol's
        timeout_s: float,
        build_timeout_s: float | None = None,  # noqa: ARG002 - the protocol's
    ) -> Collected:
        """Not called: a pytest suite collects in its shares (`collects_in_shares`)."""
        return collect(self, target, folder, timeout_s)

    def case_path(self, test_id: str, file: str) -> Path:  # noqa: ARG002
        return self.root / file

    def judged(self, end: TestEnd, *, has_gpu: bool) -> TestEnd:  # noqa: ARG002
        """As the batches judged it (a module that needs a GPU is judged at collection)."""
        return end

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
    runner: str = ""  # which process runs it (a C++ test binary's path); "": the suite's


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


def collect(
    suite: Suite,
    target: ExecTarget,
    folder: Path,
    timeout_s: float,
    *,
    placement: Placement | None = None,
    capture_cap: int = launch.DEFAULT_CAPTURE_CAP,
) -> Collected:
    """Collect the suite in the target's environment (see the module doc), through the
    launcher: ended at `timeout_s` with everything it started."""
    from validate.execute.batches import _Record  # the same reader as the batches'

    folder.mkdir(parents=True, exist_ok=True)
    record_path, log_path = folder / "collect.jsonl", folder / "collect.log"
    record_path.unlink(missing_ok=True)
    env = plugin_env(target.process_env(), record_path)
    argv = suite.argv(target.python, "--collect-only", "-q")
    returncode: int | str
    token = launch.new_token()
    try:
        proc = launch.start(
            argv, env=env, log_path=log_path, token=token, placement=placement, cwd=suite.root
        )
    except OSError as exc:
        returncode = f"could not start: {exc}"
    else:
        try:
            returncode = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            returncode = f"timed out after {timeout_s:g}s"
        finally:
            launch.reap(token)
            launch.cap_output(log_path, capture_cap)
    events = _Record(record_path).read()
    if not any(e.get("ev") == "collected" for e in events):  # the suite as a whole failed
        problem = suite_problem(suite, target, returncode, log_path)
        return Collected(problems=(problem,), log_path=str(log_path))
    tests, problems = collection_results(suite, target, events)
    return Collected(tests=tests, problems=problems, log_path=str(log_path))


def suite_problem(
    suite: BatchedSuite, target: ExecTarget, returncode: int | str, log_path: Path
) -> tuple[str, Outcome, str]:
    """The one result of a suite pytest could not collect at all: `skip` where the host has no
    GPU and the output says the suite needs one, else `error` with the exception line."""
    output = log_path.read_text(encoding="utf-8", errors="replace")
    tail = [ln for ln in output.splitlines() if ln.strip()][-_COLLECT_TAIL:]
    line = _exception_line("\n".join(tail)) or str(returncode)
    why = no_gpu_skip(output, has_gpu=target.has_gpu, what=f"the suite cannot collect ({line})")
    if why is not None:
        return suite.name, Outcome.SKIP, why
    if re.search(r"No module named '?pytest'?$", output, re.MULTILINE):
        return suite.name, Outcome.ERROR, "pytest is not installed in the cell environment"
    status = returncode if isinstance(returncode, str) else f"exit status {returncode}"
    return suite.name, Outcome.ERROR, f"pytest could not collect the suite ({status}): {line}"


def collection_results(
    suite: BatchedSuite, target: ExecTarget, events: Sequence[Mapping[str, Any]]
) -> tuple[tuple[CollectedTest, ...], tuple[tuple[str, Outcome, str], ...]]:
    """The collected tests and the modules that failed to collect (a module's `skip` where the
    host has no GPU and its error says it needs one) or were skipped at import (one `skip` with
    the module's reason: it has no test ids, and would otherwise leave no trace in the cell)."""
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
        if event.get("ev") == "collect_skip":
            where = str(event.get("id") or suite.name)
            why = str(event.get("reason") or "").strip() or "skipped at import"
            problems.append((where, Outcome.SKIP, f"{where} skipped at import: {why}"))
            continue
        if event.get("ev") != "collect_error":
            continue
        text = str(event.get("text") or "")
        where = str(event.get("id") or suite.name)
        line = _exception_line(text)
        no_gpu = no_gpu_skip(text, has_gpu=target.has_gpu, what=f"{where} cannot collect ({line})")
        if no_gpu is not None:
            problems.append((where, Outcome.SKIP, no_gpu))
        else:
            problems.append((where, Outcome.ERROR, f"{where} failed to collect: {line}"))
    return tests, tuple(problems)
