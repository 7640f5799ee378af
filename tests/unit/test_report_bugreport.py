"""Bug reports follow the cuDNN frontend issue template, filled from the stored evidence."""

from __future__ import annotations

from pathlib import Path

from validate.model.outcome import Outcome
from validate.model.results import CaseResult
from validate.report.bugreport import bug_report, reproduce_command, write_bug_reports
from validate.report.model import RunInfo, StoredResult
from validate.report.store import load_runs

EXAMPLE = Path(__file__).parents[1] / "resources" / "runs" / "example"
TEMPLATE_HEADINGS = [
    "**Describe the bug**",
    "**Expected behavior**",
    "**System Environment (please complete the following information):**",
    "**API logs**",
    "**To Reproduce**",
    "**Additional context**",
]


def _crash() -> StoredResult:
    (item,) = [s for s in load_runs([EXAMPLE]).items if s.result.outcome is Outcome.CRASH]
    return item


def test_sections_in_template_order() -> None:
    text = bug_report(_crash())
    positions = [text.index(h) for h in TEMPLATE_HEADINGS]
    assert positions == sorted(positions)


def test_environment_from_captured_facts() -> None:
    text = bug_report(_crash())
    for line in [
        "- cudnn_frontend version: 1.27.0",
        "- cudnn_backend version: 9.24.0.43",
        "- GPU arch: sm90 (NVIDIA H200 (synthetic), compute capability 9.0)",
        "- cuda runtime version: 13.0.88",
        "- cuda driver version: 580.95.05",
        "- host compiler: gcc 13.3.0",
        "- OS: Ubuntu 24.04.2 LTS (synthetic)",
    ]:
        assert f"\n{line}\n" in text


def test_api_logs_inlined_with_paths() -> None:
    text = bug_report(_crash())
    assert "Frontend API log (last 40 lines of `" in text
    assert "fe.log`):" in text
    assert "[cudnn_frontend] INFO: plan cache hit for engine config 7" in text
    assert "variantPack: uids=[101, 102, 103]; ptrs=[0x7f00, 0x7f00, (stale)];" in text
    assert "KI-1 reproduces outside its declared range (arch sm90 not in sm100, sm120)" in text


def test_exact_one_cell_one_case_command() -> None:
    expected = (
        "cudnn-matrix validate --cudnn 9.24.0.43 --frontend 1.27.0 --cuda 13.0 --driver 580.95.05 "
        "--arch sm90 --cases "
        "samples/python/26_layernorm_forward_training_and_backward_with_relu_bitmask.ipynb "
        "--case 26_layernorm_forward_training_and_backward_with_relu_bitmask.ipynb"
    )
    assert reproduce_command(_crash().result) == expected
    assert f"```sh\n{expected}\n```" in bug_report(_crash())


def test_command_selects_a_variant_and_keeps_env_mode() -> None:
    variant = _crash().result.with_(
        case="repro_fusion_uid[backward]", case_path="/opt/cases/repro_fusion_uid.py"
    )
    assert reproduce_command(variant, {"env_mode": "current"}) == (
        "cudnn-matrix validate --cudnn 9.24.0.43 --frontend 1.27.0 --cuda 13.0 --driver 580.95.05 "
        "--arch sm90 --env current --cases /opt/cases --case 'repro_fusion_uid[backward]'"
    )


def test_missing_evidence_is_said_not_invented(tmp_path: Path) -> None:
    bare = CaseResult(
        case="x.py",
        outcome=Outcome.FAIL,
        case_path="cases/x.py",
        cell={
            "cudnn": "9.25.1.1",
            "frontend": "1.32.0",
            "cuda": "13.0",
            "driver": "580",
            "arch": "sm90",
        },
        api_logs={"frontend": "/gone/fe.log"},
    )
    text = bug_report(StoredResult(result=bare, run=RunInfo(run_id="r", path=tmp_path)))
    assert "- host compiler: not captured" in text
    assert "Frontend API log: not captured (recorded path `/gone/fe.log` not found)" in text
    assert "Backend API log: not captured\n" in text
    assert "- cudnn_backend version: 9.25.1.1" in text  # falls back to the cell's pin


def test_write_one_file_per_failure(tmp_path: Path) -> None:
    paths = write_bug_reports([(_crash(), None)], tmp_path / "bugs")
    assert [p.name for p in paths] == [
        "ef509d8542__26_layernorm_forward_training_and_backward_with_relu_bitmask.ipynb.md"
    ]
    assert paths[0].read_text().startswith("# [cudnn-matrix] 26_layernorm")
