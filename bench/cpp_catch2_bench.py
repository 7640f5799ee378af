"""Catch2 built once per toolchain against Catch2 built in every cell's build, side by side;
with --unity, Catch2's unity build (the default) against one source at a time.

    python bench/cpp_catch2_bench.py --catch2 CATCH2_SRC_OR_TGZ --wheelhouse DIR \\
        [--project DIR] [--cudnn 9.12.0.46,9.13.0.50] [--pairs 3] [--unity]

The same cold `cudnn-matrix validate --cpp PROJECT --cudnn A,B` (default: the tests' fixture
project, tests/resources/cpp/catch2_project, over two backends of the tests' wheelhouse), in
turns: **once** (the default: Catch2 built once into the C++ cache, each cell's build finds it)
and **per build** (`CUDNN_MATRIX_CATCH2_ONCE=0`: each cell's build compiles Catch2 itself, as
FetchContent does); with --unity, **unity** (the default) and **per source**
(`CUDNN_MATRIX_CATCH2_UNITY=0`), both built once. Each run gets an empty C++ build cache; the
cell environments are built once before the timing and linked in. Per pair: the whole command's
seconds, the sum of the cells' build seconds (the manifests' `build_s`), and the ratio of the
first to the second. The outcomes of every TEST_CASE are compared between the two runs of each
pair: an optimisation that changes a verdict is a bug, so a difference is printed and the exit
status is 1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROJECT = REPO / "tests" / "resources" / "cpp" / "catch2_project"


def _tool() -> list[str]:
    found = shutil.which("cudnn-matrix")
    return [found] if found else [sys.executable, "-m", "validate"]


def _outcomes(run: Path) -> dict[str, str]:
    seen: dict[str, str] = {}
    for line in (run / "results.jsonl").read_text().splitlines():
        row = json.loads(line)
        seen[f"{row['cell']['cudnn']} {row['case']}"] = row["outcome"]
    return seen


def _run(
    argv: list[str], envs: Path, setting: dict[str, str], where: Path
) -> tuple[float, float, dict[str, str]]:
    cache = where / "cache"
    cache.mkdir(parents=True)
    (cache / "envs").symlink_to(envs)
    env = dict(os.environ) | setting
    start = time.perf_counter()
    done = subprocess.run(
        [*argv, "--cache-dir", str(cache), "--results", str(where / "run")],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    took = time.perf_counter() - start
    if done.returncode not in (0, 1):
        sys.exit(f"the tool exited {done.returncode}:\n{done.stderr[-3000:]}")
    build_s = sum(
        json.loads(m.read_text())["build_s"] for m in (cache / "cpp").glob("*/manifest.json")
    )
    return took, build_s, _outcomes(where / "run")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--catch2", type=Path, required=True)
    parser.add_argument("--wheelhouse", type=Path, required=True)
    parser.add_argument("--project", type=Path, default=PROJECT)
    parser.add_argument("--cudnn", default="9.12.0.46,9.13.0.50")
    parser.add_argument("--jobs", default="2")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--unity", action="store_true", help="unity against per source")
    args = parser.parse_args()
    first, second = ("unity", "per source") if args.unity else ("once", "per build")
    settings = {
        first: {},
        second: {"CUDNN_MATRIX_CATCH2_UNITY": "0"}
        if args.unity
        else {"CUDNN_MATRIX_CATCH2_ONCE": "0"},
    }
    argv = [*_tool(), "validate", "--cudnn", args.cudnn, "--frontend", "1.27.0"]
    argv += ["--cuda", "13.0", "--driver", "580", "--arch", "sm90", "--no-backend-deps"]
    argv += ["--wheelhouse", str(args.wheelhouse.resolve()), "--jobs", args.jobs]
    argv += ["--cpp", str(args.project.resolve()), "--cpp-catch2", str(args.catch2.resolve())]
    argv += ["--timeout", "5", "--no-speed"]
    root = Path(tempfile.mkdtemp(prefix="catch2-bench-"))
    envs = root / "envs"
    warm = root / "warm"
    warm.mkdir()
    envs.mkdir()
    print(f"host: {os.cpu_count()} CPUs; {subprocess.getoutput('c++ --version').splitlines()[0]}")
    print(f"project: {args.project}; cells: {args.cudnn}; --jobs {args.jobs}")
    _run(argv, envs, {}, warm)  # builds the environments, outside the timing
    pairs: list[tuple[float, float, float, float]] = []
    differ = 0
    for i in range(args.pairs):
        order = (first, second) if i % 2 == 0 else (second, first)
        got = {
            name: _run(argv, envs, settings[name], root / f"p{i}-{name.replace(' ', '-')}")
            for name in order
        }
        (t1, b1, o1), (t0, b0, o0) = got[first], got[second]
        pairs.append((t1, t0, b1, b0))
        diff = sorted(k for k in o1.keys() | o0.keys() if o1.get(k) != o0.get(k))
        differ += len(diff)
        print(
            f"pair {i + 1}: whole {t1:6.1f} s {first} / {t0:6.1f} s {second} = {t1 / t0:.2f}; "
            f"builds {b1:6.1f} s / {b0:6.1f} s = {b1 / b0:.2f}; "
            f"{len(o1)} results, {len(diff)} outcomes differ"
        )
        for key in diff:
            print(f"  differs: {key}: {first} {o1.get(key)}, {second} {o0.get(key)}")
    whole = statistics.median(p[0] / p[1] for p in pairs)
    builds = statistics.median(p[2] / p[3] for p in pairs)
    print(f"median ratio {first} / {second}: whole command {whole:.2f}, builds {builds:.2f}")
    shutil.rmtree(root, ignore_errors=True)
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
