"""Host facts (GPUs, their arch, the driver) and which cells this host cannot run."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from validate.errors import ConfigError
from validate.model.order import version

if TYPE_CHECKING:
    from packaging.version import Version

    from validate.model.matrix import Cell

__all__ = [
    "CUDA_MIN_DRIVER",
    "DECLARED_GPUS_ENV",
    "GpuInfo",
    "HostFacts",
    "cell_skip_reason",
    "declared_gpus",
    "detect_host",
    "gpu_skip_reason",
    "parse_nvidia_smi",
    "python_version_of",
    "sm_of",
]

log = logging.getLogger(__name__)

#: Oldest driver per CUDA major (CUDA compatibility guide; cuDNN 9.17 support matrix, DOMAIN §3).
CUDA_MIN_DRIVER = {12: "525.60.13", 13: "580.65.06"}
_ANY = frozenset({"", "*", "any", "host"})
#: Tests only: a declared GPU topology in place of NVML's (`declared_gpus`).
DECLARED_GPUS_ENV = "CUDNN_MATRIX_DECLARED_GPUS"
_CUDA_RE = re.compile(r"CUDA Version:\s*([0-9.]+)")


@dataclass(frozen=True, kw_only=True)
class GpuInfo:
    name: str
    sm: str  # "sm90"
    memory_mib: int


@dataclass(frozen=True, kw_only=True)
class HostFacts:
    """What this machine offers: GPUs, driver version, the CUDA version the driver supports."""

    gpus: tuple[GpuInfo, ...] = ()
    driver_version: str | None = None  # "580.159.04"
    cuda_driver_version: str | None = None  # "13.0": the newest CUDA the driver runs
    source: str = "none"  # "nvml" | "nvidia-smi" | "none" | "manual"

    @property
    def has_driver(self) -> bool:
        return self.driver_version is not None

    @property
    def archs(self) -> frozenset[str]:
        return frozenset(gpu.sm for gpu in self.gpus)

    @property
    def has_gpu(self) -> bool:
        """A driver and at least one GPU: the GPU part of a case can run here."""
        return self.has_driver and bool(self.gpus)

    @property
    def arch(self) -> str | None:
        """The first GPU's arch ("sm90"), or None without a GPU."""
        return self.gpus[0].sm if self.gpus else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpus": [{"name": g.name, "sm": g.sm, "memory_mib": g.memory_mib} for g in self.gpus],
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "has_driver": self.has_driver,
            "source": self.source,
        }


def sm_of(compute_capability: str | tuple[int, int]) -> str:
    """'9.0' or (9, 0) -> 'sm90'; '10.0' -> 'sm100'; '12.1' -> 'sm121'."""
    if isinstance(compute_capability, tuple):
        major, minor = compute_capability
    else:
        major_s, _, minor_s = compute_capability.strip().partition(".")
        major, minor = int(major_s), int(minor_s or 0)
    return f"sm{major}{minor}"


def _decode(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _from_nvml() -> HostFacts | None:
    from validate.nvml import nvml

    pynvml = nvml()
    if pynvml is None:
        return None
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total // (1024 * 1024)
            gpus.append(
                GpuInfo(
                    name=_decode(pynvml.nvmlDeviceGetName(handle)),
                    sm=sm_of(pynvml.nvmlDeviceGetCudaComputeCapability(handle)),
                    memory_mib=int(memory),
                )
            )
        cuda = int(pynvml.nvmlSystemGetCudaDriverVersion_v2())
        return HostFacts(
            gpus=tuple(gpus),
            driver_version=_decode(pynvml.nvmlSystemGetDriverVersion()),
            cuda_driver_version=f"{cuda // 1000}.{cuda % 1000 // 10}",
            source="nvml",
        )
    except pynvml.NVMLError as exc:
        log.debug("NVML did not answer: %s", exc)
        return None


def parse_nvidia_smi(query_csv: str, banner: str = "") -> HostFacts:
    """Facts from `nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total` output."""
    gpus, driver = [], None
    for line in query_csv.strip().splitlines():
        fields = [part.strip() for part in line.split(",")]
        if len(fields) != 4:
            continue
        name, cap, driver, memory = fields
        gpus.append(GpuInfo(name=name, sm=sm_of(cap), memory_mib=int(memory.split()[0])))
    cuda = _CUDA_RE.search(banner)
    return HostFacts(
        gpus=tuple(gpus),
        driver_version=driver,
        cuda_driver_version=cuda.group(1) if cuda else None,
        source="nvidia-smi",
    )


def _from_nvidia_smi() -> HostFacts | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    query = "--query-gpu=name,compute_cap,driver_version,memory.total"
    try:
        proc = subprocess.run(
            [smi, query, "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        banner = subprocess.run([smi], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.debug("nvidia-smi failed: %s", exc)
        return None
    if proc.returncode != 0:
        log.debug("nvidia-smi exit %d: %s", proc.returncode, proc.stderr.strip())
        return None
    return parse_nvidia_smi(proc.stdout, banner.stdout)


def declared_gpus() -> list[tuple[str, int]] | None:
    """The GPU topology a test declares in DECLARED_GPUS_ENV, as (sm, free MiB) per GPU in host
    order, e.g. ``sm90:16384,sm90:8192``; None when it declares none (the NVML boundary is read).
    Only tests set it: this host has no GPU, and the ledger's placement is tested on 4 declared
    ones."""
    text = os.environ.get(DECLARED_GPUS_ENV, "").strip()
    if not text:
        return None
    out: list[tuple[str, int]] = []
    for part in text.split(","):
        sm, _, mib = part.strip().rpartition(":")
        try:
            out.append((sm or "sm90", int(mib)))
        except ValueError:
            msg = f"{DECLARED_GPUS_ENV}={text!r}: expected [smXY:]MIB,... (got {part!r})"
            raise ConfigError(msg) from None
    return out


def _declared() -> HostFacts | None:
    gpus = declared_gpus()
    if gpus is None:
        return None
    return HostFacts(
        gpus=tuple(
            GpuInfo(name=f"declared GPU {i}", sm=sm, memory_mib=mib)
            for i, (sm, mib) in enumerate(gpus)
        ),
        driver_version="580.65.06",
        cuda_driver_version="13.0",
        source="declared",
    )


def detect_host() -> HostFacts:
    """GPUs and driver via NVML (pynvml), else nvidia-smi, else a host with no driver (a test's
    declared topology, DECLARED_GPUS_ENV, before all)."""
    return _declared() or _from_nvml() or _from_nvidia_smi() or HostFacts()


def gpu_skip_reason(host: HostFacts) -> str | None:
    """Why a case's GPU part cannot run here at all ("no NVIDIA driver"), else None."""
    if not host.has_driver:
        return "no NVIDIA driver"
    if not host.gpus:
        return "no NVIDIA GPU on this host"
    return None


def _driver_ok(wanted: str, have: Version) -> bool:
    """'580' = that branch; '>=575' = a specifier; 'any' = whatever is installed."""
    if wanted.lower() in _ANY:
        return True
    if wanted[0].isdigit() and "." not in wanted:
        return have.major == int(wanted)
    # here, not at import: packaging.specifiers is ~5 ms of every command's start (`run` needs
    # it only for a cell's driver range)
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        spec = SpecifierSet(wanted if not wanted[0].isdigit() else f"=={wanted}")
    except InvalidSpecifier:
        return False
    return spec.contains(have, prereleases=True)


def cell_skip_reason(cell: Cell, host: HostFacts) -> str | None:
    """Why this host cannot run `cell`, or None.

    A host with no driver returns None: the cell still installs and checks its pins, and the
    GPU part of each case is skipped with `gpu_skip_reason` instead.
    """
    if not host.has_driver:
        return None
    arch = cell.arch.lower()
    if arch not in _ANY and arch not in host.archs:
        return f"no {arch} GPU on this host"
    assert host.driver_version is not None
    try:
        have = version(host.driver_version)
    except ValueError:  # InvalidVersion
        return None
    if not _driver_ok(cell.driver.strip(), have):
        return f"cell needs driver {cell.driver}, host has {host.driver_version}"
    try:
        cuda = version(cell.cuda)
    except ValueError:  # InvalidVersion
        return None
    floor = CUDA_MIN_DRIVER.get(cuda.major)
    if floor and have < version(floor):
        return f"CUDA {cell.cuda} needs driver >= {floor}, host has {host.driver_version}"
    if host.cuda_driver_version and version(host.cuda_driver_version).major < cuda.major:
        return f"CUDA {cell.cuda} is newer than the driver's CUDA {host.cuda_driver_version}"
    return None


def python_version_of(python: str) -> Version:
    """The version of an interpreter (the base python cells without a python value run on)."""
    if python == sys.executable:
        import platform  # only here: ~2 ms of every start

        return version(platform.python_version())
    code = "import platform; print(platform.python_version())"
    try:
        proc = subprocess.run(
            [python, "-c", code], capture_output=True, text=True, timeout=60, check=False
        )
        return version(proc.stdout.strip())
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:  # InvalidVersion
        msg = f"--base-python {python}: cannot ask it for its version ({exc})"
        raise ConfigError(msg) from exc
