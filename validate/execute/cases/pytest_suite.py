"""The pytest kind: a pytest suite (`--tests PATH`, e.g. a frontend checkout's test/python).

One case of this kind stands for a whole suite and its selection (`Case.args`). It is batched:
the suite is collected in each cell's environment and its test ids run many to one long-lived
pytest process (resources/run_pytest.py), each id one result named by its node id; the
collection, the batches and their supervision are execute/suite.py and execute/batches.py
(the local executor hands every batched case to them). It is not forkable: the frontend's
suite initialises CUDA in the parent, so a forked child cannot use the GPU (DOMAIN.md §9).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any, Final

from validate.execute.resources import RESOURCES
from validate.model.outcome import Outcome

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from validate.execute.cases import Case
    from validate.execute.classify import ExecResult
    from validate.execute.collection import BatchedSuite

__all__ = ["KIND", "SUITE_PREFIX", "PytestKind"]

#: The case name of a whole suite's result (it could not be collected) starts with this.
SUITE_PREFIX: Final = "pytest:"


class PytestKind:
    """A pytest suite, run in batches (see the module doc)."""

    name = "pytest"
    suffix: str | None = None  # its cases are what the collection finds, not files
    bootstrap: Path = RESOURCES / "run_pytest.py"
    forkable = False  # CUDA initialised in the parent: forked children cannot use it
    batched = True
    grace_s = 0.0

    def command(self, case: Case, python: Path, report: Path, timeout_s: float) -> list[str]:  # noqa: ARG002
        """The whole selection in one pytest process (the batches add the plugin's record and
        their ids: execute/suite.py); `report` is not written."""
        return [str(python), str(self.bootstrap), *case.args, "-p", "no:cacheprovider"]

    def suite(self, case: Case) -> BatchedSuite:
        """The suite and its selection, for one cell's shares."""
        from validate.execute.collection import Suite  # same stage, imported late

        return Suite(root=case.path, select=case.args)

    def gather(self, run: ExecResult, result_file: Path) -> ExecResult:  # noqa: ARG002
        return run

    def classify(self, run: ExecResult) -> tuple[Outcome, str]:
        """A pytest process judged whole, by pytest's exit status (the batches judge each test
        from the plugin's record instead)."""
        from validate.execute.classify import signal_name

        sig = signal_name(run.returncode)
        if sig:
            return Outcome.CRASH, f"pytest killed by {sig}"
        match run.returncode:
            case 0:
                return Outcome.PASS, ""
            case 1:
                return Outcome.FAIL, "some tests failed"
            case 5:
                return Outcome.SKIP, "no tests collected"
        return Outcome.ERROR, f"pytest exited with status {run.returncode}"

    def exception(self, report: Mapping[str, Any]) -> Mapping[str, Any]:  # noqa: ARG002
        return {}

    def owns(self, case_path: str, case: str) -> bool:  # noqa: ARG002
        """A test's result (its name is a node id, `file.py::test[...]`) or a whole suite's."""
        return "::" in case or case.startswith(SUITE_PREFIX)

    def units(self, run: ExecResult) -> Mapping[str, Any]:  # noqa: ARG002 - the protocol's
        """None: a test's duration is its result's; no units inside it are timed."""
        return {}

    def repro_line(self, case_path: str, case: str) -> str:
        """pytest on the one node id, from the suite's root (the case path less the id's file)."""
        file = case.split("::", 1)[0]
        root = case_path.removesuffix(file).rstrip("/") if case_path.endswith(file) else "."
        if case.startswith(SUITE_PREFIX):
            return f"cd {shlex.quote(case_path)} && python -m pytest"
        return f"cd {shlex.quote(root or '/')} && python -m pytest {shlex.quote(case)}"


KIND: Final = PytestKind()
