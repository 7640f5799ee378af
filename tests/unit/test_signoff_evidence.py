"""No sign-off without evidence: GPU cases skipped for want of a GPU or driver, or for a module
missing from the case environment, withhold SIGNED OFF; a declared requirement does not."""

from __future__ import annotations

import ast
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from validate.cli import main
from validate.judge.signoff import decide, pins_verified, summary, verdict_line
from validate.model.outcome import Outcome
from validate.model.results import CaseResult, ResultStore
from validate.plan.host import HostFacts, gpu_skip_reason
from validate.plan.requirements import Requirements, SkipKind, check, skip_kind

if TYPE_CHECKING:
    from collections.abc import Sequence

REPRO = (
    Path(__file__).resolve().parents[2]
    / "validate"
    / "execute"
    / "resources"
    / "cases"
    / "repro_fusion_uid.py"
)
CELL = {"cudnn": "9.24.0.43", "frontend": "1.27.0", "cuda": "13.0", "driver": "580", "arch": "sm90"}
CAPTURED = {"captured_in": "case", "python_executable": "/envs/a/bin/python"}

# skip reasons as the writers give them (requirements.check, execute/local.py, the repro script)
NO_GPU = "no NVIDIA driver: case needs a GPU"
SAME_ENV = "no NVIDIA driver: pins checked in cell abf0f5e3e3 (same environment)"
NO_GPU_ON_HOST = "no NVIDIA GPU on this host: pins checked in cell abf0f5e3e3 (same environment)"
REPRO_CPU = "no NVIDIA driver: frontend 1.27.0 without a GPU did construct 2 graphs"
FLOOR = "needs cuDNN backend >= 9.22, cell has 9.19.0.56"
ARCH = "arch sm80 not in sm90, sm100"
UNSUPPORTED = "graph not supported by this backend (cudnnGraphNotSupportedError: x)"
NO_CUPY = "needs module cupy (not importable in the case environment)"


def _r(
    outcome: str, case: str, reason: str = "", cell: dict[str, str] | None = None, **kw: Any
) -> CaseResult:
    pins = cell or CELL
    return CaseResult(
        case=case,
        outcome=Outcome(outcome),
        reason=reason,
        cell=pins,
        cell_id=f"{pins['frontend']}-{pins['arch']}",
        **kw,
    )


def _pin_check(cell: dict[str, str] | None = None) -> CaseResult:
    return _r("pass", "pin_check.py", "frontend 1.27.0, backend 92400", cell, env=CAPTURED)


def _skips(reason: str, n: int, cell: dict[str, str] | None = None) -> list[CaseResult]:
    return [_r("skip", f"case{i}.py", reason, cell) for i in range(n)]


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        (NO_GPU, SkipKind.NO_GPU),
        (SAME_ENV, SkipKind.NO_GPU),
        (NO_GPU_ON_HOST, SkipKind.NO_GPU),
        (REPRO_CPU, SkipKind.NO_GPU),
        ("no usable NVIDIA driver (cuInit returned 100): built 2 graphs", SkipKind.NO_GPU),
        ("no CUDA device visible: built 2 graphs", SkipKind.NO_GPU),
        (FLOOR, SkipKind.EXPECTED),
        (ARCH, SkipKind.EXPECTED),
        ("needs SM >= 8.0, host is sm75", SkipKind.EXPECTED),
        (UNSUPPORTED, SkipKind.EXPECTED),
        ("backend floor not met: assert cudnn.backend_version() >= 91300", SkipKind.EXPECTED),
        (NO_CUPY, SkipKind.MISSING_MODULE),
        ("", SkipKind.EXPECTED),
    ],
)
def test_skip_kind_of_each_writers_reason(reason: str, kind: SkipKind) -> None:
    assert skip_kind(reason) is kind


def test_check_reasons_carry_their_kind() -> None:
    """requirements.check writes the reasons skip_kind reads (one module owns both)."""
    gpu = check(Requirements(needs_gpu=True), has_gpu=False, host_arch=None, backend_version=None)
    floor = check(
        Requirements(min_backend="9.22"), has_gpu=True, host_arch="sm90", backend_version="9.19"
    )
    module = check(
        Requirements(imports=("torch", "cupy")),
        has_gpu=True,
        host_arch="sm90",
        backend_version="9.24",
        missing=frozenset({"cupy"}),
    )
    assert gpu is not None
    assert floor is not None
    assert module is not None
    assert [skip_kind(gpu), skip_kind(floor), skip_kind(module)] == [
        SkipKind.NO_GPU,
        SkipKind.EXPECTED,
        SkipKind.MISSING_MODULE,
    ]


def test_host_skip_reasons_are_no_gpu() -> None:
    """The reason the local executor gives the cells whose pins another cell checked."""
    for host in (HostFacts(), HostFacts(driver_version="580.159.04")):
        reason = gpu_skip_reason(host)
        assert reason is not None
        assert skip_kind(f"{reason}: pins checked in cell x (same environment)") is SkipKind.NO_GPU


def test_repro_scripts_own_gpu_reasons_are_no_gpu() -> None:
    """The repro runs standalone (stdlib only) and spells its reasons out: every string its
    `_gpu_state` returns must classify as no GPU, or its CPU skips would count as expected."""
    tree = ast.parse(REPRO.read_text(encoding="utf-8"))
    func = next(
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_gpu_state"
    )
    heads = []
    for node in ast.walk(func):
        if isinstance(node, ast.Return) and node.value is not None:
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                heads.append(value.value)
            elif isinstance(value, ast.JoinedStr) and isinstance(value.values[0], ast.Constant):
                heads.append(str(value.values[0].value))
    assert len(heads) == 3, heads
    assert [skip_kind(h) for h in heads] == [SkipKind.NO_GPU] * 3, heads


def _cpu_run() -> list[CaseResult]:
    """Two environments (frontends), two cells each (archs): the first cell of each checks the
    pins and its repro skips for want of a GPU; the second skips all for the same environment."""
    out: list[CaseResult] = []
    for fe in ("1.27.0", "1.32.0"):
        first, second = {**CELL, "frontend": fe}, {**CELL, "frontend": fe, "arch": "sm100"}
        out += [_pin_check(first), _r("skip", "repro.py", REPRO_CPU, first, env=CAPTURED)]
        out += [_r("skip", c, SAME_ENV, second) for c in ("pin_check.py", "repro.py")]
    return out


@pytest.mark.parametrize(
    ("results", "signed_off", "exit_code", "strict_exit", "line"),
    [
        pytest.param(
            [_pin_check(), *_skips(FLOOR, 2), _r("skip", "u.py", UNSUPPORTED)],
            True,
            0,
            0,
            "SIGNED OFF: 1 pass, 3 skip (flaky: block)",
            id="requirement-skips-only",
        ),
        pytest.param(
            _cpu_run(),
            False,
            0,
            1,
            "NOT SIGNED OFF — no GPU: 6 GPU cases skipped; pins verified in 2 environments "
            "(2 pass, 6 skip; flaky: block)",
            id="no-gpu",
        ),
        pytest.param(
            [*_cpu_run(), *_skips(FLOOR, 3)],
            False,
            0,
            1,
            "NOT SIGNED OFF — no GPU: 6 GPU cases skipped; pins verified in 2 environments "
            "(2 pass, 9 skip; flaky: block)",
            id="mixed: only the no-GPU skips count",
        ),
        pytest.param(
            [_pin_check(), _r("skip", "01.ipynb", NO_CUPY)],
            False,
            1,
            1,
            "NOT SIGNED OFF — missing modules: 1 case skipped (cupy) (1 pass, 1 skip; flaky: block)",
            id="missing-module",
        ),
        pytest.param(
            [*_cpu_run(), _r("fail", "f.py", "boom")],
            False,
            1,
            1,
            "NOT SIGNED OFF: 1 fail, 2 pass, 6 skip (flaky: block) — no GPU: 6 GPU cases "
            "skipped; pins verified in 2 environments",
            id="regression-and-no-gpu: what is wrong first",
        ),
        pytest.param(
            _skips(NO_GPU, 1),
            False,
            0,
            1,
            "NOT SIGNED OFF — no GPU: 1 GPU case skipped; pins verified in 0 environments "
            "(1 skip; flaky: block)",
            id="nothing-verified",
        ),
    ],
)
def test_decide_gpu_skips_vs_requirement_skips(
    results: Sequence[CaseResult], signed_off: bool, exit_code: int, strict_exit: int, line: str
) -> None:
    verdict = decide(results)
    assert (verdict.signed_off, verdict.exit_code) == (signed_off, exit_code)
    assert decide(results, require_gpu=True).exit_code == strict_exit
    assert verdict_line(verdict) == line
    assert summary(verdict).splitlines()[0] == line


def test_pins_verified_counts_environments_that_a_case_process_checked() -> None:
    other_arch = {**CELL, "arch": "sm100"}  # same environment as CELL
    other_fe = {**CELL, "frontend": "1.32.0"}
    results = [
        _pin_check(),
        _pin_check(other_arch),
        _r("fail", "f.py", "wrong numbers", other_fe, env=CAPTURED),  # pins held, product failed
        _r("error", "pin_check.py", "pin not honoured", {**CELL, "cuda": "12.9"}, env=CAPTURED),
        _r("pass", "host.py", "", {**CELL, "frontend": "1.19.1"}, env={"captured_in": "host"}),
        _r("skip", "s.py", NO_GPU, {**CELL, "frontend": "1.26.0"}),
    ]
    assert pins_verified(results) == 2  # CELL (2 cells, one environment) and other_fe


def _store(folder: Path, results: Sequence[CaseResult]) -> Path:
    store = ResultStore(folder / "results.jsonl")
    for r in results:
        store.append(r)
    return folder


def test_report_cli_verdict_and_exit_code_with_and_without_require_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _store(tmp_path / "run", _cpu_run())
    out = tmp_path / "r.json"
    assert main(["report", "--results", str(run), "--format", "json", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    doc = json.loads(out.read_text())["verdict"]
    assert doc["line"].startswith("NOT SIGNED OFF — no GPU: 6 GPU cases skipped; pins verified")
    assert f"\n{doc['line']}\n" in err  # the line on stderr is the one the JSON carries
    assert (doc["signed_off"], doc["exit_code"], doc["require_gpu"]) == (False, 0, False)
    assert (len(doc["no_gpu"]), doc["missing_modules"], doc["pins_verified"]) == (6, [], 2)
    strict = ["report", "--results", str(run), "--require-gpu", "--format", "json"]
    assert main([*strict, "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "\nNOT SIGNED OFF — no GPU: 6 GPU cases skipped" in err
    assert "(exit 1 (--require-gpu)): 6" in err
    assert json.loads(out.read_text())["verdict"]["exit_code"] == 1


def test_every_format_renders_the_same_verdict_line(tmp_path: Path) -> None:
    run = _store(tmp_path / "run", _cpu_run())
    line = verdict_line(decide(_cpu_run()))
    for fmt in ("md", "rst", "html"):
        out = tmp_path / f"r.{fmt}"
        assert main(["report", "--results", str(run), "--format", fmt, "--out", str(out)]) == 0
        text = out.read_text().replace("&mdash;", "—")
        assert line in text, fmt


def test_junit_marks_unproven_skips(tmp_path: Path) -> None:
    results = [*_cpu_run(), _r("skip", "floor.py", FLOOR), _r("skip", "01.ipynb", NO_CUPY)]
    run = _store(tmp_path / "run", results)
    out = tmp_path / "r.xml"
    assert main(["report", "--results", str(run), "--format", "junit", "--out", str(out)]) == 1
    kinds: dict[str, list[str]] = {}
    for case in ET.parse(out).getroot().iter("testcase"):
        prop = case.find("properties/property[@name='skip_kind']")
        kinds.setdefault("none" if prop is None else prop.get("value", ""), []).append(
            case.get("name", "")
        )
    assert sorted(kinds) == ["missing_module", "no_gpu", "none"]
    assert kinds["missing_module"] == ["01.ipynb"]
    assert len(kinds["no_gpu"]) == 6
    assert "floor.py" in kinds["none"]
