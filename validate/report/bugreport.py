"""A Markdown bug report per unexpected failure, following the cuDNN frontend issue template."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from validate.execute.cases.kinds import kind_for_result
from validate.model.axes import AXES
from validate.model.outcome import policy
from validate.report.model import cell_label
from validate.textsafe import display, redact

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from validate.model.results import CaseResult
    from validate.report.model import StoredResult

__all__ = [
    "bug_report",
    "environment_rows",
    "fence",
    "file_slug",
    "reproduce_command",
    "write_bug_reports",
]

_LOG_LINES = 40
#: Environment facts as the runner may name them; the first key present wins.
_ENV_KEYS: Mapping[str, tuple[str, ...]] = {
    "frontend": ("frontend_version", "cudnn_frontend", "frontend"),
    "backend": ("backend_version", "backend_version_string", "cudnn_backend", "backend"),
    "libcudnn": ("libcudnn", "cudnn_libs", "libcudnn_paths", "libcudnn_loaded", "loaded_libraries"),
    "gpu": ("gpu_name", "gpu", "gpus"),
    "cc": ("compute_capability", "cc", "gpu_cc"),
    "cuda": ("cuda_runtime", "cuda_runtime_version", "cuda_version", "cuda"),
    "driver": ("driver", "driver_version", "nvidia_driver"),
    "compiler": ("compiler", "host_compiler", "cxx", "gcc"),
    "python": ("python", "python_version"),
    "os": ("os", "os_release", "platform"),
    "torch": ("torch", "torch_version"),
}


def _env(result: CaseResult, fact: str) -> str:
    env: Mapping[str, Any] = result.env
    gpus = env.get("gpus")
    if (
        fact in ("gpu", "cc", "driver")
        and isinstance(gpus, list)
        and gpus
        and isinstance(gpus[0], dict)
    ):
        env = {**gpus[0], **env}  # the runner records GPUs as a list of {name, cc, driver, ...}
        if fact == "gpu":
            return str(gpus[0].get("name", ""))
    for key in _ENV_KEYS[fact]:
        value = env.get(key)
        if value in (None, "", [], {}):
            continue
        if isinstance(value, (list, tuple)):
            main = [str(v) for v in value if "/libcudnn.so" in str(v)] or [str(value[0])]
            more = len(value) - len(main)
            return ", ".join(main) + (f" (+{more} more)" if more > 0 else "")
        return str(value)
    return ""


def _pin_only(result: CaseResult, axis: str) -> str:
    pin = result.cell.get(axis)
    return f"{pin} (the cell's pin; not captured in the case)" if pin else ""


def _backend(result: CaseResult) -> str:
    """The pinned backend, plus what cudnn.backend_version() returned in the case when captured."""
    pin = str(result.cell.get("cudnn", ""))
    seen = _env(result, "backend")
    if not seen or seen == pin:
        return pin or seen
    return f"{pin} (cudnn.backend_version() = {seen})" if pin else seen


def reproduce_command(result: CaseResult, meta: Mapping[str, Any] | None = None) -> str:
    """The exact one-cell, one-case `cudnn-matrix validate` command for a result.

    `meta` is the run's run.json: an `--env current` run is reproduced the same way. A case that is
    one variant of a script (its name is not the file name) is selected with `--case NAME`.
    """
    argv = ["cudnn-matrix", "validate"]
    for axis in AXES:
        if result.cell.get(axis):
            argv += [f"--{axis}", str(result.cell[axis])]
    env_mode = (meta or {}).get("env_mode")
    if env_mode and env_mode != "isolated":
        argv += ["--env", str(env_mode)]
    path = result.case_path or result.case.split("::")[0]
    if Path(path).name != result.case:  # a variant from a case manifest: pass its folder
        path = str(Path(path).parent)
    argv += ["--cases", path, "--case", result.case]
    return shlex.join(argv)


def _tail(path: Path | None, lines: int = _LOG_LINES) -> str:
    if path is None:
        return ""
    text = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return display(redact("\n".join(text[-lines:])))  # a case's log: its secrets, its escapes


def fence(text: str, lang: str = "text") -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}{lang}\n{text.rstrip()}\n{fence}"


def _describe(result: CaseResult, baseline: CaseResult | None) -> list[str]:
    what = policy(result.outcome).verb
    lines = [
        (
            f"`{result.case}` {what} with cuDNN backend {result.cell.get('cudnn', '?')} and frontend "
            f"{result.cell.get('frontend', '?')} on {result.cell.get('arch', '?')}."
        )
    ]
    lines.append("")
    lines.append(
        f"- outcome: **{result.outcome}**" + (f" ({result.signal})" if result.signal else "")
    )
    if result.reason:
        lines.append(f"- reason: {result.reason}")
    if result.exception:
        exc = result.exception
        lines.append(
            f"- exception: `{exc.get('ename', '')}: {exc.get('evalue', '')}`"
            + (f" in cell {exc['cell_index']}" if exc.get("cell_index") is not None else "")
        )
    if result.exit_code is not None:
        lines.append(f"- exit code: {result.exit_code}")
    if result.attempts:
        lines.append(f"- attempts: {', '.join(result.attempts)}")
    if baseline is not None:
        lines.append(f"- baseline: **{baseline.outcome}** with [{cell_label(baseline)}]")
    if result.ki_note:
        lines.append(f"- known-issue check: {result.ki_note}")
    return lines


def environment_rows(result: CaseResult) -> list[tuple[str, str]]:
    """The issue form's "System Environment" facts of one result, as (name, value; '' where
    not captured): what the case captured, else the cell's pin, said to be one."""
    return [
        (
            "cudnn_frontend version",
            _env(result, "frontend") or str(result.cell.get("frontend", "")),
        ),
        ("cudnn_backend version", _backend(result)),
        ("libcudnn loaded from", _env(result, "libcudnn")),
        (
            "GPU arch",
            f"{result.cell.get('arch', '?')}"
            + (
                f" ({_env(result, 'gpu')}, compute capability {_env(result, 'cc')})"
                if _env(result, "gpu")
                else ""
            ),
        ),
        ("cuda runtime version", _env(result, "cuda") or _pin_only(result, "cuda")),
        ("cuda driver version", _env(result, "driver") or _pin_only(result, "driver")),
        ("host compiler", _env(result, "compiler") or "not captured"),
        ("OS", _env(result, "os")),
        ("Python", _env(result, "python")),
        ("torch", _env(result, "torch")),
    ]


def bug_report(item: StoredResult, baseline: CaseResult | None = None) -> str:
    """Markdown for one unexpected failure: the frontend issue template filled from the evidence."""
    r = item.result
    env_rows = environment_rows(r)
    out = [f"# [cudnn-matrix] {r.case}: {r.outcome} with cuDNN {r.cell.get('cudnn', '?')}", ""]
    out += ["**Describe the bug**", "", *_describe(r, baseline), ""]
    out += ["**Expected behavior**", "", policy(r.outcome).expected + ".", ""]
    out += ["**System Environment (please complete the following information):**", ""]
    out += [f"- {name}: {value or 'not captured'}" for name, value in env_rows]
    out += ["", "**API logs**", ""]
    for name, label in (("frontend", "Frontend API log"), ("backend", "Backend API log")):
        path = item.resolve(r.api_logs.get(name, ""))
        recorded = r.api_logs.get(name, "")
        if path is None:
            out += [
                f"{label}: not captured"
                + (f" (recorded path `{recorded}` not found)" if recorded else ""),
                "",
            ]
            continue
        out += [f"{label} (last {_LOG_LINES} lines of `{path}`):", "", fence(_tail(path)), ""]
    out += ["**To Reproduce**", "", "Steps to reproduce the behavior:", ""]
    out += [
        "1. Run exactly this cell and case (the tool pins backend and frontend and captures the API logs):",
        "",
    ]
    out += [fence(reproduce_command(r, item.run.meta), "sh"), ""]
    out += ["2. Or by hand in an environment with those pins:", ""]
    out += [
        fence(
            "export CUDNN_FRONTEND_LOG_INFO=1 CUDNN_FRONTEND_LOG_FILE=fe.log\n"
            "export CUDNN_LOGLEVEL_DBG=3 CUDNN_LOGDEST_DBG=be.log\n"
            + kind_for_result(r.case_path, r.case).repro_line(r.case_path, r.case),
            "sh",
        ),
        "",
    ]
    out += ["**Additional context**", ""]
    out += [
        f"- cell: {cell_label(r)} (id `{r.cell_id}`)",
        f"- run: `{r.run_id or item.run.run_id}` in `{item.run.path}`",
    ]
    if r.started_at:
        out.append(f"- started: {r.started_at}, duration {r.duration_s:.1f}s")
    log = item.resolve(r.log_path)
    if log is not None:
        out.append(f"- full output log: `{log}`")
    tail = r.tail or _tail(log, 20)
    if tail:
        out += ["", "Output tail:", "", fence(tail)]
    return "\n".join(out).rstrip() + "\n"


def file_slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:80]


def write_bug_reports(
    items: Iterable[tuple[StoredResult, CaseResult | None]], directory: Path
) -> list[Path]:
    """Write one Markdown file per (result, baseline result or None) into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for item, baseline in items:
        r = item.result
        name = f"{file_slug(r.cell_id or 'cell')}__{file_slug(r.case)}.md"
        path = directory / name
        path.write_text(bug_report(item, baseline), encoding="utf-8")
        written.append(path)
    return written
