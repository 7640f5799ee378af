"""`cudnn-matrix validate` end to end with real wheels: pins verified in the case processes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from proctags import ctrl_c_when, quick_and_hanging, still_running, tagged, tagged_tool
from usercli import cli

if TYPE_CHECKING:
    from collections.abc import Callable

pytestmark = pytest.mark.slow

BACKEND, OTHER_BACKEND = "9.13.0.50", "9.12.0.46"  # both in the shared wheelhouse (conftest.py)
CELL = ["--cuda", "13.0", "--driver", "580", "--arch", "sm90"]
SM89_WARNING = (
    "warning: --arch sm89: no rule covers it (default.toml declares sm80, sm90, sm100, sm120;"
    " no rule in rules.toml selects it); the run goes on with it"
)
SCRIPTS = Path(__file__).resolve().parents[1] / "resources" / "scripts"


def _validate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`cudnn-matrix validate ARGS` started in `cwd`."""
    return cli("validate", *args, cwd=cwd, timeout=600)


def _unpack_backend(wheel: Path, dest: Path) -> None:
    """The wheel's nvidia/cudnn tree (lib/, include/) unpacked as `dest`."""
    prefix = "nvidia/cudnn/"
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            if member.filename.startswith(prefix) and not member.is_dir():
                out = dest / member.filename.removeprefix(prefix)
                out.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(member) as src, out.open("wb") as dst:
                    shutil.copyfileobj(src, dst)


@pytest.fixture(scope="module")
def backend_store(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two real backends: OTHER_BACKEND as a wheel's tree named by its version, BACKEND in
    NVIDIA's redist archive layout."""
    store = tmp_path_factory.mktemp("backend-store")
    for version, name in (
        (OTHER_BACKEND, OTHER_BACKEND),
        (BACKEND, f"cudnn-linux-x86_64-{BACKEND}_cuda13-archive"),
    ):
        _unpack_backend(min(wheelhouse.glob(f"nvidia_cudnn_cu13-{version}-*.whl")), store / name)
    return store


def _results(run_dir: Path) -> dict[str, dict[str, object]]:
    lines = (run_dir / "results.jsonl").read_text().splitlines()
    return {json.loads(line)["case"]: json.loads(line) for line in lines}


def _base_venv(wheelhouse: Path, base: Path) -> Path:
    """A venv holding backend BACKEND and frontend 1.27.0; its python."""
    subprocess.run(["uv", "venv", "--quiet", str(base)], check=True)
    install = ["uv", "pip", "install", "--quiet", "--python", str(base / "bin" / "python")]
    subprocess.run(
        [
            *install,
            "--no-index",
            "--no-deps",
            str(min(wheelhouse.glob(f"nvidia_cudnn_cu13-{BACKEND}-*.whl"))),
            str(min(wheelhouse.glob("nvidia_cudnn_frontend-1.27.0-*.whl"))),
        ],
        check=True,
    )
    return base / "bin" / "python"


@pytest.fixture(scope="module")
def env_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("validate-envs")


def test_validate_installs_pins_and_verifies_them(
    wheelhouse: Path, env_cache: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    common = ["--cudnn", BACKEND, "--frontend", "1.27.0", *CELL, "--wheelhouse", str(wheelhouse)]
    common += ["--cache-dir", str(env_cache), "--no-backend-deps", "--results", str(run_dir)]
    proc = _validate(*common, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = _results(run_dir)
    check = results["pin_check.py"]
    assert check["outcome"] == "pass"
    assert check["reason"] == "frontend 1.27.0, backend 91300"
    libs = json.dumps(check["env"])
    assert str(env_cache) in libs  # the backend was mapped from the cell's own environment
    for variant in ("graph-graph", "graph-pygraph", "backward", "graph-pygraph-auto"):
        result = results[f"repro_fusion_uid[{variant}]"]
        assert result["outcome"] == "skip", result
        reason = str(result["reason"])
        assert reason.startswith("no NVIDIA driver: frontend 1.27.0 without a GPU did construct ")
        assert reason.endswith("graphs; not done: build, execute, compare: need a GPU"), reason
    run_meta = json.loads((run_dir / "run.json").read_text())
    assert run_meta["host"]["source"] == "none"
    assert "finished_at" in run_meta
    # no GPU here: the repro's GPU part did not run, so the verdict is no sign-off (exit 0 all
    # the same: the pins, all a host without a GPU can check, held)
    assert (
        "\nNOT SIGNED OFF — no GPU: 4 GPU cases skipped; pins verified in 1 environment "
        "(1 pass, 4 skip; flaky: block)\n" in "\n" + proc.stdout  # the verdict is line 1
    ), proc.stdout

    # --resume on a finished run adds nothing and re-runs nothing.
    again = _validate(*common, "--resume", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert len((run_dir / "results.jsonl").read_text().splitlines()) == len(results)
    assert "reusing environment" in again.stderr or "cell" in again.stderr


def test_no_gpu_is_no_sign_off_and_require_gpu_fails_it(
    wheelhouse: Path, env_cache: Path, tmp_path: Path
) -> None:
    """The README's CPU main job in small: two cells of one environment (sm90, sm100) and the
    shipped cases. The pins are verified once (the first cell), every GPU case skips for want of
    a GPU: NOT SIGNED OFF, exit 0; --require-gpu (validate or report) makes it exit 1."""
    run_dir = tmp_path / "run"
    common = ["--cudnn", BACKEND, "--frontend", "1.27.0", "--cuda", "13.0", "--driver", "580"]
    common += ["--arch", "sm90,sm100", "--wheelhouse", str(wheelhouse), "--no-backend-deps"]
    common += ["--cache-dir", str(env_cache), "--results", str(run_dir)]
    proc = _validate(*common, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    outcomes = sorted((r["outcome"], r["case"]) for r in map(json.loads, _lines(run_dir)))
    assert outcomes.count(("pass", "pin_check.py")) == 1
    assert [o for o, _ in outcomes].count("skip") == 9
    line = (
        "NOT SIGNED OFF — no GPU: 9 GPU cases skipped; pins verified in 1 environment "
        "(1 pass, 9 skip; flaky: block)"
    )
    assert proc.stdout.startswith(f"{line}\n"), proc.stdout  # the verdict first, then the cells
    assert "\nSIGNED OFF" not in proc.stdout

    # nothing left to run: the verdict
    strict = _validate(*common, "--resume", "--require-gpu", cwd=tmp_path)
    assert strict.returncode == 1, strict.stdout + strict.stderr
    assert strict.stdout.startswith(f"{line}\n")
    assert len(_lines(run_dir)) == 10  # --resume re-ran nothing

    report = ["report", "--results", str(run_dir)]
    for extra, code in (([], 0), (["--require-gpu"], 1)):
        rendered = cli(*report, *extra, "--out", "compat.md", cwd=tmp_path, timeout=120)
        assert rendered.returncode == code, rendered.stderr
        assert f"\n{line}\n" in rendered.stderr


def _lines(run_dir: Path) -> list[str]:
    return (run_dir / "results.jsonl").read_text().splitlines()


@pytest.mark.uv  # builds with uv itself
def test_dishonoured_pin_is_an_error(wheelhouse: Path, tmp_path: Path) -> None:
    """--env current over an interpreter holding backend 9.13 while the cell pins 9.12."""
    base = _base_venv(wheelhouse, tmp_path / "base")
    run_dir = tmp_path / "run"
    proc = _validate(
        "--cudnn",
        OTHER_BACKEND,
        "--frontend",
        "1.27.0",
        *CELL,
        "--env",
        "current",
        "--base-python",
        str(base),
        "--frontend-source",
        "current",
        "--cases",
        str(Path(__file__).resolve().parents[2] / "validate/execute/resources/cases/pin_check.py"),
        "--results",
        str(run_dir),
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    result = _results(run_dir)["pin_check.py"]
    assert result["outcome"] == "error"
    assert "pin not honoured" in str(result["reason"])
    assert "9.13" in str(result["reason"])
    assert "9.12" in str(result["reason"])


@pytest.mark.uv  # builds with uv itself
def test_an_arch_no_rule_covers_is_one_warning_and_the_run_goes_on(
    wheelhouse: Path, tmp_path: Path
) -> None:
    """Issue #30 item 2: `--arch sm89` is in no matrix file and no rule selects it: one warning
    line on stderr, then the run as usual (the pins verified, exit 0)."""
    base = _base_venv(wheelhouse, tmp_path / "base")
    run_dir = tmp_path / "run"
    proc = _validate(
        *["--cudnn", BACKEND, "--frontend", "1.27.0", "--cuda", "13.0", "--driver", "580"],
        *["--arch", "sm89", "--env", "current", "--base-python", str(base)],
        *["--frontend-source", "current", "--case", "pin_check.py", "--results", str(run_dir)],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    warned = [line for line in proc.stderr.splitlines() if "no rule covers it" in line]
    assert warned == [SM89_WARNING]
    result = _results(run_dir)["pin_check.py"]
    assert result["outcome"] == "pass", result
    cell = result["cell"]
    assert isinstance(cell, dict)
    assert cell["arch"] == "sm89"


@pytest.mark.uv  # builds with uv itself
def test_the_progress_has_no_eta_on_a_cold_start_and_one_with_a_history(
    wheelhouse: Path, tmp_path: Path
) -> None:
    """Issue #30 item 3: with no history (a fresh cache) the first progress line has no ETA (it
    said `ETA 57:30` for a 30 s run); the next run reads the history the first wrote, and has one."""
    base = _base_venv(wheelhouse, tmp_path / "base")
    common = [
        *["--cudnn", BACKEND, "--frontend", "1.27.0", *CELL, "--env", "current"],
        *["--base-python", str(base), "--frontend-source", "current", "--case", "pin_check.py"],
        *["--cache-dir", str(tmp_path / "cache")],
    ]
    firsts = []
    for run in ("cold", "warm"):
        proc = _validate(*common, "--results", str(tmp_path / run), cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        lines = [line for line in proc.stderr.splitlines() if line.startswith("cases: ")]
        assert lines, proc.stderr
        firsts.append(lines[0])
    assert ", ETA " not in firsts[0], firsts
    assert ", ETA " in firsts[1], firsts


def test_a_cell_whose_environment_cannot_be_built_is_an_error_and_the_run_goes_on(
    wheelhouse: Path, env_cache: Path, tmp_path: Path
) -> None:
    """A release the wheelhouse lists but pip cannot install (its wheel is broken): that cell's
    cases are `error`, the other cell runs. (A release no source has is refused before any
    work: tests/integration/test_versions.py.)"""
    run_dir = tmp_path / "run"
    house = tmp_path / "wheelhouse"
    house.mkdir()
    for wheel in wheelhouse.glob("*.whl"):
        (house / wheel.name).symlink_to(wheel)
    (house / "nvidia_cudnn_cu13-9.99.0.1-py3-none-manylinux_2_27_x86_64.whl").write_bytes(b"")
    proc = _validate(
        *["--cudnn", f"{BACKEND},9.99.0.1", "--frontend", "1.27.0", *CELL],
        *["--wheelhouse", str(house), "--cache-dir", str(env_cache), "--no-backend-deps"],
        *["--case", "pin_check.py", "--results", str(run_dir)],
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    by_backend = {line["cell"]["cudnn"]: line for line in lines}
    assert by_backend[BACKEND]["outcome"] == "pass"  # the good cell still ran
    broken = by_backend["9.99.0.1"]
    assert broken["outcome"] == "error"
    assert broken["reason"].startswith("environment build failed:")
    assert "nvidia-cudnn-cu13==9.99.0.1" in broken["reason"]
    assert "Traceback" not in proc.stderr


def test_python_axis_builds_the_cell_with_that_interpreter(
    wheelhouse: Path, env_cache: Path, tmp_path: Path
) -> None:
    """`--python <this one>,3.99`: the first cell runs on that CPython end to end; the second
    asks for an interpreter this host does not have, so its cases are `error` with the reason."""
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    run_dir = tmp_path / "run"
    proc = _validate(
        *["--cudnn", BACKEND, "--frontend", "1.27.0", *CELL, "--python", f"{here},3.99"],
        *["--wheelhouse", str(wheelhouse), "--cache-dir", str(env_cache), "--no-backend-deps"],
        *["--case", "pin_check.py", "--results", str(run_dir)],
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    by_python = {line["cell"]["python"]: line for line in lines}
    assert set(by_python) == {here, "3.99"}
    ran = by_python[here]
    assert ran["outcome"] == "pass", ran
    assert str(ran["env"]["python"]).startswith(f"{here}.")  # captured inside the case process
    assert str(env_cache) in json.dumps(ran["env"])  # in the cell's own environment
    missing = by_python["3.99"]
    assert missing["outcome"] == "error"
    reason = str(missing["reason"])
    assert reason.startswith("environment build failed: python 3.99 is not available on this host")
    assert "\n" not in reason
    assert "Traceback" not in proc.stderr


def test_backend_store_gives_each_cell_its_version_and_a_missing_one_is_an_error(
    wheelhouse: Path, env_cache: Path, backend_store: Path, tmp_path: Path
) -> None:
    """Both layouts of --backend-store, each cell pin-checked against its own folder; the
    matrix file's version the store lacks is `error` naming the store, and the run goes on (a
    --cudnn value it lacks is refused up front: tests/integration/test_versions.py). BACKEND is
    declared as BACKEND.0: the axis registry's equality finds its folder."""
    run_dir = tmp_path / "run"
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(
        f'[axes]\ncudnn = ["{OTHER_BACKEND}", "{BACKEND}.0", "9.14.0.64"]\nfrontend = ["1.27.0"]\n'
        'cuda = ["13.0"]\ndriver = ["580"]\narch = ["sm90"]\n'
    )
    proc = _validate(
        *["--matrix", str(matrix), *CELL],
        *["--backend-store", str(backend_store), "--wheelhouse", str(wheelhouse)],
        *["--cache-dir", str(env_cache), "--case", "pin_check.py", "--results", str(run_dir)],
        cwd=tmp_path,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    by_backend = {line["cell"]["cudnn"]: line for line in lines}
    assert set(by_backend) == {OTHER_BACKEND, f"{BACKEND}.0", "9.14.0.64"}
    for declared, folder, number in (
        (OTHER_BACKEND, OTHER_BACKEND, "91200"),
        (f"{BACKEND}.0", f"cudnn-linux-x86_64-{BACKEND}_cuda13-archive", "91300"),
    ):
        result = by_backend[declared]
        assert result["outcome"] == "pass", result
        assert result["reason"] == f"frontend 1.27.0, backend {number}"
        env = result["env"]
        libs = [str(p) for p in env["cudnn_libs"]]
        lib_dir = str(backend_store / folder / "lib")
        assert libs, env
        assert all(p.startswith(lib_dir + "/") for p in libs), libs
        # every consumer is bound to the store's copy: preloaded, first on the library path
        assert env["env"]["LD_PRELOAD"].split(":")[0] == f"{lib_dir}/libcudnn.so.9"
        assert env["env"]["LD_LIBRARY_PATH"].split(":")[0] == lib_dir
        assert env["bound"]["frontend"].startswith(f"{number} from {lib_dir}/libcudnn.so.9")
    missing = by_backend["9.14.0.64"]
    assert missing["outcome"] == "error"
    reason = str(missing["reason"])
    assert reason.startswith("backend 9.14.0.64 for CUDA 13.0 is not in --backend-store"), reason
    assert str(backend_store) in reason
    assert OTHER_BACKEND in reason
    assert BACKEND in reason
    assert "\n" not in reason
    assert "Traceback" not in proc.stderr


@pytest.mark.uv  # builds with uv itself
def test_backend_store_with_env_current_binds_the_store_copy(
    wheelhouse: Path, backend_store: Path, tmp_path: Path
) -> None:
    """--env current over an interpreter holding backend BACKEND: the cell pinned to
    OTHER_BACKEND takes it from the store, and the pin check passes on the store's copy only."""
    base = _base_venv(wheelhouse, tmp_path / "base")
    run_dir = tmp_path / "run"
    proc = _validate(
        *["--cudnn", OTHER_BACKEND, "--frontend", "1.27.0", *CELL, "--env", "current"],
        *["--base-python", str(base), "--frontend-source", "current"],
        *["--backend-store", str(backend_store), "--wheelhouse", str(wheelhouse)],
        *["--cache-dir", str(tmp_path / "envs"), "--case", "pin_check.py"],
        *["--results", str(run_dir)],
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = _results(run_dir)["pin_check.py"]
    assert result["outcome"] == "pass", result
    assert result["reason"] == "frontend 1.27.0, backend 91200"
    env: dict[str, Any] = result["env"]  # type: ignore[assignment]
    lib_dir = str(backend_store / OTHER_BACKEND / "lib")
    libs = [str(p) for p in env["cudnn_libs"]]
    assert libs
    assert all(p.startswith(lib_dir + "/") for p in libs), libs
    assert env["bound"] == {"frontend": f"91200 from {lib_dir}/libcudnn.so.9"}
    manifest = json.loads(next((tmp_path / "envs" / "envs").glob("*/manifest.json")).read_text())
    assert manifest["backend_dir"] == lib_dir
    assert manifest["missing_sublibraries"] == []  # the wheel's tree is complete


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda root: root / "absent", "not a folder"),
        (lambda root: root, "holds no backend folder (it is empty)"),
        (lambda root: (root / "9.12.0.46").mkdir() or root, "no libcudnn.so.9"),
    ],
    ids=["absent", "empty", "no-dispatcher"],
)
def test_a_bad_backend_store_is_one_line_exit_2(
    make: Callable[[Path], Path], needle: str, tmp_path: Path
) -> None:
    store = make(tmp_path)
    proc = _validate("--cudnn", BACKEND, *CELL, "--backend-store", str(store), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert needle in proc.stderr
    assert "--backend-store" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.uv  # builds with uv itself
def test_ctrl_c_stores_no_result_for_the_cut_case_and_the_last_line_says_so(
    wheelhouse: Path, tmp_path: Path
) -> None:
    """Ctrl-C in the pool: the case that was running is killed and neither stored nor counted as
    done; the pool's last progress line says what was done, cut and never started."""
    base = _base_venv(wheelhouse, tmp_path / "base")
    cases = tmp_path / "cases"
    hang = quick_and_hanging(cases)
    run_dir = tmp_path / "run"
    argv = [
        "validate",
        "--cudnn",
        BACKEND,
        "--frontend",
        "1.27.0",
    ]
    argv += [*CELL, "--env", "current", "--base-python", str(base), "--frontend-source", "current"]
    argv += ["--wheelhouse", str(wheelhouse), "--cache-dir", str(tmp_path / "envs")]
    argv += ["--cases", str(cases), "--jobs", "2", "--timeout", "300", "--results", str(run_dir)]

    def stores() -> list[Path]:
        return [p for p in run_dir.glob("**/results.jsonl") if p.read_text().strip()]

    with tagged_tool(*argv, cwd=tmp_path) as (tool, tag):
        err = ctrl_c_when(
            tool,
            lambda: bool(stores()) and bool(tagged(tag, hang.name)),
            what="the quick case never finished or the hang never started",
            wait_s=120,
        )
        assert tool.returncode == 130, err
        text = err.decode()
        [store] = stores()
        assert [r["case"] for r in _read(store)] == ["a_quick.py"]
        lines = [line for line in text.splitlines() if line.startswith("cases")]
        assert lines[-1] == "cases stopped: 1 done, 1 cut, 0 not started (2 slots)", text
        assert still_running(tag, hang.name) == []  # the cut case is gone, not only unrecorded


def _read(store: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in store.read_text().splitlines()]
