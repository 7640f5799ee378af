"""Host facts parsing and which cells a host must skip.

This machine has no GPU, so the hosts with GPUs below are hand-built HostFacts values: the one
fake the project allows (labelled `_gpu_host`).
"""

from __future__ import annotations

import importlib.util
import shutil

import pytest

from validate.model.matrix import Cell
from validate.plan.host import (
    GpuInfo,
    HostFacts,
    cell_skip_reason,
    detect_host,
    gpu_skip_reason,
    parse_nvidia_smi,
    sm_of,
)

# Captured from an H200 host (nvidia-smi 580.159.04).
_SMI_QUERY = "NVIDIA H200, 9.0, 580.159.04, 143771\nNVIDIA H200, 9.0, 580.159.04, 143771\n"
_SMI_BANNER = (
    "| NVIDIA-SMI 580.159.04             Driver Version: 580.159.04     CUDA Version: 13.0     |"
)


def _gpu_host(sm: str = "sm90", driver: str = "580.159.04", cuda: str = "13.0") -> HostFacts:
    """FAKE GPU host: a hand-built HostFacts, since no GPU is present here."""
    gpu = GpuInfo(name="NVIDIA H200", sm=sm, memory_mib=143771)
    return HostFacts(gpus=(gpu,), driver_version=driver, cuda_driver_version=cuda, source="manual")


def _cell(arch: str = "sm90", driver: str = "580", cuda: str = "13.0") -> Cell:
    return Cell(cudnn="9.24.0.43", frontend="1.27.0", cuda=cuda, driver=driver, arch=arch)


@pytest.mark.parametrize(
    ("cap", "sm"), [("9.0", "sm90"), ("10.0", "sm100"), ("12.1", "sm121"), ((8, 6), "sm86")]
)
def test_sm_of(cap: str | tuple[int, int], sm: str) -> None:
    assert sm_of(cap) == sm


def test_parse_nvidia_smi() -> None:
    host = parse_nvidia_smi(_SMI_QUERY, _SMI_BANNER)
    assert host.gpus == (GpuInfo(name="NVIDIA H200", sm="sm90", memory_mib=143771),) * 2
    assert (host.driver_version, host.cuda_driver_version) == ("580.159.04", "13.0")
    assert host.has_driver
    assert host.archs == {"sm90"}


def test_this_machine_without_a_driver_reports_none() -> None:
    """Real detection: with neither NVML's library nor nvidia-smi there is no driver."""
    if shutil.which("nvidia-smi") or importlib.util.find_spec("pynvml"):
        pytest.skip("this host has nvidia-smi or pynvml; the no-driver path is not reachable")
    host = detect_host()
    assert not host.has_driver
    assert host.gpus == ()
    assert gpu_skip_reason(host) == "no NVIDIA driver"
    assert cell_skip_reason(_cell(arch="sm100"), host) is None  # pins still get installed
    assert host.to_dict()["has_driver"] is False


@pytest.mark.parametrize(
    ("cell", "host", "reason"),
    [
        (_cell(), _gpu_host(), None),
        (_cell(arch="sm100"), _gpu_host(), "no sm100 GPU on this host"),
        (_cell(driver="570"), _gpu_host(), "cell needs driver 570, host has 580.159.04"),
        (_cell(driver=">=575"), _gpu_host(), None),
        (_cell(driver=">=590"), _gpu_host(), "cell needs driver >=590, host has 580.159.04"),
        (_cell(driver="any"), _gpu_host(), None),
        (
            _cell(driver="570", cuda="13.0"),
            _gpu_host(driver="570.86.15", cuda="12.8"),
            "CUDA 13.0 needs driver >= 580.65.06, host has 570.86.15",
        ),
        (_cell(driver="570", cuda="12.8"), _gpu_host(driver="570.86.15", cuda="12.8"), None),
        (
            _cell(driver="580", cuda="13.0"),
            _gpu_host(driver="580.65.06", cuda="12.9"),
            "CUDA 13.0 is newer than the driver's CUDA 12.9",
        ),
    ],
)
def test_cell_skip_reason(cell: Cell, host: HostFacts, reason: str | None) -> None:
    assert cell_skip_reason(cell, host) == reason


def test_gpu_skip_reason_with_a_gpu() -> None:
    assert gpu_skip_reason(_gpu_host()) is None
    assert gpu_skip_reason(HostFacts(driver_version="580.159.04")) == "no NVIDIA GPU on this host"
