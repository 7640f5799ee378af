"""The pip installer with the oldest pips the tool meets: pyproject's floor (pip 23.1) and the one
Debian bookworm seeds into the base image's venv (python3-venv: pip 23.0.1). Both lack
`--progress-bar raw` (pip 24.1): the tool asks pip's version and passes only what it has.

The tool runs from an interpreter of its own whose first site-packages holds the old pip; the
installed tool and its other dependencies come from this test interpreter's site-packages through
a .pth line (tests/usercli.py `tool_venv`),
so `python -m pip` there is the old pip, as in a fresh `python3 -m venv v && v/bin/pip install .`
with Python 3.11's bundled pip. Everything installs offline from the shared wheelhouse.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
from usercli import fetch_pip, tool_venv

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow

FRONTEND = "1.26.0"
_PY = f"cp{sys.version_info.major}{sys.version_info.minor}"

#: Builds one environment (tooling + a frontend wheel, the backend as it is) with the pip
#: installer and fetches one wheel for the image's Python, as `images build` does; prints what
#: it saw as one JSON line after the log lines.
_SCRIPT = """
import json, logging, sys
from pathlib import Path
from validate.env.pipcli import pip_version
from validate.env.sources import parse_backend_source, parse_frontend_source
from validate.env.venvs import EnvSpec, ensure_env, read_manifest
from validate.env.wheelhouse import Wheelhouse

logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
cache, frontend_wheel, dest = (Path(arg) for arg in sys.argv[1:4])
spec = EnvSpec(
    backend=parse_backend_source("current"), frontend=parse_frontend_source(str(frontend_wheel))
)
handle = ensure_env(spec, cache, wheelhouse=frontend_wheel.parent, installer="pip")
Wheelhouse(dest).pip_download(dest, ["flit_core"], python="3.11", deps=False)
print(json.dumps({
    "pip": str(pip_version()),
    "python": str(handle.python),
    "installer": read_manifest(handle.root)["installer"],
    "fetched": sorted(p.name for p in dest.glob("*.whl")),
}))
"""


@pytest.mark.parametrize(
    "pip", ["23.1", "23.0.1"], ids=["pyproject-floor", "debian-bookworm-base-image"]
)
def test_an_old_pip_builds_environments_and_fetches_wheels(
    pip: str, wheelhouse: Path, tmp_path: Path
) -> None:
    python = tool_venv(tmp_path / "tool", fetch_pip(wheelhouse, pip))
    frontend = min(wheelhouse.glob(f"nvidia_cudnn_frontend-{FRONTEND}-{_PY}-*.whl"))
    flit = min(wheelhouse.glob("flit_core-*.whl")).name
    env = {
        **os.environ,
        "CI": "true",  # plain log lines: the progress a pip without `raw` gives
        "PIP_NO_INDEX": "1",  # `pip download` offline, from the shared wheelhouse
        "PIP_FIND_LINKS": str(wheelhouse),
        "PYTHONPATH": "",
    }
    argv = [str(python), "-c", _SCRIPT, str(tmp_path / "cache"), str(frontend)]
    proc = subprocess.run(
        [*argv, str(tmp_path / "fetched")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    seen = json.loads(lines[-1])
    assert seen["pip"] == pip  # the old pip did the work, not this interpreter's
    assert seen["installer"] == "pip"
    assert seen["fetched"] == [flit]
    # the progress came from pip's ordinary lines ("Successfully installed ...", a milestone)
    assert any(": successfully installed " in ln for ln in lines), "\n".join(lines)
    assert not any("invalid choice" in ln for ln in lines)
    check = "import importlib.metadata as md, nbclient; print(md.version('nvidia-cudnn-frontend'))"
    out = subprocess.run([seen["python"], "-c", check], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == FRONTEND
