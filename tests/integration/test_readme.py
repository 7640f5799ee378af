"""The README's commands work as written: after its set-up line (`pip install nox uv` in a fresh
venv), every `nox -s` session it names exists, and every `nox -s cli -- COMMAND` it shows answers
`--help`, from the package installed not editable. Real nox, real uv, a fresh venv; marked slow
(it installs the package once)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from usercli import cli

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
pytestmark = pytest.mark.slow


def _shell_lines() -> list[str]:
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"```(?:sh|bash)\n(.*?)```", text, flags=re.DOTALL)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_readme_names_setup_commands() -> None:
    setup = [line for line in _shell_lines() if not line.startswith("#")]
    assert any(
        line.startswith("python3 -m pip install nox uv && nox -s validate") for line in setup
    )
    assert any(line.endswith("nox -s lint tests") for line in setup)


def test_every_readme_command_works_after_the_setup(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "nox", "uv"]
    subprocess.run(pip, check=True, timeout=600)
    nox = [
        str(venv / "bin" / "nox"),
        "--envdir",
        str(tmp_path / "nox"),
        "-f",
        str(REPO / "noxfile.py"),
    ]
    listed = subprocess.run([*nox, "--list"], capture_output=True, text=True, check=True).stdout
    sessions = set(re.findall(r"^[*-] (\w+)", listed, flags=re.MULTILINE))
    text = README.read_text(encoding="utf-8")
    for match in re.finditer(r"nox -s ((?:[a-z_]+ ?)+)", text):
        for name in match[1].split():
            assert name in sessions, f"README names `nox -s {name}`, which the noxfile lacks"
    first = subprocess.run(
        [*nox, "-s", "cli", "--", "--help"], capture_output=True, text=True, check=False
    )
    assert first.returncode == 0, first.stdout + first.stderr
    # the session's package is installed as a user installs it (`pip install .`), not editable
    site = tmp_path / "nox" / "cli" / "lib"
    (direct_url,) = site.glob("python*/site-packages/cudnn_matrix-*.dist-info/direct_url.json")
    assert not json.loads(direct_url.read_text())["dir_info"].get("editable"), direct_url
    tool = tmp_path / "nox" / "cli" / "bin" / "cudnn-matrix"  # what `nox -s cli --` runs
    commands = sorted(
        set(re.findall(r"nox -s cli -- ([a-z][\w-]*(?: (?:list|prune|build|suggest))?)", text))
    )
    assert commands, "the README shows no `nox -s cli -- COMMAND`"
    for command in commands:
        proc = cli(*shlex.split(command), "--help", cwd=tmp_path, tool=[str(tool)], timeout=None)
        assert proc.returncode == 0, f"`nox -s cli -- {command} --help`: {proc.stderr}"


def test_ci_runs_the_readmes_test_command_and_the_users_path() -> None:
    """.ci/run runs the README's test command as written, and before it the user's path: the built
    wheel installed, not editable, with pyproject's floor pip, the main job from outside the clone."""
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    [readme_tests] = [
        line.split("&&")[-1].strip() for line in _shell_lines() if line.endswith("lint tests")
    ]
    assert readme_tests in ci, f"`.ci/run` does not run `{readme_tests}` as a line of its own"
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    [floor] = re.findall(r'"pip>=([\d.]+)"', pyproject)
    assert any(f'-m pip install --quiet "pip=={floor}"' in line for line in ci), floor
    assert any('/bin/pip" install --quiet' in line and ".whl" in line for line in ci)
    assert not any(re.search(r"pip install.* -e ", line) for line in ci)  # never editable
    main_job = next(i for i, line in enumerate(ci) if 'cudnn-matrix" validate --cudnn' in line)
    assert ci[main_job].split('" ', 1)[1] == (
        "validate --cudnn 9.24.0.43 --frontend 1.27.0 --cuda 13.0 --arch sm90"
    ), ci[main_job]
    assert any(line.strip().startswith('cd "$user_dir') for line in ci[:main_job])
    assert main_job < ci.index(readme_tests)
