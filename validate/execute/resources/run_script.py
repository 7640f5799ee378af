"""Bootstrap for one script case; executed by the CASE env's Python. Stdlib only.

Usage: python run_script.py SCRIPT REPORT_JSON [ARGS...]

Runs SCRIPT with runpy as ``__main__`` (sys.argv and sys.path[0] as a plain ``python SCRIPT``
would set them), then writes REPORT_JSON: exit code, the uncaught exception (name, message,
traceback tail) and the environment captured in-process at exit. A crash by signal or
``os._exit`` writes nothing; the tool then classifies by the exit status.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from pathlib import Path
from typing import Any

_TAIL = 4000


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _capture(want_cudnn: bool) -> dict[str, Any]:
    import importlib.util

    path = Path(__file__).resolve().with_name("capture.py")
    spec = importlib.util.spec_from_file_location("_cudnn_matrix_capture", path)
    if spec is None or spec.loader is None:
        return {}
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    facts: dict[str, Any] = module.capture(in_case=want_cudnn)
    return facts


def _guard() -> None:
    """Load guard.py beside this file by path (sys.path[0] becomes the script's folder)."""
    import importlib.util

    path = Path(__file__).resolve().with_name("guard.py")
    spec = importlib.util.spec_from_file_location("_cudnn_matrix_guard", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.die_with_parent()
    module.become_reaper()  # from here on this process is the case; its parent reaps after it


def main() -> int:
    _guard()
    script = Path(sys.argv[1]).resolve()
    report_path = Path(sys.argv[2])
    sys.argv = [str(script), *sys.argv[3:]]
    sys.path[0] = str(script.parent)
    report: dict[str, Any] = {"runner": "script", "exception": None}
    code = 0
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException as exc:  # noqa: BLE001 - recorded, printed as Python would, exit 1
        code = 1
        import traceback  # only on this path: it pulls in linecache/tokenize/textwrap

        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        sys.stderr.write(text)
        report["exception"] = {
            "ename": type(exc).__name__,
            "evalue": str(exc)[:2000],
            "traceback": text[-_TAIL:],
        }
    report["exit_code"] = code
    want_cudnn = "cudnn" in sys.modules or bool(os.environ.get("CUDNN_MATRIX_EXPECT_BACKEND"))
    try:
        report["env"] = _capture(want_cudnn)
    except Exception as exc:  # noqa: BLE001 - capture is evidence, never a verdict
        report["env"] = {"capture_error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.flush()
    sys.stderr.flush()
    tmp = report_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, default=str), encoding="utf-8")
    tmp.replace(report_path)
    return code


if __name__ == "__main__":
    sys.exit(main())
