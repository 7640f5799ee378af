"""`cudnn-matrix bisect` end to end: real validate probes over the real frontend wheels 1.26.0 and
1.27.0 (backend 9.13.0.50), offline from the shared wheelhouse, with a case of our own whose
outcome depends on the installed frontend. No GPU needed."""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest
from usercli import cli

from validate.execute.cases import SHIPPED_CASES

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CASE = ROOT / "tests" / "resources" / "bisect" / "frontend_before_1_27.py"
PIN_CHECK = SHIPPED_CASES / "pin_check.py"  # the installed package's copy
CELL = ["--cudnn", "9.13.0.50", "--cuda", "13.0", "--driver", "580", "--arch", "sm90"]


def _bisect(wheelhouse: Path, envs: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`cudnn-matrix bisect --axis frontend`, started in the folder that holds `envs`."""
    return cli(
        *("bisect", "--axis", "frontend", *CELL, *args),
        *("--wheelhouse", str(wheelhouse), "--no-backend-deps", "--cache-dir", str(envs)),
        cwd=envs.parent,
        timeout=600,
    )


def test_bisect_finds_the_first_bad_frontend_and_resumes(wheelhouse: Path, tmp_path: Path) -> None:
    folder, envs = tmp_path / "bisect", tmp_path / "envs"
    args = ["--good", "1.26.0", "--bad", "1.27.0", "--cases", str(CASE)]
    args += ["--case", CASE.name, "--results", str(folder)]
    proc = _bisect(wheelhouse, envs, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "first bad: 1.27.0" in proc.stdout
    assert "last good: 1.26.0" in proc.stdout
    assert "bad = fail (the outcome at --bad)" in proc.stdout
    assert 'frontend = ">=1.27.0"' in proc.stdout
    assert "1.27.0: frontend 1.27.0 is >= 1.27" in proc.stdout  # the probe's evidence
    state = json.loads((folder / "bisect.json").read_text())
    assert state["candidates"] == ["1.26.0", "1.27.0"]
    assert state["result"]["first_bad"] == "1.27.0"
    assert state["result"]["found"] is True
    for version, outcome in (("1.26.0", "pass"), ("1.27.0", "fail")):
        lines = (folder / "probes" / version / "r1" / "results.jsonl").read_text().splitlines()
        (line,) = (json.loads(text) for text in lines)
        assert line["cell"]["frontend"] == version
        assert line["case"] == CASE.name
        assert line["outcome"] == outcome
        assert line["env"]["frontend_version"] == version  # seen inside the case process

    # run again with the same folder: the probes are read back, none re-run
    again = _bisect(wheelhouse, envs, *args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "2 probes read back" in again.stdout
    assert "+ validate" not in again.stderr
    assert not list(folder.glob("probes/*/r2"))
    report = proc.stdout[proc.stdout.index("bad = ") :]
    assert again.stdout[again.stdout.index("bad = ") :] == report  # the same table and boundary

    # killed after its first probe: bisect.json holds one probe; the rerun makes only the other
    # (its validate folder, complete, is read back by validate --resume, not run again)
    state = json.loads((folder / "bisect.json").read_text())
    del state["result"]
    state["probes"] = state["probes"][:1]
    (folder / "bisect.json").write_text(json.dumps(state))
    resumed = _bisect(wheelhouse, envs, *args)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "1 probes read back" in resumed.stdout
    assert "+ validate 1.27.0" in resumed.stderr
    assert "+ validate 1.26.0" not in resumed.stderr
    assert resumed.stdout[resumed.stdout.index("bad = ") :] == report
    assert not list(folder.glob("probes/*/r2"))


SUITE = ROOT / "tests" / "resources" / "bisect_suite"
NODE = "test_frontend.py::test_before[1.27]"


def test_bisect_finds_the_first_bad_frontend_of_one_pytest_node_id(
    wheelhouse: Path, tmp_path: Path
) -> None:
    """`bisect --tests SUITE --case NODEID`: each probe is a `validate --tests` whose pytest
    selects that one parametrized id (the suite's other test fails everywhere and is never
    run); the id passes on 1.26.0 and fails on 1.27.0. A glob or an id whose file is not in the
    suite is bad input before any probe."""
    folder, envs = tmp_path / "bisect", tmp_path / "envs"
    args = ["--good", "1.26.0", "--bad", "1.27.0", "--tests", str(SUITE)]
    proc = _bisect(wheelhouse, envs, *args, "--case", NODE, "--results", str(folder))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "first bad: 1.27.0" in proc.stdout
    assert "last good: 1.26.0" in proc.stdout
    assert "frontend 1.27.0 is >= 1.27" in proc.stdout  # the probe's evidence: the assertion
    state = json.loads((folder / "bisect.json").read_text())
    seen = {p["candidate"]: p["observations"][0]["outcome"] for p in state["probes"]}
    assert seen == {"1.26.0": "pass", "1.27.0": "fail"}
    for version, outcome in (("1.26.0", "pass"), ("1.27.0", "fail")):
        lines = (folder / "probes" / version / "r1" / "results.jsonl").read_text().splitlines()
        rows = {json.loads(text)["case"]: json.loads(text) for text in lines}
        assert list(rows) == [NODE]  # that id alone: test_always_fails never ran
        assert (rows[NODE]["outcome"], rows[NODE]["cell"]["frontend"]) == (outcome, version)
    for bad, message in (
        ("test_frontend.py::test_*", "a pytest node id is exact"),
        ("test_elsewhere.py::test_before", "--case test_elsewhere.py::test_before: no "),
    ):
        refused = _bisect(wheelhouse, envs, *args, "--case", bad, "--results", str(tmp_path / "x"))
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert message in refused.stderr.strip().splitlines()[-1]
        assert "Traceback" not in refused.stderr
        assert not (tmp_path / "x" / "probes").exists()


def test_bisect_ends_with_the_same_outcome_are_a_finding(wheelhouse: Path, tmp_path: Path) -> None:
    """Both ends pass: exit 6 (its own row of the exit-code table, not 2's "nothing run"), the
    finding on stdout and in bisect.json, nothing between the ends probed."""
    folder = tmp_path / "bisect"
    proc = _bisect(
        wheelhouse,
        tmp_path / "envs",
        *["--good", "1.26.0", "--bad", "1.27.0", "--cases", str(PIN_CHECK)],
        *["--case", PIN_CHECK.name, "--results", str(folder)],
    )
    assert proc.returncode == 6, proc.stdout + proc.stderr
    assert (
        "no change to find: --good 1.26.0 and --bad 1.27.0 both give pass, so nothing between "
        "them was probed (exit 6)"
    ) in proc.stdout
    assert "error" not in proc.stderr.strip().splitlines()[-1]
    assert "Traceback" not in proc.stderr
    state = json.loads((folder / "bisect.json").read_text())
    assert state["result"]["ends_agree"] is True
    assert sorted(p.name for p in (folder / "probes").iterdir()) == ["1.26.0", "1.27.0"]


FRONTEND_STANDIN = '''"""Stand-in for the cuDNN frontend, built from a git commit by the bisect test."""

import ctypes

__version__ = "{version}"


def backend_version():
    return int(ctypes.CDLL("libcudnn.so.9").cudnnGetVersion())


def uid_order():
    return "{order}"
'''


def _git(repo: Path, *args: str) -> str:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(repo.parent), "GIT_AUTHOR_NAME": "t"}
    env |= {"GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e"}
    cmd = ["git", "-C", str(repo), *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout.strip()


def test_bisect_over_commits_builds_each_probe_from_source(
    wheelhouse: Path, tmp_path: Path
) -> None:
    """A repository whose package changes behaviour at one commit (c4) and does not build at
    another (c2); each probe builds its commit into a wheel (flit_core from the wheelhouse, no
    index) and runs the case against it. The unbuildable commit is skipped, not counted."""
    repo = tmp_path / "frontend"
    (repo / "cudnn").mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    pyproject = (
        '[build-system]\nrequires = ["flit_core>=3.2"]\nbuild-backend = "flit_core.buildapi"\n'
        '[project]\nname = "nvidia-cudnn-frontend"\ndynamic = ["version", "description"]\n'
        '[tool.flit.module]\nname = "cudnn"\n'
    )
    orders = ("traversal", "traversal", "broken", "traversal", "creation", "creation")
    for n, order in enumerate(orders):
        broken = order == "broken"
        (repo / "pyproject.toml").write_text("[project\n" if broken else pyproject)
        text = FRONTEND_STANDIN.format(version=f"1.26.{n}", order=order)
        (repo / "cudnn" / "__init__.py").write_text(text)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"c{n}: uid order {order}")
        _git(repo, "tag", f"c{n}")
    sha = {f"c{n}": _git(repo, "rev-parse", f"c{n}") for n in range(len(orders))}
    case = ROOT / "tests" / "resources" / "bisect" / "uses_old_uid_order.py"
    folder = tmp_path / "bisect"
    argv = ["bisect", "--axis", "frontend-commit"]
    argv += ["--good", "c0", "--bad", "c5", "--frontend-source", str(repo), *CELL]
    argv += ["--frontend", "1.26.0", "--cases", str(case), "--case", case.name]
    argv += ["--wheelhouse", str(wheelhouse), "--no-backend-deps", "--results", str(folder)]
    argv += ["--cache-dir", str(tmp_path / "envs")]
    offline = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse)}
    proc = cli(*argv, cwd=tmp_path, env=offline, timeout=None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"first bad: {sha['c4']}" in proc.stdout
    assert f"last good: {sha['c3']}" in proc.stdout
    assert "cudnn 1.26.4 uid order creation" in proc.stdout  # the probe's own evidence
    row = next(ln for ln in proc.stdout.splitlines() if ln.startswith(f"| {sha['c2'][:12]} "))
    assert [cell.strip() for cell in row.split("|")[2:4]] == ["error", "skip"]
    assert f"{sha['c2'][:12]}: environment build failed: building the frontend" in proc.stdout
    state = json.loads((folder / "bisect.json").read_text())
    assert state["candidates"] == list(sha.values())
    assert [p["candidate"] for p in state["probes"]] == [
        sha[c] for c in ("c0", "c5", "c2", "c3", "c4")
    ]
    line = json.loads((folder / "probes" / sha["c4"] / "r1" / "results.jsonl").read_text())
    assert line["env"]["frontend_version"] == "1.26.4"  # built from c4, seen in the case
    assert line["outcome"] == "fail"
    assert "suggested known issue" not in proc.stdout  # a commit range is no version range


def test_bisect_over_a_backend_store(wheelhouse: Path, tmp_path: Path) -> None:
    """--axis cudnn with validate's --backend-store: the candidates are the store's versions and
    each probe's cell takes its folder. The store holds the dispatcher and libcudnn_graph of the
    real 9.12.0.46 and 9.13.0.50 wheels: enough for backend_version(), which is all the case reads."""
    store = tmp_path / "store"
    for version in ("9.12.0.46", "9.13.0.50"):
        (wheel,) = wheelhouse.glob(f"nvidia_cudnn_cu13-{version}-*.whl")
        lib = store / version / "lib"
        lib.mkdir(parents=True)
        with zipfile.ZipFile(wheel) as archive:
            for name in ("libcudnn.so.9", "libcudnn_graph.so.9"):
                (lib / name).write_bytes(archive.read(f"nvidia/cudnn/lib/{name}"))
    case = ROOT / "tests" / "resources" / "bisect" / "backend_before_9_13.py"
    folder = tmp_path / "bisect"
    argv = ["bisect", "--axis", "cudnn", "--good", "9.12.0.46"]
    argv += ["--bad", "9.13.0.50", "--frontend", "1.27.0", *CELL[2:], "--backend-store", str(store)]
    argv += ["--wheelhouse", str(wheelhouse), "--cases", str(case), "--case", case.name]
    argv += ["--results", str(folder), "--cache-dir", str(tmp_path / "envs")]
    proc = cli(*argv, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"(backend store {store})" in proc.stdout
    assert "first bad: 9.13.0.50" in proc.stdout
    assert 'backend = ">=9.13.0.50"' in proc.stdout
    line = json.loads((folder / "probes" / "9.12.0.46" / "r1" / "results.jsonl").read_text())
    assert line["outcome"] == "pass"
    assert str(store / "9.12.0.46") in json.dumps(line["env"]["cudnn_libs"])  # from the store
