"""A download shows its bytes and percent while it runs (issue #30 item 3), with each installer.

A wheel of 6 MB (random bytes, stored: no compression) is written here and served by python's
http.server, throttled to 2.5 MB/s, from a simple index that also holds the runner's tooling
(links into the shared wheelhouse). The tool builds a real environment with it as an extra pin,
in plain mode (CI) with a plain interval of 0.4 s, with uv, with this interpreter's pip (newest:
`--progress-bar raw`) and with pyproject's floor pip 23.1 (no `raw`: the tool reads the size of
the file pip downloads into). Each prints at least one line with a byte count, a total and a
percent strictly between 0 and 100: a line taken while the bytes were still arriving.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import http.server
import os
import re
import subprocess
import sys
import threading
import time
import zipfile
from typing import TYPE_CHECKING, Any

import pytest
from packaging.utils import canonicalize_name, parse_wheel_filename
from usercli import fetch_pip, tool_venv

from validate.env.venvs import TOOLING

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path
    from typing import BinaryIO

pytestmark = pytest.mark.slow

SIZE = 6_000_000
RATE = 2_500_000  # bytes per second: the wheel takes about 2.4 s
WHEEL = "bigpkg-1.0-py3-none-any.whl"
#: `  environment <hash>: downloading bigpkg-1.0-py3-none-any.whl (6.0 MB): 2.5 MB of 6.0 MB (42%, 2.5 MB/s) (3s)`
MID_DOWNLOAD = re.compile(r"bigpkg.*: ([\d.]+ [kMG]?B) of (6\.0 MB) \((\d+)%")

#: Builds an environment whose only extra pin is the big wheel, as `validate` does.
_SCRIPT = """
import logging, sys
from pathlib import Path
from validate.env.sources import parse_backend_source, parse_frontend_source
from validate.env.venvs import EnvSpec, ensure_env

logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
spec = EnvSpec(
    backend=parse_backend_source("current"),
    frontend=parse_frontend_source("current"),
    extras=("bigpkg==1.0",),
)
ensure_env(spec, Path(sys.argv[1]), installer=sys.argv[2])
"""


def _write_wheel(folder: Path) -> Path:
    """A real wheel of SIZE random bytes (stored, so the download is SIZE bytes too)."""
    files = {
        "bigpkg/__init__.py": b"",
        "bigpkg/data.bin": os.urandom(SIZE),
        "bigpkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: bigpkg\nVersion: 1.0\n",
        "bigpkg-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    wheel = folder / WHEEL
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{name},sha256={digest.decode()},{len(data)}")
        record.append("bigpkg-1.0.dist-info/RECORD,,")
        archive.writestr("bigpkg-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel


class _Throttled(http.server.SimpleHTTPRequestHandler):
    """Serves a folder; the big wheel at RATE bytes per second."""

    def copyfile(self, source: BinaryIO, outputfile: BinaryIO) -> None:  # type: ignore[override]
        slow = self.path.endswith(WHEEL)
        try:
            while chunk := source.read(64 * 1024):
                outputfile.write(chunk)
                if slow:
                    outputfile.flush()
                    time.sleep(len(chunk) / RATE)
        except (BrokenPipeError, ConnectionResetError):  # a client that read what it needed
            return

    def log_message(self, *args: Any) -> None:
        """Quiet."""


@pytest.fixture(scope="module")
def index(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """simple/<project>/: the shared wheelhouse's wheels (links) and the big wheel."""
    root = tmp_path_factory.mktemp("slow-index")
    for wheel in wheelhouse.glob("*.whl"):
        folder = root / "simple" / canonicalize_name(parse_wheel_filename(wheel.name)[0])
        folder.mkdir(parents=True, exist_ok=True)
        (folder / wheel.name).symlink_to(wheel)
    (root / "simple" / "bigpkg").mkdir(parents=True)
    _write_wheel(root / "simple" / "bigpkg")
    handler = functools.partial(_Throttled, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _build(python: Path | str, installer: str, url: str, tmp_path: Path) -> list[str]:
    """The tool's plain lines while it builds the environment (and checks it built)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env |= {
        "CI": "true",  # plain lines, as in a pipeline
        "CUDNN_MATRIX_PROGRESS_INTERVAL_S": "0.4",
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": url,
        "PIP_NO_CACHE_DIR": "1",
        "UV_NO_CONFIG": "1",
        "UV_DEFAULT_INDEX": url,
        "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
    }
    if installer == "uv":  # the tooling in uv's cache first: the tool then downloads bigpkg alone
        warm = tmp_path / "warm"
        subprocess.run(["uv", "venv", "--quiet", str(warm)], env=env, check=True)
        install = ["uv", "pip", "install", "--quiet", "--python", str(warm / "bin" / "python")]
        subprocess.run([*install, *TOOLING], env=env, check=True)
    proc = subprocess.run(
        [str(python), "-c", _SCRIPT, str(tmp_path / "cache"), installer],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        cwd=tmp_path,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout.splitlines()


def _mid_download(lines: list[str]) -> list[str]:
    """The lines that show bytes of the total and a percent strictly between 0 and 100."""
    return [ln for ln in lines if (m := MID_DOWNLOAD.search(ln)) and 0 < int(m[3]) < 100]


@pytest.mark.parametrize("installer", [pytest.param("uv", marks=pytest.mark.uv), "pip"])
def test_a_download_shows_bytes_and_percent_as_it_runs(
    installer: str, index: str, tmp_path: Path
) -> None:
    lines = _build(sys.executable, installer, index, tmp_path)
    assert _mid_download(lines), "\n".join(lines)


def test_the_floor_pip_shows_bytes_and_percent_too(
    wheelhouse: Path, index: str, tmp_path: Path
) -> None:
    """pip 23.1 has no `--progress-bar raw`: the bytes come from the file it downloads into."""
    python = tool_venv(tmp_path / "tool", fetch_pip(wheelhouse, "23.1"))
    version = subprocess.run(
        [python, "-m", "pip", "--version"], capture_output=True, text=True, check=True
    )
    assert version.stdout.split()[1] == "23.1"
    lines = _build(python, "pip", index, tmp_path)
    assert not any(ln.startswith("Progress ") for ln in lines)  # no `raw` from this pip
    assert _mid_download(lines), "\n".join(lines)
