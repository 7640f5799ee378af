"""A CMake project's Catch2 test binaries as one suite of the shared batches (`--cpp DIR`).

Per cell, one pool job prepares it (execute/suite.py `SuiteRun._prepare_job`):

- **build**: env/cmake_build.py, once per content (the project, the cell's backend headers and
  libraries, CUDA, the arch list, the compiler), cached beside the environments; `-j` is the CPUs
  the ledger booked for the job. A failed build is the cell's one `error`, naming the first
  compiler error; its log is `build.log` in the cell's evidence folder. A build that runs past
  its limit (execute/limits.py `cpp_build_limit`: --cpp-build-timeout, else 6 x --timeout, at
  least an hour) is killed, its whole process group, and is the cell's one `error` saying so;
- **listing**: each Catch2 binary the build made (`--list-tests -r xml`, through the launcher):
  one id per TEST_CASE, `FILE::NAME`, FILE its source file relative to the project (so the
  report summarises by source file as it does a pytest suite's ids), NAME its Catch2 name.

Then its ids are dealt to shares per binary and run by resources/run_catch2.py under durable
start markers, each TEST_CASE in a process of its own (execute/batches.py follows them as it
does pytest processes: a crash names its TEST_CASE, the signal and the tail; a hang ends at the
case's time limit; the ids left run in a fresh process).

On a host without a GPU, a TEST_CASE whose failure or crash says it wanted a device or driver is
the skip every kind gives that (plan/requirements.py `no_gpu_skip`): the sign-off counts it as a
GPU case not run. The binaries load the cell's backend (the cell environment's LD_LIBRARY_PATH
and LD_PRELOAD, as every case process), and each test case's process says which libcudnn files
it mapped and whether it called cuDNN (resources/run_catch2.py `cudnn_evidence`, the loader's
debug output): a test case that mapped a libcudnn from a folder other than the cell's pinned
backend is an `error` naming both folders, whatever it reported; one that called cuDNN from the
pinned folder is stored with that evidence as its captured environment (`captured_in` "case",
what the sign-off counts as pins verified); one that only mapped it (a binary linked to libcudnn
maps it in every test case) keeps the evidence as "loaded", which verifies nothing.
"""

from __future__ import annotations

import fnmatch
import functools
import logging
import os
import signal
import subprocess
import xml.etree.ElementTree as ET
from contextlib import suppress
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Final

from validate.env.cmake_build import (
    BUILTIN_TARGETS,
    CppBuildError,
    CppBuildTimeout,
    CppProject,
    declared_targets,
    ensure_build,
)
from validate.env.venvs import cache_root
from validate.errors import ConfigError, EnvBuildError
from validate.execute import launch
from validate.execute.collection import Collected, CollectedTest
from validate.execute.resources import RESOURCES
from validate.execute.supervise import SUPERVISOR
from validate.model.outcome import Outcome
from validate.plan.requirements import NEEDS_GPU_TEXT, no_gpu_skip

if TYPE_CHECKING:
    from collections.abc import Sequence

    from validate.env.target import ExecTarget
    from validate.execute.batches import TestEnd

__all__ = ["BOOTSTRAP", "CPP_PREFIX", "Catch2Project"]

log = logging.getLogger(__name__)

#: Each batch process: a stdlib Python that runs the binary once per TEST_CASE.
BOOTSTRAP: Final = RESOURCES / "run_catch2.py"
#: The case name of a result about the whole project (its build failed), e.g. "cpp:cudnn-frontend".
CPP_PREFIX: Final = "cpp:"
#: Case args: `target=NAME` (a CMake target to build; none: all), `catch2=PATH` and `case=ID`.
_TARGET: Final = "target="
_CATCH2: Final = "catch2="
_SELECT: Final = "case="  # --case: a TEST_CASE to run (`FILE::NAME`, or a glob)


def _track(kernel_file: Path, pgid: int, running: bool) -> None:
    """A build step's process group, ended with the cases on an interrupt (supervise.py)."""
    if running:
        SUPERVISOR.live.add(pgid, kernel_file)
    else:
        SUPERVISOR.live.discard(pgid)


class Catch2Project:
    """A CMake project with Catch2 tests, as a `collection.BatchedSuite` for one cell."""

    process = "test binary"
    collects_in_shares = False
    kind = "cpp"
    draws = ""  # the tool seeds nothing in a test binary

    def __init__(
        self,
        root: Path,
        *,
        targets: Sequence[str] = (),
        catch2: Path | None = None,
        select: Sequence[str] = (),
    ) -> None:
        self.root = root
        self.targets = tuple(targets)
        self.catch2 = catch2
        self.select = tuple(select)  # --case: the TEST_CASEs to run (names or globs; none: all)
        self._binary: dict[str, str] = {}  # test id -> its binary, once listed
        self._backend_dir: Path | None = None  # the cell's pinned libcudnn folder, at prepare

    @classmethod
    def from_flags(
        cls,
        path: Path,
        targets: Sequence[str] = (),
        catch2: Path | None = None,
        select: Sequence[str] = (),
    ) -> Catch2Project:
        """`--cpp DIR --cpp-target NAME --cpp-catch2 PATH`, checked: bad input is a ConfigError."""
        if not (path / "CMakeLists.txt").is_file():
            msg = f"--cpp {path}: no CMakeLists.txt there (expected a CMake project, e.g. a cudnn-frontend checkout)"
            raise ConfigError(msg)
        if catch2 is not None and not (catch2.is_dir() or catch2.is_file()):
            msg = f"--cpp-catch2 {catch2}: no such folder or archive (a Catch2 v3 source tree)"
            raise ConfigError(msg)
        bad = [t for t in targets if not t or any(c.isspace() for c in t)]
        if bad:
            msg = f"--cpp-target {bad[0]!r}: not a CMake target name"
            raise ConfigError(msg)
        if targets:
            known, variable = declared_targets(path)
            unknown = [t for t in targets if t not in known]
            if unknown and not variable:  # a name made from a variable: the build will tell
                names = ", ".join(sorted(known - BUILTIN_TARGETS)) or "none"
                msg = (
                    f"--cpp-target {unknown[0]}: no such target in {path}'s CMake files "
                    f"(targets there: {names})"
                )
                raise ConfigError(msg)
        resolved = catch2.resolve() if catch2 else None
        return cls(path.resolve(), targets=targets, catch2=resolved, select=select)

    @classmethod
    def from_args(cls, root: Path, args: Sequence[str]) -> Catch2Project:
        """From a case's `args` (cases/__init__.py `cpp_case`)."""
        targets = [a.removeprefix(_TARGET) for a in args if a.startswith(_TARGET)]
        catch2 = next((Path(a.removeprefix(_CATCH2)) for a in args if a.startswith(_CATCH2)), None)
        select = [a.removeprefix(_SELECT) for a in args if a.startswith(_SELECT)]
        return cls(root, targets=targets, catch2=catch2, select=select)

    def args(self) -> tuple[str, ...]:
        """Its case args (the inverse of `from_args`)."""
        catch2 = (f"{_CATCH2}{self.catch2}",) if self.catch2 else ()
        select = tuple(f"{_SELECT}{p}" for p in self.select)
        return (*(f"{_TARGET}{t}" for t in self.targets), *catch2, *select)

    def _selected(self, tests: list[CollectedTest]) -> tuple[list[CollectedTest], str]:
        """The listed test cases --case keeps (an exact `FILE::NAME` or a glob; a pattern that
        names the whole project keeps all), or why none is kept."""
        if not self.select or any(fnmatch.fnmatchcase(self.name, p) for p in self.select):
            return tests, ""
        kept = [
            t for t in tests if any(t.id == p or fnmatch.fnmatchcase(t.id, p) for p in self.select)
        ]
        if kept:
            return kept, ""
        names = ", ".join(t.id for t in tests[:5]) + (", ..." if len(tests) > 5 else "")
        why = f"--case {' '.join(self.select)}: matches none of the {len(tests)} TEST_CASEs listed ({names})"
        return [], why

    @property
    def name(self) -> str:
        return f"{CPP_PREFIX}{self.root.name}"

    def batch_argv(self, python: Path, runner: str) -> list[str]:
        return [str(python), str(BOOTSTRAP), runner]

    def case_path(self, test_id: str, file: str) -> Path:
        """The binary that runs the test case (its repro line runs it), else its source file."""
        binary = self._binary.get(test_id)
        return Path(binary) if binary else self.root / file

    def judged(self, end: TestEnd, *, has_gpu: bool) -> TestEnd:
        end = self._pinned(end)
        if end.outcome not in (Outcome.FAIL, Outcome.CRASH):
            return end
        text = "\n".join([end.reason, end.tail, str((end.exception or {}).get("traceback", ""))])
        said = next((ln.strip() for ln in text.splitlines() if NEEDS_GPU_TEXT.search(ln)), "")
        what = end.reason[:300] if said in end.reason else f"{end.reason[:300]} ({said[:300]})"
        why = no_gpu_skip(text, has_gpu=has_gpu, what=what)
        return end if why is None else replace(end, outcome=Outcome.SKIP, reason=why)

    def _pinned(self, end: TestEnd) -> TestEnd:
        """The test case's libcudnn evidence against the cell's pinned backend (the module doc):
        a libcudnn from elsewhere is its `error`, in one line naming both folders."""
        seen = end.cudnn
        if not seen:
            return end
        loaded = [str(p) for p in seen.get("loaded") or ()]
        pinned = self._backend_dir.resolve() if self._backend_dir is not None else None
        verified = bool(seen.get("called")) and bool(loaded) and pinned is not None
        env = {
            "captured_in": "case" if verified else "loaded",
            "kind": "catch2",
            "cudnn_libs": loaded,
            "cudnn_called": list(seen.get("calls") or ()),
            "backend_dir": str(pinned or ""),
            "ld_debug": {k: seen.get(k) for k in ("lines", "lines_total", "raw_bytes")},
        }
        stray = next((p for p in loaded if pinned and Path(p).resolve().parent != pinned), None)
        if stray is None:
            return replace(end, env=env)
        reason = (
            f"libcudnn loaded from {Path(stray).parent}, not the cell's pinned backend {pinned} "
            f"({Path(stray).name}; the test case ended {end.outcome})"
        )
        env["captured_in"] = "loaded"  # a pin not honoured verifies nothing
        return replace(end, outcome=Outcome.ERROR, reason=reason, env=env)

    def prepare(
        self,
        target: ExecTarget,
        folder: Path,
        *,
        cpus: int,
        timeout_s: float,
        build_timeout_s: float | None = None,
    ) -> Collected:
        folder.mkdir(parents=True, exist_ok=True)
        self._backend_dir = target.backend_dir
        log_path = folder / "build.log"
        project = CppProject(root=self.root, targets=self.targets, catch2=self.catch2)
        cache = target.root.parent.parent if target.root is not None else cache_root()
        try:
            build = ensure_build(
                project,
                target,
                cache=cache,
                jobs=cpus,
                log_path=log_path,
                timeout_s=build_timeout_s,
                track=functools.partial(_track, log_path.with_suffix(".kernel")),
            )
        except CppBuildTimeout as exc:
            return self._whole(
                f"the C++ build timed out: {exc.first} (--cpp-build-timeout)", exc.log_path
            )
        except CppBuildError as exc:
            return self._whole(f"the C++ build failed: {exc.first}", exc.log_path)
        except EnvBuildError as exc:
            return self._whole(f"the C++ build could not start: {exc}", log_path)
        if not build.binaries:
            named = f" among the targets {', '.join(self.targets)}" if self.targets else ""
            return self._whole(f"the build made no Catch2 test binary{named}", log_path)
        tests: list[CollectedTest] = []
        problems: list[tuple[str, Outcome, str]] = []
        for n, binary in enumerate(build.binaries, 1):
            listed, problem = self._list(binary, target, folder / f"list-{n:02d}", timeout_s)
            if problem:
                problems.append((f"{self.name}::{binary.name}", Outcome.ERROR, problem))
            for test in listed:
                if test.id in self._binary:
                    log.warning("%s: listed by two binaries, run from the first", test.id)
                    continue
                self._binary[test.id] = test.runner
                tests.append(test)
        tests, unmatched = self._selected(tests)
        if unmatched:
            problems.append((self.name, Outcome.ERROR, unmatched))
        built = "reused" if build.reused else f"built in {build.seconds:g}s"
        log.info(
            "cell %s: %s %s, %d test binaries, %d TEST_CASEs",
            target.cell_id or "local",
            self.name,
            built,
            len(build.binaries),
            len(tests),
        )
        return Collected(tests=tuple(tests), problems=tuple(problems), log_path=str(log_path))

    def _whole(self, reason: str, log_path: Path) -> Collected:
        return Collected(problems=((self.name, Outcome.ERROR, reason),), log_path=str(log_path))

    def _list(
        self, binary: Path, target: ExecTarget, folder: Path, timeout_s: float
    ) -> tuple[list[CollectedTest], str]:
        """The TEST_CASEs of `binary` (`--list-tests -r xml`), or why they could not be listed."""
        folder.mkdir(parents=True, exist_ok=True)
        out, log_path = folder / "tests.xml", folder / "list.log"
        out.unlink(missing_ok=True)
        argv = [str(binary), "--list-tests", "-r", "xml", "-o", str(out)]
        token = launch.new_token()
        status: int | str
        try:
            proc = launch.start(
                argv, env=target.process_env(), log_path=log_path, token=token, cwd=binary.parent
            )
        except OSError as exc:
            return [], f"{binary.name} could not start: {exc}"
        try:
            status = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            status = f"timed out after {timeout_s:g}s"
        finally:
            launch.reap(token)
        try:
            root = ET.parse(out).getroot()
        except (OSError, ET.ParseError):
            text = log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
            last = text[-1][:300] if text else ""
            return [], f"{binary.name} --list-tests failed ({status}): {last}"
        tests = []
        for case in root.iter("TestCase"):
            name = (case.findtext("Name") or "").strip()
            file = (case.findtext("SourceInfo/File") or "").strip()
            if not name:
                continue
            path = Path(file)
            rel = path.relative_to(self.root) if path.is_relative_to(self.root) else path
            tests.append(CollectedTest(id=f"{rel}::{name}", file=str(rel), runner=str(binary)))
        return tests, ""
