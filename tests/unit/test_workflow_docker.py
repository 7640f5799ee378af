"""validate --executor docker, the pure logic: build failures, collection and stamping.

The builder and executor are small labelled fakes (Protocol fakes for logic only); the real
daemon path is tests/integration/test_validate_docker.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from validate.config import ValidateConfig
from validate.env.builder import base_image_for
from validate.env.images import LOCAL_BASE_IMAGE
from validate.errors import ImageBuildError
from validate.execute import ExecRequest, ExecResult
from validate.execute.cases import SHIPPED_CASES, discover_cases
from validate.execute.docker_cells import run_cells_docker
from validate.model.matrix import Cell
from validate.model.outcome import Outcome
from validate.model.results import CaseResult, ResultStore, load_results
from validate.plan.host import HostFacts
from validate.plan.rules import Plan

if TYPE_CHECKING:
    from pathlib import Path

CELLS = [
    Cell(cudnn="9.12.0.46", frontend=fe, cuda="13.0", driver="580", arch="sm90")
    for fe in ("1.26.0", "1.27.0")
]


@dataclass(frozen=True, kw_only=True)
class _Spec:
    tag: str


class FakeBuilder:
    """FAKE: no docker. Frontend 1.26.0 fails to build; 1.27.0 builds."""

    def __init__(self, images: set[str]) -> None:
        self.images = images
        self.built: list[str] = []

    def image_exists(self, tag: str) -> bool:
        return tag in self.images

    def spec_for(self, cell: Cell, **kwargs: Any) -> _Spec:
        # the real choice, as ImageBuilder.spec_for makes it from the --base-image it is given
        assert base_image_for(cell, kwargs["base_image"], self) == LOCAL_BASE_IMAGE
        return _Spec(tag=f"cudnn-matrix/cell:{cell.frontend}")

    def ensure(self, spec: _Spec, *, log_path: Path | None = None) -> str:
        assert log_path is not None
        assert log_path.name == "build.log"  # kept in the cell's folder of the run
        if spec.tag.endswith("1.26.0"):
            lines = "\n".join(f"Step {i}/40 : RUN x" for i in range(40))
            msg = f"building {spec.tag} (cudnn 9.12.0.46, frontend 1.26.0) failed: boom\n{lines}"
            raise ImageBuildError(msg)
        self.built.append(spec.tag)
        return spec.tag


class FakeExecutor:
    """FAKE: writes the results an in-container runner would (container paths, no cell id)."""

    name = "docker"

    def __init__(self) -> None:
        self.requests: list[ExecRequest] = []

    def run(self, request: ExecRequest) -> ExecResult:
        self.requests.append(request)
        store = ResultStore(request.results_dir / "results.jsonl")
        store.append(
            CaseResult(
                case="pin_check.py",
                outcome=Outcome.PASS,
                log_path="/results/cases/x/pin_check.log",
            )
        )
        return ExecResult(
            returncode=0,
            timed_out=False,
            duration_s=1.0,
            log_path=None,
            tail="runner crashed: Killed\n",
            results_dir=request.results_dir,
        )


def test_build_failure_is_an_error_and_results_are_collected(tmp_path: Path) -> None:
    cases = discover_cases([SHIPPED_CASES])
    store = ResultStore(tmp_path / "results.jsonl")
    builder, executor = FakeBuilder({LOCAL_BASE_IMAGE}), FakeExecutor()
    run_cells_docker(
        ValidateConfig(),
        Plan(planned=list(CELLS), pruned=[]),
        cases,
        HostFacts(),
        store,
        "RUN1",
        builder=builder,  # type: ignore[arg-type]
        executor=executor,  # type: ignore[arg-type]
    )
    results = load_results([tmp_path])
    broken = [r for r in results if r.cell_id == CELLS[0].id]
    assert {r.outcome for r in broken} == {Outcome.ERROR}
    assert len(broken) == len(cases)
    reason = broken[0].reason
    assert reason.startswith("image build failed: building cudnn-matrix/cell:1.26.0")
    assert "Step 39/40" in reason
    assert "Step 20/40" not in reason  # only the tail of the build log
    (request,) = executor.requests  # the failed cell never ran
    assert request.image == "cudnn-matrix/cell:1.27.0"
    assert request.expect_backend == "9.12.0"
    assert request.cases == (SHIPPED_CASES,)
    assert "--resume" in request.runner_args
    ran = {r.case: r for r in results if r.cell_id == CELLS[1].id}
    pin = ran.pop("pin_check.py")
    assert pin.outcome is Outcome.PASS
    assert pin.run_id == "RUN1"
    assert pin.cell == CELLS[1].pins()
    assert pin.log_path == str(tmp_path / "cells" / CELLS[1].id / "cases/x/pin_check.log")
    # cases the container did not report are errors naming the runner's last words
    assert ran
    assert {r.outcome for r in ran.values()} == {Outcome.ERROR}
    assert all("runner crashed: Killed" in r.reason for r in ran.values())
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(lines) == 2 * len(cases)
    assert all(json.loads(line)["run_id"] == "RUN1" for line in lines)


def test_base_image_default() -> None:
    cell = CELLS[0]
    nvidia = "nvidia/cuda:13.0.0-runtime-ubuntu24.04"
    config = ValidateConfig()
    assert (
        base_image_for(cell, config.base_image, FakeBuilder({LOCAL_BASE_IMAGE})) == LOCAL_BASE_IMAGE
    )
    assert base_image_for(cell, config.base_image, FakeBuilder(set())) == nvidia
    both = FakeBuilder({LOCAL_BASE_IMAGE, nvidia})
    assert base_image_for(cell, config.base_image, both) == nvidia
    explicit = ValidateConfig(base_image="my/base:1")
    assert base_image_for(cell, explicit.base_image, both) == "my/base:1"
