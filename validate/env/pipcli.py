"""What the pip in use supports: the tool asks pip's version once and passes only its options.

The pip that runs is the tool's own (`sys.executable -m pip`, pyproject `pip>=23.1`), except
inside an image, where the Dockerfiles run the image's pip (Debian bookworm's python3-venv seeds
pip 23.0.1, Ubuntu 24.04's 24.0). Every option the tool passes, and the first pip with it
(source: pip's NEWS.rst, except where noted):

| option | where | first pip | source |
|---|---|---|---|
| `--python PY` (before the command) | venvs `_install` | 22.3 | 22.3 NEWS, #11320 |
| `--progress-bar raw` | venvs, wheelhouse | 24.1 | 24.1b1 NEWS, #11508 |
| `--progress-bar off` (older pips) | venvs, wheelhouse | <= 23.0.1 | `[on, off]` in `install --help` of 23.0.1 and 23.1 (run here) |
| `download --abi X --abi Y`, `--platform` repeated | wheelhouse | 20.3 | 20.3 NEWS, #6121 |
| `download --only-binary=:all: --python-version --implementation` | wheelhouse | 9.0 | 9.0 NEWS, #3760 |
| `install/wheel --no-index --find-links --no-deps -r`, `-v`, `--disable-pip-version-check` | venvs, frontend_build, Dockerfiles | < 9 | long-standing options |

So nothing needs more than the declared 23.1 except `raw`, which is only a finer progress
display: below 24.1 the tool passes `--progress-bar off`, reads pip's ordinary lines
(`Collecting`, `Processing`, `Downloading X (N MB)`, `Installing collected packages`,
`Successfully installed`), see `progress.pip_line`, and takes a download's bytes from the size
of the file pip writes it into, in a TMPDIR of the tool's (`streamed.run_streamed` `grow`). The image's pip runs only the Dockerfiles'
long-standing options, so Debian's 23.0.1 below the floor builds images too.

uv (optional, used when on PATH; no floor declared, tested with uv 0.13): `uv venv --quiet
--python P [--system-site-packages]`, `uv pip install --python P --no-index --find-links DIR
--no-deps`, `uv python find V`.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from typing import Final

from packaging.version import InvalidVersion, Version

from validate.errors import EnvBuildError

__all__ = ["PIP_FLOOR", "RAW_PROGRESS", "pip_version", "progress_args", "raw_progress"]

#: pyproject's `pip>=23.1`: what `pip --python` and the rest need is well below it.
PIP_FLOOR: Final = Version("23.1")
#: `--progress-bar raw`: "Progress N of M" lines while a download runs (pip 24.1, #11508).
RAW_PROGRESS: Final = Version("24.1")
#: `pip --python` (22.3): below it the pip installer cannot work at all.
_PYTHON_OPTION: Final = Version("22.3")


@functools.lru_cache(maxsize=8)
def pip_version(python: str = sys.executable) -> Version:
    """The version of `python -m pip` as that interpreter runs it (asked once per process):
    the pip that will run, not the one this process might import."""
    argv = [python, "-m", "pip", "--version"]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    words = proc.stdout.split()
    try:
        if proc.returncode != 0 or len(words) < 2 or words[0] != "pip":
            raise InvalidVersion(proc.stdout)
        version = Version(words[1])
    except InvalidVersion:
        why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        msg = f"no usable pip for {python} ({why}); install one: {python} -m ensurepip"
        raise EnvBuildError(msg) from None
    if version < _PYTHON_OPTION:
        msg = (
            f"pip {version} of {python} lacks `pip --python` (pip {_PYTHON_OPTION}); "
            f"this tool needs pip>={PIP_FLOOR}: {python} -m pip install -U 'pip>={PIP_FLOOR}'"
        )
        raise EnvBuildError(msg)
    return version


def raw_progress(version: Version) -> bool:
    """Whether this pip prints its downloads' bytes (`Progress N of M`); older ones are watched
    through the files they download into (streamed.run_streamed `grow`)."""
    return version >= RAW_PROGRESS


def progress_args(version: Version) -> list[str]:
    """`raw` where pip has it; elsewhere no bar (its one closing line off a terminal is noise in
    the error tail), the progress then comes from pip's ordinary lines."""
    return ["--progress-bar", "raw" if raw_progress(version) else "off"]
