"""A folder under construction goes with the tool (issue 36, item 4), also when the tool exits
while the builder's own thread is still removing it: Ctrl-C ends the tool with `os._exit` from
the main thread, which stops every other thread wherever it is. Under CI's load the builder's
thread had taken its folder off the list and was half-way through removing it; the main thread
found nothing to remove and exited, and half a venv stayed (`bin/` whole, `lib/` emptied)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from validate import scratch


def _tree(root: Path) -> Path:
    for part in ("bin", "lib/python3/site-packages/pkg"):
        (root / part).mkdir(parents=True)
        for i in range(5):
            (root / part / f"f{i}").write_text("x")
    return root


def test_remove_all_removes_a_folder_its_builder_is_still_removing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _tree(tmp_path / ".hash.abc")
    started, hold = threading.Event(), threading.Event()
    real = shutil.rmtree

    def slow_in_the_builder(path: Path, ignore_errors: bool = False) -> None:
        if threading.current_thread().name == "builder":  # stopped half-way, as os._exit stops it
            real(Path(path) / "lib", ignore_errors=True)
            started.set()
            hold.wait(timeout=30)
            return
        real(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(shutil, "rmtree", slow_in_the_builder)  # scratch uses shutil.rmtree

    def build() -> None:
        with pytest.raises(KeyboardInterrupt), scratch.building(folder):
            raise KeyboardInterrupt  # the build was interrupted

    builder = threading.Thread(target=build, name="builder", daemon=True)
    builder.start()
    assert started.wait(timeout=30)
    scratch.remove_all()  # the main thread, before os._exit
    assert not folder.exists(), sorted(p.name for p in folder.rglob("*"))
    hold.set()
    builder.join(timeout=30)


def test_a_finished_build_is_kept_and_forgotten(tmp_path: Path) -> None:
    folder = _tree(tmp_path / "env")
    with scratch.building(folder, keep=True):
        pass
    scratch.remove_all()
    assert (folder / "bin" / "f0").is_file()


def test_a_failed_build_is_removed(tmp_path: Path) -> None:
    folder = _tree(tmp_path / ".hash.def")

    def build() -> None:
        with scratch.building(folder, keep=True):
            msg = "disk full"
            raise OSError(msg)

    with pytest.raises(OSError, match="disk full"):
        build()
    assert not folder.exists()


HUNG_AFTER_CTRL_C = """
import os, signal, sys, threading
from pathlib import Path
import validate.cli as cli
from validate import scratch
cli.EXIT_GRACE_S = 0.5
folder = Path(sys.argv[1])
building = scratch.building(folder)
building.__enter__()
signal.signal(signal.SIGINT, cli._interrupt)
try:
    os.kill(os.getpid(), signal.SIGINT)
except KeyboardInterrupt:
    threading.Event().wait()  # the unwinding hangs: a lock a dead thread held, a child that stays
"""


def test_a_hung_interrupt_still_exits_and_removes_its_folders(tmp_path: Path) -> None:
    folder = _tree(tmp_path / ".hash.ghi")
    proc = subprocess.run(
        [sys.executable, "-c", HUNG_AFTER_CTRL_C, str(folder)],
        cwd=tmp_path,  # the installed package, never the checkout's (`-c` puts cwd on the path)
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 130, proc.stderr
    assert "still unwinding" in proc.stderr
    assert not folder.exists()
