"""Run one notebook in a fresh kernel and write a result JSON; executed by the CASE env's Python.

Usage: python run_notebook.py NOTEBOOK RESULT_JSON [--timeout SECONDS]

Needs only nbclient, nbformat and ipykernel in the case environment. The kernel is started with
this interpreter (`sys.executable -m ipykernel_launcher`), never a kernelspec found on PATH.
Stream output is written through to this process' stdout (the tool keeps it on disk) instead of
being kept in memory. Result "status": pass | fail | timeout | dead | error.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nbformat
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

if TYPE_CHECKING:
    from collections.abc import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
import capture  # type: ignore[import-not-found]
import guard  # type: ignore[import-not-found]

_TAIL = 4000
_ANSI = "\x1b["


class _ThisPythonSpecs(KernelSpecManager):
    """Every kernel name resolves to this interpreter's ipykernel."""

    def get_kernel_spec(self, kernel_name: str) -> KernelSpec:  # noqa: ARG002 - any name
        # What `python -m ipykernel_launcher` does, after guard.py under a private module name
        # (it imports only stdlib): the kernel runs in a session of its own and must still die
        # with this process, even when the tool is killed before the kernel's pid is recorded.
        guard_path = str(Path(__file__).resolve().with_name("guard.py"))
        code = (
            "import importlib.util as _u; "
            f"_s = _u.spec_from_file_location('_cudnn_matrix_guard', {guard_path!r}); "
            "_m = _u.module_from_spec(_s); _s.loader.exec_module(_m); "
            "_m.die_with_parent(parent_env=None); del _u, _s, _m; "
            "from ipykernel import kernelapp; kernelapp.launch_new_instance()"
        )
        argv = [sys.executable, "-c", code, "-f", "{connection_file}"]
        return KernelSpec(argv=argv, display_name=f"python3 ({sys.executable})", language="python")


class _StreamingClient(NotebookClient):
    """NotebookClient that writes stream output through to stdout instead of holding it."""

    def output(self, outs: list[Any], msg: dict[str, Any], display_id: Any, cell_index: int) -> Any:
        if msg["msg_type"] == "stream":
            sys.stdout.write(msg["content"].get("text", ""))
            sys.stdout.flush()
            return None
        return super().output(outs, msg, display_id, cell_index)


def _strip_ansi(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text.startswith(_ANSI, i):
            j = i + 2
            while j < len(text) and not text[j].isalpha():
                j += 1
            i = j + 1
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def _signal_name(returncode: int | None) -> str | None:
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _write(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, default=str), encoding="utf-8")
    tmp.replace(path)


def _run(nb_path: Path, result_path: Path, timeout: float) -> dict[str, Any]:
    nb = nbformat.read(nb_path, as_version=4)  # type: ignore[no-untyped-call]
    result: dict[str, Any] = {"runner": "notebook", "status": "pass", "cells": []}
    started: dict[int, float] = {}

    n_cells = len(nb.cells)

    def on_start(cell_index: int, **_: Any) -> None:
        if cell_index >= n_cells:
            return
        started[cell_index] = time.monotonic()
        print(f"--- cell {cell_index} ---", flush=True)

    def on_executed(cell_index: int, execute_reply: dict[str, Any], **_: Any) -> None:
        if cell_index >= n_cells:
            return
        took = time.monotonic() - started.get(cell_index, time.monotonic())
        status = execute_reply["content"].get("status", "?")
        result["cells"].append(
            {"index": cell_index, "duration_s": round(took, 3), "status": status}
        )

    def on_error(cell: Any, cell_index: int, **_: Any) -> None:
        if "raises-exception" in cell.metadata.get("tags", []):
            result.setdefault("allowed_errors", []).append(cell_index)
        else:
            result["error_cell"] = cell_index

    # Unix sockets in a folder of this process's own, not TCP ports: kernels started side by side
    # pick TCP ports by probing, and under 24+ parallel starts two can race for one port; the loser
    # "didn't respond" (seen on the H200 host). IPC paths cannot collide, and nothing is written
    # beside the notebook (which may be read-only).
    sockets = Path(tempfile.mkdtemp(prefix="cm-kernel-"))
    km = AsyncKernelManager(
        kernel_name="python3",
        kernel_spec_manager=_ThisPythonSpecs(),
        transport="ipc",
        ip=str(sockets / "k"),
        connection_file=str(sockets / "kernel.json"),
    )
    client = _StreamingClient(
        nb,
        km=km,
        timeout=math.ceil(timeout),  # nbclient's trait is an int: 317.2 s was refused at start
        startup_timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(nb_path.parent)}},
        on_cell_execute=on_start,
        on_cell_executed=on_executed,
        on_cell_error=on_error,
    )
    kernel_proc = None
    try:
        with client.setup_kernel(cwd=str(nb_path.parent)):
            kernel_proc = getattr(km.provisioner, "process", None)
            pid_file = result_path.with_suffix(".kernel")
            if kernel_proc is not None:
                pid_file.write_text(str(kernel_proc.pid), encoding="utf-8")
                _share_autogroup_nice(kernel_proc.pid)
            for index, cell in enumerate(nb.cells):
                tags = cell.metadata.get("tags", [])
                if cell.cell_type == "code" and "skip-execution" in tags:
                    result.setdefault("skipped_cells", []).append(index)
                client.execute_cell(cell, index, execution_count=client.code_cells_executed + 1)
            _capture_in_kernel(client, result_path, len(nb.cells))
    except CellExecutionError as exc:
        result.update(status="fail", ename=exc.ename, evalue=exc.evalue)
        result.update(_failed_cell(nb, result.pop("error_cell", None), str(exc)))
        _capture_in_kernel(client, result_path, len(nb.cells))
    except CellTimeoutError as exc:
        result.update(status="timeout", evalue=str(exc).splitlines()[0][:500])
        result.update(_failed_cell(nb, _current_cell(started), ""))
    except DeadKernelError as exc:
        code = kernel_proc.wait(timeout=10) if kernel_proc is not None else None
        result.update(status="dead", evalue=str(exc), kernel_exit_code=code)
        result["kernel_signal"] = _signal_name(code)
        result.update(_failed_cell(nb, _current_cell(started), ""))
    except Exception as exc:  # noqa: BLE001 - kernel would not start, unreadable notebook ...
        result.update(status="error", ename=type(exc).__name__, evalue=str(exc)[:2000])
        result["traceback"] = traceback.format_exc()[-_TAIL:]
    finally:
        _shutdown(client, km)
        shutil.rmtree(sockets, ignore_errors=True)
    return result


def _share_autogroup_nice(pid: int) -> None:
    """Give the kernel's session (jupyter_client starts the kernel in one of its own) the CPU
    share of this case's: where the kernel groups CPU time by session (sched autogroup), a case
    the pool lowered beside a critical-path case (runner._lower_priority) would otherwise run its
    cells at the full share again."""
    try:
        nice = int(Path("/proc/self/autogroup").read_text(encoding="ascii").split()[-1])
        if nice > 0:
            Path(f"/proc/{pid}/autogroup").write_text(str(nice), encoding="ascii")
    except (OSError, ValueError, IndexError):  # no autogroup here: the process nice is inherited
        pass


def _current_cell(started: dict[int, float]) -> int | None:
    return max(started) if started else None


def _failed_cell(nb: Any, cell_index: int | None, text: str) -> dict[str, Any]:
    out: dict[str, Any] = {"cell_index": cell_index, "traceback": _strip_ansi(text)[-_TAIL:]}
    if cell_index is not None and 0 <= cell_index < len(nb.cells):
        out["cell_source"] = str(nb.cells[cell_index].source)[:2000]
    return out


def _capture_in_kernel(client: Any, result_path: Path, index: int) -> None:
    """Run capture.py inside the still-running kernel; the facts land in a side file."""
    env_path = result_path.with_suffix(".env.json")
    here = str(Path(capture.__file__).resolve())
    code = (
        "def _cudnn_matrix_capture():\n"
        "    import runpy\n"
        f"    runpy.run_path({here!r})['write_capture']({str(env_path)!r})\n"
        "_cudnn_matrix_capture(); del _cudnn_matrix_capture\n"
    )
    cell = nbformat.v4.new_code_cell(code)  # type: ignore[no-untyped-call]
    client.nb.cells.append(cell)
    try:
        client.execute_cell(cell, index)
    except Exception as exc:  # noqa: BLE001 - capture is evidence, never a verdict
        print(f"cudnn-matrix: env capture in kernel failed: {exc}", file=sys.stderr)


def _shutdown(client: Any, km: Any) -> None:
    try:
        client._cleanup_kernel()
    except Exception as exc:  # noqa: BLE001
        print(f"cudnn-matrix: kernel shutdown: {exc}", file=sys.stderr)
        km.provisioner = None


def _kernel_group(pid_file: Path) -> list[int]:
    try:
        return [int(pid_file.read_text(encoding="utf-8").strip())]
    except (OSError, ValueError):
        return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="run_notebook")
    parser.add_argument("notebook", type=Path)
    parser.add_argument("result", type=Path)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    pid_file = args.result.resolve().with_suffix(".kernel")  # the kernel's own session (see _run)
    guard.die_with_parent(lambda: _kernel_group(pid_file))
    guard.become_reaper()  # from here on this process is the case; its parent reaps after it
    start = time.monotonic()
    result = _run(args.notebook.resolve(), args.result.resolve(), args.timeout)
    env_path = args.result.resolve().with_suffix(".env.json")
    if env_path.exists():
        result["env"] = json.loads(env_path.read_text(encoding="utf-8"))
        env_path.unlink()
    else:
        result["env"] = capture.capture(in_case=False)
    result["duration_s"] = round(time.monotonic() - start, 3)
    _write(args.result, result)
    return 0


def fork_boot() -> Callable[[], int]:
    """For resources/fork_server.py, once this module is imported (nbclient, nbformat,
    jupyter_client): set up as a fresh start is; returns what runs one notebook (sys.argv)."""
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")  # as below
    return main


if __name__ == "__main__":
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    raise SystemExit(main())
