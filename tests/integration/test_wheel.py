"""The built wheel carries the embedded data and every package: installed, not editable, into a
fresh venv with the floor pip, every command works from a folder outside the checkout."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from usercli import cli, fetch_pip

from validate import __version__

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


#: What a build must not see: setuptools' build/ and egg-info left by an earlier build in the
#: checkout would go into the wheel as they are (a stale build/lib hid the missing packages).
_NOT_SOURCE = (".git", "build", "dist", "*.egg-info", ".cache", ".nox", ".venv", "reports")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `pip wheel` builds from a clean copy of this working tree."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    ignore = shutil.ignore_patterns(*_NOT_SOURCE, "__pycache__", ".*_cache")
    shutil.copytree(REPO, source, ignore=ignore)
    pip = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--no-deps",
        "-w",
        str(root),
        str(source),
    ]
    subprocess.run(pip, check=True)
    [built] = root.glob("cudnn_matrix-*.whl")
    return built


def test_wheel_holds_matrix_data_and_shipped_cases(wheel: Path, tmp_path: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for data in ("default.toml", "rules.toml", "known_issues.toml", "cases.toml"):
        assert f"validate/_matrix/{data}" in names
    for case in ("cases.toml", "repro_fusion_uid.py", "pin_check.py"):
        assert f"validate/execute/resources/cases/{case}" in names
    assert "validate/execute/resources/run_notebook.py" in names
    for dockerfile in ("Dockerfile", "Dockerfile.backend"):  # `images build` from the wheel
        assert f"validate/_images/{dockerfile}" in names
    assert not any(name.startswith(("tests/", "matrix/", "images/")) for name in names)
    # installed (unpacked, as pip does), the tool finds its Dockerfiles there
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    found = subprocess.run(
        [
            sys.executable,
            "-c",
            "from validate.env.images import dockerfile_path as d; print(d('Dockerfile.backend'))",
        ],
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert found.stdout.strip() == str(site / "validate" / "_images" / "Dockerfile.backend")


# --- the installed wheel, as a user runs it (issue #36) ------------------------------------------

#: The shared wheelhouse's backend (conftest.py): the main job's CPU form without a download.
BACKEND = "9.13.0.50"
FLOOR_PIP = "23.1"  # pyproject: pip>=23.1
COMMITTED_RUN = REPO / "tests" / "resources" / "runs" / "cpu"


def _command_paths() -> list[tuple[str, ...]]:
    """Every command line that has a `--help`: the tool itself, each command, each sub-command."""
    from validate.cli import build_parser

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
        yield path
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, (*path, name))

    return list(walk(build_parser(), ()))


def _user_venv(wheel: Path, wheelhouse: Path, root: Path) -> Path:
    """`python -m venv v`, its pip taken down to the declared floor, `v/bin/pip install WHEEL`
    (not editable; the dependencies from the index as a user's pip finds them); v/bin."""
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    python = root / "bin" / "python"
    floor = fetch_pip(wheelhouse, FLOOR_PIP)
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-index", floor], check=True)
    seen = subprocess.run(
        [python, "-m", "pip", "--version"], capture_output=True, text=True, check=True
    )
    assert seen.stdout.startswith(f"pip {FLOOR_PIP} "), seen.stdout + seen.stderr
    subprocess.run([root / "bin" / "pip", "install", "--quiet", str(wheel)], check=True)
    return root / "bin"


def test_the_installed_wheel_runs_every_command_outside_the_checkout(
    wheel: Path, wheelhouse: Path, tmp_path: Path
) -> None:
    """What `python3 -m venv v && v/bin/pip install . && cd elsewhere && v/bin/cudnn-matrix ...`
    gives with the floor pip: every `--help`, `--version`, the main job's CPU form (default results
    folder) and `report` over a committed run. At fc2e173 every command but `plan` crashed with
    ModuleNotFoundError (pyproject listed the packages by hand and missed two)."""
    bin_dir = _user_venv(wheel, wheelhouse, tmp_path / "v")
    tool = [str(bin_dir / "cudnn-matrix")]
    home = tmp_path / "elsewhere"  # a user's folder: not the checkout, nothing of it on the path
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    where = subprocess.run(
        [bin_dir / "python", "-c", "import validate; print(validate.__file__)"],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.startswith(str(tmp_path / "v")), where.stdout  # the wheel's copy ran

    for path in _command_paths():
        shown = cli(*path, "--help", cwd=home, env=env, tool=tool, timeout=120)
        assert shown.returncode == 0, (path, shown.stderr)
        assert shown.stdout.startswith("usage: cudnn-matrix"), (path, shown.stdout)
    version = cli("--version", cwd=home, env=env, tool=tool, timeout=120)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"cudnn-matrix {__version__}"

    # the main job's CPU form, into the default results folder (relative to where it started)
    job = ["validate", "--cudnn", BACKEND, "--frontend", "1.27.0", "--cuda", "13.0", "--arch"]
    job += ["sm90", "--wheelhouse", str(wheelhouse), "--no-backend-deps"]
    job += ["--cache-dir", str(tmp_path / "cache")]
    ran = cli(*job, cwd=home, env=env, tool=tool)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert ran.stdout.startswith("NOT SIGNED OFF — no GPU: "), ran.stdout
    [results] = (home / "reports" / "runs").glob("*/results.jsonl")
    stored = [json.loads(line) for line in results.read_text().splitlines()]
    assert {r["outcome"] for r in stored} == {"pass", "skip"}, stored  # no error, no fail
    assert "pass" in {r["outcome"] for r in stored if r["case"] == "pin_check.py"}  # pins held

    # `report` over a committed run (a copy: nothing may be written into tests/resources)
    shutil.copytree(COMMITTED_RUN, home / "cpu")
    shown = cli("report", "--results", "cpu", cwd=home, env=env, tool=tool, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "NOT SIGNED OFF — no GPU" in shown.stdout + shown.stderr
