"""What a case needs (backend floor, archs, GPU, SM, modules), as data; unmet -> a SKIP reason.

A skip reason also says what kind of skip it is (`SkipKind`, `skip_kind`), for the sign-off: a
skip for want of a GPU or driver, or of a module the case imports, leaves the case unproven; a
declared requirement the cell does not meet (backend floor, arch, SM) is expected.
"""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
from dataclasses import dataclass, field, replace
from functools import cache
from typing import TYPE_CHECKING, Any, Final

from validate._compat import StrEnum
from validate.datafile import Key, TomlErrors, read_toml
from validate.model.matrix import MATRIX_DIR
from validate.model.order import version

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from pathlib import Path

    from packaging.version import Version

__all__ = [
    "DEFAULT_CASES_TOML",
    "MISSING_MODULE_PREFIX",
    "NEEDS_GPU_TEXT",
    "NO_GPU_PREFIXES",
    "RequirementTable",
    "Requirements",
    "SkipKind",
    "check",
    "missing_modules",
    "no_gpu_skip",
    "skip_kind",
]

#: Requirements of the cudnn-frontend sample notebooks (DOMAIN.md §5).
DEFAULT_CASES_TOML: Final = MATRIX_DIR / "cases.toml"

#: How every skip reason for want of a GPU or a driver starts: `check` (needs_gpu), the cells of
#: an environment whose pins another cell checked (plan/host.py `gpu_skip_reason`, execute/local.py)
#: and a script's own GPU probe (execute/resources/cases/repro_fusion_uid.py `_gpu_state`, which
#: runs standalone and so spells them out; tests/unit/test_signoff_evidence.py keeps them in step).
NO_GPU_PREFIXES: Final = (
    "no NVIDIA driver",
    "no NVIDIA GPU",
    "no usable NVIDIA driver",
    "no CUDA device",
)
#: Output that says a process wanted a GPU or driver it did not find: the frontend's conftest
#: asserting `torch.cuda.is_available()`, the C++ samples' CUDA_CHECK/CUDNN_CHECK on a host
#: without a device or driver (DOMAIN.md §9, §11): cudaGetDevice's "CUDA driver version is
#: insufficient" and cudnnCreate's CUDNN_STATUS_NOT_INITIALIZED ("the CUDA Runtime API
#: initialization failed", what it returns on a host with no driver).
NEEDS_GPU_TEXT: Final = re.compile(
    r"torch\.cuda\.is_available|cuda\.is_available\(\)|no NVIDIA driver|NVIDIA driver on your"
    r"|no CUDA-capable device|cudaErrorNoDevice|CUDA_ERROR_NO_DEVICE|CUDA is not available"
    r"|libcuda\.so|needs? a GPU|driver version is insufficient|cudaErrorInsufficientDriver"
    r"|CUDNN_STATUS_NOT_INITIALIZED",
    re.IGNORECASE,
)
#: How a skip for a module missing from the case environment starts (`check`, imports).
MISSING_MODULE_PREFIX: Final = "needs module "


def no_gpu_skip(text: str, *, has_gpu: bool, what: str) -> str | None:
    """The skip reason of a case (a pytest module or suite that cannot collect, a C++ test case
    that failed) whose output says it wanted a GPU, on a host without one; None on a GPU host
    (nothing there says "no GPU": the failure stands) or where the output says nothing of it.
    The reason starts with a NO_GPU prefix, so the sign-off counts it as a GPU case not run
    (`skip_kind`, judge/signoff.py), whichever kind it came from."""
    if has_gpu or not NEEDS_GPU_TEXT.search(text):
        return None
    return f"{NO_GPU_PREFIXES[3]} on this host: needs a GPU: {what}"


class SkipKind(StrEnum):
    """What a skip says about the evidence (judge/signoff.py reads it)."""

    NO_GPU = "no_gpu"  # no GPU or driver here: the case's GPU part did not run
    MISSING_MODULE = "missing_module"  # the case environment lacks a module the case imports
    EXPECTED = "expected"  # a declared requirement unmet (backend, arch, SM), or the case said so


def skip_kind(reason: str) -> SkipKind:
    """The kind of a skip from its reason, which every writer starts with one of the prefixes
    above (results stored before the kinds existed carry the same reasons)."""
    if reason.startswith(NO_GPU_PREFIXES):
        return SkipKind.NO_GPU
    if reason.startswith(MISSING_MODULE_PREFIX):
        return SkipKind.MISSING_MODULE
    return SkipKind.EXPECTED


_KEYS: Final = frozenset(
    {"min_backend", "archs", "needs_gpu", "min_sm", "imports", "exclusive", "source"}
)


@dataclass(frozen=True, kw_only=True)
class Requirements:
    """Requirements of one case; the defaults require nothing."""

    min_backend: str | None = None  # e.g. "9.13" (cudnn.backend_version() floor)
    archs: tuple[str, ...] = ()  # allowed host archs, e.g. ("sm90", "sm100"); () = any
    needs_gpu: bool = False
    min_sm: str | None = None  # compute capability floor, e.g. "8.0"
    imports: tuple[str, ...] = ()  # top-level modules that must be importable in the case env
    exclusive: bool = False  # runs with no other case beside it on its GPU (execute/pool.py)
    source: str = ""  # where the requirement comes from

    def updated(self, data: Mapping[str, Any]) -> Requirements:
        """Copy with the keys of one TOML table applied."""
        changes: dict[str, Any] = {}
        for key, value in data.items():
            match key:
                case "archs" | "imports":
                    changes[key] = tuple(str(v) for v in value)
                case "needs_gpu" | "exclusive":
                    changes[key] = bool(value)
                case "min_backend" | "min_sm" | "source":
                    changes[key] = str(value)
        return replace(self, **changes)


@dataclass(frozen=True, kw_only=True)
class RequirementTable:
    """Defaults plus (file-name glob -> overrides) rows, applied in file order."""

    defaults: Requirements = field(default_factory=Requirements)
    rows: tuple[tuple[str, Mapping[str, Any]], ...] = ()

    def for_case(self, name: str) -> Requirements:
        req = self.defaults
        for pattern, data in self.rows:
            if fnmatch.fnmatch(name, pattern):
                req = req.updated(data)
        return req

    @classmethod
    def from_toml(cls, path: Path) -> RequirementTable:
        """Load and validate a cases.toml; every bad key or value is reported at once."""
        doc = read_toml(path, what="case requirements")
        data, errors = doc.data, doc.errors
        defaults = data.get("defaults", {})
        _validate(errors, Key.of("defaults"), defaults)
        rows = data.get("cases", {})
        if not isinstance(rows, dict):
            errors.add(Key.of("cases"), f'must be tables [cases."GLOB"], got {rows!r}')
            rows = {}
        for pattern, row in rows.items():
            _validate(errors, Key.of("cases", pattern), row)
        for key in sorted(set(data) - {"defaults", "cases"}):
            errors.add(Key.of(key), 'unknown table (expected [defaults] or [cases."GLOB"])')
        errors.raise_if_any()
        assert isinstance(defaults, dict)  # checked by _validate, which recorded an error if not
        return cls(defaults=Requirements().updated(defaults), rows=tuple(rows.items()))


def _validate(errors: TomlErrors, where: Key, table: object) -> None:
    if not isinstance(table, dict):
        errors.add(where, f"must be a table, got {table!r}")
        return
    for key, value in table.items():
        if key not in _KEYS:
            errors.add(where / key, f"unknown key (known: {', '.join(sorted(_KEYS))})")
        elif key in {"min_backend", "min_sm"} and _version(str(value)) is None:
            errors.add(where / key, f"{value!r} is not a version")
        elif key in {"archs", "imports"} and not isinstance(value, list):
            errors.add(where / key, f"must be a list, got {value!r}")
        elif key in {"needs_gpu", "exclusive"} and not isinstance(value, bool):
            errors.add(where / key, f"must be true or false, got {value!r}")


def _version(text: str) -> Version | None:
    try:
        return version(text)
    except ValueError:  # InvalidVersion
        return None


def _sm_of(arch: str) -> Version | None:
    digits = arch.lower().removeprefix("sm_").removeprefix("sm")
    if not digits.isdigit() or len(digits) < 2:
        return None
    return version(f"{digits[:-1]}.{digits[-1]}")


@cache
def _probe(python: str, modules: tuple[str, ...]) -> frozenset[str]:
    code = (
        "import importlib.util as u, json, sys\n"
        "print(json.dumps([m for m in sys.argv[1:] if u.find_spec(m) is None]))"
    )
    try:
        out = subprocess.run(
            [python, "-c", code, *modules], capture_output=True, text=True, timeout=60, check=True
        ).stdout
        return frozenset(json.loads(out.strip().splitlines()[-1]))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return frozenset(modules)


def missing_modules(python: Path, modules: Iterable[str]) -> frozenset[str]:
    """Modules not importable by `python` (one cached probe per interpreter and module set)."""
    wanted = tuple(sorted(set(modules)))
    return _probe(str(python), wanted) if wanted else frozenset()


def check(
    req: Requirements,
    *,
    has_gpu: bool,
    host_arch: str | None,
    backend_version: str | None,
    missing: frozenset[str] = frozenset(),
) -> str | None:
    """The SKIP reason for the first unmet requirement, or None when all are met or unknowable."""
    if req.needs_gpu and not has_gpu:
        return f"{NO_GPU_PREFIXES[0]}: case needs a GPU"
    if req.archs and host_arch is not None and host_arch not in req.archs:
        return f"arch {host_arch} not in {', '.join(req.archs)}"
    sm = _sm_of(host_arch) if host_arch else None
    if req.min_sm and sm is not None and sm < version(req.min_sm):
        return f"needs SM >= {req.min_sm}, host is {host_arch}"
    have = _version(backend_version) if backend_version else None
    if req.min_backend and have is not None and have < version(req.min_backend):
        return f"needs cuDNN backend >= {req.min_backend}, cell has {backend_version}"
    need = sorted(set(req.imports) & missing)
    if need:
        return f"{MISSING_MODULE_PREFIX}{', '.join(need)} (not importable in the case environment)"
    return None
