"""The tool's one NVML session (validate/nvml.py), over a stand-in `pynvml` (no GPU here): host
detection, the slot bound and the GPU sampler initialise NVML once between them, and a host
whose NVML does not answer falls back to nvidia-smi."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from validate import nvml as nvml_module
from validate.execute import slots
from validate.plan.host import detect_host

if TYPE_CHECKING:
    from pathlib import Path


@dataclass
class _Memory:
    total: int
    free: int


class _NVMLError(Exception):
    pass


def _fake_pynvml(*, answers: bool = True) -> types.ModuleType:
    """A pynvml with one 140 GiB SM 9.0 GPU (80 GiB free), counting the nvmlInit calls."""
    fake = types.ModuleType("pynvml")
    fake.inits = 0  # type: ignore[attr-defined]
    fake.NVMLError = _NVMLError  # type: ignore[attr-defined]

    def init() -> None:
        fake.inits += 1  # type: ignore[attr-defined]
        if not answers:
            msg = "Driver Not Loaded"
            raise _NVMLError(msg)

    def shutdown() -> None:  # nobody should call it: the session stays open
        msg = "nvmlShutdown called"
        raise AssertionError(msg)

    gib = 1 << 30
    calls = {
        "nvmlInit": init,
        "nvmlShutdown": shutdown,
        "nvmlDeviceGetCount": lambda: 1,
        "nvmlDeviceGetHandleByIndex": lambda i: f"gpu{i}",
        "nvmlDeviceGetMemoryInfo": lambda _h: _Memory(total=140 * gib, free=80 * gib),
        "nvmlDeviceGetName": lambda _h: b"NVIDIA H200",
        "nvmlDeviceGetCudaComputeCapability": lambda _h: (9, 0),
        "nvmlSystemGetCudaDriverVersion_v2": lambda: 13000,
        "nvmlSystemGetDriverVersion": lambda: "580.159.04",
        "nvmlDeviceGetComputeRunningProcesses": lambda _h: [],
    }
    for name, fn in calls.items():
        setattr(fake, name, fn)
    return fake


@pytest.fixture
def fresh_session(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvml_module, "_SESSION", [])


@pytest.mark.usefixtures("fresh_session")
def test_host_detection_slot_bound_and_sampler_share_one_init(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = _fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    host = detect_host()
    assert host.source == "nvml"
    assert host.driver_version == "580.159.04"
    assert [(g.name, g.sm, g.memory_mib) for g in host.gpus] == [("NVIDIA H200", "sm90", 143360)]
    assert slots.free_gpu_mib() == [81920]
    sampler = slots.UsageSampler(dict, interval_s=0.01).start()
    assert sampler.active
    sampler.stop()
    assert fake.inits == 1


@pytest.mark.usefixtures("fresh_session")
def test_nvml_that_does_not_answer_is_tried_once_and_smi_answers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = _fake_pynvml(answers=False)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\nprintf "81000\\n"\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    assert nvml_module.nvml() is None
    assert slots.free_gpu_mib() == [81000]  # the nvidia-smi path
    assert detect_host().source != "nvml"
    assert fake.inits == 1
