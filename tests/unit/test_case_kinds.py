"""The case-kind seam: every registered kind implements the protocol, no module outside
execute/cases/ names a kind, and a kind registered here (a shell script, one class and one
registry line) is discovered, run in a real process by the real runner, classified and given a
repro line in its bug report, with no other file touched."""

from __future__ import annotations

import ast
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from validate.errors import CaseError
from validate.execute import ExecTarget
from validate.execute.cases import discover_cases
from validate.execute.cases.kinds import (
    FALLBACK,
    KINDS,
    CaseKindSpec,
    forked_bootstraps,
    kind_for_result,
)
from validate.execute.classify import ExecResult, classify, signal_name
from validate.execute.resources import RESOURCES
from validate.execute.runner import RunOptions, run_cases
from validate.model.outcome import Outcome
from validate.model.results import ResultStore
from validate.report.bugreport import bug_report
from validate.report.model import RunInfo, StoredResult

if TYPE_CHECKING:
    from collections.abc import Mapping

    from validate.execute.cases import Case

PACKAGE = Path(__file__).resolve().parents[2] / "validate"


@pytest.mark.parametrize("name", list(KINDS))
def test_every_registered_kind_implements_the_protocol(name: str) -> None:
    kind = KINDS[name]
    assert isinstance(kind, CaseKindSpec)
    assert kind.name == name
    assert kind.bootstrap.is_file()
    assert kind.bootstrap.parent == RESOURCES  # run inside the case process: stdlib only there
    assert kind.grace_s >= 0
    assert kind.suffix is None or kind.suffix.startswith(".")
    if kind.forkable:  # the fork server calls it (resources/fork_server.py _load)
        tree = ast.parse(kind.bootstrap.read_text(encoding="utf-8"))
        defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert "fork_boot" in defined, f"{kind.bootstrap} has no fork_boot()"
        assert forked_bootstraps()[str(kind.bootstrap)] == name


def test_suffixes_are_unique_and_the_fallback_is_registered() -> None:
    suffixes = [k.suffix for k in KINDS.values() if k.suffix is not None]
    assert len(suffixes) == len(set(suffixes))
    assert FALLBACK in KINDS
    assert kind_for_result("", "some_case").name == FALLBACK


#: The modules that once held kind-specific branches; they ask the registry now.
_KIND_FREE = (
    "execute/runner.py",
    "execute/units.py",
    "execute/jobs.py",
    "execute/local.py",
    "execute/classify.py",
    "execute/forkserver.py",
    "execute/resources/fork_server.py",
    "report/bugreport.py",
)


@pytest.mark.parametrize("module", _KIND_FREE)
def test_no_module_outside_the_kinds_names_one(module: str) -> None:
    """No string constant in these modules is a kind's name or a notebook's suffix (docstrings
    aside; `.py` also names a module file)."""
    words = {"notebook", "script", *KINDS}
    tree = ast.parse((PACKAGE / module).read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    found = [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and (node.value in words or node.value.endswith(".ipynb"))
    ]
    assert not found, f"{module} names a case kind: {found}"


class ShellKind:
    """A throwaway kind: `.sh` files run by /bin/sh; exit 0 passes, 1 fails, a signal crashes,
    anything else is the harness's error. What a real kind declares, and nothing more."""

    name = "shell"
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
        last = next((ln for ln in reversed(run.tail.splitlines()) if ln.strip()), "")
        sig = signal_name(run.returncode)
        if sig:
            return Outcome.CRASH, f"sh killed by {sig}"
        if run.returncode == 0:
            return Outcome.PASS, ""
        if run.returncode == 1:
            return Outcome.FAIL, f"sh exited 1: {last}"
        return Outcome.ERROR, f"sh exited with status {run.returncode}"

    def exception(self, report: Mapping[str, Any]) -> Mapping[str, Any]:  # noqa: ARG002
        return {}

    def units(self, run: ExecResult) -> Mapping[str, Any]:  # noqa: ARG002
        return {}

    def owns(self, case_path: str, case: str) -> bool:  # noqa: ARG002
        return case_path.endswith(".sh")

    def repro_line(self, case_path: str, case: str) -> str:  # noqa: ARG002
        return f"sh {shlex.quote(case_path)}"


def test_a_kind_is_one_class_and_one_registry_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "ok.sh").write_text("echo fine\n")
    (cases / "bad.sh").write_text("echo 'wrong answer: 41'\nexit 1\n")
    (cases / "odd.sh").write_text("exit 7\n")
    (cases / "plain.py").write_text("print('a script beside them')\n")
    with pytest.raises(CaseError, match=r"not a case \(expected a \.ipynb notebook or a \.py"):
        discover_cases([cases / "ok.sh"])  # unknown until registered

    assert isinstance(ShellKind(), CaseKindSpec)
    monkeypatch.setitem(KINDS, "shell", ShellKind())  # the one registry line

    found = discover_cases([cases])
    assert {c.name: c.kind for c in found} == {
        "bad.sh": "shell",
        "ok.sh": "shell",
        "odd.sh": "shell",
        "plain.py": "script",
    }
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(CaseError, match=r"a \.ipynb notebook, a \.py script or a \.sh shell\)"):
        discover_cases([tmp_path / "notes.txt"])

    run_dir = tmp_path / "run"
    store = ResultStore(run_dir / "results.jsonl")
    options = RunOptions(results_dir=run_dir, jobs=2, timeout_s=60, api_logs=False, run_id="r1")
    target = ExecTarget(python=Path(sys.executable))
    results = {r.case: r for r in run_cases(found, target, options, store)}
    assert results["ok.sh"].outcome is Outcome.PASS, results["ok.sh"].reason
    assert results["bad.sh"].outcome is Outcome.FAIL
    assert results["bad.sh"].reason == "sh exited 1: wrong answer: 41"
    assert results["bad.sh"].exit_code == 1
    assert results["odd.sh"].outcome is Outcome.ERROR  # the kind's own rule, not the script's
    assert results["plain.py"].outcome is Outcome.PASS, results["plain.py"].reason
    assert {r.case for r in store} == set(results)  # stored as any other case

    bad = results["bad.sh"]
    assert classify(ExecResult(kind="shell", returncode=1)) == (Outcome.FAIL, "sh exited 1: ")
    text = bug_report(StoredResult(result=bad, run=RunInfo(run_id="r1", path=run_dir)))
    assert f"\nsh {cases / 'bad.sh'}\n" in text  # the by-hand line is the kind's
    assert "--cases" in text
    assert f"python {cases / 'bad.sh'}" not in text
