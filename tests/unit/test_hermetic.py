"""The tests leave the user's machine alone (issue #36 item 8): the tool's cache is the session's,
a session that changed the user's ~/.cache/cudnn-matrix fails, and a test that runs uv skips
where uv is missing. The last two run a pytest session of their own, as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from validate.env.builder import ImageBuilder
from validate.env.venvs import cache_root

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent


def _pytest(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def test_the_tools_cache_is_the_sessions_whatever_the_shell_says() -> None:
    """Every tool run of the tests (in process or a child) caches in the session's folder."""
    root = cache_root()
    assert root.name == "cache", root
    assert root.parent.name.startswith("cudnn-matrix-session-"), root
    assert root.parent.parent == Path(tempfile.gettempdir()), root
    assert os.environ["XDG_CACHE_HOME"].startswith(str(root.parent)), os.environ["XDG_CACHE_HOME"]


def test_every_cache_default_of_the_tool_follows_its_cache_setting() -> None:
    """The environments, the image build contexts and the image wheelhouse all live under the one
    cache folder ($CUDNN_MATRIX_CACHE here): the docker path wrote its contexts into the user's
    ~/.cache/cudnn-matrix whatever the setting said."""
    builder = ImageBuilder(client=object())  # no daemon is asked: the client is never used
    assert builder.cache_dir == cache_root().resolve()
    assert builder.wheelhouse == (cache_root() / "wheelhouse").resolve()


def test_a_session_that_writes_the_users_cache_fails(tmp_path: Path) -> None:
    """A test that passes but leaves a file in ~/.cache/cudnn-matrix (here a home of its own)
    fails its session, naming what changed; a session that leaves it alone passes."""
    home = tmp_path / "home"
    (home / ".cache" / "cudnn-matrix").mkdir(parents=True)
    (tmp_path / "test_writes.py").write_text(
        "from pathlib import Path\n\n"
        "def test_writes() -> None:\n"
        "    (Path.home() / '.cache' / 'cudnn-matrix' / 'durations.json').write_text('{}')\n\n"
        "def test_reads() -> None:\n"
        "    assert Path.home().is_dir()\n"
    )
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(TESTS)}
    dirty = _pytest("-p", "conftest", "test_writes.py", cwd=tmp_path, env=env)
    assert dirty.returncode == 1, dirty.stdout + dirty.stderr
    assert "2 passed" in dirty.stdout, dirty.stdout
    assert "changed the user's cache" in dirty.stdout, dirty.stdout
    assert "durations.json (added)" in dirty.stdout, dirty.stdout
    clean = _pytest("-p", "conftest", "test_writes.py::test_reads", cwd=tmp_path, env=env)
    assert clean.returncode == 0, clean.stdout + clean.stderr


def test_a_test_that_runs_uv_skips_where_uv_is_missing(tmp_path: Path) -> None:
    """test_axes.py's uv case on a PATH without uv: skipped, with the reason."""
    bare = tmp_path / "bin"  # a PATH with the basic tools only: no uv
    bare.mkdir()
    env = {**os.environ, "PATH": f"{bare}:/usr/bin:/bin"}
    assert subprocess.run(["sh", "-c", "command -v uv"], env=env, check=False).returncode != 0
    node = "tests/unit/test_axes.py::test_a_python_this_host_lacks_is_one_line_before_anything_is_installed[uv]"
    ran = _pytest("-rs", node, cwd=REPO, env=env)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "1 skipped" in ran.stdout, ran.stdout
    assert "needs uv, which is not on PATH" in ran.stdout, ran.stdout
