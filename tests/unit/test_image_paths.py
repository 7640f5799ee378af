"""`images build` and `validate --executor docker` give a cell one ImageSpec (issue 11, 6b).

Both ask ImageBuilder.spec_for, which decides every input, forward compatibility included.
Hermetic: the wheelhouse holds wheel files by name only (spec_for reads names, builds nothing)
and --base-image is given, so no daemon is asked; only the build step is a labelled fake.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from validate.cli import build_parser
from validate.cli.images import _specs
from validate.config import Selectors, ValidateConfig
from validate.env.builder import ImageBuilder
from validate.execute import ExecResult
from validate.execute.cases import SHIPPED_CASES, discover_cases
from validate.execute.docker import DockerExecutor
from validate.model.matrix import load_matrix
from validate.model.results import ResultStore
from validate.plan.host import HostFacts
from validate.plan.rules import load_rules, plan_cells
from validate.workflow import run_cells

if TYPE_CHECKING:
    from pathlib import Path

    from validate.env.images import ImageSpec
    from validate.env.target import ExecTarget
    from validate.model.matrix import Cell
    from validate.model.results import RunKey

WHEELS = (
    "nvidia_cudnn_cu13-9.24.0.43-py3-none-manylinux_2_27_x86_64.whl",
    *(
        f"nvidia_cudnn_frontend-1.27.0-cp{v}-cp{v}-manylinux_2_28_x86_64.whl"
        for v in (311, 312, 313)
    ),
)
BASE = "nvidia/cuda:13.0.0-runtime-ubuntu24.04"
#: a normal cell and a forward-compat one (user-mode driver 610 on kernel-mode 580)
SELECT = ["--cudnn", "9.24.0.43", "--frontend", "1.27.0", "--cuda", "13.0"]
SELECT += ["--driver", "580,fc-610@580", "--arch", "sm90"]


class RecordingBuilder(ImageBuilder):
    """FAKE build step only (no daemon): records the specs the docker path asks to build."""

    def __init__(self, wheelhouse: Path) -> None:
        super().__init__(wheelhouse=wheelhouse, cache_dir=wheelhouse.parent / "ctx")
        self.asked: list[ImageSpec] = []

    def ensure(self, spec: ImageSpec, *, log_path: Path | None = None) -> str:
        assert log_path is not None
        self.asked.append(spec)
        return spec.tag


class NoContainer(DockerExecutor):
    """FAKE container: runs nothing (the cases then read as errors; only the specs matter here)."""

    def __init__(self, builder: ImageBuilder) -> None:
        super().__init__(client=object(), gpu=False, builder=builder)

    def close(self) -> None:
        """No SDK client to close."""

    def run_container(
        self,
        cell: Cell,  # noqa: ARG002 - the real signature
        target: ExecTarget,  # noqa: ARG002
        config: ValidateConfig,  # noqa: ARG002
        results_dir: Path,  # noqa: ARG002
        *,
        timeout_s: float | None = None,  # noqa: ARG002
        key: RunKey | None = None,  # noqa: ARG002
    ) -> ExecResult:
        return ExecResult(kind="runner", returncode=0)


def _both_paths(tmp_path: Path, select: list[str]) -> tuple[dict[str, ImageSpec], ...]:
    """The specs `images build` gives the selected cells, and those the docker path asks for."""
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    for name in WHEELS:
        (wheelhouse / name).write_bytes(b"")
    builder = RecordingBuilder(wheelhouse)
    args = build_parser().parse_args(
        ["images", "build", *select, "--base-image", BASE, "--wheelhouse", str(wheelhouse)]
    )
    cli = {spec.tag: spec for spec in _specs(args, builder)}

    selectors = Selectors.from_args(args)
    plan = plan_cells(load_matrix(selectors.matrix), load_rules(selectors.rules), selectors)
    run_cells(
        ValidateConfig(base_image=BASE, wheelhouse=wheelhouse),
        plan,
        discover_cases([SHIPPED_CASES]),
        HostFacts(),
        ResultStore(tmp_path / "run" / "results.jsonl"),
        "RUN1",
        executor=NoContainer(builder),
    )
    docker = {spec.tag: spec for spec in builder.asked}
    assert docker.keys() == cli.keys()
    assert {tag: spec.pins() for tag, spec in docker.items()} == {
        tag: spec.pins() for tag, spec in cli.items()
    }
    return cli, docker


def test_cli_and_docker_path_give_each_cell_one_spec(tmp_path: Path) -> None:
    cli, docker = _both_paths(tmp_path, SELECT)
    assert len(cli) == 2  # forward compat is a pin of the image: two images, not one
    assert sorted((spec.compat or "") for spec in docker.values()) == ["", "13-0"]
    assert {spec.base_image for spec in docker.values()} == {BASE}


@pytest.mark.parametrize(("flags", "python"), [([], "3.11"), (["--python", "3.12,3.13"], "")])
def test_the_python_axis_reaches_the_image(tmp_path: Path, flags: list[str], python: str) -> None:
    """Each cell's image is made for its own Python (its frontend wheel for that Python), from
    `images build` and the docker path alike; a cell without one gets the image default, 3.11.
    (The docker path fell back to 3.11 where `images build` passed the cell's Python.)"""
    _, docker = _both_paths(tmp_path, [*SELECT[:-4], "--driver", "580", "--arch", "sm90", *flags])
    wanted = [python] if python else ["3.12", "3.13"]
    assert sorted(spec.python for spec in docker.values()) == wanted
    assert sorted(spec.frontend_wheel for spec in docker.values()) == [
        f"nvidia_cudnn_frontend-1.27.0-cp{py.replace('.', '')}-cp{py.replace('.', '')}"
        "-manylinux_2_28_x86_64.whl"
        for py in wanted
    ]
