"""The script bootstrap's work, imported by run_script.py in the CASE env's Python. Stdlib only.

main() runs SCRIPT as ``__main__`` (a fresh module, as runpy.run_path would; sys.argv and
sys.path[0] as a plain ``python SCRIPT`` would set them), then writes REPORT_JSON: exit code,
the uncaught exception (name, message, traceback tail) and the environment captured in-process
at exit. A crash by signal or ``os._exit`` writes nothing; the tool then classifies by the exit
status.
"""

from __future__ import annotations

import os
import sys

# No typing, runpy, pathlib or importlib.util here: each is milliseconds of start-up per case
# (bench/runner_bench.py), and a plain `python SCRIPT` pays none of them.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

_TAIL = 4000
_HERE = os.path.dirname(os.path.abspath(__file__))  # noqa: PTH100, PTH120 - no pathlib


def _monotonic() -> float:
    from time import monotonic  # a built-in module: no file is read

    return monotonic()


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _private(name: str) -> ModuleType:
    """guard.py / capture.py beside this file, imported while sys.path[0] is still this folder,
    then kept only under a private name (a case's own `guard` or `capture` module is its own).
    Imported once per process: the fork server (fork_server.py) imports them before it forks."""
    private = sys.modules.get(f"_cudnn_matrix_{name}")
    if private is not None:
        return private
    inserted = sys.path[:1] != [_HERE]  # python -P adds no script folder
    if inserted:
        sys.path.insert(0, _HERE)
    try:
        module = __import__(name)
    finally:
        if inserted:
            del sys.path[0]
    del sys.modules[name]
    sys.modules[f"_cudnn_matrix_{name}"] = module
    return module


def _run(script: str) -> None:
    """Run `script` as `__main__`, as `python SCRIPT` does (what runpy.run_path does, without
    its imports): a fresh `__main__` module, its code compiled with the script's file name."""
    main = type(sys)("__main__")  # types.ModuleType, without importing types (a millisecond)
    main.__file__ = script
    with open(script, "rb") as fh:  # noqa: PTH123 - no pathlib
        code = compile(fh.read(), script, "exec")
    sys.modules["__main__"] = main
    exec(code, main.__dict__)  # noqa: S102 - running the case is the point


def dumps(obj: object) -> str:
    """JSON text of the report (dicts, lists, str, numbers, bool, None; anything else as its
    str()), as json.dumps(obj, default=str) writes it, without importing json: its decoder's
    regexes are compiled at import, a few milliseconds of every case."""
    parts: list[str] = []

    def quote(text: str) -> str:
        # printable ASCII without a quote or backslash is written as it is (most of a report):
        # the C encoder's module is loaded only for the rest
        if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
            return f'"{text}"'
        try:
            from _json import encode_basestring_ascii
        except ImportError:  # pragma: no cover - an interpreter without the C accelerator
            import json

            return json.dumps(text)
        return str(encode_basestring_ascii(text))

    def put(value: object) -> None:
        if value is None:
            parts.append("null")
        elif value is True:
            parts.append("true")
        elif value is False:
            parts.append("false")
        elif isinstance(value, str):
            parts.append(quote(value))
        elif isinstance(value, int):
            parts.append(int.__repr__(value))
        elif isinstance(value, float):
            parts.append(_float(value))
        elif isinstance(value, dict):
            parts.append("{")
            for i, (key, item) in enumerate(value.items()):
                parts.append(", " if i else "")
                parts.append(quote(_key(key)) + ": ")
                put(item)
            parts.append("}")
        elif isinstance(value, (list, tuple)):  # a tuple form: the case may run Python 3.9
            parts.append("[")
            for i, item in enumerate(value):
                parts.append(", " if i else "")
                put(item)
            parts.append("]")
        else:
            parts.append(quote(str(value)))

    put(obj)
    return "".join(parts)


def _float(value: float) -> str:
    if value != value:  # noqa: PLR0124 - NaN, written as json.dumps writes it
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return float.__repr__(value)


def _key(key: object) -> str:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool):
        return {None: "null", True: "true", False: "false"}[key]
    if isinstance(key, float):
        return _float(key)
    return str(key)


def preload() -> None:
    """Import what main() needs, for a process that forks before it runs main (fork_server.py)."""
    guard = _private("guard")
    _private("capture")
    try:  # noqa: SIM105 - no contextlib here (an import of every case)
        guard.resolve_prctl()
    except (ImportError, AttributeError, OSError):  # the case finds out again (guard._prctl)
        pass


def main() -> int:
    guard = _private("guard")
    capture = _private("capture")
    guard.die_with_parent()
    guard.become_reaper()  # from here on this process is the case; its parent reaps after it
    script = os.path.abspath(sys.argv[1])  # noqa: PTH100 - no pathlib
    report_path = sys.argv[2]
    sys.argv = [script, *sys.argv[3:]]
    sys.path[0] = os.path.dirname(script)  # noqa: PTH120 - no pathlib
    report: dict[str, Any] = {"runner": "script", "exception": None}
    code = 0
    start = _monotonic()
    try:
        _run(script)
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
    report["run_s"] = round(_monotonic() - start, 4)  # the script alone (cases/script.py: timing)
    want_cudnn = "cudnn" in sys.modules or bool(os.environ.get("CUDNN_MATRIX_EXPECT_BACKEND"))
    try:
        report["env"] = capture.capture(in_case=want_cudnn)
    except Exception as exc:  # noqa: BLE001 - capture is evidence, never a verdict
        report["env"] = {"capture_error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.flush()
    sys.stderr.flush()
    tmp = report_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:  # noqa: PTH123 - no pathlib
        fh.write(dumps(report))
    os.replace(tmp, report_path)  # noqa: PTH105 - no pathlib
    return code
