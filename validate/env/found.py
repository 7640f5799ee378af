"""What an interpreter offers `run`: pytest, its cuDNN wheel's folder, and the cell it is (issue
36, item 5).

`run` takes an environment as it is, so its cell is not declared but found: the frontend and the
backend it loads, the CUDA they were built for, asked of the interpreter in one child process;
the driver and the arch from the host. A value that cannot be found is the word `unknown` (and
`none` where the host has no driver or no GPU), never left out: a report then shows what is
missing instead of `?`.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from validate.env.sources import decode_backend_version, same_backend

if TYPE_CHECKING:
    from collections.abc import Mapping

    from validate.plan.host import HostFacts

__all__ = ["UNKNOWN", "FoundCell", "find_cell"]

UNKNOWN: Final = "unknown"
_NONE: Final = "none"
#: Run by the interpreter: stdlib only, nothing printed but the last JSON line.
_PROBE: Final = r"""
import importlib.metadata as md, importlib.util, json, os, re
out = {"pytest": importlib.util.find_spec("pytest") is not None}
try:
    spec = importlib.util.find_spec("nvidia.cudnn")
except BaseException:
    spec = None
for folder in (spec.submodule_search_locations or []) if spec is not None else []:
    if os.path.isfile(os.path.join(folder, "lib", "libcudnn.so.9")):
        out["cudnn_lib"] = os.path.join(folder, "lib")
        break
dists = {}
for d in md.distributions():
    name = (d.metadata["Name"] or "").lower().replace("_", "-")
    dists.setdefault(name, d.version)
out["wheels"] = {n: v for n, v in dists.items() if re.match(r"nvidia-(cudnn|cuda-runtime)-cu\d+$", n)}
try:
    import cudnn
except BaseException as exc:
    out["why"] = f"cudnn not importable: {type(exc).__name__}: {exc}"[:200]
else:
    out["frontend"] = str(getattr(cudnn, "__version__", "") or "")
    try:
        out["backend"] = int(cudnn.backend_version())
    except BaseException as exc:
        out["why"] = f"no backend loaded: {type(exc).__name__}: {exc}"[:200]
print(json.dumps(out))
"""


@dataclass(frozen=True, kw_only=True)
class FoundCell:
    """The interpreter's pytest and its cell's pins (`unknown` where not found) and why not."""

    has_pytest: bool
    pins: Mapping[str, str] = field(default_factory=dict)
    notes: Mapping[str, str] = field(default_factory=dict)  # axis -> why it is unknown
    #: The backend wheel's library folder (`nvidia/cudnn/lib`), what a C++ build compiles and
    #: links against (`run --cpp`); None where the interpreter has no cuDNN wheel.
    backend_dir: Path | None = None
    backend_wheel: str | None = None  # that wheel's version, e.g. 9.13.0.50


def find_cell(python: Path, host: HostFacts, timeout: float = 120) -> FoundCell:
    """Ask `python` what it has; the driver and the arch come from `host`."""
    data: dict[str, object] = {}
    why = ""
    try:
        proc = subprocess.run(
            [str(python), "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        why = f"{python} could not be asked: {exc}"
    else:
        try:
            data = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            why = f"{python} could not be asked: {tail[0]}"
    wheels = data.get("wheels")
    wheels = wheels if isinstance(wheels, dict) else {}
    why = why or str(data.get("why") or "")
    notes: dict[str, str] = {}
    pins = {
        "cudnn": _backend(data.get("backend"), wheels),
        "frontend": str(data.get("frontend") or UNKNOWN),
        "cuda": _cuda(wheels),
        "driver": host.driver_version or _NONE,
        "arch": host.arch or _NONE,
    }
    if pins["cudnn"] == UNKNOWN:
        notes["cudnn"] = why or "no backend loaded"
    if pins["frontend"] == UNKNOWN:
        notes["frontend"] = why or "cudnn.__version__ not set"
    if pins["cuda"] == UNKNOWN:
        notes["cuda"] = "no nvidia-cuda-runtime or nvidia-cudnn-cuNN wheel installed"
    lib = data.get("cudnn_lib")
    wheel = next((v for n, v in wheels.items() if n.startswith("nvidia-cudnn-cu")), None)
    return FoundCell(
        has_pytest=data.get("pytest") is True,
        pins=pins,
        notes=notes,
        backend_dir=Path(lib) if isinstance(lib, str) else None,
        backend_wheel=wheel,
    )


def _backend(loaded: object, wheels: Mapping[str, str]) -> str:
    """The loaded backend: the installed wheel's full version when it is the one loaded."""
    if not isinstance(loaded, int):
        return UNKNOWN
    for name, version in wheels.items():
        if name.startswith("nvidia-cudnn-cu") and same_backend(version, loaded):
            return version
    return decode_backend_version(loaded)


def _cuda(wheels: Mapping[str, str]) -> str:
    """The CUDA the wheels are built for: the runtime wheel's major.minor, else the cuDNN
    wheel's major (`nvidia-cudnn-cu13`), else unknown."""
    for name, version in wheels.items():
        if name.startswith("nvidia-cuda-runtime-cu"):
            return ".".join(version.split(".")[:2])
    for name in wheels:
        if name.startswith("nvidia-cudnn-cu"):
            return name.removeprefix("nvidia-cudnn-cu")
    return UNKNOWN
