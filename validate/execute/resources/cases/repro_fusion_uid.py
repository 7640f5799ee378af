"""Repro for NVIDIA/cudnn-frontend#361: one fused LayerNorm+ReLU+bitmask graph compiled twice, UIDs differ.

Standalone case script (needs only cudnn, torch and a GPU; never imports the validate package).
Maintainers: "when you compile 2 graphs of the same everything but with different uids, the second
time cache will hit and the engine will be looking for the wrong pointers" (backend, fixed in 9.25.0).

Variants (``--variant`` or env ``REPRO_VARIANT``):
  graph-graph          forward through cudnn.Graph twice, UIDs 1..10 then 101..110
  graph-pygraph        forward through cudnn.Graph (UIDs 1..10), then cudnn.pygraph (101..110):
                       the notebook-26 path with explicit UIDs
  backward             cudnn.Graph fwd (1..10) + bwd (11..19), then cudnn.pygraph fwd (101..110)
                       + bwd (111..119); bwd = mul by bitmask -> layernorm_backward
  graph-pygraph-auto   as graph-pygraph, UIDs left to the frontend exactly as notebook 26 does
                       (frontend >= 1.27 numbers tensors in creation order, so the two graphs differ)

Each graph gets fresh inputs (own seed) and NaN-filled outputs on separate buffers; after the last
graph ran, every earlier graph's outputs are checked again (a graph writing through stale pointers
shows up there). Tolerances (the notebook's): forward out/mean/inv_var rtol=atol=5e-3; backward
dX/dScale/dBias rtol=atol=2e-4; bitmask bits exact, except where the reference output lies within
1e-4 of a clip bound (rounding may put it on either side).

Root cause: every stage of a graph (construct/build, execute) ends in torch.cuda.synchronize(), so
an asynchronous CUDA error (an illegal memory access) is reported in the graph and stage that
caused it, not at a later call. The first such error is kept as ``first_error`` {graph, stage,
error, cuda_error} in the RESULT JSON and names the verdict's reason; a teardown failure after it
("cudnnHandle Destroy failed", the H200's masked symptom) is recorded beside it, never instead.
The runner classifies a context-poisoning CUDA error anywhere in the output as a crash.

Without a GPU the script says, for the frontend it runs with, what it could do and what not: each
graph's construct and validate() stage is tried on a handle-less cudnn.pygraph and recorded
(``no_gpu`` in the RESULT JSON: done, not_done, needs); frontends that need the NVIDIA driver even
to construct a graph (1.32.0: cuda-bindings loads libcuda, a driver library) say so in the reason.

Contract: exit 0 pass / skip, 1 fail, 2 environment error (no verdict); a crash kills the process,
and the last ``STAGE`` line on stdout names the graph and stage it died in. The last two stdout
lines are ``RESULT <json>`` and ``VERDICT pass|fail|skip: <reason>``; ``--json PATH`` writes the
same JSON to a file, as does ``$CUDNN_MATRIX_RESULT_FILE`` (the runner's result file; its
``outcome`` key is the verdict).
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import os
import re
import sys
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

MIN_BACKEND = 91300  # notebook 26: "LayerNorm with relu bitmask generation ... 9.13.0 or above"
BATCH, SEQ, EMBED = 4, 1024, 768  # the notebook's shape, so the same engines are picked
ROWS = BATCH * SEQ
EPS, LO, HI = 1e-3, 0.0, 6.0
FWD_TOL, BWD_TOL, MASK_SLACK = 5e-3, 2e-4, 1e-4


@dataclass(frozen=True, kw_only=True)
class Step:
    """One graph of a variant: which API builds it, forward or backward, first UID (None: auto)."""

    api: str  # "graph" (cudnn.Graph wrapper) or "pygraph" (cudnn.pygraph)
    kind: str  # "fwd" or "bwd"
    uid_base: int | None

    def label(self, index: int) -> str:
        n = 10 if self.kind == "fwd" else 9
        uids = "auto" if self.uid_base is None else f"{self.uid_base}..{self.uid_base + n - 1}"
        api = "cudnn.Graph" if self.api == "graph" else "cudnn.pygraph"
        return f"graph {index} ({self.kind}, {api}, uids {uids})"


VARIANTS: dict[str, tuple[Step, ...]] = {
    "graph-graph": (
        Step(api="graph", kind="fwd", uid_base=1),
        Step(api="graph", kind="fwd", uid_base=101),
    ),
    "graph-pygraph": (
        Step(api="graph", kind="fwd", uid_base=1),
        Step(api="pygraph", kind="fwd", uid_base=101),
    ),
    "backward": (
        Step(api="graph", kind="fwd", uid_base=1),
        Step(api="graph", kind="bwd", uid_base=11),
        Step(api="pygraph", kind="fwd", uid_base=101),
        Step(api="pygraph", kind="bwd", uid_base=111),
    ),
    "graph-pygraph-auto": (
        Step(api="graph", kind="fwd", uid_base=None),
        Step(api="pygraph", kind="fwd", uid_base=None),
    ),
}


@dataclass(kw_only=True)
class Outcome:
    """What the script found; printed as RESULT json and the VERDICT line."""

    variant: str
    facts: dict[str, Any] = field(default_factory=dict)
    graphs: list[dict[str, Any]] = field(default_factory=list)
    verdict: str = "pass"
    reason: str = ""
    first_error: dict[str, Any] | None = None  # the first failing graph, its stage, the error


#: A CUDA runtime/driver error name, or the "CUDA error: <what>" text torch and the frontend print.
_CUDA_NAME = re.compile(r"\b(cudaError\w+|CUDA_ERROR_\w+)")
_CUDA_TEXT = re.compile(r"CUDA error:? ?([^\n]+)")


def cuda_error(text: str) -> str | None:
    """`an illegal memory access was encountered (cudaErrorIllegalAddress)`, or None."""
    name, what = _CUDA_NAME.search(text), _CUDA_TEXT.search(text)
    if what is None and name is None:
        return None
    words = what.group(1).strip() if what else ""
    if name is not None and name.group(1) not in words:
        words = f"{words} ({name.group(1)})" if words else name.group(1)
    return words


class StepFailed(Exception):
    """A graph failed at a named stage; the message says which and how."""

    def __init__(self, graph: str, stage: str, exc: BaseException) -> None:
        self.graph, self.stage = graph, stage
        self.error = f"{type(exc).__name__}: {str(exc).strip()}"
        super().__init__(f"{graph} failed at {stage}: {self.error.splitlines()[0][:300]}")

    def record(self) -> dict[str, Any]:
        """The `first_error` of the RESULT JSON."""
        return {
            "graph": self.graph,
            "stage": self.stage,
            "error": self.error.splitlines()[0][:400],
            "cuda_error": cuda_error(self.error),
        }


def staged(label: str, stage: str, work: Callable[[], Any], sync: Callable[[], None]) -> Any:
    """Run one stage of a graph and synchronize the device, so that an asynchronous CUDA error
    is raised here, as StepFailed naming this graph and stage, and not at some later call."""
    _stage(f"{label}: {stage}")
    try:
        value = work()
        sync()
    except Exception as exc:
        raise StepFailed(label, stage, exc) from exc
    return value


def _stage(text: str) -> None:
    print(f"STAGE {text}", flush=True)


def _finish(out: Outcome, json_path: str | None) -> int:
    data = {
        "variant": out.variant,
        "outcome": out.verdict,  # the runner's result-file key (validate/cases/script.py)
        "verdict": out.verdict,
        "reason": out.reason,
        **out.facts,
        "graphs": out.graphs,
        "first_error": out.first_error,
    }
    text = json.dumps(data, sort_keys=True, default=str)
    for path in {json_path, os.environ.get("CUDNN_MATRIX_RESULT_FILE")} - {None, ""}:
        with open(str(path), "w", encoding="utf-8") as fh:  # noqa: PTH123 - no pathlib needed
            fh.write(text + "\n")
    print(f"RESULT {text}")
    print(f"VERDICT {out.verdict}: {out.reason}", flush=True)
    return 1 if out.verdict == "fail" else 0


def _env_error(msg: str) -> int:
    print(f"repro_fusion_uid: environment error: {msg}", file=sys.stderr, flush=True)
    return 2


def _gpu_state() -> str | None:
    """None when a CUDA device is usable; otherwise why not (driver library, cuInit, device count)."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no NVIDIA driver"
    rc = libcuda.cuInit(0)
    if rc != 0:
        return f"no usable NVIDIA driver (cuInit returned {rc})"
    count = ctypes.c_int(0)
    if libcuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return "no CUDA device visible"
    return None


# --------------------------------------------------------------------------- graph construction


def _fp32(cudnn: Any) -> dict[str, Any]:
    f = cudnn.data_type.FLOAT
    return {"io_data_type": f, "intermediate_data_type": f, "compute_data_type": f}


def _uid(tensor: Any, base: int | None, offset: int) -> Any:
    if base is not None:
        tensor.set_uid(base + offset)
    return tensor


def _cl(rows: int) -> tuple[list[int], list[int]]:
    """Dims and channels-last strides of an [rows, EMBED, 1, 1] tensor (the notebook's layout)."""
    return [rows, EMBED, 1, 1], [EMBED, 1, EMBED, EMBED]


def add_forward(cudnn: Any, g: Any, base: int | None, *, lazy: bool = False) -> dict[str, Any]:
    """LayerNorm(training) -> ReLU(0..6) -> cmp_gt/cmp_lt -> logical_and; returns the I/O tensors.

    lazy: create the comparison scalars right before their op, in the order cudnn.Graph creates
    them from torch tensors in notebook 26 (matters only for frontend-assigned UIDs).
    """
    f32, t = cudnn.data_type.FLOAT, {}

    def scalar(name: str, offset: int) -> None:
        one = [1, 1, 1, 1]
        s = g.tensor(name=name, dim=one, stride=one, data_type=f32, is_pass_by_value=True)
        t[name] = _uid(s, base, offset)

    t["x"] = _uid(g.tensor(name="X", dim=_cl(ROWS)[0], stride=_cl(ROWS)[1], data_type=f32), base, 0)
    t["scale"] = _uid(
        g.tensor(name="scale", dim=_cl(1)[0], stride=_cl(1)[1], data_type=f32), base, 1
    )
    t["bias"] = _uid(g.tensor(name="bias", dim=_cl(1)[0], stride=_cl(1)[1], data_type=f32), base, 2)
    scalar("epsilon", 3)
    if not lazy:
        scalar("lower_clip", 4)
        scalar("upper_clip", 5)
    norm_out, mean, inv_var = g.layernorm(
        name="LN",
        norm_forward_phase=cudnn.norm_forward_phase.TRAINING,
        input=t["x"],
        scale=t["scale"],
        bias=t["bias"],
        epsilon=t["epsilon"],
    )
    out = g.relu(name="ReLU", input=norm_out, lower_clip=LO, upper_clip=HI)
    if lazy:
        scalar("lower_clip", 4)
    lower = g.cmp_gt(name="lower_mask", input=out, comparison=t["lower_clip"])
    lower.set_name("lower_cmp").set_data_type(cudnn.data_type.BOOLEAN)
    if lazy:
        scalar("upper_clip", 5)
    upper = g.cmp_lt(name="upper_mask", input=out, comparison=t["upper_clip"])
    upper.set_name("upper_cmp").set_data_type(cudnn.data_type.BOOLEAN)
    bitmask = g.logical_and(name="and_bitmask", a=lower, b=upper)
    t["out"] = _uid(out.set_name("output").set_output(True), base, 6)
    t["mean"] = _uid(mean.set_name("mean").set_output(True).set_data_type(f32), base, 7)
    t["inv_var"] = _uid(inv_var.set_name("inv_var").set_output(True).set_data_type(f32), base, 8)
    t["bitmask"] = _uid(
        bitmask.set_name("relu_bitmask").set_output(True).set_data_type(cudnn.data_type.BOOLEAN),
        base,
        9,
    )
    return t


def add_backward(cudnn: Any, g: Any, base: int | None) -> dict[str, Any]:
    """mul(dY, bitmask) -> layernorm_backward; returns the I/O tensors."""
    f32 = cudnn.data_type.FLOAT
    dims, strides = _cl(ROWS)
    stats = ([ROWS, 1, 1, 1], [1, 1, 1, 1])
    t: dict[str, Any] = {}
    t["d_out"] = _uid(g.tensor(name="d_out", dim=dims, stride=strides, data_type=f32), base, 0)
    t["bitmask"] = _uid(
        g.tensor(
            name="bitmask", dim=dims, stride=[EMBED, 1, 1, 1], data_type=cudnn.data_type.BOOLEAN
        ),
        base,
        1,
    )
    t["x"] = _uid(g.tensor(name="x", dim=dims, stride=strides, data_type=f32), base, 2)
    t["scale"] = _uid(
        g.tensor(name="scale", dim=_cl(1)[0], stride=_cl(1)[1], data_type=f32), base, 3
    )
    t["mean"] = _uid(g.tensor(name="mean", dim=stats[0], stride=stats[1], data_type=f32), base, 4)
    t["inv_var"] = _uid(
        g.tensor(name="inv_var", dim=stats[0], stride=stats[1], data_type=f32), base, 5
    )
    dy = g.mul(name="drelu_bitmask_mul", a=t["d_out"], b=t["bitmask"])
    d_x, d_scale, d_bias = g.layernorm_backward(
        name="DLN",
        grad=dy,
        input=t["x"],
        scale=t["scale"],
        mean=t["mean"],
        inv_variance=t["inv_var"],
    )
    t["d_x"] = _uid(d_x.set_name("dX").set_output(True).set_data_type(f32), base, 6)
    t["d_scale"] = _uid(d_scale.set_name("dScale").set_output(True).set_data_type(f32), base, 7)
    t["d_bias"] = _uid(d_bias.set_name("dBias").set_output(True).set_data_type(f32), base, 8)
    return t


def _add(cudnn: Any, g: Any, step: Step) -> dict[str, Any]:
    if step.kind == "fwd":
        return add_forward(cudnn, g, step.uid_base, lazy=step.api == "graph")
    return add_backward(cudnn, g, step.uid_base)


#: An error that says the step needs the NVIDIA driver (not a GPU-less defect of the frontend):
#: frontend 1.32.0 validates graphs through cuda-bindings, whose cuda-pathfinder raises
#: DynamicLibNotFoundError: "cuda" is an NVIDIA driver library (libcuda.so.1).
_NEEDS_DRIVER = re.compile(
    r"DynamicLibNotFoundError|driver library|libcuda\.so|cuInit|CUDA driver"
    r"|no CUDA-capable device|CUDA_ERROR_NO_DEVICE|cudaErrorNoDevice|cudaErrorInsufficientDriver",
    re.IGNORECASE,
)
#: What only a GPU run does (run_step), never tried without one.
GPU_ONLY = ("build", "execute", "compare")


def construct_only(cudnn: Any, steps: tuple[Step, ...], out: Outcome) -> str:
    """No GPU: try each graph's construct and validate() stages on a handle-less cudnn.pygraph
    and record, per graph, what was done and what not; return the reason of the skip verdict.

    cudnn.Graph (the wrapper) builds plans when its `with` block exits, which needs a GPU, so its
    graphs are constructed here on the cudnn.pygraph it wraps. A stage that fails for want of the
    driver is "needs the NVIDIA driver", any other failure is named as it is.
    """
    frontend = out.facts.get("frontend", "?")
    stages = ("construct", "validate")
    done: dict[str, int] = dict.fromkeys(stages, 0)
    blocked: dict[str, str] = {}  # stage -> why it could not be done (first graph's error)
    for i, step in enumerate(steps, start=1):
        label = step.label(i)
        record: dict[str, Any] = {"graph": label, "done": [], "not_done": {}}
        try:
            _stage(f"{label}: construct (handle-less cudnn.pygraph)")
            g = cudnn.pygraph(**_fp32(cudnn))
            tensors = _add(cudnn, g, step)
            record["done"].append("construct")
            done["construct"] += 1
            record["uids"] = {k: v.get_uid() for k, v in tensors.items()}
            _stage(f"{label}: validate")
            g.validate()
            record["done"].append("validate")
            done["validate"] += 1
        except Exception as exc:  # noqa: BLE001 - frontends raise assorted types without a GPU
            stage = "validate" if record["done"] else "construct"
            error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
            why = f"needs the NVIDIA driver ({error})" if _NEEDS_DRIVER.search(error) else error
            record["not_done"][stage] = why
            blocked.setdefault(stage, why)
            if stage == "construct":
                record["not_done"]["validate"] = "not tried: the graph was not constructed"
        record["stage"] = record["done"][-1] if record["done"] else "none"
        record["ok"] = len(record["done"]) == len(stages)
        record["not_done"].update(dict.fromkeys(GPU_ONLY, "needs a GPU"))
        out.graphs.append(record)
    n = len(steps)
    could = [f"{stage} {done[stage]}/{n}" for stage in stages if done[stage]]
    could_not = [f"{stage}: {why}" for stage, why in blocked.items()]
    could_not.append(f"{', '.join(GPU_ONLY)}: need a GPU")
    out.facts["no_gpu"] = {
        "frontend": frontend,
        "done": {stage: done[stage] for stage in stages},
        "graphs": n,
        "not_done": {**blocked, **dict.fromkeys(GPU_ONLY, "needs a GPU")},
    }
    did = ", ".join(could) if could else "nothing"
    return f"frontend {frontend} without a GPU did {did} graphs; not done: {'; '.join(could_not)}"


# --------------------------------------------------------------------------- GPU execution


@dataclass(kw_only=True)
class _Data:
    """Torch buffers of one forward/backward pair and their references."""

    fwd_in: dict[str, Any] = field(default_factory=dict)
    fwd_out: dict[str, Any] = field(default_factory=dict)
    fwd_ref: dict[str, Any] = field(default_factory=dict)
    bwd_in: dict[str, Any] = field(default_factory=dict)
    bwd_out: dict[str, Any] = field(default_factory=dict)
    bwd_ref: dict[str, Any] = field(default_factory=dict)


def _forward_data(torch: Any, seed: int) -> _Data:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    cl = torch.channels_last

    def rnd(*shape: int) -> Any:
        return torch.randn(*shape, device="cuda", generator=gen).to(memory_format=cl)

    def scalar(v: float) -> Any:
        return torch.full((1, 1, 1, 1), v, dtype=torch.float32)

    d = _Data()
    d.fwd_in = {
        "x": rnd(ROWS, EMBED, 1, 1),
        "scale": rnd(1, EMBED, 1, 1),
        "bias": rnd(1, EMBED, 1, 1),
        "epsilon": scalar(EPS),
        "lower_clip": scalar(LO),
        "upper_clip": scalar(HI),
    }
    nan = float("nan")
    d.fwd_out = {
        "out": torch.full_like(d.fwd_in["x"], nan),
        "mean": torch.full((ROWS, 1, 1, 1), nan, device="cuda"),
        "inv_var": torch.full((ROWS, 1, 1, 1), nan, device="cuda"),
        "bitmask": torch.full((ROWS, EMBED // 8, 1, 1), 0xA5, dtype=torch.uint8, device="cuda"),
    }
    x = d.fwd_in["x"].detach().clone().requires_grad_(True)
    scale = d.fwd_in["scale"].detach().clone().requires_grad_(True)
    bias = d.fwd_in["bias"].detach().clone().requires_grad_(True)
    norm = torch.nn.functional.layer_norm(
        x, [EMBED, 1, 1], weight=scale.squeeze(0), bias=bias.squeeze(0), eps=EPS
    )
    out_ref = torch.clamp(norm, min=LO, max=HI)
    xd = x.detach()
    d.fwd_ref = {
        "out": out_ref.detach(),
        "mean": xd.mean(dim=(1, 2, 3), keepdim=True),
        "inv_var": torch.rsqrt(xd.var(dim=(1, 2, 3), keepdim=True, correction=0) + EPS),
        "mask": (out_ref.detach() > LO) & (out_ref.detach() < HI),
    }
    d_out = torch.randn(out_ref.shape, device="cuda", generator=gen).to(memory_format=cl)
    out_ref.backward(d_out)
    d.bwd_in = {"d_out": d_out, "x": xd, "scale": scale.detach()}
    d.bwd_ref = {"d_x": x.grad, "d_scale": scale.grad, "d_bias": bias.grad}
    d.bwd_out = {
        "d_x": torch.full_like(xd, nan),
        "d_scale": torch.full_like(scale.detach(), nan),
        "d_bias": torch.full_like(bias.detach(), nan),
    }
    return d


def unpack_bitmask(torch: Any, packed: Any) -> Any:
    """[N, C/8, 1, 1] uint8, bit b of byte j = channel 8*j + b -> bool [N, C, 1, 1]."""
    p = packed.view(ROWS, EMBED // 8, 1)
    bits = [((p >> b) & 1).bool() for b in range(8)]
    return torch.stack(bits, dim=2).view(ROWS, EMBED, 1, 1)


def _close(torch: Any, name: str, got: Any, ref: Any, tol: float) -> str | None:
    got, ref = got.reshape(ref.shape).float(), ref.float()
    if torch.isnan(got).any():
        return f"{name}: {int(torch.isnan(got).sum())} of {got.numel()} values never written (NaN)"
    bad = (got - ref).abs() > tol + tol * ref.abs()
    if bad.any():
        worst = float((got - ref).abs().max())
        return (
            f"{name}: {int(bad.sum())} of {got.numel()} beyond tol {tol:g} (max |diff| {worst:.3g})"
        )
    return None


def check_forward(torch: Any, d: _Data) -> list[str]:
    problems = [
        _close(torch, k, d.fwd_out[k], d.fwd_ref[k], FWD_TOL) for k in ("out", "mean", "inv_var")
    ]
    ref_out, mask_ref = d.fwd_ref["out"], d.fwd_ref["mask"]
    mask = unpack_bitmask(torch, d.fwd_out["bitmask"])
    edge = ((ref_out - LO).abs() < MASK_SLACK) | ((ref_out - HI).abs() < MASK_SLACK)
    wrong = (mask != mask_ref) & ~edge
    if wrong.any():
        problems.append(f"bitmask: {int(wrong.sum())} of {mask.numel()} bits differ")
    return [p for p in problems if p]


def check_backward(torch: Any, d: _Data) -> list[str]:
    keys = ("d_x", "d_scale", "d_bias")
    problems = [_close(torch, k, d.bwd_out[k], d.bwd_ref[k], BWD_TOL) for k in keys]
    return [p for p in problems if p]


def _pack(t: dict[str, Any], bufs: dict[str, Any]) -> dict[Any, Any]:
    return {t[k]: v for k, v in bufs.items()}


def run_step(cudnn: Any, torch: Any, handle: Any, step: Step, label: str, d: _Data) -> list[str]:
    """Build, execute and check one graph on the GPU, synchronizing after each stage; raise
    StepFailed naming the stage an error (an asynchronous CUDA one too) belongs to."""
    sync = torch.cuda.synchronize
    if step.kind == "fwd":
        bufs = {**d.fwd_in, **d.fwd_out}
    else:
        bufs = {
            **d.bwd_in,
            "bitmask": d.fwd_out["bitmask"],
            "mean": d.fwd_out["mean"],
            "inv_var": d.fwd_out["inv_var"],
            **d.bwd_out,
        }
    if step.api == "graph":

        def construct_and_build() -> Any:
            with cudnn.Graph(handle=handle, **_fp32(cudnn)) as g:
                t = _add(cudnn, g, step)
            return g, t

        # cudnn.Graph builds its plans when the `with` block exits
        g, t = staged(label, "construct/build", construct_and_build, sync)
        staged(label, "execute", lambda: g(_pack(t, bufs), handle=handle), sync)
    else:
        pg = cudnn.pygraph(handle=handle, **_fp32(cudnn))
        t = staged(label, "construct", lambda: _add(cudnn, pg, step), sync)

        def build() -> Any:
            pg.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
            return torch.empty(pg.get_workspace_size(), device="cuda", dtype=torch.uint8)

        workspace = staged(label, "build", build, sync)
        staged(label, "execute", lambda: pg.execute(_pack(t, bufs), workspace, handle=handle), sync)
    check = check_forward if step.kind == "fwd" else check_backward
    problems: list[str] = staged(label, "compare", lambda: check(torch, d), sync)
    return problems


def teardown(cudnn: Any, torch: Any, handle: Any, out: Outcome) -> None:
    """Synchronize, then destroy the handle. An error here becomes the first error only when no
    graph failed before; otherwise it is recorded beside it (it is that error's echo)."""
    for stage, work in (
        ("synchronize", torch.cuda.synchronize),
        ("destroy handle", lambda: cudnn.destroy_handle(handle)),
    ):
        _stage(f"teardown: {stage}")
        try:
            work()
        except Exception as exc:  # noqa: BLE001 - any failure here is reported, none raised
            failed = StepFailed("teardown", stage, exc)
            out.facts.setdefault("teardown_errors", []).append(failed.record()["error"])
            if out.first_error is None:
                out.first_error = failed.record()


def run_gpu(
    cudnn: Any,
    torch: Any,
    steps: tuple[Step, ...],
    out: Outcome,
    *,
    step_fn: Callable[..., list[str]] = run_step,
    data_fn: Callable[..., _Data] | None = None,
    check_fn: Callable[..., list[str]] | None = None,
) -> None:
    """Every graph in turn; stop at the first that fails (the context may be poisoned). The
    verdict's reason starts with the first error: graph, stage and the CUDA error. step_fn,
    data_fn and check_fn (run_step, the torch inputs, the forward check) are what needs a GPU."""
    make_data = data_fn or _forward_data
    recheck = check_fn or check_forward
    handle = cudnn.create_handle()
    out.facts["gpu"] = torch.cuda.get_device_name(0)
    out.facts["sm"] = "{}.{}".format(*torch.cuda.get_device_capability(0))
    pairs: list[_Data] = []
    failures: list[str] = []
    try:
        for i, step in enumerate(steps, start=1):
            label = step.label(i)
            try:
                if step.kind == "fwd":  # torch ops: an earlier async error may surface here
                    inputs = functools.partial(make_data, torch, seed=1000 + i)
                    pairs.append(staged(label, "inputs", inputs, torch.cuda.synchronize))
                problems = step_fn(cudnn, torch, handle, step, label, pairs[-1])
            except StepFailed as exc:
                out.first_error = exc.record()
                out.graphs.append({"graph": label, "ok": False, **exc.record()})
                failures.append(str(exc))
                break  # the context may be poisoned; later graphs would only repeat the error
            out.graphs.append({"graph": label, "ok": not problems, "problems": problems})
            if problems:
                failures.append(f"{label} wrong results: " + "; ".join(problems))
        if not failures:  # earlier graphs' outputs must not have changed under later graphs
            fwd_labels = [s.label(i) for i, s in enumerate(steps, start=1) if s.kind == "fwd"]
            for label, d in zip(fwd_labels[:-1], pairs[:-1], strict=True):
                try:
                    problems = staged(
                        label,
                        "recheck",
                        functools.partial(recheck, torch, d),
                        torch.cuda.synchronize,
                    )
                except StepFailed as exc:
                    out.first_error = exc.record()
                    out.graphs.append({"graph": label, "ok": False, **exc.record()})
                    failures.append(str(exc))
                    break
                if problems:
                    failures.append(
                        f"{label} outputs changed after later graphs ran: " + "; ".join(problems)
                    )
    finally:
        teardown(cudnn, torch, handle, out)
    first = out.first_error
    if first is not None and not failures:  # nothing failed until teardown
        failures.append(f"{first['graph']} failed at {first['stage']}: {first['error']}")
    if failures:
        reason = " | ".join(failures)
        if first is not None and first.get("cuda_error"):
            reason = f"{reason} [first CUDA error: {first['cuda_error']}]"
        echoes = out.facts.get("teardown_errors", [])
        if echoes and first is not None and first["graph"] != "teardown":
            reason += f" (then at teardown: {'; '.join(echoes)})"
        out.verdict, out.reason = "fail", reason
    else:
        out.reason = f"{len(steps)} graphs match the torch reference"


# --------------------------------------------------------------------------- main


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--variant",
        choices=sorted(VARIANTS),
        default=os.environ.get("REPRO_VARIANT", "graph-pygraph"),
    )
    p.add_argument("--json", dest="json_path", default=None, help="also write the result here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    out = Outcome(variant=args.variant)
    steps = VARIANTS[args.variant]
    try:
        import cudnn
    except ImportError as exc:
        return _env_error(f"cannot import cudnn (nvidia-cudnn-frontend): {exc}")
    out.facts["frontend"] = getattr(cudnn, "__version__", "?")
    out.facts["pygraph_impl"] = f"{cudnn.pygraph.__module__}.{cudnn.pygraph.__qualname__}"
    try:
        backend = int(cudnn.backend_version())
    except Exception as exc:  # noqa: BLE001 - RuntimeError today; any failure means no backend
        return _env_error(f"libcudnn not loadable by the frontend: {exc}")
    out.facts["backend"] = backend
    if backend < MIN_BACKEND:
        out.verdict = "skip"
        out.reason = (
            f"backend {backend} < {MIN_BACKEND} (LayerNorm+ReLU bitmask needs cuDNN >= 9.13)"
        )
        return _finish(out, args.json_path)
    gpu = _gpu_state()
    out.facts["gpu_state"] = gpu or "ok"
    if gpu is not None:
        out.verdict = "skip"
        out.reason = f"{gpu}: {construct_only(cudnn, steps, out)}"
        return _finish(out, args.json_path)
    try:
        import torch
    except ImportError as exc:
        return _env_error(f"cannot import torch (the reference): {exc}")
    if not torch.cuda.is_available():
        return _env_error(f"torch {torch.__version__} sees no CUDA device although the driver does")
    out.facts["torch"] = torch.__version__
    try:
        run_gpu(cudnn, torch, steps, out)
    except Exception as exc:  # noqa: BLE001 - outside any graph (reference, handle): still a fail
        traceback.print_exc()
        first = out.first_error
        why = f"{type(exc).__name__}: {exc}"
        if first is not None:  # never mask the first error with a later one
            why = f"{first['graph']} failed at {first['stage']}: {first['error']} (then {why})"
        out.verdict, out.reason = "fail", why
    return _finish(out, args.json_path)


if __name__ == "__main__":
    sys.exit(main())
