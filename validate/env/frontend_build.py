"""A frontend git checkout built into a wheel, without network where its pieces are on the host.

What the build needs, and each missing piece in one line, is decided first (`plan_build`,
env/frontend_plan.py); here the checkout is cloned, the plan's CMake toolchain file is written
(named by `CMAKE_TOOLCHAIN_FILE`), `pip wheel` runs, and a failed compile is read back for the
headers it missed. The plan's names are re-exported: `validate.env.frontend_build` stays the
one import for a frontend build.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shlex
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Final

from validate.env.frontend_plan import (
    CUDA_ROOTS,
    DLPACK_DIRS,
    BuildPlan,
    missing_requirements,
    plan_build,
)
from validate.env.progress import Activity, activity, ninja_line
from validate.env.streamed import Streamed, run_streamed
from validate.errors import EnvBuildError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from validate.env.sources import BackendSource, FrontendSource

__all__ = [
    "CUDA_ROOTS",
    "DLPACK_DIRS",
    "BuildPlan",
    "build_frontend_wheel",
    "compile_causes",
    "missing_requirements",
    "plan_build",
]

log = logging.getLogger(__name__)

_MISSING_HEADER_RE: Final = re.compile(
    r"^(?P<where>\S+?):(?P<line>\d+):\d+: fatal error: (?P<header>\S+): No such file or directory"
)
#: Lines of a failed `pip wheel` worth quoting: the cause sits mid-log, the traceback at the end.
_BUILD_CAUSE: Final = re.compile(r"CMake Error|fatal:|error:|Could not|not found", re.IGNORECASE)


def compile_causes(output: str, work: Path, plan: BuildPlan) -> list[str]:
    """Missing-header errors of a failed compile as one line each: the header, who includes it,
    where it was looked for, and the wheel that would bring it."""
    lines: list[str] = []
    for line in output.splitlines():
        match = _MISSING_HEADER_RE.search(line.strip())
        if match is None:
            continue
        header, where = match["header"], Path(match["where"])
        with_line = (
            f"{where.relative_to(work) if where.is_relative_to(work) else where}:{match['line']}"
        )
        looked = (
            ", ".join(str(p) for p in [*plan.cuda_include, *plan.include_dirs])
            or "no CUDA include folder"
        )
        hint = ""
        if header.startswith("nvrtc"):
            wheel = "nvidia-cuda-nvrtc" + (
                "" if (plan.cuda_major or 13) >= 13 else f"-cu{plan.cuda_major}"
            )
            hint = f"; put the {wheel} wheel for CUDA {plan.cuda_major or '?'} in the wheelhouse or install the toolkit's nvrtc headers"
        text = (
            f"CUDA header {header}: not found (included from {with_line}; looked in {looked}){hint}"
        )
        if text not in lines:
            lines.append(text)
    return lines


def _toolchain_file(plan: BuildPlan, folder: Path) -> Path | None:
    if not plan.toolchain:
        return None
    lines = list(plan.toolchain)
    if previous := os.environ.get("CMAKE_TOOLCHAIN_FILE"):  # the user's own comes first
        lines.insert(0, f'include("{previous}")')
    path = folder / "offline.cmake"
    path.write_text(
        "# written by cudnn-matrix: build the frontend with installed pieces\n"
        + "\n".join(lines)
        + "\n"
    )
    return path


def _run_logged(
    argv: Sequence[str],
    sink: Path,
    act: Activity,
    env: Mapping[str, str] | None = None,
    parse: Callable[[str, Activity], None] | None = None,
) -> Streamed:
    with sink.open("a", encoding="utf-8") as out:
        return run_streamed(argv, act, parse, env=env, log_file=out)


def build_frontend_wheel(
    source: FrontendSource,
    cache_dir: Path,
    *,
    python: str = sys.executable,
    wheelhouse: Path | None = None,
    backend: BackendSource | None = None,
) -> Path:
    """Build a git checkout's commit into a wheel once; later calls return the cached wheel.

    With a wheelhouse it builds without network (`pip wheel --no-index`, system dlpack); a
    missing piece is an EnvBuildError naming each one, before anything is compiled.
    """
    assert source.kind == "git"
    assert source.path is not None
    assert source.commit is not None
    target = cache_dir / "frontend-wheels" / source.commit
    wheels = sorted(target.glob("*.whl"))
    if wheels:
        return wheels[0]
    target.parent.mkdir(parents=True, exist_ok=True)
    build_log = target.parent / f"{source.commit}.log"
    build_log.write_text("")
    short = source.commit[:12]
    with (
        tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp,
        activity(f"frontend wheel {short}") as act,
    ):
        work, out = Path(tmp) / "src", Path(tmp) / "wheels"
        git_steps = [
            ["git", "clone", "--quiet", "--shared", "--no-checkout", str(source.path), str(work)],
            ["git", "-C", str(work), "checkout", "--quiet", source.commit],
            ["git", "-C", str(work), "submodule", "update", "--init", "--recursive", "--quiet"],
        ]
        for argv in git_steps:
            act.update(f"git {argv[3] if argv[1] == '-C' else argv[1]}")
            proc = _run_logged(argv, build_log, act)
            if proc.returncode != 0:
                tail = proc.tail(6)
                msg = f"building the frontend at {short} failed: {shlex.join(argv)}\n{tail}"
                raise EnvBuildError(msg, signalled=proc.returncode < 0)
        plan = plan_build(
            work, commit=source.commit, cache=target.parent, wheelhouse=wheelhouse, backend=backend
        )
        if plan.missing:
            raise EnvBuildError(plan.error(source.commit))
        env = {**os.environ, **plan.env}
        if toolchain := _toolchain_file(plan, Path(tmp)):
            env["CMAKE_TOOLCHAIN_FILE"] = str(toolchain)
        if plan.include_dirs:
            cpath = [str(p) for p in plan.include_dirs]
            env["CPATH"] = os.pathsep.join([*cpath, *filter(None, [os.environ.get("CPATH")])])
        argv = [python, "-m", "pip", "wheel", "-v", "--no-deps", "--disable-pip-version-check"]
        argv += [*plan.pip_args, "--wheel-dir", str(out), str(work)]
        log.info(
            "building frontend %s@%s into a wheel%s (log: %s)",
            source.path,
            short,
            f": {'; '.join(plan.notes)}" if plan.notes else "",
            build_log,
        )
        act.update("pip wheel")
        proc = _run_logged(argv, build_log, act, env, ninja_line)
        if proc.returncode != 0:
            output = proc.output
            if causes := compile_causes(output, work, plan):
                names = ", ".join(c.split(":", 1)[0] for c in causes)
                msg = "\n".join(
                    [f"building the frontend at {short} failed: missing {names}", *causes]
                )
                raise EnvBuildError(msg + f"\nfull log: {build_log}")
            lines = output.strip().splitlines()
            found = [ln.strip() for ln in lines if _BUILD_CAUSE.search(ln)][:6]
            tail = "\n".join([*found, *lines[-6:]])
            msg = f"building the frontend at {short} failed: {shlex.join(argv)}\n{tail}\nfull log: {build_log}"
            raise EnvBuildError(msg, signalled=proc.returncode < 0)
        built = sorted(out.glob("*.whl"))
        if not built:
            msg = f"pip wheel of {source.path}@{short} produced no wheel"
            raise EnvBuildError(msg)
        staged = target.with_name(
            f".{source.commit}.{hashlib.sha256(tmp.encode()).hexdigest()[:8]}"
        )
        staged.mkdir()
        shutil.move(str(built[0]), staged / built[0].name)
        (staged / "build.json").write_text(json.dumps({"notes": plan.notes}, indent=2) + "\n")
        try:
            staged.rename(target)
        except OSError:  # another process finished first: keep its wheel
            shutil.rmtree(staged, ignore_errors=True)
    return min(target.glob("*.whl"))
