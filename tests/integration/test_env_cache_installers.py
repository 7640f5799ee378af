"""One environment cache for both installers (issue #30 item 4): the tool run the nox way (its own
venv, uv) and the pip way (another venv, pip) over one CPython reuse each other's environments.

Each "tool" is a venv of its own, as nox's session venv and a user's `pip install` venv are: its
interpreter path differs, its base interpreter is this one. The installed tool and this
interpreter's packages reach it through a .pth line (tests/usercli.py `tool_venv`). The environments hold the tooling
and a frontend wheel, installed offline from the shared wheelhouse; the backend is left as it is.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
from usercli import tool_venv

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow

_PY = f"cp{sys.version_info.major}{sys.version_info.minor}"

#: Ensures one environment with the given installer; prints what it got as one JSON line.
_SCRIPT = """
import json, sys
from pathlib import Path
from validate.env.sources import parse_backend_source, parse_frontend_source
from validate.env.venvs import EnvSpec, ensure_env, read_manifest

cache, frontend_wheel, installer = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
spec = EnvSpec(
    backend=parse_backend_source("current"), frontend=parse_frontend_source(str(frontend_wheel))
)
handle = ensure_env(spec, cache, wheelhouse=frontend_wheel.parent, installer=installer)
print(json.dumps({
    "tool": sys.executable,
    "root": str(handle.root),
    "python": str(handle.python),
    "reused": handle.reused,
    "built_by": read_manifest(handle.root)["installer"],
}))
"""


def _ensure(tool: Path, cache: Path, frontend: Path, installer: str) -> dict[str, object]:
    env = {**os.environ, "CI": "true", "PYTHONPATH": ""}
    argv = [str(tool), "-c", _SCRIPT, str(cache), str(frontend), installer]
    proc = subprocess.run(
        argv, capture_output=True, text=True, env=env, check=False, cwd=cache.parent
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    seen: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["tool"] == str(tool)
    return seen


def _frontend_in(python: object) -> str:
    check = "import importlib.metadata as md, nbclient; print(md.version('nvidia-cudnn-frontend'))"
    out = subprocess.run([str(python), "-c", check], capture_output=True, text=True, check=True)
    return out.stdout.strip()


@pytest.mark.skipif(shutil.which("uv") is None, reason="uv is not on PATH")
def test_an_environment_built_by_one_installer_is_reused_by_the_other(
    wheelhouse: Path, tmp_path: Path
) -> None:
    nox_tool, pip_tool = tool_venv(tmp_path / "nox-venv"), tool_venv(tmp_path / "pip-venv")
    cache = tmp_path / "cache"
    first, second = (
        min(wheelhouse.glob(f"nvidia_cudnn_frontend-{version}-{_PY}-*.whl"))
        for version in ("1.26.0", "1.27.0")
    )

    built = _ensure(nox_tool, cache, first, "uv")
    assert (built["reused"], built["built_by"]) == (False, "uv")
    reused = _ensure(pip_tool, cache, first, "pip")
    assert (reused["reused"], reused["built_by"], reused["root"]) == (True, "uv", built["root"])
    assert _frontend_in(reused["python"]) == "1.26.0"

    built = _ensure(pip_tool, cache, second, "pip")
    assert (built["reused"], built["built_by"]) == (False, "pip")
    reused = _ensure(nox_tool, cache, second, "uv")
    assert (reused["reused"], reused["built_by"], reused["root"]) == (True, "pip", built["root"])
    assert _frontend_in(reused["python"]) == "1.27.0"

    assert len(list((cache / "envs").glob("*/manifest.json"))) == 2
