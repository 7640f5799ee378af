"""Progress of the env stage: real uv installs and ninja builds read as they run, plain lines
at a bounded rate off a terminal, a rich display on one (a real pseudo-terminal), and no
command lines or inline scripts in the INFO log."""

from __future__ import annotations

import logging
import os
import pty
import select
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest
from testwheels import make_wheel

from validate.env import venvs
from validate.env.progress import activity, interactive, ninja_line, pip_line, uv_line
from validate.env.streamed import run_streamed
from validate.errors import EnvBuildError

if TYPE_CHECKING:
    from pathlib import Path


def _plain(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]


@pytest.fixture
def info(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> pytest.LogCaptureFixture:
    monkeypatch.setenv("CI", "true")  # plain lines, as in CI
    caplog.set_level(logging.INFO, logger="validate")
    return caplog


@pytest.mark.skipif(shutil.which("uv") is None, reason="uv not on PATH")
def test_a_real_uv_install_reports_packages_as_they_arrive(
    tmp_path: Path, info: pytest.LogCaptureFixture
) -> None:
    for name in ("alpha", "beta", "gamma"):
        make_wheel(tmp_path / "wheels", name, "1.0", files={f"{name}/__init__.py": b""})
    subprocess.run(["uv", "venv", "--quiet", str(tmp_path / "env")], check=True)
    python = tmp_path / "env" / "bin" / "python"
    with activity("environment demo") as act:
        venvs._install("uv", python, ["alpha", "beta", "gamma"], tmp_path / "wheels", act)
        assert act.done == 3  # one per " + name==version" line uv printed
    lines = _plain(info)
    assert lines == [
        "  environment demo: installing alpha, beta, gamma",
        "  environment demo: installed 3 packages",
    ]
    assert not [line for line in lines if line.startswith("+ ")]


def test_a_failed_install_names_the_packages_and_the_tail(tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "env")], check=True
    )
    with activity("environment demo") as act, pytest.raises(EnvBuildError) as caught:
        venvs._install(
            "pip", tmp_path / "env" / "bin" / "python", ["no-such-pkg"], tmp_path / "wheels", act
        )
    first, *rest = str(caught.value).splitlines()
    assert first.startswith("installing no-such-pkg failed (exit 1): ")
    assert any("no-such-pkg" in line for line in rest)


def test_plain_running_state_is_rate_limited_and_milestones_are_not(
    info: pytest.LogCaptureFixture,
) -> None:
    with activity("download x", unit="bytes", interval=3600) as slow:
        for done in range(0, 100, 10):
            slow.update("downloading x.whl", done=done * 1e6, total=100e6)
        slow.milestone("saved x.whl")
    with activity("download y", unit="bytes", interval=0) as fast:
        fast.update("downloading y.whl", done=1e6, total=2e6)
        fast.update("downloading y.whl", done=1e6, total=2e6)  # unchanged: not said again
    lines = _plain(info)
    assert lines[0] == "  download x: saved x.whl"
    assert lines[1].startswith("  download y: downloading y.whl: 1.0 MB of 2.0 MB (")
    assert len(lines) == 2


def test_pip_raw_progress_counts_bytes() -> None:
    with activity("download cmake") as act:
        for line in (
            "Collecting cmake==4.1.0",
            "  Downloading cmake-4.1.0-py3-none-manylinux2014_x86_64.whl (29.7 MB)",
            "Progress 0 of 29681029",
            "Progress 262144 of 29681029",
        ):
            pip_line(line, act)
        assert (
            act.state()
            == "downloading cmake-4.1.0-py3-none-manylinux2014_x86_64.whl (29.7 MB): 262.1 kB of 29.7 MB (1%)"
        )


@pytest.mark.skipif(shutil.which("ninja") is None, reason="ninja not on PATH")
def test_a_real_ninja_build_counts_its_steps(tmp_path: Path) -> None:
    (tmp_path / "build.ninja").write_text(
        "rule touch\n  command = touch $out\n"
        + "".join(f"build out{i}.o: touch\n" for i in range(3))
    )
    with activity("frontend wheel demo") as act:
        proc = run_streamed(["ninja", "-j1"], act, ninja_line, cwd=tmp_path)
        assert proc.returncode == 0
        assert (act.done, act.total) == (3, 3)
        assert act.text.startswith("compiling ")


def test_uv_counts_and_downloads_parse() -> None:
    with activity("env") as act:
        uv_line("Resolved 39 packages in 12ms", act)
        assert act.text == "resolved 39 packages"
        uv_line("Downloading torch (846.0MiB)", act)
        assert act.text == "downloading torch (846.0MiB)"
        uv_line(" + torch==2.11.0", act)
        assert (act.text, act.done) == ("installed torch==2.11.0", 1)


def test_commands_and_inline_scripts_stay_out_of_the_info_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="validate")
    script = "import sys\nprint(sys.version_info[0])\n"
    assert venvs._run([sys.executable, "-c", script], "asking the version").strip() == "3"
    with activity("x") as act:
        assert run_streamed([sys.executable, "-c", script], act).output.strip() == "3"
    assert not [r for r in caplog.records if r.levelno >= logging.INFO]
    debug = [r.getMessage() for r in caplog.records]
    assert any("<script, 2 lines>" in line for line in debug)  # run_streamed's own echo


def test_interactive_only_on_a_terminal_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    assert not interactive()
    monkeypatch.delenv("CI")
    monkeypatch.setenv("TERM", "dumb")
    assert not interactive()


def test_on_a_terminal_rich_draws_the_rows(tmp_path: Path) -> None:
    """A child on a real pseudo-terminal: nested steps are rows of one rich display."""
    code = (
        "import logging, time\n"
        "from validate.log import setup_logging\n"
        "from validate.env.progress import activity\n"
        "setup_logging()\n"
        "with activity('environment abc') as env:\n"
        "    env.update('installing 5 requirements')\n"
        "    logging.getLogger('validate').info('a log line while the display is live')\n"
        "    with activity('download cmake', unit='bytes') as dl:\n"
        "        dl.update('downloading cmake.whl', done=5e6, total=10e6)\n"
        "        time.sleep(0.5)\n"
        "print('DONE')\n"
    )
    main, child = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "TERM")} | {
        "TERM": "xterm-256color",
        "COLUMNS": "160",
    }
    proc = subprocess.Popen(  # in a folder of its own: `-c` puts cwd, never the checkout, first
        [sys.executable, "-c", code], stdin=child, stdout=child, stderr=child, env=env, cwd=tmp_path
    )
    os.close(child)
    chunks: list[bytes] = []
    while True:
        ready, _, _ = select.select([main], [], [], 30)
        if not ready:
            break
        try:
            data = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    assert proc.wait(timeout=30) == 0
    screen = b"".join(chunks).decode(errors="replace")
    assert "environment abc: installing 5 requirements" in screen
    assert "download cmake: downloading cmake.whl" in screen
    assert "5.0 MB of 10.0 MB" in screen
    assert "a log line while the display is live" in screen
    assert "DONE" in screen


def test_uv_download_rows_count_bytes() -> None:
    """uv's rows as it redraws them on a terminal (progress.run_streamed pty_stderr): the bytes
    of every download it shows, summed. A long run of spaces before a row is read at once."""
    row = (
        "Preparing packages... (0/2)"
        + " " * 400
        + "bigpkg    ------------ 960.00 KiB/5.72 MiB"
        + " " * 30
        + "other  ----- 1.00 MiB/2.00 MiB"
    )
    with activity("environment") as act:
        uv_line(row, act)
        assert act.state() == "downloading 2 files: 2.0 MB of 8.1 MB (25%)"
        uv_line("Prepared 2 packages in 3.1s", act)
        assert act.state() == "prepared 2 packages"
