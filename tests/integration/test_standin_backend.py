"""Real `validate` and `bisect` runs over stand-in backends (issue #36, items 6 and 7): a backend
store of libcudnn.so.9 built here with the C compiler (only `cudnnGetVersion`: this machine has no
cuDNN to spare), a stand-in frontend wheel whose `backend_version()` asks that library, and real
environments (nbclient and its kernel from the index uv is configured with).

- `bisect` whose ends agree (both pass) is a finding with its own exit code, 6, not bad input's 2,
  and nothing between the ends is probed.
- `validate`'s end on a terminal: the verdict line first, then the cells, within the width.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import zipfile
from typing import TYPE_CHECKING

import pytest
from usercli import cli, command, on_a_terminal

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.slow

CC = shutil.which("cc") or shutil.which("gcc")
_FRONTEND = '''"""Stand-in for the cuDNN frontend (tests/integration/test_bisect_agree.py)."""
import ctypes

__version__ = "1.27.0"


def backend_version():
    return int(ctypes.CDLL("libcudnn.so.9").cudnnGetVersion())
'''


def _backend(store: Path, version: str) -> None:
    """store/<version>/lib/libcudnn.so.9 whose cudnnGetVersion() gives `version`'s number."""
    major, minor, patch = (int(p) for p in version.split(".")[:3])
    lib = store / version / "lib"
    lib.mkdir(parents=True)
    source = lib / "stub.c"
    number = major * 10000 + minor * 100 + patch
    source.write_text(f"unsigned long cudnnGetVersion(void) {{ return {number}; }}\n")
    assert CC is not None
    subprocess.run(
        [CC, "-shared", "-fPIC", "-o", str(lib / "libcudnn.so.9"), str(source)], check=True
    )


def _frontend_wheel(folder: Path) -> Path:
    """nvidia_cudnn_frontend-1.27.0-py3-none-any.whl holding the stand-in `cudnn` module."""
    dist = "nvidia_cudnn_frontend-1.27.0.dist-info"
    files = {
        "cudnn/__init__.py": _FRONTEND,
        f"{dist}/METADATA": "Metadata-Version: 2.1\nName: nvidia-cudnn-frontend\nVersion: 1.27.0\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = ""
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record += f"{name},sha256={digest.decode()},{len(text.encode())}\n"
    files[f"{dist}/RECORD"] = record + f"{dist}/RECORD,,\n"
    path = folder / "nvidia_cudnn_frontend-1.27.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name, text in files.items():
            wheel.writestr(name, text)
    return path


@pytest.mark.skipif(CC is None, reason="no C compiler to build the stand-in libcudnn.so.9")
def test_ends_that_agree_exit_6_and_nothing_between_is_probed(tmp_path: Path) -> None:
    store = tmp_path / "store"
    for version in ("9.12.0.46", "9.12.1.0", "9.13.0.50"):
        _backend(store, version)
    case = tmp_path / "passes.py"
    case.write_text('print("a case whose outcome no backend changes")\n')
    folder = tmp_path / "bisect"
    argv = ["bisect", "--axis", "cudnn"]
    argv += ["--good", "9.12.0.46", "--bad", "9.13.0.50", "--backend-store", str(store)]
    argv += ["--frontend", "1.27.0", "--frontend-source", str(_frontend_wheel(tmp_path))]
    argv += ["--cuda", "13.0", "--driver", "580", "--arch", "sm90"]
    argv += ["--cases", str(case), "--case", case.name, "--results", str(folder)]
    argv += ["--cache-dir", str(tmp_path / "envs")]
    proc = cli(*argv, cwd=tmp_path, timeout=600)
    assert proc.returncode == 6, proc.stdout + proc.stderr
    assert "1 candidates between 9.12.0.46 and 9.13.0.50" in proc.stdout
    assert (
        "no change to find: --good 9.12.0.46 and --bad 9.13.0.50 both give pass, so nothing "
        "between them was probed (exit 6)"
    ) in proc.stdout
    assert "cudnn-matrix: error" not in proc.stderr
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in (folder / "probes").iterdir()) == ["9.12.0.46", "9.13.0.50"]
    state = json.loads((folder / "bisect.json").read_text(encoding="utf-8"))
    assert state["result"]["ends_agree"] is True
    assert state["result"]["found"] is False
    assert state["suggested_issue"] is None


def _on_a_terminal(args: list[str], width: int, log: Path) -> tuple[int, str, str]:
    """`cudnn-matrix ARGS` started in the folder of `log`, with stdout on a pseudo-terminal
    `width` columns wide; stderr to `log`."""
    with log.open("w", encoding="utf-8") as err:
        code, text = on_a_terminal(command(*args), width=width, cwd=log.parent, stderr=err)
    return code, text, log.read_text(encoding="utf-8")


@pytest.mark.skipif(CC is None, reason="no C compiler to build the stand-in libcudnn.so.9")
def test_validate_ends_with_the_verdict_first_within_the_terminal(tmp_path: Path) -> None:
    """Four cells (two backends x sm90, sm100) on an 80-column terminal: the verdict line first,
    then one line per cell (the table, whose note column makes its rows wider than 80, is not
    printed as such), every line within 80 columns; piped, the table as it is."""
    store = tmp_path / "store"
    for version in ("9.12.0.46", "9.13.0.50"):
        _backend(store, version)
    case = tmp_path / "passes.py"
    case.write_text('print("ok")\n')
    argv = ["validate", "--cudnn", "9.12.0.46,9.13.0.50"]
    argv += ["--backend-store", str(store), "--frontend", "1.27.0"]
    argv += ["--frontend-source", str(_frontend_wheel(tmp_path))]
    argv += ["--cuda", "13.0", "--driver", "580", "--arch", "sm90,sm100", "--cases", str(case)]
    argv += ["--cache-dir", str(tmp_path / "envs"), "--speed-repeats", "0"]
    code, text, err = _on_a_terminal(
        [*argv, "--results", str(tmp_path / "a")], 80, tmp_path / "stderr.log"
    )
    assert code == 0, text + err  # no GPU: not signed off, exit 0
    lines = text.splitlines()
    assert lines[0].startswith("NOT SIGNED OFF — no GPU: 2 GPU cases skipped; pins verified"), text
    assert [line for line in lines if len(line) > 80] == [], text
    cells = [line for line in lines if " / 1.27.0 / 13.0 / 580 / sm" in line]
    assert len(cells) == 4, text
    assert all(text.index(line) > text.index(lines[0]) for line in cells)
    assert not any(line.startswith("| cell ") for line in lines)
    assert lines[-1] == f"results: {tmp_path / 'a'}"[:80] or len(lines[-1]) <= 80

    piped = cli(*argv, "--results", str(tmp_path / "b"), cwd=tmp_path, timeout=600)
    assert piped.returncode == 0, piped.stderr
    out = piped.stdout.splitlines()
    assert out[0] == (
        "NOT SIGNED OFF — no GPU: 2 GPU cases skipped; pins verified in 2 environments "
        "(2 pass, 2 skip; flaky: block)"
    )
    assert out[1].startswith("| cell ")  # then the table, as it is
