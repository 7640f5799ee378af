"""The tool's pytest batches against pytest-xdist on one selection, side by side in one run.

Prints both wall times, the ratio (issue 27 item 8: goal 1.0x, at most 1.1x) and how many of the
collected tests each left without a verdict. Asserts nothing.

- CPU (default): tests/resources/pytest_suite without its hang (xdist has no per-test limit
  without pytest-timeout) and its module that fails to collect (xdist then runs nothing at all):
  2,017 tests with a segfault, an abort, os._exit(70) after a CUDA error line and a poisoned test.
- GPU machine: `--suite CHECKOUT/test/python --select "-m L0 test_matmul_bias_relu.py ..."
  --python PY`, where PY has the frontend, torch, pytest and pytest-xdist (no network needed).

Each side: `PY -m pytest -n N SELECT --junitxml` (verdicts = distinct test cases in its JUnit), and
`cudnn-matrix run --tests SUITE --tests-select SELECT --interpreter PY --jobs N` (verdicts =
distinct test ids in results.jsonl). The tool runs under --tool-python (default: the interpreter
running this script; it needs the tool's dependencies), the suite under PY. Rounds alternate the order; the medians are printed.

The tool stores each result durably (fsync) before it counts; where the results store groups
appends (`append_many`: one write and one fsync per poll of a share's record) that is a few
fsyncs per second per share, else one per test, which on a busy disk is most of the gap.

Usage: python bench/pytest_bench.py [--suite PATH] [--select ARGS] [--python PY] [--jobs N]
       [--timeout S] [--rounds R] [--tool-python PY]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SYNTHETIC = REPO / "tests" / "resources" / "pytest_suite"
SYNTHETIC_SELECT = "--ignore=test_broken_import.py --deselect test_hang.py::test_hang"


def _collected(python: str, suite: Path, select: list[str]) -> set[str]:
    proc = subprocess.run(
        [python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *select],
        cwd=suite,
        capture_output=True,
        text=True,
        check=False,
    )
    ids = {ln.strip() for ln in proc.stdout.splitlines() if "::" in ln and " " not in ln.strip()}
    if not ids:
        sys.exit(f"collection found no tests (exit {proc.returncode}):\n{proc.stdout[-2000:]}")
    return ids


def _xdist(python: str, suite: Path, select: list[str], jobs: int, out: Path) -> dict[str, float]:
    junit = out / "xdist.xml"
    argv = [python, "-m", "pytest", "-n", str(jobs), "-p", "no:cacheprovider", "-q"]
    start = time.perf_counter()
    proc = subprocess.run(
        [*argv, f"--junitxml={junit}", *select],
        cwd=suite,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - start
    seen: set[tuple[str, str]] = set()
    failed = 0
    if junit.is_file():
        for case in ET.parse(junit).getroot().iter("testcase"):
            seen.add((case.get("classname", ""), case.get("name", "")))
            failed += case.find("failure") is not None or case.find("error") is not None
    text = proc.stdout + proc.stderr  # xdist names each crash twice: its own lines only
    crashed = len({ln for ln in text.splitlines() if ln.startswith("worker '") and "crashed" in ln})
    return {
        "wall": wall,
        "verdicts": len(seen),
        "worker_crashes": crashed,
        "not_passed": failed,
        "rc": proc.returncode,
    }


def _tool(
    tool_python: str,
    python: str,
    suite: Path,
    select: str,
    jobs: int,
    timeout: float,
    out: Path,
    collected: set[str],
) -> dict[str, float]:
    results = out / "tool-run"
    argv = [tool_python, "-m", "validate", "run", "--tests", str(suite), "--interpreter", python]
    argv += ["--tests-select", select, "--jobs", str(jobs), "--timeout", str(timeout)]
    # the tool's checkout first; what the caller put on PYTHONPATH (the suite's packages on a GPU
    # host without network, e.g. the frontend wheel unpacked into a folder) stays behind it
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "CUDNN_MATRIX_CACHE": str(out / "cache")}
    start = time.perf_counter()
    proc = subprocess.run(
        [*argv, "--results", str(results)], capture_output=True, text=True, check=False, env=env
    )
    wall = time.perf_counter() - start
    store = results / "results.jsonl"
    lines = store.read_text().splitlines() if store.is_file() else []
    rows = [json.loads(ln) for ln in lines if ln.strip()]
    ids = [r["case"] for r in rows]
    bad = {"fail", "error", "crash", "timeout"}
    if not ids:
        sys.exit(f"the tool stored no result (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return {
        "wall": wall,
        "verdicts": len(set(ids) & collected),
        "duplicates": len(ids) - len(set(ids)),
        "not_passed": sum(r["outcome"] in bad for r in rows),
        "rc": proc.returncode,
    }


def _walls(rows: list[dict[str, float]]) -> str:
    return ", ".join(f"{r['wall']:.2f}" for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", type=Path, default=SYNTHETIC)
    parser.add_argument("--select", default=None, help="pytest selection (default: synthetic's)")
    parser.add_argument("--python", default=sys.executable, help="the suite's interpreter")
    parser.add_argument(
        "--tool-python",
        default=sys.executable,
        help="the interpreter the tool runs under (its dependencies; default: this one)",
    )
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    suite = args.suite.resolve()
    if (
        os.sep in args.python
    ):  # the suite runs from its root: an absolute path (no symlink resolved)
        args.python = os.path.abspath(args.python)  # noqa: PTH100 - a venv's python is a link
    select_text = args.select if args.select is not None else SYNTHETIC_SELECT
    if args.select is None and suite != SYNTHETIC:
        select_text = ""
    select = shlex.split(select_text)
    collected = _collected(args.python, suite, select)
    print(f"suite {suite}, selection {select_text!r}: {len(collected)} tests collected")
    xdist: list[dict[str, float]] = []
    tool: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="pytest-bench-") as tmp:
        for n in range(args.rounds):
            order = ("xdist", "tool") if n % 2 == 0 else ("tool", "xdist")
            for side in order:
                out = Path(tmp) / f"{side}-{n}"
                out.mkdir()
                if side == "xdist":
                    xdist.append(_xdist(args.python, suite, select, args.jobs, out))
                else:
                    tool.append(
                        _tool(
                            args.tool_python,
                            args.python,
                            suite,
                            select_text,
                            args.jobs,
                            args.timeout,
                            out,
                            collected,
                        )
                    )
    x_wall = statistics.median(r["wall"] for r in xdist)
    t_wall = statistics.median(r["wall"] for r in tool)
    x_lost = len(collected) - min(int(r["verdicts"]) for r in xdist)
    t_lost = len(collected) - min(int(r["verdicts"]) for r in tool)
    crashes = max(int(r["worker_crashes"]) for r in xdist)
    print(f"rounds: {args.rounds} (order alternated), {args.jobs} processes each")
    print(
        f"pytest -n {args.jobs} (xdist):          {x_wall:7.2f} s median"
        f"  [{_walls(xdist)}]"
        f"  verdicts {min(int(r['verdicts']) for r in xdist)}, lost {x_lost},"
        f" worker crashes {crashes}, failed or errored {int(xdist[0]['not_passed'])}"
    )
    print(
        f"cudnn-matrix run --jobs {args.jobs}:     {t_wall:7.2f} s median"
        f"  [{_walls(tool)}]"
        f"  verdicts {min(int(r['verdicts']) for r in tool)}, lost {t_lost},"
        f" duplicates {max(int(r['duplicates']) for r in tool)},"
        f" fail/error/crash/timeout {int(tool[0]['not_passed'])}"
    )
    x_min, t_min = min(r["wall"] for r in xdist), min(r["wall"] for r in tool)
    print(
        f"ratio tool / xdist: {t_wall / x_wall:.2f}x of the medians, {t_min / x_min:.2f}x of the"
        " fastest rounds (goal 1.0x, at most 1.1x; a shared host's noise moves single rounds)"
    )


if __name__ == "__main__":
    main()
