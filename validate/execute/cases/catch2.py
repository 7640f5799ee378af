"""The C++ kind: a CMake project's Catch2 tests (`--cpp DIR`, e.g. a cudnn-frontend checkout).

One case of this kind stands for the whole project and the targets to build (`Case.args`). It is
batched: per cell, the project is built against the cell's pinned backend (cached by content,
env/cmake_build.py), each test binary is listed, and every TEST_CASE is one result named
`FILE::NAME` (its source file relative to the project, its Catch2 name), run in batches under
durable start markers by the mechanism the pytest kind uses (execute/catch2_suite.py,
execute/suite.py, execute/batches.py), each TEST_CASE in a process of its own
(resources/run_catch2.py). Not forkable: a Catch2 binary is not a Python bootstrap.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any, Final

from validate.execute.resources import RESOURCES
from validate.execute.resources.run_catch2 import spec_for
from validate.model.outcome import Outcome

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from validate.execute.cases import Case
    from validate.execute.classify import ExecResult
    from validate.execute.collection import BatchedSuite

__all__ = ["CPP_SUFFIXES", "KIND", "Catch2Kind"]

#: Source files a TEST_CASE is declared in: an id whose file part ends so is a C++ test case's.
CPP_SUFFIXES: Final = (".cpp", ".cc", ".cxx", ".c++", ".cu", ".h", ".hpp", ".hh", ".hxx", ".cuh")
_PREFIX: Final = "cpp:"  # execute/catch2_suite.py CPP_PREFIX: a whole project's result


class Catch2Kind:
    """A CMake project's Catch2 test cases, run in batches (see the module doc)."""

    name = "catch2"
    suffix: str | None = None  # its cases are what the build's binaries list, not files
    bootstrap: Path = RESOURCES / "run_catch2.py"
    forkable = False
    batched = True
    grace_s = 0.0

    def command(self, case: Case, python: Path, report: Path, timeout_s: float) -> list[str]:  # noqa: ARG002
        """Unused: the batches start `bootstrap BINARY` per share (execute/catch2_suite.py)."""
        return [str(python), str(self.bootstrap), str(case.path)]

    def suite(self, case: Case) -> BatchedSuite:
        """The project, for the shared batches of one cell."""
        from validate.execute.catch2_suite import Catch2Project  # same stage, imported late

        return Catch2Project.from_args(case.path, case.args)

    def gather(self, run: ExecResult, result_file: Path) -> ExecResult:  # noqa: ARG002
        return run

    def classify(self, run: ExecResult) -> tuple[Outcome, str]:
        """A binary judged whole by its exit status (the batches judge each TEST_CASE from
        Catch2's XML report instead): its status is the number of failed assertions."""
        from validate.execute.classify import signal_name

        sig = signal_name(run.returncode)
        if sig:
            return Outcome.CRASH, f"test binary killed by {sig}"
        if run.returncode == 0:
            return Outcome.PASS, ""
        return Outcome.FAIL, f"{run.returncode} assertion(s) failed"

    def exception(self, report: Mapping[str, Any]) -> Mapping[str, Any]:  # noqa: ARG002
        return {}

    def units(self, run: ExecResult) -> Mapping[str, Any]:  # noqa: ARG002
        return {}

    def owns(self, case_path: str, case: str) -> bool:  # noqa: ARG002
        """A TEST_CASE's result (`FILE::NAME`, FILE a C++ source) or a whole project's."""
        return case.startswith(_PREFIX) or case.partition("::")[0].endswith(CPP_SUFFIXES)

    def repro_line(self, case_path: str, case: str) -> str:
        """The binary (the case path) on the one TEST_CASE, its name escaped as a test spec."""
        if case.startswith(_PREFIX) or "::" not in case:
            return f"cmake -S {shlex.quote(case_path)} -B build -G Ninja && cmake --build build"
        return f"{shlex.quote(case_path)} {shlex.quote(spec_for(case.split('::', 1)[1]))}"


KIND: Final = Catch2Kind()
