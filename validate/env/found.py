"""What an interpreter offers `run`: pytest, and the cell it is (issue 36, item 5).

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
from typing import TYPE_CHECKING, Final

from validate.env.sources import decode_backend_version, same_backend

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from validate.plan.host import HostFacts

__all__ = ["UNKNOWN", "FoundCell", "find_cell"]

UNKNOWN: Final = "unknown"
_NONE: Final = "none"
#: Run by the interpreter: stdlib only, nothing printed but the last JSON line.
_PROBE: Final = r"""
import importlib.metadata as md, importlib.util, json, re
out = {"pytest": importlib.util.find_spec("pytest") is not None}
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
    return FoundCell(has_pytest=data.get("pytest") is True, pins=pins, notes=notes)


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
