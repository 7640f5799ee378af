"""The processes a test started, found by a tag in their environment: every process the tool starts
inherits it, so a test finds only its own, never another checkout's tests on the same machine."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from usercli import start

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

TAG_VAR = "CUDNN_MATRIX_TEST_TAG"


SCRIPTS = Path(__file__).resolve().parent / "resources" / "scripts"


def quick_and_hanging(cases: Path) -> Path:
    """Make `cases` with a quick passing script (`a_quick.py`) and a hanging one whose name holds
    this process's pid (a unique name to find its processes by); returns the hanging one."""
    cases.mkdir()
    shutil.copy(SCRIPTS / "pass_script.py", cases / "a_quick.py")
    hang = cases / f"hang_{os.getpid()}.py"
    shutil.copy(SCRIPTS / "hang.py", hang)
    return hang


def tagged_env() -> tuple[str, dict[str, str]]:
    """A new tag and the environment (this one plus the tag) to start the tool with."""
    tag = uuid.uuid4().hex
    return tag, {**os.environ, TAG_VAR: tag}


def tagged(tag: str, marker: str = "") -> list[str]:
    """`pid args` of the live (not zombie) processes carrying `tag` whose command line contains
    `marker`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()
            args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if state != "Z" and f"{TAG_VAR}={tag}".encode() in environ.split(b"\0") and marker in args:
            found.append(f"{proc.name} {args.strip()}")
    return found


def kill_tagged(tag: str) -> None:
    """SIGKILL whatever a failed assertion left behind, by pid."""
    for line in tagged(tag):
        with contextlib.suppress(OSError):
            os.kill(int(line.split()[0]), signal.SIGKILL)


def default_sigint() -> None:
    """preexec_fn for a tool started as from a terminal: a shell without job control starts
    background commands with SIGINT ignored, and that disposition is inherited (a CI script run
    with `&` would hide Ctrl-C)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextlib.contextmanager
def tagged_tool(
    *args: str, cwd: Path, output: int = subprocess.PIPE
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`cudnn-matrix ARGS` (usercli.start) started in `cwd` with a new tag, as from a terminal
    (SIGINT as by default); on leaving, whatever a failed assertion left behind is killed: the
    tool and every tagged process."""
    tag, env = tagged_env()
    tool = start(*args, cwd=cwd, env=env, stdout=output, stderr=output, preexec_fn=default_sigint)
    try:
        yield tool, tag
    finally:
        tool.kill()
        tool.communicate()
        kill_tagged(tag)


def ctrl_c_when(
    tool: subprocess.Popen[bytes],
    ready: Callable[[], bool],
    *,
    what: str,
    wait_s: float = 60,
    end_s: float = 60,
    sig: signal.Signals = signal.SIGINT,
) -> bytes:
    """Ctrl-C (SIGINT, or `sig`) to the tool once `ready()` holds; its stderr once it has ended
    (within `end_s`). `what` names the condition in the failure when it never holds within
    `wait_s`."""
    deadline = time.monotonic() + wait_s
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(what)
        time.sleep(0.2)
    tool.send_signal(sig)
    _, err = tool.communicate(timeout=end_s)
    return err


def still_running(tag: str, marker: str = "", within_s: float = 10.0) -> list[str]:
    """What `tagged(tag, marker)` still finds after waiting up to `within_s` for it to go."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and tagged(tag, marker):
        time.sleep(0.2)
    return tagged(tag, marker)


def stop_while(job: Any, started: Callable[[], object], within_s: float) -> list[Any]:
    """Run `job` (one of a SuiteRun's jobs) on a thread in a supervisor session; once `started()`
    is true, stop the supervisor as Ctrl-C or SIGTERM does (`kill_all`), and return what the job
    gave. In the tool's own process, so nothing races the stop. The supervisor is left able to
    start cases again, for the tests after this one."""
    from validate.execute.supervise import SUPERVISOR

    given: list[Any] = []
    worker = threading.Thread(target=lambda: given.extend(job.run()))
    with SUPERVISOR.session():
        try:
            worker.start()
            deadline = time.monotonic() + within_s
            while not started() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert started(), f"what the stop waits for did not start within {within_s} s"
            SUPERVISOR.live.kill_all()
            worker.join(timeout=60)
            assert not worker.is_alive()
        finally:
            SUPERVISOR.live.stopped.clear()
    return given
