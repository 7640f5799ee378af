"""Root cause in the repro's verdict (issue 13 item 5).

Classification: real case processes run by the real runner, printing the real texts the H200 run
recorded (reports/gpu/...: graph 3's illegal memory access kept in the RESULT JSON, masked by
"cudnnHandle Destroy failed" as the reason). Staging: the repro's own functions, with fakes only
for what needs a GPU (the device synchronize, the handle).
"""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from validate.env.target import ExecTarget
from validate.execute.cases import SHIPPED_CASES, discover_cases
from validate.execute.classify import ExecResult, classify
from validate.execute.runner import RunOptions, run_case
from validate.model.outcome import Outcome

REPO = Path(__file__).resolve().parents[2]
SCRIPT = SHIPPED_CASES / "repro_fusion_uid.py"  # the installed package's copy
#: The H200 evidence of repro_fusion_uid[backward] on 9.24.0.43 / fe 1.26.0 (committed run).
H200 = (
    REPO / "reports/gpu/2026-12-02-h200-matrix/y/validate/cases/81bb9b271a"
    "/repro_fusion_uid_backward-2712d1"
)
#: torch 2.11's text for cudaErrorIllegalAddress, as the H200 printed it.
ILLEGAL = (
    "CUDA error: an illegal memory access was encountered\n"
    "Search for `cudaErrorIllegalAddress' in https://docs.nvidia.com/cuda/cuda-runtime-api/"
    "group__CUDART__TYPES.html for more information.\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1"
)


def _repro() -> Any:
    spec = importlib.util.spec_from_file_location("repro_fusion_uid_under_test", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


repro = _repro()


def _case(tmp_path: Path, name: str, body: str) -> Any:
    folder = tmp_path / "cases"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(textwrap.dedent(body), encoding="utf-8")
    (case,) = (c for c in discover_cases([folder]) if c.name == name)
    return case


def _run(tmp_path: Path, name: str, body: str) -> Any:
    case = _case(tmp_path, name, body)
    options = RunOptions(timeout_s=60, results_dir=tmp_path / "run", api_logs=False)
    return run_case(case, ExecTarget(python=Path(sys.executable)), options)


REPLAY = """\
import os, pathlib, sys
evidence = pathlib.Path({evidence!r})
sys.stdout.write((evidence / "output.log").read_text())
sys.stdout.flush()
result = os.environ.get("CUDNN_MATRIX_RESULT_FILE")
if result and {with_file}:
    pathlib.Path(result).write_text((evidence / "script-result.json").read_text())
sys.exit(1)
"""


@pytest.mark.parametrize("with_file", [True, False], ids=["result-file", "verdict-line"])
def test_h200_masked_illegal_access_is_a_crash_naming_the_first_graph(
    tmp_path: Path, with_file: bool
) -> None:
    """The H200 output as it was: the reason said "cudnnHandle Destroy failed"; the illegal
    memory access of graph 3 was only in the RESULT JSON. Now it is a crash that names it."""
    assert "cudnnHandle Destroy failed" in (H200 / "output.log").read_text()
    body = REPLAY.format(evidence=str(H200), with_file=with_file)
    result = _run(tmp_path, "replay_h200.py", body)
    assert result.outcome is Outcome.CRASH, result.reason
    assert result.reason.startswith(
        "CUDA context poisoned: graph 3 (fwd, cudnn.pygraph, uids 101..110) failed at "
        "synchronize: AcceleratorError: CUDA error: an illegal memory access was encountered; "
        "the script said fail: RuntimeError: cudnnHandle Destroy failed"
    ), result.reason


# (name, what the script prints, exit status) -> (outcome, reason starts with)
SCRIPTS = [
    (
        "poison_in_stderr_pass_verdict.py",
        f"import sys\nsys.stderr.write({ILLEGAL!r} + '\\n')\nprint('VERDICT pass: fine')\n",
        0,
        Outcome.CRASH,
        (
            "CUDA context poisoned: CUDA error: an illegal memory access was encountered; the "
            "script said pass: fine"
        ),
    ),
    (
        "poison_in_result_first_error.py",
        (
            "import json\n"
            "first = {'graph': 'graph 2 (bwd, cudnn.Graph, uids 11..19)', 'stage': 'execute', "
            "'error': 'AcceleratorError: CUDA error: an illegal memory access was encountered'}\n"
            "print('RESULT ' + json.dumps({'first_error': first, 'graphs': []}))\n"
            "print('VERDICT fail: RuntimeError: cudnnHandle Destroy failed')\n"
        ),
        1,
        Outcome.CRASH,
        (
            "CUDA context poisoned: graph 2 (bwd, cudnn.Graph, uids 11..19) failed at execute: "
            "AcceleratorError: CUDA error: an illegal memory access was encountered"
        ),
    ),
    (
        "cuda_enum_only.py",
        "print('cudaErrorIllegalAddress at teardown')\nprint('VERDICT fail: handle')\n",
        1,
        Outcome.CRASH,
        "CUDA context poisoned: cudaErrorIllegalAddress at teardown",
    ),
    (  # a wrong number with no CUDA error stays a fail
        "plain_fail.py",
        (
            'print(\'RESULT {"first_error": null, "graphs": []}\')\n'
            "print('VERDICT fail: graph 2 wrong results: out: 3 of 4 beyond tol')\n"
        ),
        1,
        Outcome.FAIL,
        "graph 2 wrong results",
    ),
    (  # a skip is a skip, whatever it printed
        "skip_verdict.py",
        f"print({ILLEGAL!r})\nprint('VERDICT skip: no GPU')\n",
        0,
        Outcome.SKIP,
        "no GPU",
    ),
]


@pytest.mark.parametrize(
    ("name", "body", "code", "outcome", "reason"), SCRIPTS, ids=[s[0] for s in SCRIPTS]
)
def test_poison_anywhere_in_a_script(
    tmp_path: Path, name: str, body: str, code: int, outcome: Outcome, reason: str
) -> None:
    result = _run(tmp_path, name, f"{body}import sys\nsys.exit({code})\n")
    assert result.outcome is outcome, result.reason
    assert result.reason.startswith(reason), result.reason


# --------------------------------------------------------------------------- repro staging


class FakeCuda:
    """torch.cuda where a GPU is needed: synchronize raises the H200's error at call `fail_at`."""

    def __init__(self, fail_at: int | None, text: str = ILLEGAL) -> None:
        self.calls, self.fail_at, self.text = 0, fail_at, text
        self.failed = False

    def synchronize(self) -> None:
        self.calls += 1
        if self.failed or (self.fail_at is not None and self.calls >= self.fail_at):
            self.failed = True  # a poisoned context: every later call fails too
            raise RuntimeError(self.text)  # torch 2.11 raises AcceleratorError, a RuntimeError

    def get_device_name(self, _index: int) -> str:
        return "fake GPU"

    def get_device_capability(self, _index: int) -> tuple[int, int]:
        return 9, 0


class FakeTorch:
    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda


class FakeCudnn:
    """The handle calls: destroy fails once the context is poisoned (the H200's symptom)."""

    def __init__(self, cuda: FakeCuda) -> None:
        self.cuda = cuda

    def create_handle(self) -> str:
        return "handle"

    def destroy_handle(self, _handle: str) -> None:
        if self.cuda.failed:
            msg = "cudnnHandle Destroy failed "
            raise RuntimeError(msg)


def _stages() -> Any:
    """A step that runs the repro's stages as run_step names them, work stubbed, sync real(fake)."""

    def step(_cudnn: Any, torch: Any, _handle: Any, s: Any, label: str, _d: Any) -> list[str]:
        names = ("construct/build", "execute") if s.api == "graph" else ("construct", "build")
        for stage in (*names, *(("execute",) if s.api != "graph" else ()), "compare"):
            repro.staged(label, stage, lambda: None, torch.cuda.synchronize)
        return []

    return step


# (variant, failing synchronize call) -> the first error's graph and stage; None: all pass
STAGING = [
    ("backward", 6, "graph 2 (bwd, cudnn.Graph, uids 11..19)", "execute"),
    ("backward", 1, "graph 1 (fwd, cudnn.Graph, uids 1..10)", "inputs"),
    ("graph-pygraph", 7, "graph 2 (fwd, cudnn.pygraph, uids 101..110)", "build"),
    ("graph-graph", 9, "graph 1 (fwd, cudnn.Graph, uids 1..10)", "recheck"),  # after graph 2
    ("graph-graph", 10, "teardown", "synchronize"),  # all graphs ran; the device fails after
    ("graph-graph", None, None, None),
]


@pytest.mark.parametrize(("variant", "fail_at", "graph", "stage"), STAGING)
def test_first_error_names_graph_stage_and_cuda_error(
    variant: str,
    fail_at: int | None,
    graph: str | None,
    stage: str | None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cuda = FakeCuda(fail_at)
    out = repro.Outcome(variant=variant)
    repro.run_gpu(
        FakeCudnn(cuda),
        FakeTorch(cuda),
        repro.VARIANTS[variant],
        out,
        step_fn=_stages(),
        data_fn=lambda _torch, **_seed: repro._Data(),
        check_fn=lambda _torch, _d: [],
    )
    code = repro._finish(out, None)
    lines = capsys.readouterr().out.strip().splitlines()
    result = json.loads(lines[-2].removeprefix("RESULT "))
    if graph is None:
        assert (code, out.verdict, result["first_error"]) == (0, "pass", None)
        assert out.reason == "2 graphs match the torch reference"
        return
    first = result["first_error"]
    assert (first["graph"], first["stage"]) == (graph, stage)
    assert first["error"] == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert (
        first["cuda_error"] == "an illegal memory access was encountered (cudaErrorIllegalAddress)"
    )
    assert code == 1
    assert out.reason.startswith(f"{graph} failed at {stage}: RuntimeError: CUDA error: an illegal")
    assert "[first CUDA error: an illegal memory access was encountered" in out.reason
    if graph != "teardown":  # the teardown's errors are its echo, recorded beside it
        assert result["teardown_errors"] == [
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            "RuntimeError: cudnnHandle Destroy failed",
        ]
        assert out.reason.endswith(
            "(then at teardown: RuntimeError: CUDA error: an illegal memory access was "
            "encountered; RuntimeError: cudnnHandle Destroy failed)"
        )
        assert [g["ok"] for g in result["graphs"]][-1] is False
    # and the runner's rule reads it as a crash naming that graph and stage
    tail = "\n".join(lines)
    verdict = repro_verdict(lines[-1])
    outcome, reason = classify(
        ExecResult(kind="script", returncode=code, tail=tail, verdict=verdict)
    )
    assert outcome is Outcome.CRASH
    assert reason.startswith(f"CUDA context poisoned: {graph} failed at {stage}")


def repro_verdict(line: str) -> tuple[Outcome, str]:
    from validate.execute.cases.script import verdict_line

    found = verdict_line(line)
    assert found is not None
    return found


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (ILLEGAL, "an illegal memory access was encountered (cudaErrorIllegalAddress)"),
        ("CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_ILLEGAL_ADDRESS"),
        ("CUDA error: unspecified launch failure", "unspecified launch failure"),
        ("cudnnHandle Destroy failed", None),
    ],
)
def test_cuda_error_text(text: str, expected: str | None) -> None:
    assert repro.cuda_error(text) == expected
