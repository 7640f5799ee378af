"""Case requirements from TOML and the in-process pin check (table-driven, hermetic)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from validate.errors import MatrixError
from validate.execute.resources.capture import redact_env, verify_pins
from validate.plan.requirements import DEFAULT_CASES_TOML, RequirementTable, check

if TYPE_CHECKING:
    from pathlib import Path

TABLE = RequirementTable.from_toml(DEFAULT_CASES_TOML)


@pytest.mark.parametrize(
    ("name", "gpu", "arch", "backend", "missing", "reason"),
    [
        ("26_layernorm.ipynb", False, None, "9.24.0.43", set(), "no NVIDIA driver"),
        ("26_layernorm.ipynb", True, "sm90", "9.12.0", set(), "needs cuDNN backend >= 9.13"),
        ("26_layernorm.ipynb", True, "sm90", "9.24.0.43", set(), None),
        ("52_mm.ipynb", True, "sm75", "9.24.0", set(), "needs SM >= 8.0, host is sm75"),
        ("01_matmul.ipynb", True, "sm90", "9.24.0", {"cupy"}, "needs module cupy"),
        ("61_conv.ipynb", True, "sm100", "9.21.0", set(), "needs cuDNN backend >= 9.22"),
        ("99_new.ipynb", True, "sm90", None, {"torch"}, "needs module torch"),
    ],
)
def test_sample_requirements(
    name: str,
    gpu: bool,
    arch: str | None,
    backend: str | None,
    missing: set[str],
    reason: str | None,
) -> None:
    got = check(
        TABLE.for_case(name),
        has_gpu=gpu,
        host_arch=arch,
        backend_version=backend,
        missing=frozenset(missing),
    )
    if reason is None:
        assert got is None
    else:
        assert got is not None
        assert reason in got


def test_bad_toml_reports_every_problem(tmp_path: Path) -> None:
    bad = tmp_path / "cases.toml"
    bad.write_text('[defaults]\nneeds_gpus = true\n[cases."2*"]\nmin_backend = "nine"\n', "utf-8")
    with pytest.raises(MatrixError) as err:
        RequirementTable.from_toml(bad)
    assert "needs_gpus" in str(err.value)
    assert "'nine' is not a version" in str(err.value)
    assert str(err.value).split("; ") == [
        (
            f"{bad}:2: defaults.needs_gpus: unknown key (known: archs, exclusive, imports, min_backend, "
            "min_sm, needs_gpu, source)"
        ),
        f"{bad}:4: cases.\"2*\".min_backend: 'nine' is not a version",
    ]


LIB = "/venv/nvidia/cudnn/lib/libcudnn.so.9"
TORCH_LIB = "/base/site-packages/nvidia/cudnn/lib/libcudnn.so.9"
PINNED = "/opt/cudnn/lib/libcudnn.so.9"
PINNED_OPS = "/opt/cudnn/lib/libcudnn_ops.so.9"
PINNED_GRAPH = "/opt/cudnn/lib/libcudnn_graph.so.9"
SYSTEM_OPS = "/usr/lib/x86_64-linux-gnu/libcudnn_ops.so.9.14.0"
TORCH_ADV = "/base/site-packages/nvidia/cudnn/lib/libcudnn_adv.so.9"


@pytest.mark.parametrize(
    ("captured", "expected", "message"),
    [
        ({"backend_version": 92400, "cudnn_libs": [LIB]}, {"backend": "9.24.0.43"}, None),
        (
            {"backend_version": 91900, "cudnn_libs": [LIB]},
            {"backend": "9.24.0"},
            f"pin not honoured: loaded 9.19.0 from {LIB}, expected 9.24.0",
        ),
        (
            {"backend_version": 92400, "cudnn_libs": [LIB]},
            {"backend_dir": "/opt/cudnn/lib"},
            (
                f"pin not honoured (libcudnn from {LIB}, version unknown); the cell's backend is "
                "/opt/cudnn/lib"
            ),
        ),
        (  # the dispatcher and a sub-library from the pinned folder: the pin holds
            {"backend_version": 92400, "cudnn_libs": [PINNED, PINNED_OPS]},
            {"backend": "9.24.0", "backend_dir": "/opt/cudnn/lib"},
            None,
        ),
        (  # issue 12 item 7 changed this rule. It was "torch's own copy mapped too: the pin
            # holds while the pinned dispatcher is there"; now every mapped copy must be the
            # pinned one, so torch's own dispatcher beside it is `pin not honoured`, with the
            # version its cudnnGetVersion() said (capture.py cudnn_lib_versions).
            {
                "backend_version": 92400,
                "cudnn_libs": [TORCH_LIB, PINNED],
                "cudnn_lib_versions": {TORCH_LIB: 91900, PINNED: 92400},
            },
            {"backend": "9.24.0", "backend_dir": "/opt/cudnn/lib"},
            (
                f"pin not honoured (libcudnn from {TORCH_LIB}, 9.19.0); the cell's backend is "
                "/opt/cudnn/lib"
            ),
        ),
        (  # seen on the H200: torch opens its own dispatcher file by full path, but with the
            # pinned one preloaded every consumer reports the pinned version: the pin holds
            {
                "backend_version": 92101,
                "cudnn_libs": [TORCH_LIB, PINNED, PINNED_GRAPH],
                "bound": {"frontend": f"92101 from {PINNED}", "torch": f"92101 from {PINNED}"},
            },
            {"backend": "9.21.1.3", "backend_dir": "/opt/cudnn/lib"},
            None,
        ),
        (  # the same, but torch is bound to its own 9.19: not the pinned backend
            {
                "backend_version": 92101,
                "cudnn_libs": [TORCH_LIB, PINNED],
                "bound": {"frontend": f"92101 from {PINNED}", "torch": f"91900 from {TORCH_LIB}"},
            },
            {"backend": "9.21.1.3", "backend_dir": "/opt/cudnn/lib"},
            f"pin not honoured (libcudnn from {TORCH_LIB}",
        ),
        (  # a sub-library from elsewhere is never accepted, whatever the consumers report
            {
                "backend_version": 92101,
                "cudnn_libs": [PINNED, TORCH_ADV],
                "bound": {"frontend": f"92101 from {PINNED}"},
            },
            {"backend": "9.21.1.3", "backend_dir": "/opt/cudnn/lib"},
            f"pin not honoured (libcudnn_adv from {TORCH_ADV}",
        ),
        (  # only torch's copy: the frontend did not load the pinned folder's library
            {"backend_version": 92400, "cudnn_libs": [TORCH_LIB]},
            {"backend": "9.24.0", "backend_dir": "/opt/cudnn/lib"},
            f"pin not honoured (libcudnn from {TORCH_LIB}, version unknown)",
        ),
        (  # the H200 case: a 9.25 dispatcher with the system's libcudnn_ops.so.9.14.0
            {"backend_version": 92501, "cudnn_libs": [PINNED, SYSTEM_OPS, PINNED_GRAPH]},
            {"backend": "9.25.1.1", "backend_dir": "/opt/cudnn/lib"},
            (
                f"pin not honoured (libcudnn_ops from {SYSTEM_OPS}, 9.14.0); the cell's backend is "
                "/opt/cudnn/lib"
            ),
        ),
        (  # every stray is named, the dispatcher matching backend_version() or not
            {"backend_version": 92400, "cudnn_libs": [PINNED, SYSTEM_OPS, TORCH_ADV]},
            {"backend": "9.24.0", "backend_dir": "/opt/cudnn/lib"},
            (
                f"pin not honoured (libcudnn_ops from {SYSTEM_OPS}, 9.14.0; libcudnn_adv from "
                f"{TORCH_ADV}, version unknown)"
            ),
        ),
        (  # a folder whose name holds "libcudnn" maps other libraries too: those are not cuDNN
            {"backend_version": 92400, "cudnn_libs": [PINNED, "/opt/libcudnn-x/libcublas.so.13"]},
            {"backend": "9.24.0", "backend_dir": "/opt/cudnn/lib"},
            None,
        ),
        (  # a sub-library of the pinned version, but not from the pinned folder, still counts
            {"backend_version": 92400, "cudnn_libs": [PINNED, "/usr/lib/libcudnn_cnn.so.9.24.0"]},
            {"backend": "9.24.0", "backend_dir": "/opt/cudnn/lib"},
            "pin not honoured (libcudnn_cnn from /usr/lib/libcudnn_cnn.so.9.24.0, 9.24.0)",
        ),
        (
            {"backend_error": "RuntimeError: Unable to find symbol cudnnGetVersion"},
            {"backend": "9.24.0"},
            "pin not honoured: no backend loaded (RuntimeError: Unable to find symbol",
        ),
        (
            {"frontend_version": "1.27.0"},
            {"frontend": "1.26.0"},
            "pin not honoured: loaded frontend",
        ),
    ],
)
def test_verify_pins(
    captured: dict[str, object], expected: dict[str, str], message: str | None
) -> None:
    got = verify_pins(captured, expected)
    if message is None:
        assert got is None
    else:
        assert got is not None
        assert message in got


def test_secrets_are_redacted() -> None:
    env = redact_env(
        {"HF_TOKEN": "abc", "CUDA_HOME": "/usr/local/cuda", "MY_API_KEY": "k", "HOME": "/r"}
    )
    assert env == {
        "CUDA_HOME": "/usr/local/cuda",
        "HF_TOKEN": "<redacted>",
        "MY_API_KEY": "<redacted>",
    }
