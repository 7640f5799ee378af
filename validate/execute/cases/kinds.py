"""The case-kind registry: everything kind-specific about a case, one object per kind.

A kind is one module in this folder that defines an object satisfying `CaseKindSpec`, and one
line in `KINDS`. Discovery (cases/__init__.py), the command and the time limit (the runner), the
fork server (execute/forkserver.py), classification (execute/classify.py) and bug reports
(report/bugreport.py) ask the registry; none of them names a kind. tests/unit/test_case_kinds.py
checks every registered kind against the protocol and runs a throwaway kind end to end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from validate.execute.cases import catch2, notebook, pytest_suite, script

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from validate.execute.cases import Case
    from validate.execute.classify import ExecResult
    from validate.execute.collection import BatchedSuite
    from validate.model.outcome import Outcome

__all__ = [
    "FALLBACK",
    "KINDS",
    "BatchedKind",
    "CaseKindSpec",
    "forked_bootstraps",
    "kind_for_path",
    "kind_for_result",
]


@runtime_checkable
class CaseKindSpec(Protocol):
    """What the tool needs to know of one kind of case."""

    #: Its name: `Case.kind`, `ExecResult.kind` and its key in KINDS.
    name: str
    #: Files with this suffix are its cases (named, or found in a folder walk); None: its cases
    #: are not files (a batched kind's: what its suite collects or lists, `BatchedKind.suite`;
    #: its case comes from its own flags, cases/__init__.py `cases_for`).
    suffix: str | None
    #: The file its command runs under the case environment's Python (in resources/ for the
    #: kinds shipped here; stdlib only, as everything there).
    bootstrap: Path
    #: Whether the fork server (execute/forkserver.py) forks this kind's bootstrap from a warm
    #: interpreter instead of starting it fresh. A forkable bootstrap defines `fork_boot()`, which
    #: imports what its cases need and returns an object whose `main()` runs one case with the
    #: arguments in sys.argv (resources/fork_server.py).
    forkable: bool
    #: False: one process per case (`command`). True: the kind's cases run many to one
    #: long-lived process (a pytest session over many test ids), the start-up paid once per
    #: batch; such a kind also gives the runner the batch's command and how to split the
    #: batch's report into one result per case (added with the first such kind).
    batched: bool
    #: Seconds its process gets on top of the case's timeout (a notebook's kernel start).
    grace_s: float

    def command(self, case: Case, python: Path, report: Path, timeout_s: float) -> list[str]:
        """argv that runs `case` under `python` and writes its report JSON to `report`."""
        ...

    def gather(self, run: ExecResult, result_file: Path) -> ExecResult:
        """`run` with what the case left besides its report (a script's result file and VERDICT
        line): the runner's I/O, so that `classify` stays pure."""
        ...

    def classify(self, run: ExecResult) -> tuple[Outcome, str]:
        """The verdict of a run that was not timed out and whose pins held (classify.classify
        checks those first)."""
        ...

    def exception(self, report: Mapping[str, Any]) -> Mapping[str, Any]:
        """Where its report keeps the exception that ended the case ({} when none)."""
        ...

    def units(self, run: ExecResult) -> Mapping[str, Any]:
        """{unit: seconds} its process timed, start-up excluded (execute/units.py keeps the
        finite, non-negative ones for the speed evidence); {} where it times none."""
        ...

    def owns(self, case_path: str, case: str) -> bool:
        """Whether a stored result (its case file and name; results do not store the kind) is
        one of this kind's."""
        ...

    def repro_line(self, case_path: str, case: str) -> str:
        """The shell line that runs the case by hand, for a bug report."""
        ...


@runtime_checkable
class BatchedKind(CaseKindSpec, Protocol):
    """A `batched` kind also gives the shared batches its suite for one cell: how its ids are
    found (collected in its shares, or prepared once: a build and a listing), the command of a
    batch process, and its own judgement of an end (execute/collection.py `BatchedSuite`)."""

    def suite(self, case: Case) -> BatchedSuite:
        """The suite `case` stands for, for one cell's batches."""
        ...


#: Every case kind by name. Adding a kind: one module here, one line below. Order matters only
#: for `kind_for_result`: a kind that owns results another also owns comes first.
KINDS: Final[dict[str, CaseKindSpec]] = {
    notebook.KIND.name: notebook.KIND,
    catch2.KIND.name: catch2.KIND,  # before pytest: a C++ test case's id holds "::" too
    pytest_suite.KIND.name: pytest_suite.KIND,  # before script: a test id's file is a .py too
    script.KIND.name: script.KIND,
}
#: The kind of a stored result that no kind owns (one without a case path): run it as a script.
FALLBACK: Final = script.KIND.name


def kind_for_path(path: Path) -> CaseKindSpec | None:
    """The kind whose suffix `path` has, if any."""
    for kind in KINDS.values():
        if kind.suffix is not None and path.suffix == kind.suffix:
            return kind
    return None


def kind_for_result(case_path: str, case: str) -> CaseKindSpec:
    """The kind a stored result came from: the first that owns it, else FALLBACK."""
    for kind in KINDS.values():
        if kind.owns(case_path, case):
            return kind
    return KINDS[FALLBACK]


def forked_bootstraps() -> dict[str, str]:
    """Bootstrap path -> kind name, for the kinds the fork server serves."""
    return {str(kind.bootstrap): kind.name for kind in KINDS.values() if kind.forkable}
