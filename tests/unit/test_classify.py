"""Table-driven tests of classify(): one row per observed situation, expected (outcome, reason)."""

from __future__ import annotations

from typing import Any

import pytest

from validate.execute.classify import ExecResult, classify, classify_exception, signal_name
from validate.model.outcome import Outcome


def _nb(**report: Any) -> ExecResult:
    return ExecResult(kind="notebook", returncode=0, timeout_s=5, report=report)


def _sc(returncode: int | None, **kw: Any) -> ExecResult:
    return ExecResult(kind="script", returncode=returncode, timeout_s=5, **kw)


CASES = [
    ("nb pass", _nb(status="pass"), Outcome.PASS, ""),
    (
        "nb exception",
        _nb(status="fail", ename="ValueError", evalue="boom", cell_index=2),
        Outcome.FAIL,
        "ValueError: boom (cell 2)",
    ),
    (
        "nb illegal address is a crash",
        _nb(status="fail", ename="RuntimeError", evalue="CUDA error: an illegal memory access"),
        Outcome.CRASH,
        "CUDA context poisoned",
    ),
    (
        "nb cuda error 719",
        _nb(status="fail", ename="CudaError", evalue="CUDA error 719 at foo.cu:12"),
        Outcome.CRASH,
        "CUDA context poisoned",
    ),
    (
        "nb misaligned",
        _nb(status="fail", ename="RuntimeError", evalue="misaligned address"),
        Outcome.CRASH,
        "CUDA context poisoned",
    ),
    (
        "graph not supported",
        _nb(status="fail", ename="cudnnGraphNotSupportedError", evalue="no engine"),
        Outcome.SKIP,
        "graph not supported by this backend",
    ),
    (
        "backend floor in source",
        _nb(
            status="fail",
            ename="AssertionError",
            evalue="",
            cell_source="assert cudnn.backend_version() >= 91300",
        ),
        Outcome.SKIP,
        "backend floor not met: assert cudnn.backend_version() >= 91300",
    ),
    (
        "plain assert is a fail",
        _nb(status="fail", ename="AssertionError", evalue="wrong numbers"),
        Outcome.FAIL,
        "AssertionError: wrong numbers",
    ),
    (
        "module missing",
        _nb(status="fail", ename="ModuleNotFoundError", evalue="No module named 'cupy'"),
        Outcome.ERROR,
        "environment: ModuleNotFoundError",
    ),
    (
        "sub-library version mismatch",
        _nb(
            status="fail",
            ename="cudnnGraphNotSupportedError",
            evalue="CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH",
        ),
        Outcome.ERROR,
        "environment:",
    ),
    (
        "no libcudnn at all",
        _nb(status="fail", ename="RuntimeError", evalue="Unable to find symbol cudnnGetVersion"),
        Outcome.ERROR,
        "environment:",
    ),
    (  # issue 12 item 7: on the H200 a sub-library from elsewhere made 60_causal_conv1d_* fail
        "frontend cannot load a backend symbol",
        _nb(
            status="fail",
            ename="RuntimeError",
            evalue="Invalid handle. Cannot load symbol cudnnCausalConv1dForward",
            cell_index=3,
        ),
        Outcome.ERROR,
        "environment: RuntimeError: Invalid handle. Cannot load symbol cudnnCausalConv1dForward",
    ),
    (
        "sub-library did not load (graph not supported would be a skip)",
        _nb(
            status="fail",
            ename="cudnnGraphNotSupportedError",
            evalue="[cudnn_frontend] Error: CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED",
        ),
        Outcome.ERROR,
        "environment: cudnnGraphNotSupportedError",
    ),
    (  # torch's batchnorm with a system libcudnn_ops next to the pinned dispatcher
        "sub-library of another version, through torch",
        _nb(
            status="fail",
            ename="RuntimeError",
            evalue="cuDNN error: CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH",
        ),
        Outcome.ERROR,
        "environment: RuntimeError: cuDNN error: CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH",
    ),
    (
        "script exit 1 on a sub-library that did not load",
        _sc(1, tail="Traceback ...\nRuntimeError: CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED\n"),
        Outcome.ERROR,
        "environment:",
    ),
    (
        "script exception: cannot load symbol",
        _sc(
            1,
            report={
                "exception": {
                    "ename": "RuntimeError",
                    "evalue": "Invalid handle. Cannot load symbol cudnnCausalConv1dBackward",
                }
            },
        ),
        Outcome.ERROR,
        "environment: RuntimeError: Invalid handle. Cannot load symbol cudnnCausalConv1dBackward",
    ),
    (
        "old backend lacks a symbol",
        _nb(
            status="fail",
            ename="RuntimeError",
            evalue="Unable to find symbol cudnnCausalConv1dForward",
        ),
        Outcome.SKIP,
        "backend lacks cudnnCausalConv1dForward",
    ),
    (
        "nb cell timeout",
        _nb(status="timeout", cell_index=0),
        Outcome.TIMEOUT,
        "cell timed out after 5s",
    ),
    (
        "dead kernel by signal",
        _nb(status="dead", kernel_signal="SIGABRT", kernel_exit_code=-6, cell_index=26),
        Outcome.CRASH,
        "kernel died (cell 26): killed by SIGABRT",
    ),
    (
        "dead kernel by exit",
        _nb(status="dead", kernel_signal=None, kernel_exit_code=3, cell_index=1),
        Outcome.CRASH,
        "kernel died (cell 1): exited with status 3",
    ),
    (
        "kernel would not start",
        _nb(status="error", ename="RuntimeError", evalue="x"),
        Outcome.ERROR,
        "notebook runner",
    ),
    (
        "runner killed, no report",
        ExecResult(kind="notebook", returncode=-9),
        Outcome.CRASH,
        "notebook runner killed by SIGKILL",
    ),
    (
        "runner missing nbclient",
        ExecResult(
            kind="notebook", returncode=1, tail="ModuleNotFoundError: No module named 'nbclient'\n"
        ),
        Outcome.ERROR,
        "notebook runner exited with status 1",
    ),
    (
        "tool timeout wins",
        ExecResult(kind="notebook", returncode=-15, timed_out=True, timeout_s=5),
        Outcome.TIMEOUT,
        "timed out after 5s",
    ),
    ("script exit 0", _sc(0), Outcome.PASS, ""),
    ("script exit 1", _sc(1), Outcome.FAIL, "exit status 1"),
    (
        "script exit 1 poisoned text",
        _sc(1, tail="CUDA error: unspecified launch failure\n"),
        Outcome.CRASH,
        "CUDA context poisoned",
    ),
    ("script exit 3", _sc(3), Outcome.ERROR, "script exited with status 3"),
    ("script segfault", _sc(-11), Outcome.CRASH, "killed by SIGSEGV"),
    ("script abort", _sc(-6), Outcome.CRASH, "killed by SIGABRT"),
    ("verdict line", _sc(0, verdict=(Outcome.SKIP, "no arch")), Outcome.SKIP, "no arch"),
    ("result file", _sc(0, result_file=(Outcome.FAIL, "mismatch")), Outcome.FAIL, "mismatch"),
    (
        "own fail verdict naming an illegal address",
        _sc(1, verdict=(Outcome.FAIL, "graph 2 execute: an illegal memory access was encountered")),
        Outcome.CRASH,
        "CUDA context poisoned: graph 2 execute: an illegal memory access",
    ),
    (
        "bad result file",
        _sc(0, result_file="bad result file x"),
        Outcome.ERROR,
        "bad result file x",
    ),
    (
        "script exception kept",
        _sc(1, report={"exception": {"ename": "KeyError", "evalue": "'a'", "traceback": "..."}}),
        Outcome.FAIL,
        "KeyError: 'a'",
    ),
]


@pytest.mark.parametrize(
    ("run", "outcome", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_classify(run: ExecResult, outcome: Outcome, reason: str) -> None:
    got, why = classify(run)
    assert got is outcome
    assert reason in why
    if not reason:
        assert why == ""


def test_pin_error_overrides_a_pass() -> None:
    msg = "pin not honoured: loaded 9.19.0 from /x/libcudnn.so.9, expected 9.24.0"
    assert classify(_nb(status="pass"), pin_error=msg) == (Outcome.ERROR, msg)


def test_multiline_message_keeps_first_line() -> None:
    _, reason = classify_exception("RuntimeError", "line one\nline two")
    assert reason == "RuntimeError: line one"


@pytest.mark.parametrize(
    ("code", "name"), [(-11, "SIGSEGV"), (-6, "SIGABRT"), (0, None), (3, None), (None, None)]
)
def test_signal_name(code: int | None, name: str | None) -> None:
    assert signal_name(code) == name
