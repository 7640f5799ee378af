"""DESIGN.md's "where to add X", held to its count through the real workflow: a new case kind is
one class and one line in KINDS, a new executor one class and one line in EXECUTORS, and a
`validate` run with both (the CLI, the plan, the one pool, the store) runs the new kind's cases
beside scripts and a pytest suite, with their speed units, from the one step from cases to jobs
(execute/jobs.py) that the shipped executors take too. A new batched kind without flags of its own
is its module (kind and suite), one line in KINDS and its bootstrap: one is planted and run too."""

from __future__ import annotations

import json
import logging
import shlex
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from validate.cli import main
from validate.env.target import ExecTarget
from validate.execute import EXECUTORS, Executor
from validate.execute.cases import Case
from validate.execute.cases.kinds import KINDS, CaseKindSpec
from validate.execute.classify import signal_name
from validate.model.outcome import Outcome

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

    from validate.config import ValidateConfig
    from validate.execute import RunContext
    from validate.execute.batches import TestEnd
    from validate.execute.classify import ExecResult
    from validate.execute.collection import BatchedSuite, Collected
    from validate.execute.pool import Job
    from validate.model.matrix import Cell
    from validate.plan.steps import Step


class TimedShell:
    """A throwaway kind: `.sh` files run by /bin/sh; exit 0 passes, 1 fails. Its speed unit is
    the `took` line the script prints. What a kind declares, and nothing more."""

    name = "timed_shell"
    suffix: str | None = ".sh"
    bootstrap: Path = Path("/bin/sh")
    forkable = False
    batched = False
    grace_s = 0.0

    def command(self, case: Case, python: Path, report: Path, timeout_s: float) -> list[str]:  # noqa: ARG002
        return [str(self.bootstrap), str(case.path)]

    def gather(self, run: ExecResult, result_file: Path) -> ExecResult:  # noqa: ARG002
        return run

    def classify(self, run: ExecResult) -> tuple[Outcome, str]:
        if signal_name(run.returncode):
            return Outcome.CRASH, "sh killed"
        if run.returncode == 0:
            return Outcome.PASS, ""
        if run.returncode == 1:
            return Outcome.FAIL, "sh exited 1"
        return Outcome.ERROR, f"sh exited {run.returncode}"

    def exception(self, report: Mapping[str, Any]) -> Mapping[str, Any]:  # noqa: ARG002
        return {}

    def units(self, run: ExecResult) -> Mapping[str, Any]:
        for line in run.tail.splitlines():
            if line.startswith("took "):
                return {"shell": float(line.split()[1])}
        return {}

    def owns(self, case_path: str, case: str) -> bool:  # noqa: ARG002
        return case_path.endswith(".sh")

    def repro_line(self, case_path: str, case: str) -> str:  # noqa: ARG002
        return f"sh {shlex.quote(case_path)}"


class HereExecutor:
    """A throwaway executor: every step runs on this host under this interpreter. Its jobs come
    from the one step every executor takes (execute/jobs.py); it knows no kind."""

    name = "here"

    def available(self) -> bool:
        return True

    def check(self, config: ValidateConfig) -> None:
        """Every option applies."""

    def env_key(self, cell: Cell, run: RunContext) -> str:  # noqa: ARG002
        return "this interpreter"

    def prepare(self, step: Step, run: RunContext) -> ExecTarget | str:  # noqa: ARG002
        return ExecTarget(python=Path(sys.executable))

    def run(
        self, step: Step, target: ExecTarget, cases: Sequence[Case], run: RunContext
    ) -> Sequence[Job] | None:
        from validate.execute.history import History
        from validate.execute.jobs import cell_jobs, run_options

        options = run_options(
            run.config, results_dir=run.results_dir, run_id=run.run_id, slots=run.slots
        )
        jobs: list[Job] = []
        for cell in step.cells:
            jobs += cell_jobs(
                cases,
                target.for_cell(cell, run.host),
                options,
                run.store,
                history=run.history or History(),
                slots=run.slots,
            ).jobs()
        return jobs

    def close(self) -> None:
        """Nothing is held."""


@pytest.fixture(autouse=True)
def _fresh_log_handler() -> Iterator[None]:
    """cli.main installs a stderr handler once; drop it so the next test's capsys stream is used."""
    yield
    logger = logging.getLogger("validate")
    for handler in [h for h in logger.handlers if h.get_name() == "cudnn-matrix"]:
        logger.removeHandler(handler)


def test_a_planted_kind_and_executor_run_through_the_workflow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "ok.sh").write_text("echo 'took 0.25'\n")
    (cases / "bad.sh").write_text("echo 'wrong answer'\nexit 1\n")
    (cases / "plain.py").write_text("print('a script beside them')\n")
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_it.py").write_text(
        textwrap.dedent(
            """\
            def test_good():
                assert True

            def test_bad():
                assert 1 == 2
            """
        )
    )
    assert isinstance(TimedShell(), CaseKindSpec)
    assert isinstance(HereExecutor(), Executor)
    monkeypatch.setitem(KINDS, "timed_shell", TimedShell())  # the kind's one registry line
    monkeypatch.setitem(EXECUTORS, "here", HereExecutor)  # the executor's one registry line
    run_dir = tmp_path / "run"
    code = main(
        [
            "validate",
            *("--cudnn", "9.24.0.43", "--frontend", "1.27.0", "--cuda", "13.0"),
            *("--driver", "580", "--arch", "sm90", "--executor", "here", "--no-api-logs"),
            *("--cases", str(cases), "--tests", str(suite), "--jobs", "2"),
            *("--results", str(run_dir), "--cache-dir", str(tmp_path / "cache")),
        ]
    )
    assert code == 1  # bad.sh and test_bad fail
    lines = [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()]
    outcomes = {d["case"]: d["outcome"] for d in lines if "case" in d}
    assert outcomes == {
        "ok.sh": "pass",
        "bad.sh": "fail",
        "plain.py": "pass",
        "test_it.py::test_good": "pass",
        "test_it.py::test_bad": "fail",
    }
    units = {d["case"]: d.get("units") for d in lines if "case" in d}
    assert units["ok.sh"] == {"shell": 0.25}  # the new kind's speed unit, as its class says
    assert units["plain.py"]  # the script's whole run


#: The planted batched kind's bootstrap (stdlib only, as execute/resources/ holds them): it runs
#: the ids of its share one after another, each under a durable start marker, and says how each
#: ended ("bad" in a name fails; "dies" in a name kills the process while it runs).
_LISTED_BOOT = """\
import json, os, signal, time
record = os.open(os.environ["CUDNN_MATRIX_PYTEST_RECORD"], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
def write(event, sync=False):
    os.write(record, (json.dumps(event) + "\\n").encode())
    if sync:
        os.fdatasync(record)
with open(os.environ["CUDNN_MATRIX_PYTEST_IDS"]) as fh:
    ids = [line.strip() for line in fh if line.strip()]
for ident in ids:
    write({"ev": "start", "id": ident, "t": time.time()}, sync=True)
    print("running", ident, flush=True)
    if "dies" in ident:
        os.kill(os.getpid(), signal.SIGKILL)
    outcome = "fail" if "bad" in ident else "pass"
    message = "AssertionError: listed as bad" if outcome == "fail" else ""
    write({"ev": "done", "id": ident, "outcome": outcome, "message": message, "t": time.time()})
"""


class ListedSuite:
    """The planted batched kind's suite: the test names one per line of a `.ids` file, prepared
    once per cell (a listing), its ids dealt to share processes of the bootstrap."""

    process = "listed process"
    collects_in_shares = False
    kind = "listed"
    draws = ""

    def __init__(self, file: Path, boot: Path) -> None:
        self.file, self.boot = file, boot

    @property
    def root(self) -> Path:
        return self.file.parent

    @property
    def name(self) -> str:
        return f"listed:{self.file.name}"

    def batch_argv(self, python: Path, runner: str) -> list[str]:  # noqa: ARG002 - one runner
        return [str(python), str(self.boot)]

    def prepare(
        self,
        target: ExecTarget,  # noqa: ARG002
        folder: Path,  # noqa: ARG002
        *,
        cpus: int,  # noqa: ARG002
        timeout_s: float,  # noqa: ARG002
        build_timeout_s: float | None = None,  # noqa: ARG002
    ) -> Collected:
        from validate.execute.collection import Collected, CollectedTest

        names = [n.strip() for n in self.file.read_text().splitlines() if n.strip()]
        tests = tuple(
            CollectedTest(id=f"{self.file.name}::{n}", file=self.file.name) for n in names
        )
        return Collected(tests=tests)

    def case_path(self, test_id: str, file: str) -> Path:  # noqa: ARG002
        return self.root / file

    def judged(self, end: TestEnd, *, has_gpu: bool) -> TestEnd:  # noqa: ARG002
        return end


class ListedKind(TimedShell):
    """A throwaway batched kind: a `.ids` file is one case standing for its listed tests, run in
    batches by its own bootstrap (DESIGN.md: 3 files, its module, its line in KINDS and its
    bootstrap). Its process-level hooks are the shell kind's; only the batch ones differ."""

    name = "listed"
    suffix: str | None = ".ids"
    batched = True

    def __init__(self, boot: Path) -> None:
        self.bootstrap = boot

    def suite(self, case: Case) -> ListedSuite:
        return ListedSuite(case.path, self.bootstrap)

    def units(self, run: ExecResult) -> Mapping[str, Any]:  # noqa: ARG002
        return {}

    def owns(self, case_path: str, case: str) -> bool:  # noqa: ARG002
        return case_path.endswith(".ids")

    def repro_line(self, case_path: str, case: str) -> str:
        return f"grep -x {shlex.quote(case.split('::')[-1])} {shlex.quote(case_path)}"


def test_a_planted_batched_kind_runs_through_the_workflow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DESIGN.md's count for a batched kind without flags of its own: its module (the kind and
    its suite), one line in KINDS and its bootstrap. Its ids are prepared once per cell, dealt to
    two share processes, judged from its record; the one its process died in is that id's crash,
    and the rest still run."""
    from validate.execute.cases.kinds import BatchedKind

    boot = tmp_path / "run_listed.py"
    boot.write_text(_LISTED_BOOT)
    kind = ListedKind(boot)
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "suite.ids").write_text("one\ntwo\nbad_three\ndies_four\nfive\nsix\n")
    assert isinstance(kind, BatchedKind)
    suite: BatchedSuite = kind.suite(Case(name="x", path=cases / "suite.ids", kind="listed"))
    assert suite.name == "listed:suite.ids"  # mypy checks the suite against the protocol
    monkeypatch.setitem(KINDS, "listed", kind)  # the kind's one registry line
    monkeypatch.setitem(EXECUTORS, "here", HereExecutor)
    run_dir = tmp_path / "run"
    code = main(
        [
            "validate",
            *("--cudnn", "9.24.0.43", "--frontend", "1.27.0", "--cuda", "13.0"),
            *("--driver", "580", "--arch", "sm90", "--executor", "here", "--no-api-logs"),
            *("--cases", str(cases), "--jobs", "2", "--timeout", "60"),
            *("--results", str(run_dir), "--cache-dir", str(tmp_path / "cache")),
        ]
    )
    assert code == 1  # bad_three fails, dies_four crashed
    lines = [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()]
    outcomes = {d["case"]: d["outcome"] for d in lines if "case" in d}
    assert outcomes == {
        "suite.ids::one": "pass",
        "suite.ids::two": "pass",
        "suite.ids::bad_three": "fail",
        "suite.ids::dies_four": "crash",
        "suite.ids::five": "pass",
        "suite.ids::six": "pass",
    }, outcomes
