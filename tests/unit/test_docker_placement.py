"""The docker executor's part of the ledger and of "cases to jobs, once", captured at the SDK's
HTTP layer (no daemon here, no GPU): each cell's container asks for the GPU its pool job was
booked on, and a `--tests` suite goes into the container as the cases do."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import docker
import pytest

from validate.config import ValidateConfig
from validate.env.sources import Sources
from validate.execute import ExecTarget, RunContext
from validate.execute.cases import discover_cases
from validate.execute.docker import DockerExecutor, container_config
from validate.execute.pool import Pool
from validate.model.matrix import Cell
from validate.model.results import ResultStore
from validate.plan.host import HostFacts
from validate.plan.steps import Step

if TYPE_CHECKING:
    from pathlib import Path

CELLS = (
    Cell(cudnn="9.24.0.43", frontend="1.27.0", cuda="13.0", driver="580", arch="sm90"),
    Cell(cudnn="9.24.0.43", frontend="1.32.0", cuda="13.0", driver="580", arch="sm90"),
)


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A real DockerClient (API version pinned: no daemon is asked) whose container creates are
    recorded and then refused, as a daemon that cannot create one would."""
    real: Any = docker.DockerClient(base_url="unix:///nonexistent/docker.sock", version="1.41")
    real.bodies = []

    def post_json(url: str, data: dict[str, Any], **_: Any) -> None:
        assert url.endswith("/containers/create")
        real.bodies.append(data)
        time.sleep(0.5)  # both cells' jobs hold their GPUs at once
        msg = "captured"
        raise docker.errors.DockerException(msg)

    monkeypatch.setattr(real.api, "_post_json", post_json)
    return real


def test_each_cells_container_asks_for_the_gpu_its_job_was_booked_on(
    client: Any, tmp_path: Path
) -> None:
    from validate.execute.ledger import GpuBudget, Ledger

    case = tmp_path / "cases" / "c.py"
    case.parent.mkdir()
    case.write_text("print('hi')\n")
    store = ResultStore(tmp_path / "run" / "results.jsonl")
    run = RunContext(
        config=ValidateConfig(cases=(case,), executor="docker"),
        host=HostFacts(),
        run_id="R",
        sources=Sources(),
        store=store,
        slots=2,
    )
    executor = DockerExecutor(client=client, gpu=True)
    target = ExecTarget(image="cudnn-matrix/cell:0123456789abcdef", expected_backend="9.24.0")
    jobs = executor.run(Step(key="k", cells=CELLS), target, discover_cases([case]), run)
    ledger = Ledger(2, gpus=[GpuBudget(index=2, free_mib=8192), GpuBudget(index=5, free_mib=8192)])
    pool = Pool(2, ledger=ledger)
    pool.submit(jobs)
    pool.close()
    pool.run()
    devices = sorted(b["HostConfig"]["DeviceRequests"][0]["DeviceIDs"] for b in client.bodies)
    assert devices == [["2"], ["5"]]  # one GPU each, the one booked (not count=-1: all)
    assert {r.outcome.value for r in store} == {"error"}  # the refused create: an error each


def test_a_suite_goes_into_the_container(client: Any, tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    config = ValidateConfig(tests=suite, executor="docker")
    DockerExecutor(client=client, gpu=False).check(config)  # --tests is taken
    inner = container_config(config)
    assert str(inner.tests) == "/tests/suite"
    assert inner.cases == ()  # the suite alone, as on the host (not the shipped cases)
    executor = DockerExecutor(client=client, gpu=False)
    target = ExecTarget(image="cudnn-matrix/cell:0123456789abcdef")
    with pytest.raises(Exception, match="captured"):
        executor.container(CELLS[0], target, config, tmp_path / "results").__enter__()
    binds = client.bodies[-1]["HostConfig"]["Binds"]
    assert f"{suite.resolve()}:/tests/suite:ro" in binds
