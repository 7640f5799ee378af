"""The repro's root-cause staging on a real GPU: a real illegal memory access is named with its graph,
stage and CUDA error, and the case is a crash; the shipped repro runs its stages in order.

Needs an NVIDIA GPU (skips without one). The illegal address comes from a CuPy kernel writing
through a null-page pointer; the full repro needs torch and an nvidia-cudnn-frontend wheel for this
Python in .cache/gpu-whl/ or .cache/wheelhouse/ (skips without one).
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from validate.env.target import ExecTarget
from validate.execute.cases import SHIPPED_CASES, discover_cases
from validate.execute.runner import RunOptions, run_case
from validate.model.outcome import Outcome

REPO = Path(__file__).resolve().parents[2]
SCRIPT = SHIPPED_CASES / "repro_fusion_uid.py"  # the installed package's copy
PY = f"cp{sys.version_info.major}{sys.version_info.minor}"


def _no_gpu() -> str | None:
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no NVIDIA driver"
    count = ctypes.c_int(0)
    if libcuda.cuInit(0) != 0 or libcuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return "no usable NVIDIA driver"
    return None if count.value else "no CUDA device"


pytestmark = [pytest.mark.gpu, pytest.mark.slow]
if (why := _no_gpu()) is not None:
    pytestmark.append(pytest.mark.skip(reason=why))

POKE = f"""\
import importlib.util, json, sys
import cupy, torch
spec = importlib.util.spec_from_file_location("repro", {str(SCRIPT)!r})
repro = importlib.util.module_from_spec(spec)
sys.modules["repro"] = repro
spec.loader.exec_module(repro)
torch.zeros(1, device="cuda")  # torch and cupy share the device's primary context
poke = cupy.RawKernel(
    'extern "C" __global__ void poke(int* p) {{ p[threadIdx.x] = 1; }}', "poke"
)
label = "graph 2 (fwd, cudnn.pygraph, uids 101..110)"
try:
    repro.staged(label, "execute", lambda: poke((1,), (32,), (cupy.uint64(16),)), torch.cuda.synchronize)
except repro.StepFailed as exc:
    print("RECORD " + json.dumps(exc.record()))
    print(f"VERDICT fail: {{exc}}")
    sys.exit(1)
print("VERDICT pass: the kernel wrote through a bad pointer and nothing noticed")
"""


def test_a_real_illegal_address_names_graph_stage_and_error(tmp_path: Path) -> None:
    pytest.importorskip("cupy")
    pytest.importorskip("torch")
    folder = tmp_path / "cases"
    folder.mkdir()
    (folder / "poke.py").write_text(POKE, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(folder / "poke.py")],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    record = next(
        json.loads(line.removeprefix("RECORD "))
        for line in done.stdout.splitlines()
        if line.startswith("RECORD ")
    )
    assert (record["graph"], record["stage"]) == (
        "graph 2 (fwd, cudnn.pygraph, uids 101..110)",
        "execute",
    )
    assert "illegal memory access" in record["error"], record
    assert record["cuda_error"] == (
        "an illegal memory access was encountered (cudaErrorIllegalAddress)"
    ), record
    (case,) = discover_cases([folder])
    options = RunOptions(timeout_s=300, results_dir=tmp_path / "run", api_logs=False)
    result = run_case(case, ExecTarget(python=Path(sys.executable)), options)
    assert result.outcome is Outcome.CRASH, result.reason
    assert result.reason.startswith(
        "CUDA context poisoned: graph 2 (fwd, cudnn.pygraph, uids 101..110) failed at execute: "
    ), result.reason


def _frontend_wheel() -> Path | None:
    for folder in (REPO / ".cache" / "gpu-whl", REPO / ".cache" / "wheelhouse"):
        found = sorted(folder.glob(f"nvidia_cudnn_frontend-1.2[67].*-{PY}-*.whl"))
        if found:
            return found[-1]
    return None


#: The stages the repro reports for variant graph-pygraph when every graph passes.
STAGES = [
    "graph 1 (fwd, cudnn.Graph, uids 1..10): inputs",
    "graph 1 (fwd, cudnn.Graph, uids 1..10): construct/build",
    "graph 1 (fwd, cudnn.Graph, uids 1..10): execute",
    "graph 1 (fwd, cudnn.Graph, uids 1..10): compare",
    "graph 2 (fwd, cudnn.pygraph, uids 101..110): inputs",
    "graph 2 (fwd, cudnn.pygraph, uids 101..110): construct",
    "graph 2 (fwd, cudnn.pygraph, uids 101..110): build",
    "graph 2 (fwd, cudnn.pygraph, uids 101..110): execute",
    "graph 2 (fwd, cudnn.pygraph, uids 101..110): compare",
    "graph 1 (fwd, cudnn.Graph, uids 1..10): recheck",
    "teardown: synchronize",
    "teardown: destroy handle",
]


def test_the_repro_runs_its_stages_on_the_gpu(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    wheel = _frontend_wheel()
    if wheel is None:
        pytest.skip(f"no nvidia-cudnn-frontend 1.26/1.27 wheel for {PY} in .cache/")
    site = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site)]
    subprocess.run(
        [*pip, str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--variant", "graph-pygraph", "--json", str(out)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    result = json.loads(out.read_text(encoding="utf-8"))
    stages = [
        ln.removeprefix("STAGE ") for ln in done.stdout.splitlines() if ln.startswith("STAGE ")
    ]
    print(textwrap.indent(done.stdout[-3000:], "  "))  # the stages, for the log
    first = result["first_error"]
    if result["verdict"] == "pass":  # this backend does not reproduce the issue
        assert (done.returncode, first, stages) == (0, None, STAGES)
        assert result["reason"] == "2 graphs match the torch reference"
    else:  # it reproduces: the reason leads with the first error, the stages stop there
        assert result["verdict"] == "fail", result
        if first is not None:
            assert result["reason"].startswith(f"{first['graph']} failed at {first['stage']}")
            assert stages[-2:] == ["teardown: synchronize", "teardown: destroy handle"]
        else:
            assert "wrong results" in result["reason"] or "outputs changed" in result["reason"]
