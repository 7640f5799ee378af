"""The fan-out seam: every registered dispatcher implements the protocol, and `validate
--executor NAME` reaches whichever one DISPATCHERS names (a registered fake proves there is no
name branch in the CLI). The real Slurm dispatcher runs on a real cluster in
tests/integration/test_slurm.py; the fake here stands in for a scheduler, not for this machine.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import pytest

import validate.cli.validate
from validate.cli import main
from validate.dispatch import DISPATCHERS, Dispatcher, DispatchOptions
from validate.execute import EXECUTORS
from validate.workflow import RunOutcome

if TYPE_CHECKING:
    from validate.config import ValidateConfig


class FakeDispatcher:
    """FAKE scheduler: records what it was asked to run; its run is not signed off."""

    name = "fake"
    calls: ClassVar[list[tuple[ValidateConfig, DispatchOptions]]] = []

    def available(self) -> bool:
        return True

    def run(self, config: ValidateConfig, options: DispatchOptions) -> RunOutcome:
        from validate.judge.signoff import decide
        from validate.plan.rules import Plan

        self.calls.append((config, options))
        assert config.results_dir is not None
        return RunOutcome(
            run_id="fake",
            folder=config.results_dir,
            plan=Plan(planned=[], pruned=[]),
            results=(),
            verdict=decide([]),
        )


@pytest.mark.parametrize("name", sorted(DISPATCHERS))
def test_every_registered_dispatcher_implements_the_protocol(name: str) -> None:
    dispatcher = DISPATCHERS[name]()
    assert isinstance(dispatcher, Dispatcher)
    assert dispatcher.name == name
    assert name not in EXECUTORS  # one --executor name means one thing


def test_validate_reaches_a_registered_dispatcher(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI prints what the dispatcher's run ended with and exits with its verdict's code."""
    from validate.judge.signoff import decide

    monkeypatch.setitem(DISPATCHERS, "fake", FakeDispatcher)
    FakeDispatcher.calls.clear()
    argv = ["validate", "--executor", "fake", "--shards", "3", "--results", str(tmp_path / "r")]
    assert main(argv) == decide([]).exit_code
    assert f"results: {tmp_path / 'r'}" in capsys.readouterr().out
    ((config, options),) = FakeDispatcher.calls
    assert config.executor == "fake"
    from validate.env.versions import resolve_versions

    # the version pins' check goes down to the dispatcher, which runs it once the files are read
    assert options == DispatchOptions(shards=3, resolve=resolve_versions)


def test_dispatch_flags_need_a_dispatcher(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--executor", "local", "--shards", "2"]) == 2
    assert "--shards is for --executor slurm" in capsys.readouterr().err


def test_the_validate_command_names_no_dispatcher() -> None:
    """cli/validate.py holds no dispatcher's name: DISPATCHERS is its only lookup."""
    tree = ast.parse(Path(validate.cli.validate.__file__).read_text(encoding="utf-8"))
    found = [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in DISPATCHERS
    ]
    assert found == []
