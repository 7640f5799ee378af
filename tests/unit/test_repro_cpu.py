"""The shipped #361 repro's CPU part: real frontend wheels + real libcudnn, no GPU -> a skip that
says, for the frontend, what it did and what it could not do.

Environments are built once from PyPI with `pip --target` into .cache/ (reused by later runs): the
frontend wheels 1.26.0 / 1.27.0 (~4 MB each), 1.32.0 with its dependencies (nvidia-cutlass-dsl,
cuda-bindings, cuda-pathfinder, apache-tvm-ffi: ~130 MB of wheels, 625 MB installed), and
libcudnn.so.9 + libcudnn_graph.so.9 taken from the nvidia-cudnn-cu13 9.13.1.26 wheel (a ~330 MB
download, shared with the environments' wheelhouse .cache/wheelhouse/; graph construction and
validate() need only those two libraries). 1.26.0 and 1.27.0 construct and validate every graph;
1.32.0 constructs them, but its validate() goes through cuda-bindings, whose cuda-pathfinder needs
the driver library libcuda ("DynamicLibNotFoundError: "cuda" is an NVIDIA driver library").
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import Any

import pytest

from validate.execute.cases import SHIPPED_CASES

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = SHIPPED_CASES / "repro_fusion_uid.py"  # the installed package's copy
CACHE = ROOT / ".cache"
WHEELHOUSE = CACHE / "wheelhouse"
BACKEND = "9.13.1.26"  # smallest backend wheel that meets the repro's 9.13 floor
FRONTENDS = ("1.26.0", "1.27.0", "1.32.0")
#: Frontends whose wheel needs its dependencies to import (1.32.0: nvidia-cutlass-dsl and more).
WITH_DEPS = frozenset({"1.32.0"})
#: Per frontend, the no-GPU stages each graph got through, and what stopped the rest.
NO_GPU = {
    "1.26.0": (("construct", "validate"), {}),
    "1.27.0": (("construct", "validate"), {}),
    "1.32.0": (
        ("construct",),
        {
            "validate": 'needs the NVIDIA driver (DynamicLibNotFoundError: "cuda" is an NVIDIA '
            "driver library and can only be found via system search. Ensure the NVIDIA display "
            "driver is installed.)"
        },
    ),
}
GPU_ONLY = {"build": "needs a GPU", "execute": "needs a GPU", "compare": "needs a GPU"}
PY = f"{sys.version_info.major}.{sys.version_info.minor}"

pytestmark = [pytest.mark.slow]


def _driver_present() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


if _driver_present():  # pragma: no cover - only on GPU machines
    pytestmark.append(pytest.mark.skip(reason="NVIDIA driver present: the gpu tier runs it"))


def _pip() -> list[str]:
    """pip of this interpreter, else the host's python3 pip (uv venvs have none)."""
    if importlib.util.find_spec("pip") is not None:
        return [sys.executable, "-m", "pip"]
    host = shutil.which("python3")
    if host is None:
        pytest.skip("no pip available to fetch the frontend/backend wheels")
    return [host, "-m", "pip"]


def _run(cmd: list[str]) -> None:
    print("+", " ".join(cmd))
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=900)
    if done.returncode != 0:
        pytest.fail(f"{cmd[:4]} failed ({done.returncode}): {done.stderr[-2000:]}")


def _wheel(name: str, version: str) -> Path:
    """The wheel from the shared wheelhouse, downloaded from PyPI on first use."""
    stem = name.replace("-", "_")
    found = sorted(WHEELHOUSE.glob(f"{stem}-{version}-*.whl"))
    found = [w for w in found if "-py3-none-" in w.name or f"cp{PY.replace('.', '')}" in w.name]
    if not found:
        binary = ["--only-binary=:all:", "--python-version", PY]
        _run(
            [
                *_pip(),
                "download",
                "-q",
                "--no-deps",
                *binary,
                "-d",
                str(WHEELHOUSE),
                f"{name}=={version}",
            ]
        )
        return _wheel(name, version)
    return found[0]


@pytest.fixture(scope="session")
def backend_lib() -> Path:
    """Folder holding libcudnn.so.9 and libcudnn_graph.so.9 of backend 9.13.1.26."""
    target = CACHE / "repro-env" / f"cudnn-cu13-{BACKEND}"
    libs = ("libcudnn.so.9", "libcudnn_graph.so.9")
    if not all((target / lib).exists() for lib in libs):
        target.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(_wheel("nvidia-cudnn-cu13", BACKEND)) as whl:
            for lib in libs:
                (target / lib).write_bytes(whl.read(f"nvidia/cudnn/lib/{lib}"))
    return target


@pytest.fixture(scope="session", params=FRONTENDS)
def frontend_env(request: pytest.FixtureRequest) -> tuple[str, Path]:
    """(version, folder) with nvidia-cudnn-frontend installed by pip --target."""
    version: str = request.param
    target = CACHE / "repro-env" / f"fe-{version}-py{PY}"
    if not (target / "cudnn" / "__init__.py").exists():
        wheel = _wheel("nvidia-cudnn-frontend", version)
        flags = ["--no-index", "--only-binary=:all:", "--python-version", PY]
        if version in WITH_DEPS:  # its dependencies into the wheelhouse first (once)
            binary = ["--only-binary=:all:", "--python-version", PY, "-d", str(WHEELHOUSE)]
            _run([*_pip(), "download", "-q", *binary, str(wheel)])
            flags += ["--find-links", str(WHEELHOUSE)]
        else:
            flags.append("--no-deps")
        _run([*_pip(), "install", "-q", *flags, "--target", str(target), str(wheel)])
    return version, target


def _repro(
    args: list[str], pythonpath: Path, libdir: Path | None, tmp_path: Path
) -> tuple[int, list[str], dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "PYTHONPATH")}
    env["PYTHONPATH"] = str(pythonpath)
    if libdir is not None:
        env["LD_LIBRARY_PATH"] = str(libdir)
    out = tmp_path / "result.json"
    cmd = [sys.executable, "-s", str(SCRIPT), *args, "--json", str(out)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, timeout=300)
    lines = done.stdout.strip().splitlines()
    result = json.loads(out.read_text()) if out.exists() else {}
    return done.returncode, lines, result


@pytest.mark.parametrize(
    ("variant", "graphs"),
    [("graph-graph", 2), ("graph-pygraph", 2), ("backward", 4), ("graph-pygraph-auto", 2)],
)
def test_constructs_graphs_then_skips(
    variant: str,
    graphs: int,
    frontend_env: tuple[str, Path],
    backend_lib: Path,
    tmp_path: Path,
) -> None:
    version, site = frontend_env
    rc, lines, result = _repro(["--variant", variant], site, backend_lib, tmp_path)
    done, blocked = NO_GPU[version]
    did = ", ".join(f"{stage} {graphs}/{graphs}" for stage in done)
    not_done = [f"{stage}: {why}" for stage, why in blocked.items()]
    not_done.append("build, execute, compare: need a GPU")
    expected = (
        f"VERDICT skip: no NVIDIA driver: frontend {version} without a GPU did {did} graphs; "
        f"not done: {'; '.join(not_done)}"
    )
    assert (rc, lines[-1]) == (0, expected), "\n".join(lines)
    assert lines[-2] == "RESULT " + json.dumps(result, sort_keys=True)
    assert (result["frontend"], result["backend"], result["verdict"]) == (version, 91301, "skip")
    assert [g["done"] for g in result["graphs"]] == [list(done)] * graphs
    assert [g["not_done"] for g in result["graphs"]] == [{**blocked, **GPU_ONLY}] * graphs
    counts = dict.fromkeys(("construct", "validate"), 0) | dict.fromkeys(done, graphs)
    assert result["no_gpu"] == {
        "frontend": version,
        "graphs": graphs,
        "done": counts,
        "not_done": {**blocked, **GPU_ONLY},
    }
    assert result["first_error"] is None
    stages = [line for line in lines if line.startswith("STAGE ")]
    assert len(stages) == 2 * graphs  # construct and validate were tried for every graph


def test_explicit_uids_are_set(
    frontend_env: tuple[str, Path], backend_lib: Path, tmp_path: Path
) -> None:
    _, site = frontend_env
    _, _, result = _repro(["--variant", "backward"], site, backend_lib, tmp_path)
    graphs: list[dict[str, dict[str, int]]] = result["graphs"]
    got = [sorted(g["uids"].values()) for g in graphs]
    expected = [range(1, 11), range(11, 20), range(101, 111), range(111, 120)]
    assert got == [list(r) for r in expected]


def test_auto_uids_differ_from_frontend_127(
    frontend_env: tuple[str, Path], backend_lib: Path, tmp_path: Path
) -> None:
    """The #361 mechanism: >= 1.27 numbers tensors in creation order, so the two graphs differ."""
    version, site = frontend_env
    _, _, result = _repro(["--variant", "graph-pygraph-auto"], site, backend_lib, tmp_path)
    first, second = (g["uids"] for g in result["graphs"])
    if version == "1.26.0":  # C++ assigns UIDs only when the graph is built
        assert set(first.values()) == set(second.values()) == {0}
    else:
        assert first["x"] == second["x"] == 1
        assert first["lower_clip"] != second["lower_clip"]
        assert first != second


def test_without_libcudnn_is_an_environment_error(
    frontend_env: tuple[str, Path], tmp_path: Path
) -> None:
    _, site = frontend_env
    purelib = Path(sysconfig.get_paths()["purelib"]) / "nvidia" / "cudnn" / "lib"
    if (purelib / "libcudnn.so.9").exists():
        pytest.skip(f"a libcudnn is installed in {purelib}; the frontend would find it")
    rc, lines, result = _repro(["--variant", "graph-graph"], site, tmp_path, tmp_path)
    assert (rc, result) == (2, {})
    assert not any(line.startswith("VERDICT") for line in lines)
