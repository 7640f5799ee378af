"""Bootstrap of a pytest suite's process: pytest with the tool's plugin (this module).

Usage: python run_pytest.py PYTEST_ARGS...  (as `python -m pytest PYTEST_ARGS...`, cwd the root)

Stdlib and pytest only: it runs in the cell's environment. This folder is taken off sys.path
before pytest starts (the current folder takes its place, as `python -m` puts it there), so no
file of the tool's shadows a module of the suite's; the plugin is handed to pytest as an object.

The plugin writes one JSON object per line to the file named by $CUDNN_MATRIX_PYTEST_RECORD,
each line whole with one write(2) on an O_APPEND descriptor:

- collection (`--collect-only`): `item` per collected test (node id, file, markers), `collect_error`
  per module that failed to collect, `collect_skip` per module skipped at import
  (`pytest.skip(..., allow_module_level=True)`: it has no test ids), then `collected`;
- a share ($CUDNN_MATRIX_PYTEST_SHARE is "k/n"): the whole selection is collected, as pytest-xdist's
  workers do, and this process runs share k of n (resources/shares.py: contiguous blocks dealt
  round robin, balanced by the seconds in $CUDNN_MATRIX_PYTEST_WEIGHTS), less the ids in $CUDNN_MATRIX_PYTEST_SKIP (stored
  already: resume) and, where $CUDNN_MATRIX_PYTEST_EXCLUSIVE is 1, the `gpu_exclusive` tests; its
  ids are one `assigned` line. Share 1 also writes every `item`, `collect_error` and
  `collect_skip`, then `collected`: the collection of the whole suite, without a process of its
  own;
- a batch run ($CUDNN_MATRIX_PYTEST_IDS names a file of node ids): only those files are collected,
  only those tests run, in that order (the selection's -m/-k are not applied again: the ids were
  selected by the collection); an id not collected now is a `missing` line.

In a share and a batch run each test writes `start` before its setup (the test running when the
process dies is the one whose `start` has no `done`), then `done` with its pytest outcome: the
record is a marker file of resources/markers.py, the piece every batched kind shares.

Durability: a line is in the file once its write(2) returns, and the kernel keeps it whatever
becomes of this process (a segfault, `os._exit`, a kill -9 of it or of the tool). A `start` is
also fdatasync'd (markers.py): on `--resume` after the tool itself was killed, or the machine
went down, the test that was running is known and runs once more alone, and is the `crash` if
the tool dies again (execute/suite.py). That costs a disk flush per test (2-6 ms on a busy disk
in bench/pytest_bench.py, before this was durable). The file is fsynced when the session ends.

Each test's draws are its own: before its setup, call and teardown the plugin seeds Python's
`random` (and numpy's global generator, where the suite imported numpy) with `zlib.crc32` of the
test's node id, as pytest-randomly reseeds before each test (`_Reseed`). The tool runs an id in
a share, a batch after a crash, an alone re-run, a `--case` repro or a bisect probe, each after
other tests or none; a suite that draws shapes with an unseeded `random` would give the id other
shapes, and maybe another outcome, in each. `-p no:cudnn_matrix_reseed` in `--tests-select`
leaves the suite's randomness as it is.

A test whose report names a poisoned CUDA context (resources/cuda_errors.py) ends the process
right after its `done` (`replace`, exit status 75): every later CUDA call in it would fail, so
the tool starts the rest of the batch in a fresh process.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import random
import sys
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterable

RECORD_ENV = "CUDNN_MATRIX_PYTEST_RECORD"
IDS_ENV = "CUDNN_MATRIX_PYTEST_IDS"
SHARE_ENV = "CUDNN_MATRIX_PYTEST_SHARE"
SKIP_ENV = "CUDNN_MATRIX_PYTEST_SKIP"
WEIGHTS_ENV = "CUDNN_MATRIX_PYTEST_WEIGHTS"
EXCLUSIVE_ENV = "CUDNN_MATRIX_PYTEST_EXCLUSIVE"
EXCLUSIVE_MARK = "gpu_exclusive"
#: Set by the tool where the cell pins a backend: the process then reports what it loaded.
EXPECT_ENV = "CUDNN_MATRIX_EXPECT_BACKEND"
#: The exit status of a process this plugin ended after a poisoned test (EX_TEMPFAIL).
REPLACE_EXIT = 75
_TEXT_LIMIT = 4000  # characters of a report's text kept in a `done` line


def _load_sibling(name: str) -> Any:
    """A stdlib module of the tool's resources folder (beside this file), by its path."""
    path = Path(__file__).resolve().parent / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_cudnn_matrix_{name}", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stdout_offset() -> int | None:
    """Where the process's output file stands now (the tool slices a dead test's output from
    it); None when stdout is not a file."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    try:
        return os.lseek(1, 0, os.SEEK_CUR)
    except OSError:
        return None


def _last_pid() -> int | None:
    """The last pid the kernel handed out: a process whose pid lies between a test's two
    readings was started while it ran (the tool names what a test left running by it)."""
    try:
        with open("/proc/sys/kernel/ns_last_pid", "rb") as fh:  # noqa: PTH123
            return int(fh.read())
    except (OSError, ValueError):
        return None


def _longrepr(report: pytest.TestReport | pytest.CollectReport) -> str:
    try:
        return str(report.longreprtext)
    except Exception:  # noqa: BLE001 - a report that cannot render itself
        return repr(report.longrepr)


def _lines(path: str | None) -> list[str] | None:
    if not path:
        return None
    with open(path, encoding="utf-8") as fh:  # noqa: PTH123 - plain open, as the rest
        return [line.rstrip("\n") for line in fh if line.strip()]


class _Share:
    """Share k of n of the collected selection (see the module doc)."""

    def __init__(self, text: str) -> None:
        k, _, n = text.partition("/")
        self.k, self.n = int(k), int(n)
        self.skip = set(_lines(os.environ.get(SKIP_ENV)) or ())
        weights = os.environ.get(WEIGHTS_ENV)
        self.weights: dict[str, float] = {}
        if weights:
            with open(weights, encoding="utf-8") as fh:  # noqa: PTH123
                self.weights = json.load(fh)
        self.exclusive = os.environ.get(EXCLUSIVE_ENV) == "1"


class _Plugin:
    def __init__(self, record: Any, ids: list[str] | None, share: _Share | None) -> None:
        self.record = record
        self.ids = ids
        self.share = share
        self.reports: dict[str, list[pytest.TestReport]] = {}
        self.poison = _load_sibling("cuda_errors").POISON
        self.files: set[Path] | None = None  # a batch run: its files, and their folders
        self.dirs: set[Path] = set()

    # --- both modes ---------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(self, config: pytest.Config) -> None:
        self.record.write(
            {
                "ev": "session",
                "pid": os.getpid(),
                "pytest": pytest.__version__,
                "python": sys.version.split()[0],
                "rootdir": str(config.rootpath),
            }
        )
        if self.ids is not None or self.share is not None:
            config.option.maxfail = 0  # every test gets its verdict: no stop after a failure
        if self.ids is not None:
            # The ids were chosen by the collection with the selection's -m/-k: not again here
            # (a later -m in the selection must not deselect them), and no stop after a failure.
            config.option.markexpr = ""
            config.option.keyword = ""
            config.option.maxfail = 0
            root = config.rootpath
            self.files = {(root / i.split("::", 1)[0]).resolve() for i in self.ids}
            self.dirs = {parent for f in self.files for parent in f.parents}

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.record.write(
                {"ev": "collect_error", "id": report.nodeid, "text": _longrepr(report)[-8000:]}
            )
        elif report.skipped and report.nodeid:  # pytest.skip(allow_module_level=True)
            why = report.longrepr[2] if isinstance(report.longrepr, tuple) else _longrepr(report)
            why = str(why).removeprefix("Skipped: ")
            self.record.write({"ev": "collect_skip", "id": report.nodeid, "reason": why[-2000:]})

    def _write_items(self, items: list[pytest.Item]) -> None:
        for item in items:
            path = item.nodeid.split("::", 1)[0]
            marks = sorted({mark.name for mark in item.iter_markers()})
            self.record.write({"ev": "item", "id": item.nodeid, "file": path, "markers": marks})
        self.record.write({"ev": "collected", "n": len(items)}, sync=True)

    def _shared(self, share: _Share, items: list[pytest.Item]) -> list[pytest.Item]:
        if share.k == 1:
            self._write_items(items)
        free = [
            item
            for item in items
            if item.nodeid not in share.skip
            and not (share.exclusive and item.get_closest_marker(EXCLUSIVE_MARK) is not None)
        ]
        parts = _load_sibling("shares").split([i.nodeid for i in free], share.weights, share.n)
        mine = set(parts[share.k - 1]) if share.k <= len(parts) else set()
        wanted = [item for item in free if item.nodeid in mine]
        self.record.write({"ev": "assigned", "ids": [i.nodeid for i in wanted]}, sync=True)
        return wanted

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        if self.share is not None:
            wanted = self._shared(self.share, items)
        elif self.ids is not None:
            by_id = {item.nodeid: item for item in items}
            wanted = [by_id[i] for i in self.ids if i in by_id]
            for missing in (i for i in self.ids if i not in by_id):
                self.record.write({"ev": "missing", "id": missing})
        else:
            return
        keep = {id(item) for item in wanted}
        dropped = [item for item in items if id(item) not in keep]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = wanted
        self._capture()

    def _capture(self) -> None:
        """What this process loaded (resources/capture.py), once its conftests and test modules
        are imported and before its first test: where the cell pins a backend, or the suite
        imported cudnn itself. The tool checks the pins against it (a copy torch brought along
        is not the pinned backend)."""
        if not os.environ.get(EXPECT_ENV) and "cudnn" not in sys.modules:
            return
        try:
            env = _load_sibling("capture").capture(in_case=True)
        except Exception as exc:  # noqa: BLE001 - evidence, never a verdict of its own
            env = {"capture_error": f"{type(exc).__name__}: {exc}"}
        self.record.write({"ev": "env", "env": env}, sync=True)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.ids is None and self.share is None:  # --collect-only: the whole selection
            self._write_items(session.items)

    # --- batch runs ---------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_ignore_collect(self, collection_path: Path) -> bool | None:
        """Collect only the batch's files (and the folders on their way)."""
        if self.files is None:
            return None
        path = collection_path.resolve()
        if path in self.files or path in self.dirs:
            return None
        if path.is_dir():
            return True
        return True if path.suffix == ".py" else None

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self.reports[nodeid] = []
        # durable before the test runs (the module doc, resources/markers.py)
        self.record.start(nodeid, t=time.time(), offset=_stdout_offset(), pid0=_last_pid())

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.reports.setdefault(report.nodeid, []).append(report)

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        reports = self.reports.pop(nodeid, [])
        done = _verdict(reports)
        done.update(ev="done", id=nodeid, t=time.time(), pid1=_last_pid())
        self.record.write(done)
        text = "\n".join([done.get("text", ""), *_sections(reports)])
        hit = next((ln for ln in text.splitlines() if self.poison.search(ln)), None)
        if hit is not None:
            self.record.write({"ev": "replace", "id": nodeid, "line": hit.strip()[:300]}, sync=True)
            _stdout_offset()  # flush what the test printed
            os._exit(REPLACE_EXIT)

    def pytest_unconfigure(self) -> None:
        self.record.write({"ev": "end"})
        self.record.close()


def _sections(reports: Iterable[pytest.TestReport]) -> list[str]:
    return [content for report in reports for _, content in report.sections]


def _verdict(reports: list[pytest.TestReport]) -> dict[str, Any]:
    """The test's outcome from its setup/call/teardown reports, as pytest counts it: a failed
    setup or teardown is an error, a skip in setup or call a skip (with its reason), xfail and
    non-strict xpass as such (a strict xpass is already a failed call report)."""
    duration = sum(r.duration for r in reports)
    by_when = {r.when: r for r in reports}
    setup, call, teardown = by_when.get("setup"), by_when.get("call"), by_when.get("teardown")
    out: dict[str, Any] = {"duration": round(duration, 6)}
    first = setup if setup is not None and not setup.passed else call
    if first is not None and first.skipped:
        if hasattr(first, "wasxfail"):
            out.update(outcome="xfail", reason=str(first.wasxfail))
        else:
            longrepr = first.longrepr
            why = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
            out.update(outcome="skip", reason=str(why).removeprefix("Skipped: "))
    elif setup is not None and setup.failed:
        out.update(outcome="error", when="setup", **_failure(setup))
    elif call is not None and call.failed:
        out.update(outcome="fail", when="call", **_failure(call))
    elif call is not None and call.passed and hasattr(call, "wasxfail"):
        out.update(outcome="xpass", reason=str(call.wasxfail))
    elif call is not None and call.passed:
        out.update(outcome="pass")
    else:  # no call report: the setup passed and nothing ran (should not happen)
        out.update(outcome="error", when="call", message="no call report")
    if teardown is not None and teardown.failed:
        if out["outcome"] in ("pass", "xpass", "skip", "xfail"):
            out.update(outcome="error", when="teardown", **_failure(teardown))
        else:
            out["teardown"] = _failure(teardown)["message"]
    return out


def _failure(report: pytest.TestReport) -> dict[str, str]:
    crash = getattr(report.longrepr, "reprcrash", None)
    message = str(getattr(crash, "message", "") or "")
    text = _longrepr(report)
    if not message:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        message = lines[-1] if lines else "failed"
    return {"message": message[:_TEXT_LIMIT], "text": text[-_TEXT_LIMIT:]}


class _Reseed:
    """The seeds of a test's draws: its node id's alone (the module docstring says why)."""

    @staticmethod
    def seed(nodeid: str) -> int:
        return zlib.crc32(nodeid.encode("utf-8"))

    def _reset(self, item: pytest.Item) -> None:
        seed = self.seed(item.nodeid)
        random.seed(seed)
        numpy = sys.modules.get("numpy")  # never imported here: only a suite's own numpy
        if numpy is not None:
            # a numpy without the legacy global generator, or a stand-in module: nothing to seed
            with contextlib.suppress(AttributeError, TypeError, ValueError):
                numpy.random.seed(seed)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self._reset(item)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        self._reset(item)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        self._reset(item)


def pytest_configure(config: pytest.Config) -> None:
    """Register the recorder and the reseeding (the tool always names a record file; without
    one: a no-op). `-p no:cudnn_matrix_reseed` blocks the second: its registration is refused."""
    path = os.environ.get(RECORD_ENV)
    if not path or config.pluginmanager.has_plugin("cudnn_matrix_recorder"):
        return
    ids = _lines(os.environ.get(IDS_ENV))
    share = _Share(os.environ[SHARE_ENV]) if os.environ.get(SHARE_ENV) and ids is None else None
    # the suite process dies with the tool (a kill -9 of it must not leave tests running)
    _load_sibling("guard").die_with_parent()
    plugin = _Plugin(_load_sibling("markers").Markers(path), ids, share)
    # pytest_configure is historic: the plugin registered now gets its own call right away
    config.pluginmanager.register(plugin, "cudnn_matrix_recorder")
    # the name is batches.RESEED_PLUGIN (the tool reads a selection that blocks it)
    if not config.pluginmanager.has_plugin("cudnn_matrix_reseed"):
        config.pluginmanager.register(_Reseed(), "cudnn_matrix_reseed")


def main() -> int:
    """pytest over sys.argv[1:] with this module as a plugin."""
    here = os.path.dirname(os.path.abspath(__file__))  # noqa: PTH100, PTH120 - no pathlib here
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:  # noqa: PTH100
        sys.path[0] = os.getcwd()  # noqa: PTH109 - what `python -m pytest` has there
    return int(pytest.main(sys.argv[1:], plugins=[sys.modules[__name__]]))


if __name__ == "__main__":
    sys.exit(main())
