"""validate --executor docker, the pure logic: build failures, collection and stamping.

The builder and the container are small labelled fakes (Protocol fakes for logic only); the
real daemon path is tests/integration/test_validate_docker.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from validate.config import ValidateConfig
from validate.env.builder import base_image_for
from validate.env.images import LOCAL_BASE_IMAGE
from validate.errors import ImageBuildError, ResultsLost
from validate.execute import ExecResult, ExecTarget
from validate.execute.cases import SHIPPED_CASES, cases_for
from validate.execute.docker import DockerExecutor, container_config, container_kwargs
from validate.execute.incontainer import CONFIG_FILE, payload, read_payload, run_payload
from validate.model.matrix import Cell
from validate.model.outcome import Outcome
from validate.model.results import RUN_KEY_ENV, CaseResult, ResultStore, RunKey, load_results
from validate.plan.host import HostFacts
from validate.plan.rules import Plan
from validate.workflow import run_cells

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


@dataclass(frozen=True, kw_only=True)
class _Started:
    """What one container was started with."""

    cell: Cell
    target: ExecTarget
    kwargs: dict[str, Any]
    inner: ValidateConfig  # the config the container read from /results/config.json
    timeout_s: float | None


class FakeDocker(DockerExecutor):
    """FAKE container: writes the results an in-container runner would (container paths, no
    cell id); everything before the container (images, the config file) is the real executor."""

    def __init__(self, builder: FakeBuilder) -> None:
        super().__init__(client=object(), gpu=False, builder=builder)  # type: ignore[arg-type]
        self.started: list[_Started] = []

    def close(self) -> None:
        """No SDK client to close."""

    def run_container(
        self,
        cell: Cell,
        target: ExecTarget,
        config: ValidateConfig,
        results_dir: Path,
        *,
        timeout_s: float | None = None,
        key: RunKey | None = None,
    ) -> ExecResult:
        kwargs = container_kwargs(cell, target, config, results_dir, gpu=False, key=key)
        inner, _, _ = read_payload(results_dir / CONFIG_FILE)
        started = _Started(
            cell=cell, target=target, kwargs=kwargs, inner=inner, timeout_s=timeout_s
        )
        self.started.append(started)
        return self.inside(started, results_dir)

    def inside(self, started: _Started, results_dir: Path) -> ExecResult:
        handed = RunKey(bytes.fromhex(started.kwargs["environment"][RUN_KEY_ENV]))
        store = ResultStore(results_dir / "results.jsonl", key=handed)
        store.append(
            CaseResult(
                case="pin_check.py",
                outcome=Outcome.PASS,
                log_path="/results/cases/x/pin_check.log",
            )
        )
        forged = {"case": "repro_fusion_uid[backward]", "outcome": "pass", "schema": 2, "mac": "0"}
        with store.path.open("a") as fh:  # a line a case wrote itself: never collected
            fh.write(json.dumps(forged) + "\n")
        return ExecResult(kind="runner", returncode=0, tail="runner crashed: Killed\n")


class HostRunner(FakeDocker):
    """FAKE container, real runner: the real in-container entry (`run --config`) runs on this
    host, on the payload with the container's mount paths mapped back to the host's."""

    def inside(self, started: _Started, results_dir: Path) -> ExecResult:
        inner = started.inner
        volumes = started.kwargs["volumes"]
        mounts = {Path(bind["bind"]): Path(host) for host, bind in volumes.items()}
        mapped = dataclasses.replace(
            inner,
            cases=tuple(mounts[path] for path in inner.cases),
            samples=mounts[inner.samples] if inner.samples is not None else None,
            results_dir=mounts[Path("/results")],
        )
        (results_dir / "host.json").write_text(payload(mapped, "9.12.0", "RUN1"))
        os.environ[RUN_KEY_ENV] = started.kwargs["environment"][RUN_KEY_ENV]  # as docker hands it
        code = run_payload(results_dir / "host.json")
        return ExecResult(kind="runner", returncode=code, tail="")


def test_build_failure_is_an_error_and_results_are_collected(tmp_path: Path) -> None:
    config = ValidateConfig(executor="docker")
    cases = cases_for(config)
    store = ResultStore(tmp_path / "results.jsonl")
    builder = FakeBuilder({LOCAL_BASE_IMAGE})
    executor = FakeDocker(builder)
    plan = Plan(planned=list(CELLS), pruned=[])
    run_cells(config, plan, cases, HostFacts(), store, "RUN1", executor=executor)
    results = load_results([tmp_path])
    broken = [r for r in results if r.cell_id == CELLS[0].id]
    assert {r.outcome for r in broken} == {Outcome.ERROR}
    assert len(broken) == len(cases)
    reason = broken[0].reason
    assert reason.startswith("image build failed: building cudnn-matrix/cell:1.26.0")
    assert "Step 39/40" in reason
    assert "Step 20/40" not in reason  # only the tail of the build log
    (started,) = executor.started  # the failed cell never ran
    assert started.target.image == "cudnn-matrix/cell:1.27.0"
    assert started.target.expected_backend == "9.12.0"
    assert started.kwargs["volumes"][str(SHIPPED_CASES.resolve())]["bind"] == "/cases/0/cases"
    assert started.inner == container_config(config)
    assert started.inner.cases == (Path("/cases/0/cases"),)
    assert started.inner.resume  # the cell folder may hold some results already
    assert started.timeout_s == 600 * len(cases) + 300  # every case's limit, plus start-up
    ran = {r.case: r for r in results if r.cell_id == CELLS[1].id}
    pin = ran.pop("pin_check.py")
    assert pin.outcome is Outcome.PASS
    assert pin.run_id == "RUN1"
    assert pin.cell == CELLS[1].pins()
    assert pin.log_path == str(tmp_path / "cells" / CELLS[1].id / "cases/x/pin_check.log")
    # cases the container did not report are errors naming the runner's last words
    assert ran
    assert {r.outcome for r in ran.values()} == {Outcome.ERROR}  # the forged pass among them
    assert all("runner crashed: Killed" in r.reason for r in ran.values())
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(lines) == 2 * len(cases)
    assert all(json.loads(line)["run_id"] == "RUN1" for line in lines)


def test_case_selection_reaches_the_container(tmp_path: Path) -> None:
    """Issue 11 item 6(a): `--case pin_check.py` ran every case in the container, and all were
    stored. The container now reads the run's config, so only the selected case runs."""
    config = ValidateConfig(executor="docker", case_names=("pin_check.py",), api_logs=False)
    cases = cases_for(config)
    assert [c.name for c in cases] == ["pin_check.py"]
    store = ResultStore(tmp_path / "results.jsonl")
    executor = HostRunner(FakeBuilder({LOCAL_BASE_IMAGE}))
    plan = Plan(planned=[CELLS[1]], pruned=[])
    run_cells(config, plan, cases, HostFacts(), store, "RUN1", executor=executor)
    (started,) = executor.started
    assert started.inner.case_names == ("pin_check.py",)
    in_cell = load_results([tmp_path / "cells" / CELLS[1].id])
    assert [r.case for r in in_cell] == ["pin_check.py"]  # the runner ran only that case
    stored = [json.loads(line) for line in store.path.read_text().splitlines()]
    assert [(r["case"], r["cell_id"], r["run_id"]) for r in stored] == [
        ("pin_check.py", CELLS[1].id, "RUN1")
    ]


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


class _StoreBuilder(FakeBuilder):
    """FAKE: records the backend each image was asked for."""

    def __init__(self, images: set[str]) -> None:
        super().__init__(images)
        self.backends: dict[str, Any] = {}

    def spec_for(self, cell: Cell, **kwargs: Any) -> _Spec:
        self.backends[cell.cudnn] = kwargs["backend"]
        return _Spec(tag=f"cudnn-matrix/cell:{cell.cudnn}")


def test_backend_store_gives_each_image_its_folder_and_a_missing_version_is_an_error(
    tmp_path: Path,
) -> None:
    """--executor docker --backend-store: the image of a version the store holds gets its
    library folder (the image builder copies it in); one it lacks is `error`, naming the store,
    and no image is built for it."""
    store_dir = tmp_path / "store"
    lib = store_dir / "cudnn-linux-x86_64-9.12.0.46_cuda13-archive" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcudnn.so.9").write_bytes(b"")
    (lib.parent / "include").mkdir()
    (lib.parent / "include" / "cudnn_version.h").write_text(
        "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 12\n#define CUDNN_PATCHLEVEL 0\n"
    )
    cells = [Cell(cudnn=v, frontend="1.27.0", cuda="13.0", driver="580", arch="sm90") for v in
             ("9.12.0.46", "9.13.0.50")]  # fmt: skip
    config = ValidateConfig(
        executor="docker", backend_store=store_dir, case_names=("pin_check.py",)
    )
    cases = cases_for(config)
    store = ResultStore(tmp_path / "run" / "results.jsonl")
    builder = _StoreBuilder({LOCAL_BASE_IMAGE})
    executor = FakeDocker(builder)
    run_cells(
        config, Plan(planned=cells, pruned=[]), cases, HostFacts(), store, "R", executor=executor
    )
    assert set(builder.backends) == {"9.12.0.46"}
    assert builder.backends["9.12.0.46"].kind == "libdir"
    assert builder.backends["9.12.0.46"].libdir() == lib
    (started,) = executor.started
    assert started.inner.backend_store is None  # a host path: the backend is in the image
    missing = [r for r in load_results([tmp_path / "run"]) if r.cell_id == cells[1].id]
    assert [r.outcome for r in missing] == [Outcome.ERROR]
    assert missing[0].reason == (
        f"backend 9.13.0.50 for CUDA 13.0 is not in --backend-store {store_dir} "
        "(it has 9.12.0.46 (cuda13))"
    )


def test_a_shards_cases_reach_the_container(tmp_path: Path) -> None:
    """--shard: the container runs this shard's cases of the cell, named exactly, and no other."""
    config = ValidateConfig(executor="docker", shard="1/2", api_logs=False)
    cases = cases_for(config)
    store = ResultStore(tmp_path / "results.jsonl")
    executor = HostRunner(FakeBuilder({LOCAL_BASE_IMAGE}))
    plan = Plan(planned=[CELLS[1]], pruned=[])
    only = {CELLS[1].id: frozenset({"pin_check.py"})}
    run_cells(config, plan, cases, HostFacts(), store, "RUN1", executor=executor, only=only)
    (started,) = executor.started
    assert started.inner.case_names == ("pin_check.py",)
    stored = [json.loads(line)["case"] for line in store.path.read_text().splitlines()]
    assert stored == ["pin_check.py"]


class DeletesTheRun(FakeDocker):
    """FAKE container whose case deletes the host's whole run folder (the cell folder's parent)."""

    def inside(self, started: _Started, results_dir: Path) -> ExecResult:  # noqa: ARG002
        shutil.rmtree(results_dir.parents[1])
        return ExecResult(kind="runner", returncode=1, tail="case deleted the run\n")


def test_a_run_folder_deleted_in_a_cell_stops_before_the_next_cell(tmp_path: Path) -> None:
    cells = [dataclasses.replace(CELLS[1], arch=arch) for arch in ("sm90", "sm100")]
    config = ValidateConfig(executor="docker")
    cases = cases_for(config)
    store = ResultStore(tmp_path / "run" / "results.jsonl")
    executor = DeletesTheRun(FakeBuilder({LOCAL_BASE_IMAGE}))
    plan = Plan(planned=cells, pruned=[])
    with pytest.raises(ResultsLost, match="was deleted or replaced mid-run"):
        run_cells(config, plan, cases, HostFacts(), store, "RUN1", executor=executor)
    assert [s.cell for s in executor.started] == cells[:1]  # the second cell never started
    results = load_results([tmp_path / "run"])  # re-created, with the first cell's verdicts
    assert {(r.cell_id, r.outcome) for r in results} == {(cells[0].id, Outcome.ERROR)}
    assert len(results) == len(cases)


class RecordingBuilder(FakeBuilder):
    """FAKE: records the cells whose spec was asked for (the real spec_for takes the Python from
    the cell: tests/unit/test_image_paths.py)."""

    def __init__(self, images: set[str]) -> None:
        super().__init__(images)
        self.asked: list[Cell] = []

    def spec_for(self, cell: Cell, **kwargs: Any) -> _Spec:  # noqa: ARG002 - the real signature
        self.asked.append(cell)
        return _Spec(tag=f"cudnn-matrix/cell:{cell.frontend}-py{cell.python}")


def test_cells_that_differ_only_in_python_are_two_images(tmp_path: Path) -> None:
    """Two environments, each image asked for by its own cell."""
    cells = [dataclasses.replace(CELLS[1], python=py) for py in ("3.12", "")]
    builder = RecordingBuilder({LOCAL_BASE_IMAGE})
    executor = FakeDocker(builder)
    assert executor.env_key(cells[0], None) != executor.env_key(cells[1], None)  # type: ignore[arg-type]
    config = ValidateConfig(executor="docker")
    store = ResultStore(tmp_path / "results.jsonl")
    plan = Plan(planned=cells, pruned=[])
    run_cells(config, plan, cases_for(config), HostFacts(), store, "R", executor=executor)
    assert builder.asked == cells
    assert [s.target.image for s in executor.started] == [
        "cudnn-matrix/cell:1.27.0-py3.12",
        "cudnn-matrix/cell:1.27.0-py",
    ]
