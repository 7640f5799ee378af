"""Environment facts captured inside the case process; stdlib only, cheap unless asked for more.

Runs under the CASE environment's Python (imported by run_notebook.py inside the kernel and by
run_script.py), and is also imported by the tool itself for GPU detection and the pin check.
Never imports torch just to capture: torch facts are read only when the case already imported it.
"""

from __future__ import annotations

import os
import sys

# No re, typing, json, pathlib or importlib at import: every script case loads this at exit
# (a case environment's site imports none of them; `re` alone is milliseconds).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

__all__ = [
    "capture",
    "detect_gpu",
    "loaded_cudnn_libs",
    "redact_env",
    "redact_url",
    "verify_pins",
    "write_capture",
]

#: A variable whose name holds one of these (any case) is kept with its value hidden. AUTH
#: covers *_AUTH, AUTHORIZATION and AUTH_TOKEN; KEY covers API keys (NGC_API_KEY) -- a path-like
#: *_KEY variable among the kept prefixes is hidden too, which costs a bug report nothing.
_SECRET = ("TOKEN", "PASSWORD", "PASSWD", "SECRET", "KEY", "CREDENTIAL", "AUTH", "COOKIE")
_ENV_PREFIXES = ("CUDA", "CUDNN", "LD_", "NVIDIA", "PYTHON", "PATH", "VIRTUAL_ENV", "CONDA")
_HIDDEN = "<redacted>"


def redact_url(value: str) -> str:
    """`value` with the user information of every URL in it hidden: scheme://user:pw@host ->
    scheme://<redacted>@host (a mirror URL with credentials, e.g. CUDA_REPO_URL). No `re`: this
    runs at every case's exit."""
    if "://" not in value or "@" not in value:
        return value
    out, rest = [], value
    while "://" in rest:
        head, rest = rest.split("://", 1)
        out.append(head + "://")
        end = len(rest)  # the authority ends at the first of / ? # or whitespace
        for stop in "/?# \t\n,;":
            at = rest.find(stop)
            if at != -1:
                end = min(end, at)
        userinfo = rest[:end].rfind("@")
        if userinfo > 0:
            out.append(_HIDDEN)
            rest = rest[userinfo:]
    out.append(rest)
    return "".join(out)


def _hide_urls(value: Any) -> Any:
    """Every string in a captured JSON-like value with URL credentials hidden."""
    if isinstance(value, str):
        return redact_url(value)
    if isinstance(value, dict):
        return {k: _hide_urls(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_hide_urls(v) for v in value]
    return value


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Relevant environment variables (by prefix) with credentials in URLs hidden, and every
    secret-named one (*TOKEN*, *PASSWD*, *KEY*, ...) with its value hidden."""
    out: dict[str, str] = {}
    for name, value in sorted(env.items()):
        upper = name.upper()
        if any(word in upper for word in _SECRET):
            out[name] = _HIDDEN  # any prefix: that it was set is a fact, its value is not
        elif name.startswith(_ENV_PREFIXES):
            out[name] = redact_url(value)
    return out


def _mapped_paths() -> list[str]:
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:  # noqa: PTH123
            text = fh.read()
    except OSError:
        return []
    seen: dict[str, None] = {}
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and parts[5].startswith("/"):
            seen.setdefault(parts[5].strip(), None)
    return list(seen)


def loaded_cudnn_libs(paths: list[str] | None = None) -> list[str]:
    """Paths of libcudnn*.so* mapped into this process (two copies can be mapped at once)."""
    return [p for p in (paths if paths is not None else _mapped_paths()) if "libcudnn" in p]


def _is_dispatcher(path: str) -> bool:
    return os.path.basename(path).startswith("libcudnn.so")  # noqa: PTH119 - no pathlib


def _dispatcher_versions(libs: list[str]) -> dict[str, int]:
    """cudnnGetVersion() of each libcudnn.so* already mapped here, by path (RTLD_NOLOAD: asking
    never loads a copy). Two copies can be mapped at once (DOMAIN.md §2)."""
    import ctypes

    out: dict[str, int] = {}
    for path in libs:
        if not _is_dispatcher(path):
            continue
        try:
            fn = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_LAZY).cudnnGetVersion
            fn.restype = ctypes.c_size_t
            out[path] = int(fn())
        except (OSError, AttributeError):
            continue
    return out


def _bound(facts: Mapping[str, Any]) -> dict[str, str]:
    """Which mapped copy each consumer bound to: the frontend (its backend_version()) and torch
    (torch.backends.cudnn.version()), matched to the mapped dispatchers by their version."""
    versions: Mapping[str, int] = facts.get("cudnn_lib_versions") or {}
    out: dict[str, str] = {}
    for consumer, key in (("frontend", "backend_version"), ("torch", "torch_cudnn_version")):
        got = facts.get(key)
        if not isinstance(got, int):
            continue
        paths = [p for p, v in versions.items() if v == got]
        out[consumer] = f"{got} from {' or '.join(paths) if paths else 'no mapped libcudnn.so'}"
    return out


def _cudnn_facts() -> dict[str, Any]:
    import importlib.util

    if "cudnn" not in sys.modules and importlib.util.find_spec("cudnn") is None:
        return {}
    facts: dict[str, Any] = {}
    try:
        import cudnn

        facts["frontend_version"] = getattr(cudnn, "__version__", None)
        facts["backend_version"] = int(cudnn.backend_version())
    except Exception as exc:  # noqa: BLE001 - any failure here is itself a fact to report
        facts["backend_error"] = f"{type(exc).__name__}: {exc}"
    return facts


def _torch_facts() -> dict[str, Any]:
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    facts: dict[str, Any] = {"torch_version": getattr(torch, "__version__", None)}
    try:
        facts["torch_cudnn_version"] = torch.backends.cudnn.version()
        facts["torch_cuda_version"] = torch.version.cuda
    except Exception as exc:  # noqa: BLE001
        facts["torch_error"] = f"{type(exc).__name__}: {exc}"
    return facts


def _cuda_runtime_version(paths: list[str]) -> str | None:
    import ctypes  # imported here: most of a tiny case's capture cost is imports

    for path in paths:
        if "libcudart.so" in path:
            try:
                fn = ctypes.CDLL(path).cudaRuntimeGetVersion
                value = ctypes.c_int(0)
                if fn(ctypes.byref(value)) == 0:
                    return f"{value.value // 1000}.{(value.value % 1000) // 10}"
            except (OSError, AttributeError):
                continue
    torch = sys.modules.get("torch")
    return getattr(getattr(torch, "version", None), "cuda", None) if torch else None


def _nvml_gpus() -> list[dict[str, str]] | None:
    import importlib.util

    if importlib.util.find_spec("pynvml") is None:
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver: fall back / report none
        return None
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            name = pynvml.nvmlDeviceGetName(handle)
            gpus.append(
                {
                    "name": name.decode() if isinstance(name, bytes) else str(name),
                    "compute_capability": f"{major}.{minor}",
                    "driver": driver.decode() if isinstance(driver, bytes) else str(driver),
                }
            )
        return gpus
    finally:
        pynvml.nvmlShutdown()


def _smi_gpus() -> list[dict[str, str]]:
    import shutil
    import subprocess

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    query = "--query-gpu=name,compute_cap,driver_version"
    try:
        out = subprocess.run(
            [smi, query, "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        name, cc, driver = (part.strip() for part in ([*line.split(","), "", ""])[:3])
        gpus.append({"name": name, "compute_capability": cc, "driver": driver})
    return gpus


def detect_gpu() -> list[dict[str, str]]:
    """GPUs visible here (name, compute capability, driver): NVML first, else nvidia-smi."""
    gpus = _nvml_gpus()
    return gpus if gpus is not None else _smi_gpus()


def _host_compiler() -> str:
    """`gcc (Debian 12.2.0-14) 12.2.0`-style first line of the C++ compiler on PATH, if any."""
    import shutil
    import subprocess

    for name in ("c++", "g++", "clang++"):
        exe = shutil.which(name)
        if exe is None:
            continue
        try:
            out = subprocess.run(
                [exe, "--version"], capture_output=True, text=True, timeout=10, check=False
            ).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        if out.strip():
            return out.strip().splitlines()[0]
    import platform

    return f"none on PATH (Python built with {platform.python_compiler()})"


def _os_name() -> str:
    """Kernel and distribution, from os.uname() and /etc/os-release (no `platform` import:
    it is the largest part of a tiny case's capture cost)."""
    distro = ""
    for release in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            with open(release, encoding="utf-8") as fh:  # noqa: PTH123 - no pathlib
                text = fh.read()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("PRETTY_NAME="):
                distro = line.split("=", 1)[1].strip().strip('"')
        break
    uname = os.uname()
    return f"{uname.sysname} {uname.release} {uname.machine} {distro}".strip()


def capture(*, in_case: bool = True) -> dict[str, Any]:
    """Collect the environment facts; `in_case=False` skips cudnn import (host-side fallback)."""
    paths = _mapped_paths()
    facts: dict[str, Any] = {"captured_in": "case" if in_case else "host"}
    if in_case:
        facts.update(_cudnn_facts())
        paths = _mapped_paths()  # importing cudnn may have mapped libcudnn
    facts.update(_torch_facts())
    if "torch_cudnn_version" in facts:  # asking torch may have loaded its copy
        paths = _mapped_paths()
    facts["cudnn_libs"] = loaded_cudnn_libs(paths)
    if in_case:
        facts["cudnn_lib_versions"] = _dispatcher_versions(facts["cudnn_libs"])
        facts["bound"] = _bound(facts)
    if in_case or "torch" in sys.modules or any("libcuda" in p for p in paths):
        facts["cuda_runtime"] = _cuda_runtime_version(paths)
        facts["gpus"] = detect_gpu()
    else:  # a case that loaded no CUDA library: skip the ctypes/NVML probes (per-case overhead)
        facts["cuda_runtime"] = facts["gpus"] = "not captured: the case loaded no CUDA library"
    if in_case:  # the bug template asks for the host compiler (what would build extensions)
        facts["compiler"] = _host_compiler()
    facts["python"] = ".".join(str(part) for part in sys.version_info[:3])
    facts["python_executable"] = sys.executable
    facts["os"] = _os_name()
    facts["env"] = redact_env(os.environ)
    # a URL with credentials anywhere else (a library's error text, a path)
    return {name: _hide_urls(value) for name, value in facts.items()}


def write_capture(path: str, *, in_case: bool = True) -> None:
    """Capture and write JSON to `path` (called from inside the kernel after the notebook)."""
    import json

    with open(path, "w", encoding="utf-8") as fh:  # noqa: PTH123 - no pathlib
        json.dump(capture(in_case=in_case), fh, default=str)


def _version_tuple(text: str) -> tuple[int, ...]:
    import re

    return tuple(int(p) for p in re.findall(r"\d+", text))


def _backend_string(number: int) -> str:
    return f"{number // 10000}.{(number % 10000) // 100}.{number % 100}"


def _lib_name(path: str) -> str:
    """'/x/libcudnn_ops.so.9.14.0' -> 'libcudnn_ops'."""
    return os.path.basename(path).split(".so", 1)[0]  # noqa: PTH119 - no pathlib


def _file_version(path: str, captured: Mapping[str, Any]) -> str:
    """The version a library file carries in its name (libcudnn_ops.so.9.14.0 -> 9.14.0), else
    what the captured cudnnGetVersion() of that dispatcher said, else 'version unknown'."""
    name = os.path.basename(path)  # noqa: PTH119 - no pathlib
    tail = name.split(".so", 1)[1] if ".so" in name else ""
    parts = [p for p in tail.split(".") if p]
    if len(parts) >= 3 and all(p.isdigit() for p in parts):
        return ".".join(parts)
    number = (captured.get("cudnn_lib_versions") or {}).get(path)
    return _backend_string(int(number)) if isinstance(number, int) else "version unknown"


def _all_bound_to(captured: Mapping[str, Any], want_backend: str) -> bool:
    """Whether every consumer recorded in `bound` (frontend, torch) reports the pinned version."""
    bound = captured.get("bound") or {}
    if not isinstance(bound, dict) or not bound:
        return False
    for text in bound.values():
        head = str(text).split()[0] if str(text).split() else ""
        if not head.isdigit():
            return False
        if _version_tuple(_backend_string(int(head)))[:3] != _version_tuple(want_backend)[:3]:
            return False
    return True


def verify_pins(captured: Mapping[str, Any], expected: Mapping[str, str | None]) -> str | None:
    """None when the loaded cuDNN matches `expected` (backend, backend_dir, frontend), else why not.

    `expected["backend"]` is "9.24.0" or "9.24.0.43" (the build number is not visible at run time).
    With `backend_dir`, every mapped libcudnn*.so* (the dispatcher and each sub-library: _graph,
    _heuristic, _engines_*, _ops, _cnn, _adv, _ext) must come from that folder: a sub-library
    from elsewhere (a system libcudnn_ops.so.9.14.0 next to a 9.25 dispatcher) or a second
    dispatcher (torch's own copy) is not the pinned backend, whatever backend_version() says.
    """
    want_backend = expected.get("backend")
    want_dir = expected.get("backend_dir")
    want_frontend = expected.get("frontend")
    libs = [str(p) for p in captured.get("cudnn_libs", ())]
    main_lib = next((p for p in libs if _is_dispatcher(p)), None)
    where = main_lib or "nowhere"
    if want_backend:
        got = captured.get("backend_version")
        if got is None:
            why = captured.get("backend_error", "cudnn not importable")
            return f"pin not honoured: no backend loaded ({why}), expected {want_backend}"
        got_s = _backend_string(int(got))
        if _version_tuple(got_s)[:3] != _version_tuple(want_backend)[:3]:
            return f"pin not honoured: loaded {got_s} from {where}, expected {want_backend}"
    if want_dir:
        from pathlib import Path  # the tool's side (the case's capture never needs it)

        want = Path(want_dir).resolve()
        strays = [
            p
            for p in libs
            if Path(p).name.startswith("libcudnn") and Path(p).resolve().parent != want
        ]
        pinned_mapped = any(_is_dispatcher(p) and Path(p).resolve().parent == want for p in libs)
        if pinned_mapped and want_backend and _all_bound_to(captured, want_backend):
            # a second dispatcher file mapped (torch opens its own by full path) while every
            # consumer's symbols resolve to the preloaded pinned one: the pin holds; a sub-library
            # from elsewhere never does (its code would run)
            strays = [p for p in strays if not _is_dispatcher(p)]
        if strays:
            shown = "; ".join(
                f"{_lib_name(p)} from {p}, {_file_version(p, captured)}" for p in strays
            )
            return f"pin not honoured ({shown}); the cell's backend is {want}"
        if not any(_is_dispatcher(p) for p in libs):
            return f"pin not honoured: no libcudnn.so mapped, expected one from {want}"
    if want_frontend:
        got_fe = captured.get("frontend_version")
        if got_fe is None or _version_tuple(str(got_fe))[:3] != _version_tuple(want_frontend)[:3]:
            return f"pin not honoured: loaded frontend {got_fe}, expected {want_frontend}"
    return None
