"""The executor seam: every registered executor implements the protocol, and `validate` runs
whichever one the config names through it (a registered fake proves there is no name branch).

The fake here is a Protocol fake for the workflow's logic only (no environment, no process);
the real executors run real cases in test_local_executor.py and the docker tests.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from usercli import cli

import validate.workflow
from validate.config import Selectors, ValidateConfig
from validate.env.sources import Sources
from validate.errors import ConfigError
from validate.execute import EXECUTORS, ExecTarget, Executor, RunContext, resolve_executor
from validate.execute.incontainer import payload, read_payload
from validate.execute.records import now_stamp
from validate.model.axes import AXES, REGISTRY
from validate.model.matrix import Cell, Driver
from validate.model.outcome import Outcome
from validate.model.results import CaseResult, ResultStore
from validate.plan.host import GpuInfo, HostFacts
from validate.plan.steps import plan_steps

if TYPE_CHECKING:
    from collections.abc import Sequence

    from validate.execute.cases import Case
    from validate.plan.steps import Step

SELECT = Selectors(
    values={
        "cudnn": ("9.12.0.46",),
        "frontend": ("1.26.0", "1.27.0"),
        "cuda": ("13.0",),
        "driver": ("580",),
        "arch": ("sm90", "sm100"),
    }
)


class FakeExecutor:
    """FAKE: one environment per frontend; frontend 1.26.0 cannot be built; every case passes."""

    name = "fake"
    log: list[str] = []  # noqa: RUF012 - class-level: the workflow builds its own instance

    def available(self) -> bool:
        return True

    def close(self) -> None:
        self.log.append("close")

    def check(self, config: ValidateConfig) -> None:
        self.log.append(f"check {config.executor}")

    def env_key(self, cell: Cell, run: RunContext) -> str:  # noqa: ARG002 - the protocol's
        return f"fe-{cell.frontend}"

    def prepare(self, step: Step, run: RunContext) -> ExecTarget | str:  # noqa: ARG002
        self.log.append(f"prepare {step.key} {len(step.cells)}")
        if step.first.frontend == "1.26.0":
            return "environment build failed: no wheel for 1.26.0"
        return ExecTarget(python=Path(sys.executable), expected_backend="9.12.0")

    def run(self, step: Step, target: ExecTarget, cases: Sequence[Case], run: RunContext) -> None:
        assert target.expected_backend == "9.12.0"
        for cell in step.cells:
            self.log.append(f"run {cell.id}")
            for case in cases:
                run.store.append(
                    CaseResult(
                        case=case.name,
                        outcome=Outcome.PASS,
                        cell_id=cell.id,
                        cell=cell.pins(),
                        run_id=run.run_id,
                        started_at=now_stamp(),
                    )
                )


@pytest.mark.parametrize("name", sorted(EXECUTORS))
def test_every_registered_executor_implements_the_protocol(name: str) -> None:
    executor = EXECUTORS[name]()
    try:
        assert isinstance(executor, Executor)
        assert executor.name == name
    finally:
        executor.close()


def test_the_fake_implements_the_protocol() -> None:
    assert isinstance(FakeExecutor(), Executor)


def test_validate_runs_a_registered_executor_end_to_end(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No branch on the name: registering an executor is all `validate --executor X` needs."""
    monkeypatch.setitem(EXECUTORS, "fake", FakeExecutor)
    FakeExecutor.log.clear()
    run_dir = tmp_path / "run"
    config = ValidateConfig(
        selectors=SELECT, executor="fake", case_names=("pin_check.py",), results_dir=run_dir
    )
    # the cells that could not be built are errors
    assert validate.workflow.run(config).exit_code == 1
    lines = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    by_cell = {(line["cell"]["frontend"], line["cell"]["arch"]): line for line in lines}
    assert len(lines) == len(by_cell) == 4
    for arch in ("sm90", "sm100"):
        assert by_cell["1.27.0", arch]["outcome"] == "pass"
        broken = by_cell["1.26.0", arch]
        assert broken["outcome"] == "error"
        assert broken["reason"] == "environment build failed: no wheel for 1.26.0"
    assert json.loads((run_dir / "run.json").read_text())["executor"] == "fake"
    # one prepare per environment, every cell of a step run in it, closed once at the end
    assert [entry for entry in FakeExecutor.log if not entry.startswith("run")] == [
        "check fake",
        "prepare fe-1.26.0 2",
        "prepare fe-1.27.0 2",
        "close",
    ]


class FailingExecutor(FakeExecutor):
    """FAKE: every environment builds; every case fails with the reason `boom`."""

    def prepare(self, step: Step, run: RunContext) -> ExecTarget | str:  # noqa: ARG002
        return ExecTarget(python=Path(sys.executable), expected_backend="9.12.0")

    def run(self, step: Step, target: ExecTarget, cases: Sequence[Case], run: RunContext) -> None:  # noqa: ARG002
        for cell in step.cells:
            for case in cases:
                run.store.append(
                    CaseResult(
                        case=case.name,
                        outcome=Outcome.FAIL,
                        reason="boom",
                        cell_id=cell.id,
                        cell=cell.pins(),
                        run_id=run.run_id,
                        started_at=now_stamp(),
                    )
                )


def test_known_issues_are_judged_as_a_step_of_the_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Once every case has ended, the run judges its results against the known issues: a failure
    an issue declares reads as xfail (the later line wins) beside the raw failure it judged, and
    the verdict the run returns is the judged one."""
    monkeypatch.setitem(EXECUTORS, "failing", FailingExecutor)
    issues = tmp_path / "ki.toml"
    issues.write_text(
        '[[issue]]\nid = "KI-9"\ntitle = "pin_check fails on 1.27"\nbackend = ""\n'
        'frontend = "==1.27.0"\ncases = ["pin_check.py"]\nsymptom = { outcomes = ["fail"] }\n',
        encoding="utf-8",
    )
    run_dir = tmp_path / "run"
    config = ValidateConfig(
        selectors=SELECT,
        executor="failing",
        case_names=("pin_check.py",),
        results_dir=run_dir,
        known_issues=issues,
    )
    outcome = validate.workflow.run(config)
    judged = {r.cell["frontend"]: r.outcome for r in outcome.results}
    assert judged == {"1.26.0": Outcome.FAIL, "1.27.0": Outcome.XFAIL}
    assert sorted(r.outcome for r in outcome.verdict.regressions) == [Outcome.FAIL] * 2
    lines = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    by_frontend: dict[str, list[str]] = {}
    for line in lines:
        by_frontend.setdefault(line["cell"]["frontend"], []).append(line["outcome"])
    # 1.26.0 is outside the declared range: still a failure, judged with a note that says so
    assert by_frontend == {"1.26.0": ["fail"] * 4, "1.27.0": ["fail", "fail", "xfail", "xfail"]}
    older = [line for line in lines if line["cell"]["frontend"] == "1.26.0"]
    assert [bool(line.get("ki_note")) for line in older] == [False, False, True, True]
    assert all(line["known_issue"] == "KI-9" for line in lines if line["outcome"] == "xfail")


def test_workflow_names_no_executor() -> None:
    """The workflow holds no executor's name: EXECUTORS[config.executor] is its only lookup."""
    tree = ast.parse(Path(validate.workflow.__file__).read_text(encoding="utf-8"))
    names = {"auto", *EXECUTORS}
    found = [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in names
    ]
    assert found == []


@pytest.mark.parametrize(
    ("flags", "shown"), [(["--env", "current"], "--env current"), (["--with", "torch"], "--with")]
)
def test_docker_refuses_what_an_image_cannot_honour(
    tmp_path: Path, flags: list[str], shown: str
) -> None:
    """Checked by the executor itself, before any work (one line, exit 2)."""
    proc = cli("validate", "--executor", "docker", *flags, cwd=tmp_path, timeout=None)
    assert proc.returncode == 2
    assert proc.stderr == (
        f"cudnn-matrix: error: --executor docker: {shown} is not supported "
        "(a cell's image holds its pins)\n"
    )


def test_resolve_executor() -> None:
    assert resolve_executor("local") == "local"
    assert resolve_executor("docker") == "docker"
    assert resolve_executor("auto") in EXECUTORS
    with pytest.raises(ConfigError, match="unknown executor 'podman'; expected one of auto, "):
        resolve_executor("podman")


def _cell(frontend: str, arch: str, driver: str = "580") -> Cell:
    return Cell(cudnn="9.12.0.46", frontend=frontend, cuda="13.0", driver=driver, arch=arch)


def test_steps_group_cells_by_environment_in_plan_order() -> None:
    host = HostFacts(
        gpus=(GpuInfo(name="H200", sm="sm90", memory_mib=143_000),),
        driver_version="580.65.06",
        cuda_driver_version="13.0",
        source="manual",
    )
    cells = [
        _cell("1.26.0", "sm90"),
        _cell("1.27.0", "sm90"),
        _cell("1.26.0", "sm100"),  # no such GPU here
        _cell("1.26.0", "sm90", driver="575"),  # not this host's driver
        _cell("1.26.0", "any"),
    ]
    plan = plan_steps(cells, host, lambda cell: cell.frontend)
    assert [(step.key, step.cells) for step in plan.steps] == [
        ("1.26.0", (cells[0], cells[4])),
        ("1.27.0", (cells[1],)),
    ]
    assert [(cell, reason) for cell, reason in plan.skipped] == [
        (cells[2], "no sm100 GPU on this host"),
        (cells[3], "cell needs driver 575, host has 580.65.06"),
    ]
    assert plan.steps[0].first == cells[0]


def test_docker_steps_follow_the_image_pins() -> None:
    """Driver and arch share an image; a forward-compat driver may not (its compat layer)."""
    docker = EXECUTORS["docker"]()
    run = None  # env_key reads only the cell
    keys = {
        docker.env_key(cell, run)  # type: ignore[arg-type]
        for cell in (_cell("1.27.0", "sm90"), _cell("1.27.0", "sm100", driver="575"))
    }
    assert len(keys) == 1
    compat = _cell("1.27.0", "sm90", driver="fc-610@580")
    assert Driver.parse(compat.driver).forward_compat
    assert docker.env_key(compat, run) not in keys  # type: ignore[arg-type]


#: Another value of each axis (driver 570: a branch, not forward compatibility).
_OTHER = {
    "cudnn": "9.25.1.1",
    "frontend": "1.32.0",
    "cuda": "12.9",
    "driver": "570",
    "arch": "sm100",
    "python": "3.12",
}


@pytest.mark.parametrize("python", ["", "3.13"])
@pytest.mark.parametrize("name", sorted(EXECUTORS))
def test_every_executor_keys_environments_by_the_env_axes(
    name: str, python: str, tmp_path: Path
) -> None:
    """One environment key (model.matrix.env_pins) for every registered executor: a cell that
    differs only in an axis the registry marks `env` needs another environment, one that differs
    only in another axis shares it. (The docker executor's hand-made key once left python out.)"""
    assert set(_OTHER) == set(AXES), "give a new axis another value here"
    run = RunContext(
        config=ValidateConfig(),
        host=HostFacts(),
        run_id="R",
        sources=Sources(),
        store=ResultStore(tmp_path / "results.jsonl"),
    )
    base = dataclasses.replace(_cell("1.27.0", "sm90"), python=python)
    executor = EXECUTORS[name]()
    try:
        for axis in REGISTRY:
            other = dataclasses.replace(base, **{axis.name: _OTHER[axis.name]})
            differs = executor.env_key(other, run) != executor.env_key(base, run)
            assert differs is axis.env, f"{name}: {axis.name} (env={axis.env})"
    finally:
        executor.close()


def test_config_crosses_as_one_json_object(tmp_path: Path) -> None:
    config = ValidateConfig(
        selectors=SELECT,
        cases=(Path("/cases/a.py"), Path("/cases/b")),
        samples=Path("/samples"),
        case_names=("pin_check.py", "repro_*"),
        executor="docker",
        base_image="my/base:1",
        env_mode="isolated",
        base_python="/usr/bin/python3",
        backend_source="9.12.0.46",
        frontend_source="1.27.0",
        extras=("torch==2.11.0",),
        wheelhouse=Path("/wh"),
        cache_dir=Path("/cache"),
        installer="uv",
        backend_deps=False,
        jobs=3,
        timeout_s=12.5,
        reruns=2,
        results_dir=Path("/results"),
        resume=True,
        api_logs=False,
        known_issues=Path("/ki.toml"),
        argv=("validate", "--case", "pin_check.py"),
    )
    file = tmp_path / "config.json"  # what the docker executor writes, the container reads
    file.write_text(payload(config, "9.12.0", "RUN1"), encoding="utf-8")
    assert read_payload(file) == (config, "9.12.0", "RUN1")
    default = json.loads(json.dumps(ValidateConfig().to_dict()))
    assert ValidateConfig.from_dict(default) == ValidateConfig()
    with pytest.raises(ConfigError, match="config: unknown option 'color'"):
        ValidateConfig.from_dict({"color": "red"})
