"""Nothing half-built survives (issue 36, item 4): an environment build interrupted by Ctrl-C or
SIGTERM leaves no folder in the cache, and one killed outright (SIGKILL) leaves one that the next
build and `envs prune` remove, saying how much they freed, while a build in progress is kept.

Real builds, in flight by construction: `validate --env current --with heldpkg==...` builds a real
venv with the real installer (uv or pip) from a simple index served here by python's http.server
(the shared wheelhouse's tooling, and heldpkg, a wheel written here). The index holds its answer
for heldpkg's wheel until the test opens the gate, so when the test signals the tool, the request
has arrived and the build is still installing (a warm cache once finished the build before the
signal landed). The tool runs in its own session and is signalled as a terminal's Ctrl-C, a
cancelled CI job or `kill -9` would signal it.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import secrets
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from packaging.utils import canonicalize_name, parse_wheel_filename
from testwheels import make_wheel
from usercli import cli, own_cache, start

if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import BinaryIO

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "resources" / "scripts"
CELL = ["--cudnn", "9.24.0.43", "--frontend", "1.27.0", "--cuda", "13.0", "--driver", "580"]
CELL += ["--arch", "sm90", "--env", "current", "--frontend-source", "current"]


class HeldIndex:
    """A simple index whose answer for heldpkg's wheel waits until `release()`."""

    def __init__(self, version: str) -> None:
        self.url = ""  # http://127.0.0.1:PORT/simple/ once the server is listening
        self.version = version  # new for each index: no installer cache has this wheel
        self.arrived = threading.Event()  # a request for the wheel came in (cleared by the test)
        self.gate = threading.Event()  # set: the wheel is served

    def release(self) -> None:
        self.gate.set()

    def env(self, cwd: Path) -> dict[str, str]:
        """The tool's environment (usercli.own_cache) with both installers reading this index."""
        env = {k: v for k, v in own_cache(cwd).items() if not k.startswith(("PIP_", "UV_"))}
        return env | {
            "PIP_CONFIG_FILE": os.devnull,
            "PIP_INDEX_URL": self.url,
            "PIP_NO_CACHE_DIR": "1",
            "UV_NO_CONFIG": "1",
            "UV_DEFAULT_INDEX": self.url,
            "UV_CACHE_DIR": os.environ.get("UV_CACHE_DIR", str(cwd / "uv-cache")),
        }


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the index folder; heldpkg's wheel only once the gate is open."""

    def __init__(self, *args: Any, held: HeldIndex, **kwargs: Any) -> None:
        self.held = held
        super().__init__(*args, **kwargs)

    def copyfile(self, source: BinaryIO, outputfile: BinaryIO) -> None:  # type: ignore[override]
        if self.path.endswith(".whl") and "/heldpkg/" in self.path:
            self.held.arrived.set()
            self.held.gate.wait(timeout=600)
        try:
            super().copyfile(source, outputfile)
        except (BrokenPipeError, ConnectionResetError):  # its installer was signalled meanwhile
            return

    def log_message(self, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def index(wheelhouse: Path, tmp_path: Path) -> Iterator[HeldIndex]:
    """simple/<project>/: the shared wheelhouse's wheels (links) and heldpkg, held."""
    root = tmp_path / "index"
    for wheel in wheelhouse.glob("*.whl"):
        folder = root / "simple" / canonicalize_name(parse_wheel_filename(wheel.name)[0])
        folder.mkdir(parents=True, exist_ok=True)
        (folder / wheel.name).symlink_to(wheel)
    version = f"1.0.{secrets.randbelow(10**9)}"
    make_wheel(root / "simple" / "heldpkg", "heldpkg", version, files={"heldpkg/__init__.py": b""})
    held = HeldIndex(version)
    handler = functools.partial(_Handler, held=held, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    held.url = f"http://127.0.0.1:{server.server_address[1]}/simple/"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield held
    finally:
        held.release()
        server.shutdown()
        server.server_close()
        thread.join()


def _validate(cwd: Path, index: HeldIndex, results: str) -> subprocess.Popen[str]:
    """A real validate run whose cell needs a new environment (the tool's interpreter plus
    heldpkg), started in a session of its own."""
    cases = cwd / "cases"
    if not cases.is_dir():
        cases.mkdir()
        shutil.copy(SCRIPTS / "pass_script.py", cases)
    argv = ["validate", *CELL, "--with", f"heldpkg=={index.version}"]
    argv += ["--cases", str(cases), "--results", results]
    return start(
        *argv,
        cwd=cwd,
        env=index.env(cwd),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _cli(cwd: Path, index: HeldIndex, *args: str) -> subprocess.CompletedProcess[str]:
    return cli(*args, cwd=cwd, env=index.env(cwd), timeout=300)


def _building(envs: Path, proc: subprocess.Popen[str], index: HeldIndex) -> Path:
    """The build folder of a build in flight: its installer waits for heldpkg's wheel."""
    deadline = time.monotonic() + 240
    while not index.arrived.wait(timeout=0.05):
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the build ended before it asked for heldpkg: {out}{err}")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            pytest.fail("the build never asked for heldpkg")
    index.arrived.clear()
    (partial,) = [p for p in envs.iterdir() if p.name.startswith(".") and p.is_dir()]
    assert (partial / "env" / "bin" / "python").exists()
    assert proc.poll() is None
    return partial


def _ended(proc: subprocess.Popen[str], timeout: float) -> str:
    """Its stderr once it exits; one that does not within `timeout` is a failure, killed with
    its session (not left running into the next test)."""
    try:
        return proc.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
        pytest.fail(f"the tool did not exit within {timeout:.0f} s of the signal:\n{err}")


def _folders(envs: Path) -> list[str]:
    return sorted(p.name for p in envs.iterdir() if p.is_dir()) if envs.is_dir() else []


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["ctrl-c", "sigterm"]
)
def test_an_interrupted_build_leaves_no_folder(
    index: HeldIndex, tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    envs = tmp_path / "cache" / "envs"
    proc = _validate(tmp_path, index, "run")
    partial = _building(envs, proc, index)  # its installer waits for heldpkg
    os.killpg(proc.pid, sig)  # the whole session, as a terminal or a CI runner signals it
    err = _ended(proc, timeout=120)
    assert proc.returncode == code, err
    assert not partial.exists(), _folders(envs)
    assert _folders(envs) == [], err  # no build folder, no half-renamed environment
    # the build the stop killed is no verdict: no `error` for the cell (a resume builds again)
    store = tmp_path / "run" / "results.jsonl"
    assert not store.exists() or store.read_text().strip() == "", store.read_text()


def test_sigterm_to_the_tool_alone_ends_its_installer(index: HeldIndex, tmp_path: Path) -> None:
    """SIGTERM to the tool's process only (`kill PID`, `docker stop` of a container whose PID 1 is
    the tool): the installer runs in the tool's group but gets no signal, and the tool exits
    with os._exit. The tool ends it before it exits: nothing of the session is left running (the
    installer once went on writing into the folder the tool had removed)."""
    envs = tmp_path / "cache" / "envs"
    proc = _validate(tmp_path, index, "run")
    partial = _building(envs, proc, index)  # its installer waits for heldpkg
    assert _session(proc.pid) != [], "the installer is not in the tool's session"
    os.kill(proc.pid, signal.SIGTERM)  # the tool alone
    err = _ended(proc, timeout=120)
    assert proc.returncode == 143, err
    deadline = time.monotonic() + 10
    while _session(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _session(proc.pid)
    for line in left:
        os.kill(int(line.split()[0]), signal.SIGKILL)
    assert left == []
    assert not partial.exists()
    assert _folders(envs) == [], err


def _session(sid: int) -> list[str]:
    """`pid args` of the live processes of session `sid` (the tool's: it was started in one)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            args = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(stat[3]) == sid and stat[0] not in ("Z", "X"):
            found.append(f"{entry.name} {args.strip()[:200]}")
    return found


def test_a_killed_build_is_removed_by_prune_and_by_the_next_build(
    index: HeldIndex, tmp_path: Path
) -> None:
    envs = tmp_path / "cache" / "envs"
    # killed outright: nothing of the tool runs, the folder stays (as issue 36 found, 129 MB each)
    proc = _validate(tmp_path, index, "r1")
    partial = _building(envs, proc, index)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert partial.is_dir()
    listed = _cli(tmp_path, index, "envs", "list")
    assert listed.returncode == 0, listed.stderr
    assert "1 half-built environment folder(s)" in listed.stdout, listed.stdout
    pruned = _cli(tmp_path, index, "envs", "prune")
    assert pruned.returncode == 0, pruned.stderr
    assert re.search(
        r"removed 1 half-built environment folder\(s\) left by interrupted builds, "
        r"\d+(\.\d)? (B|KiB|MiB|GiB) freed",
        pruned.stdout,
    ), pruned.stdout
    assert not partial.exists()
    # killed again; the next build of any environment removes it, and says so
    proc = _validate(tmp_path, index, "r2")
    partial = _building(envs, proc, index)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert partial.is_dir()
    index.release()
    proc = _validate(tmp_path, index, "r3")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err  # the case is an `error` (no backend here), the env built
    assert "removed 1 half-built environment folder(s) left by interrupted builds" in err, err
    assert not partial.exists()
    (built,) = _folders(envs)
    assert (envs / built / ".complete").is_file()


def test_prune_keeps_a_build_in_progress(index: HeldIndex, tmp_path: Path) -> None:
    envs = tmp_path / "cache" / "envs"
    proc = _validate(tmp_path, index, "run")
    partial = _building(envs, proc, index)
    pruned = _cli(tmp_path, index, "envs", "prune", "--all")
    assert pruned.returncode == 0, pruned.stderr
    assert "half-built" not in pruned.stdout, pruned.stdout
    assert proc.poll() is None  # still waiting for heldpkg: its folder is there
    assert partial.is_dir()
    index.release()
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err  # built; its case an `error` for want of the backend
    assert "environment" in err
    assert not partial.exists()  # renamed into place by its own build
    (built,) = _folders(envs)
    assert (envs / built / ".complete").is_file(), err
