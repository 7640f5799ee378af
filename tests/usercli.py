"""The one way the tests run the tool as a user does: its console script, in a folder the test
names, with the environment the test gives (issue #36: each test file had its own `_cli`).

`cli()` runs the `cudnn-matrix` script installed beside the interpreter running the tests (what
`pip install` put there: the tool a user types), or `python -m validate` where that interpreter
has no such script. A test that must run another installation (a wheel in a venv of its own)
passes that installation's script as `tool`. `cwd` has no default: where a command starts is part
of what a test says, and the checkout is the one folder a user never starts from; nor does the
environment point PYTHONPATH at the checkout (an editable checkout hid a wheel without two of its
packages).

`tool_venv()` is a venv of its own that runs the tool installed for the tests' interpreter (an
interpreter path of its own, as nox's and a user's venvs have; an older pip where a test needs it).

`elsewhere()` is a folder outside the checkout for a test with no tmp_path whose command writes
nothing (`plan`, a refused flag).

`start()` is `cli()` for a test that must hold the process (a signal, an interrupt, a pipe it
reads as it goes), and `command()` the command line for one that hands it to a shell or a terminal
of its own (`on_a_terminal`). No test file builds the tool's command line itself
(tests/unit/test_usercli_only.py): this is the one place that says how a user starts the tool.
"""

from __future__ import annotations

import atexit
import fcntl
import functools
import os
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
import termios
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from installedtool import installed_dist

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import IO

__all__ = [
    "cli",
    "command",
    "elsewhere",
    "fetch_pip",
    "installed_tool",
    "on_a_terminal",
    "own_cache",
    "start",
    "tool_venv",
]


def installed_tool() -> list[str]:
    """argv that starts the tool installed for this interpreter."""
    script = Path(sys.executable).parent / "cudnn-matrix"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "validate"]


@functools.cache
def elsewhere() -> Path:
    """An empty folder outside the checkout, one per test session (removed at its end): where a
    command that names only absolute paths and writes nothing starts."""
    folder = Path(tempfile.mkdtemp(prefix="cudnn-matrix-elsewhere-"))
    atexit.register(shutil.rmtree, folder, True)
    return folder


def command(*args: str, tool: Sequence[str] | None = None) -> list[str]:
    """The command line `cudnn-matrix ARGS` (`tool`: another installation's script)."""
    return [*(tool or installed_tool()), *args]


def cli(
    *args: str,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    tool: Sequence[str] | None = None,
    timeout: float | None = 600,
) -> subprocess.CompletedProcess[str]:
    """`cudnn-matrix ARGS` started in `cwd`; `env` is the whole environment (None: this one's)."""
    return subprocess.run(
        command(*args, tool=tool),
        cwd=cwd,
        env=None if env is None else dict(env),
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )


def start(
    *args: str,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    tool: Sequence[str] | None = None,
    **popen_kwargs: Any,
) -> subprocess.Popen[Any]:
    """`cudnn-matrix ARGS` started in `cwd` and left running: the same command line as `cli()`,
    with SIGINT as a terminal's foreground job has it (a shell that started the tests in the
    background hands its children SIGINT ignored, and the tool rightly keeps it ignored: Ctrl-C
    tests would wait for an exit nothing asked for); `env` is the whole environment (None: this
    one's), `popen_kwargs` go to subprocess.Popen."""
    argv = [sys.executable, "-c", _SIGINT_DEFAULT, *command(*args, tool=tool)]
    return subprocess.Popen(argv, cwd=cwd, env=None if env is None else dict(env), **popen_kwargs)


#: Run argv[1:] with SIGINT's default action (exec keeps it; an ignored one it would keep too).
_SIGINT_DEFAULT: Final = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def on_a_terminal(
    argv: Sequence[str],
    *,
    width: int,
    cwd: Path | None = None,
    stderr: IO[str] | None = None,
    timeout: float = 600,
) -> tuple[int, str]:
    """Run `argv` with stdout (and stderr, unless given a file) on a pseudo-terminal `width`
    columns wide, as a user's terminal shows it: (exit code, what the terminal received)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, width, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    err = slave if stderr is None else stderr
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=err, cwd=cwd, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 1 << 16)
        except OSError:  # EIO: the other end closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    code = proc.wait(timeout=timeout)
    return code, b"".join(chunks).decode("utf-8").replace("\r\n", "\n")


def own_cache(cwd: Path) -> dict[str, str]:
    """This environment with the tool's cache in `cwd/cache`: a test's durations and environments
    stay in its own folder, never the user's cache."""
    return {**os.environ, "CUDNN_MATRIX_CACHE": str(cwd / "cache")}


def tool_venv(root: Path, pip_wheel: Path | None = None) -> Path:
    """`python -m venv --without-pip ROOT` that runs the tool installed for this interpreter: this
    interpreter's site-packages (where `pip install .` put the tool and its dependencies; never
    the checkout) reach it through a .pth line, after the venv's own, where `pip_wheel` (a
    user's older pip) goes and so wins over this interpreter's pip. Returns the venv's python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    if pip_wheel is not None:
        install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet"]
        subprocess.run([*install, "--no-index", "--no-deps", str(pip_wheel)], check=True)
    code = "import site; print(site.getsitepackages()[0])"
    own = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, check=True, cwd=elsewhere()
    )
    dist = installed_dist()
    assert dist is not None, "cudnn-matrix is not installed (tests/conftest.py stops before this)"
    lines = dict.fromkeys([str(dist.locate_file("")), sysconfig.get_paths()["purelib"]])
    (Path(own.stdout.strip()) / "_tool.pth").write_text("".join(f"{ln}\n" for ln in lines))
    return python


def fetch_pip(wheelhouse: Path, version: str) -> Path:
    """pip's own wheel of that version (a user's old pip), downloaded once into the wheelhouse."""
    found = sorted(wheelhouse.glob(f"pip-{version}-*.whl"))
    if not found:
        argv = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:"]
        subprocess.run([*argv, "--no-deps", "-d", str(wheelhouse), f"pip=={version}"], check=True)
        found = sorted(wheelhouse.glob(f"pip-{version}-*.whl"))
    return found[0]
