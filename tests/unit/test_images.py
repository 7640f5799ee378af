"""ImageSpec: content-addressed tags, labels and build args (hermetic: no daemon)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import pytest

from validate.env.images import (
    BACKEND_REPO,
    IMAGE_REPO,
    LOCAL_BASE_IMAGE,
    ImageSpec,
    compat_for,
    dockerfile_path,
)
from validate.errors import ConfigError
from validate.model.matrix import Cell

if TYPE_CHECKING:
    from pathlib import Path

CELL = Cell(cudnn="9.24.0.43", frontend="1.27.0", cuda="13.0", driver="580", arch="sm100")
BACKEND_WHEEL = "nvidia_cudnn_cu13-9.24.0.43-py3-none-manylinux_2_27_x86_64.whl"
FE_WHEEL = "nvidia_cudnn_frontend-1.27.0-cp311-cp311-manylinux_2_28_x86_64.whl"


def _spec(**changes: object) -> ImageSpec:
    spec = ImageSpec.for_cell(
        CELL, frontend_wheel=FE_WHEEL, backend_wheel=BACKEND_WHEEL, base_image=LOCAL_BASE_IMAGE
    )
    return replace(spec, **changes) if changes else spec  # type: ignore[arg-type]


def test_tag_is_stable_and_names_the_repo() -> None:
    assert _spec().tag == _spec().tag
    assert _spec().tag.startswith(f"{IMAGE_REPO}:")
    assert _spec().backend_tag.startswith(f"{BACKEND_REPO}:")


def test_default_base_is_the_cuda_runtime_image() -> None:
    spec = ImageSpec.for_cell(CELL, frontend_wheel=FE_WHEEL, backend_wheel=BACKEND_WHEEL)
    assert spec.base_image == "nvidia/cuda:13.0.0-runtime-ubuntu24.04"


@pytest.mark.parametrize(
    ("change", "cell_changes", "backend_changes"),
    [
        ({"frontend": "1.26.0", "frontend_wheel": "fe-1.26.whl"}, True, False),
        ({"cudnn": "9.25.1.1", "backend_wheel": "be-9.25.whl"}, True, True),
        ({"base_image": "nvidia/cuda:13.0.2-runtime-ubuntu24.04"}, True, True),
        ({"compat": "13-0"}, True, True),
        ({"torch": "2.11.0"}, True, True),
    ],
)
def test_what_changes_which_tag(
    change: dict[str, str], cell_changes: bool, backend_changes: bool
) -> None:
    base, other = _spec(), _spec(**change)
    assert (base.tag != other.tag) is cell_changes
    assert (base.backend_tag != other.backend_tag) is backend_changes


def test_dockerfile_text_is_part_of_the_tag(tmp_path: Path) -> None:
    edited = tmp_path / "Dockerfile"
    edited.write_text(dockerfile_path().read_text() + "\n# a comment\n")
    assert _spec(dockerfile=edited).tag != _spec().tag
    assert _spec(dockerfile=edited).backend_tag == _spec().backend_tag


def test_cells_differing_in_driver_or_arch_share_an_image() -> None:
    other = replace(CELL, driver="590", arch="sm90")
    spec = ImageSpec.for_cell(
        other, frontend_wheel=FE_WHEEL, backend_wheel=BACKEND_WHEEL, base_image=LOCAL_BASE_IMAGE
    )
    assert spec.tag == _spec().tag


def test_labels_name_the_pins() -> None:
    labels = _spec().labels()
    assert labels["io.cudnn-matrix.cudnn"] == "9.24.0.43"
    assert labels["io.cudnn-matrix.frontend"] == "1.27.0"
    assert labels["io.cudnn-matrix.cuda"] == "13.0"
    assert labels["io.cudnn-matrix.backend-source"] == "wheel"
    assert labels["io.cudnn-matrix.digest"] == _spec().digest
    assert labels["org.opencontainers.image.base.name"] == LOCAL_BASE_IMAGE
    backend = _spec().backend_labels()
    assert backend["io.cudnn-matrix.kind"] == "backend"
    assert not any("frontend" in key for key in backend)


def test_build_args_split_between_the_two_dockerfiles() -> None:
    spec = _spec(compat="13-0")
    assert spec.backend_build_args() == {
        "BASE_IMAGE": LOCAL_BASE_IMAGE,
        "BACKEND_SOURCE": "wheel",
        "CUDA_COMPAT": "13-0",
        "COMPAT_LIBDIR": "/usr/local/cuda/compat:",
    }
    assert spec.build_args() == {"BACKEND_IMAGE": spec.backend_tag, "FRONTEND_WHEEL": FE_WHEEL}
    assert _spec().backend_build_args()["COMPAT_LIBDIR"] == ""
    cell_text = spec.dockerfile.read_text()
    backend_text = spec.backend_dockerfile.read_text()
    assert "FRONTEND_WHEEL" not in backend_text  # a frontend pin cannot bust the backend layers
    assert all(arg not in cell_text for arg in ("BASE_IMAGE", "CUDA_COMPAT", "BACKEND_SOURCE"))


def test_libdir_backend_needs_an_existing_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"library folder .* not found"):
        ImageSpec.for_cell(CELL, frontend_wheel=FE_WHEEL, backend_libdir=tmp_path / "missing")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libcudnn.so.9").write_bytes(b"x")
    spec = ImageSpec.for_cell(CELL, frontend_wheel=FE_WHEEL, backend_libdir=tmp_path / "lib")
    assert spec.backend_source == "libdir"
    before = spec.tag
    (tmp_path / "lib" / "libcudnn.so.9").write_bytes(b"xx")  # other libraries, other tag
    assert spec.tag != before


@pytest.mark.parametrize(
    ("driver", "cuda", "expected"),
    [("580", "13.0", None), ("fc-610@580", "13.1", "13-1"), ("fc-590@580", "13", "13-0")],
)
def test_compat_only_for_forward_compat_drivers(
    driver: str, cuda: str, expected: str | None
) -> None:
    assert compat_for(replace(CELL, driver=driver, cuda=cuda)) == expected
