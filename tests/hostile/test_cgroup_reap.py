"""Reaping by a cgroup v2 (execute/cgroups.py), where the host delegates one, and the fallback
(the subreaper and the token scan) where it does not. Real processes: a daemon double-forks,
leaves its session with setsid and execs with an empty environment, so it carries no token;
only its cgroup still holds it. It is found here by a marker in its command line."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from usercli import cli, start

from validate.execute import cgroups, launch

if TYPE_CHECKING:
    from collections.abc import Iterator

SUITES = Path(__file__).resolve().parents[1] / "resources" / "hostile" / "suites"

#: Double fork + setsid; the grandchild execs `sleep` under Python with the marker as its last
#: argument and, where SCRUB is set, no environment at all (no token).
_DAEMON = """
import os, sys
mark, scrub = sys.argv[1], sys.argv[2] == "1"
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        argv = [sys.executable, "-c", "import time; time.sleep(600)", mark]
        os.execve(sys.executable, argv, {} if scrub else dict(os.environ))
    os._exit(0)
os.wait()
"""


def _with_mark(mark: str) -> list[int]:
    """Live (not zombie) processes whose command line holds `mark`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
            state = (proc / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if state != "Z" and mark.encode() in args:
            found.append(int(proc.name))
    return found


def _wait_for(mark: str, *, present: bool) -> list[int]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = _with_mark(mark)
        if bool(found) == present:
            return found
        time.sleep(0.05)
    return _with_mark(mark)


@pytest.fixture
def mark() -> Iterator[str]:
    value = f"hostile_cgroup_{uuid.uuid4().hex}"
    yield value
    for pid in _with_mark(value):  # what a failed assertion left
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _cgroup_or_skip() -> Path:
    base = cgroups.available()
    if base is None:
        pytest.skip(
            "no writable cgroup v2 with cgroup.kill here (the tool's own cgroup refuses a child, "
            "or CUDNN_MATRIX_CGROUP=0): the token scan alone reaps"
        )
    return base


def _daemon(tmp_path: Path, mark: str, *, scrub: bool) -> tuple[str, Path]:
    """Start the daemonizing script through the launcher, wait for it and for its daemon;
    returns the case's token and its log."""
    token = launch.new_token()
    log = tmp_path / f"{token}.log"
    proc = launch.start(
        [sys.executable, "-c", _DAEMON, mark, "1" if scrub else "0"],
        env=dict(os.environ),
        log_path=log,
        token=token,
    )
    assert proc.wait(timeout=30) == 0, log.read_text()
    assert _wait_for(mark, present=True), "the daemon never started"
    return token, log


def test_a_daemon_without_its_token_is_ended_by_the_cases_cgroup(tmp_path: Path, mark: str) -> None:
    base = _cgroup_or_skip()
    token, _ = _daemon(tmp_path, mark, scrub=True)
    [pid] = _with_mark(mark)
    environ = Path(f"/proc/{pid}/environ").read_bytes()
    assert launch.TOKEN_ENV.encode() not in environ  # no scan could find it
    assert pid in cgroups.members(token)
    named = launch.reap(token)
    assert [p.pid for p in named] == [pid], named
    assert named[0].args.endswith(mark), named
    assert _wait_for(mark, present=False) == []
    assert not (base / f"cm-{token}-{os.getpid()}").exists()  # the case's cgroup is removed with it


#: A case that makes a cgroup of its own under its case's (as the tool does when a case runs it)
#: and leaves a process there with no environment.
_NESTED = """
import os, sys
inner, mark = sys.argv[1], sys.argv[2]
os.mkdir(inner)
if os.fork() == 0:
    with open(os.path.join(inner, "cgroup.procs"), "w") as fh:
        fh.write("0")
    os.setsid()
    os.execve(sys.executable, [sys.executable, "-c", "import time; time.sleep(600)", mark], {})
"""


def test_a_cgroup_a_case_made_under_its_own_is_ended_and_removed_with_it(
    tmp_path: Path, mark: str
) -> None:
    base = _cgroup_or_skip()
    token = launch.new_token()
    own = base / f"cm-{token}-{os.getpid()}"  # made by this process: its owner
    inner = own / "inner"
    proc = launch.start(
        [sys.executable, "-c", _NESTED, str(inner), mark],
        env=dict(os.environ),
        log_path=tmp_path / "nested.log",
        token=token,
    )
    assert proc.wait(timeout=30) == 0, (tmp_path / "nested.log").read_text()
    [pid] = _wait_for(mark, present=True)
    assert pid in cgroups.members(token)
    named = launch.reap(token)
    assert [p.pid for p in named] == [pid], named
    assert _wait_for(mark, present=False) == []
    assert not own.exists()


def test_without_a_cgroup_the_token_scan_still_reaps(
    tmp_path: Path, mark: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(cgroups.CGROUP_ENV, "0")
    assert cgroups.available() is None
    token = launch.new_token()
    assert cgroups.PROCS_ENV not in launch.case_env({}, token)  # no cgroup is made
    token, _ = _daemon(tmp_path, mark, scrub=False)  # it keeps the token: the scan finds it
    [pid] = _with_mark(mark)
    assert cgroups.members(token) == []
    named = launch.reap(token)
    assert [p.pid for p in named] == [pid], named
    assert _wait_for(mark, present=False) == []


def test_run_tests_ends_a_scrubbed_daemon_and_names_it(tmp_path: Path, mark: str) -> None:
    """As a user runs it: the daemon a pytest test leaves, with no token, ends with its share
    process and is named in the note of the test that started it."""
    _cgroup_or_skip()
    run_dir = tmp_path / "run"
    args = ["run", "--tests", str(SUITES / "scrubbed_daemon"), "--jobs", "2", "--no-api-logs"]
    proc = cli(
        *args,
        *("--timeout", "60", "--results", run_dir.name),
        cwd=tmp_path,
        env={**os.environ, "HOSTILE_MARK": mark},
        timeout=240,
    )
    assert isinstance(proc, subprocess.CompletedProcess)
    lines = [json.loads(ln) for ln in (run_dir / "results.jsonl").read_text().splitlines()]
    last = {r["case"]: (r["outcome"], r.get("reason", "")) for r in lines if "case" in r}
    assert {c: o for c, (o, _) in last.items()} == {
        "test_scrubbed.py::test_daemonizes_scrubbed": "pass",
        "test_scrubbed.py::test_after": "pass",
    }, proc.stderr
    assert proc.returncode == 0, proc.stderr
    assert _wait_for(mark, present=False) == [], proc.stderr
    note = last["test_scrubbed.py::test_daemonizes_scrubbed"][1]
    assert "1 process(es) outlived the test and were killed: " in note, note
    assert note.endswith(mark), note


@pytest.mark.parametrize("fork", ["1", "0"])
def test_a_script_case_runs_in_a_cgroup_of_its_own(tmp_path: Path, fork: str) -> None:
    """Forked by the fork server (the child joins its cgroup itself) or started fresh (the
    launcher's child joins it before exec): the case's process is in `cm-<token>-<tool pid>`,
    so all it starts is too."""
    _cgroup_or_skip()
    cases = tmp_path / "cases"
    cases.mkdir()
    seen = tmp_path / "cgroup.txt"
    (cases / "where.py").write_text(
        "import os, pathlib\n"
        "pathlib.Path(os.environ['HOSTILE_OUT']).write_text(open('/proc/self/cgroup').read())\n"
    )
    run_dir = tmp_path / "run"
    proc = cli(
        *("run", "cases", "--jobs", "1", "--timeout", "60", "--no-api-logs"),
        *("--results", run_dir.name),
        cwd=tmp_path,
        env={**os.environ, "HOSTILE_OUT": str(seen), "CUDNN_MATRIX_FORK_SERVER": fork},
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    [line] = [ln for ln in seen.read_text().splitlines() if ln.startswith("0::")]
    assert re.fullmatch(r"0::.*/cm-[0-9a-f]{32}-[0-9]+", line), line


def test_the_empty_cgroups_a_killed_run_left_are_removed_at_the_next_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tool killed outright reaps nothing: its cases' cgroups stay, empty once their processes
    were killed. Of those that name no owner (a tool from before owners were named), the next
    tool removes those older than a minute, and leaves a new one alone (its process may not
    have joined it yet)."""
    base = _cgroup_or_skip()
    stale = base / f"cm-{uuid.uuid4().hex}"
    (stale / "inner").mkdir(parents=True)  # a case that ran the tool made its own under it
    for each in (stale / "inner", stale):
        os.utime(each, (time.time() - 3600,) * 2)
    fresh = base / f"cm-{uuid.uuid4().hex}"
    fresh.mkdir()
    try:
        monkeypatch.setattr(cgroups, "_BASE", [])  # as a new tool process finds it
        assert cgroups.available() == base
        assert not stale.exists()
        assert fresh.is_dir()
    finally:
        for each in (fresh, stale / "inner", stale):
            with contextlib.suppress(OSError):
                each.rmdir()


_SLEEPER = """\
import os, pathlib, time
pathlib.Path(os.environ["HOSTILE_OUT"]).write_text(open("/proc/self/cgroup").read())
time.sleep(300)
"""


def test_a_sigkilled_tools_empty_cgroups_are_removed_at_once_by_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real tool SIGKILLed while its case runs leaves the case's cgroup, which names the dead
    tool as its owner. Once empty, the next tool removes it at start, at once (it is seconds
    old, not a minute); an empty one whose owner lives (another run's) stays."""
    base = _cgroup_or_skip()
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "sleeper.py").write_text(_SLEEPER)
    seen = tmp_path / "cgroup.txt"
    tool = start(
        *("run", "cases", "--jobs", "1", "--timeout", "280", "--no-api-logs"),
        *("--results", "run"),
        cwd=tmp_path,
        env={**os.environ, "HOSTILE_OUT": str(seen)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    other = base / f"cm-{uuid.uuid4().hex}-{live.pid}"
    left: Path | None = None
    try:
        deadline = time.monotonic() + 120
        while not seen.is_file() or "cm-" not in seen.read_text():
            assert time.monotonic() < deadline, "the case never started"
            assert tool.poll() is None, "the tool ended before its case started"
            time.sleep(0.1)
        [line] = [ln for ln in seen.read_text().splitlines() if ln.startswith("0::")]
        left = base / line.rsplit("/", 1)[-1]
        assert left.name.endswith(f"-{tool.pid}"), (left, tool.pid)  # its owner: the tool
        tool.kill()
        tool.wait(timeout=30)
        (left / "cgroup.kill").write_bytes(b"1")  # what it ran, killed: the cgroup stays, empty
        while "populated 1" in (left / "cgroup.events").read_text():
            assert time.monotonic() < deadline, "the case's cgroup never emptied"
            time.sleep(0.05)
        assert left.is_dir()
        other.mkdir()
        monkeypatch.setattr(cgroups, "_BASE", [])  # as a new tool process finds it
        assert cgroups.available() == base
        assert not left.exists()
        assert other.is_dir()
    finally:
        for proc in (tool, live):
            proc.kill()
            proc.wait()
        for each in (other, left):
            if each is not None:
                with contextlib.suppress(OSError):
                    (each / "cgroup.kill").write_bytes(b"1")
                    each.rmdir()
