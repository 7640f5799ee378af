"""The C++ kind's build against the frontend's own instructions, side by side on one machine.

    python bench/cpp_build_bench.py --checkout /tmp/fe --catch2 CATCH2_SRC_OR_TGZ \\
        [--target samples --target tests] [--cudnn 9.24.0.43 --cuda 13.0 --frontend 1.27.0 ...]

1. **frontend**: what the frontend's README says, `cmake -S . -B build -DCUDNN_PATH=... -G
   Ninja && cmake --build build` (with `--target` for the same targets), against the same cell
   environment's backend wheel, with the same compiler, generator and cores (Ninja's default
   -j, the host's CPUs). Two additions it needs on a host whose toolkit lacks cublasLt and nvrtc
   and that has no network: the wheels' libraries as CUDA_cublasLt_LIBRARY/CUDA_nvrtc_LIBRARY and
   their headers, and the Catch2 source as FETCHCONTENT_SOURCE_DIR_CATCH2 (the tool passes the
   same ones, env/cmake_build.py).
2. **tool, cold**: `cudnn-matrix validate --cpp CHECKOUT` with an empty C++ build cache (its
   environments are the user's cache, linked in): the build's own seconds (the manifest's
   `build_s`) and the whole command's.
3. **tool, warm**: the same command again: the seconds to its first TEST_CASE result (the
   results file's first line), and the whole command's.

`--tool-first` runs 2 before 1 (the second build finds the headers in the page cache).
Prints seconds and ratios; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def _env_python(cache: Path, cudnn: str) -> Path:
    """The cell environment of the run (by its manifest's backend): its nvidia/ folder."""
    for manifest in sorted((cache / "envs").glob("*/manifest.json")):
        data = json.loads(manifest.read_text())
        if data.get("backend", "").endswith(cudnn) and data.get("backend_dir"):
            return Path(data["backend_dir"]).parent.parent
    msg = f"no environment for {cudnn} in {cache}/envs: run the tool once first"
    raise SystemExit(msg)


def _frontend_build(checkout: Path, nvidia: Path, catch2: Path, targets: list[str]) -> float:
    build = Path(tempfile.mkdtemp(prefix="fe-build-"))
    cu = min(nvidia.glob("cu[0-9]*"))
    configure = [
        "cmake",
        "-S",
        str(checkout),
        "-B",
        str(build),
        f"-DCUDNN_PATH={nvidia / 'cudnn'}",
        "-G",
        "Ninja",
        f"-DCUDA_cublasLt_LIBRARY={min((cu / 'lib').glob('libcublasLt.so*'))}",
        f"-DCUDA_nvrtc_LIBRARY={min((cu / 'lib').glob('libnvrtc.so*'))}",
        f"-DCMAKE_CXX_FLAGS=-isystem {cu / 'include'}",
        f"-DFETCHCONTENT_SOURCE_DIR_CATCH2={catch2}",
        "-DCMAKE_DISABLE_FIND_PACKAGE_Catch2=ON",
    ]
    compile_ = ["cmake", "--build", str(build)]
    if targets:
        compile_ += ["--target", *targets]
    start = time.perf_counter()
    with (build.parent / f"{build.name}.log").open("w") as log:
        subprocess.run(configure, check=True, stdout=log, stderr=subprocess.STDOUT)
        subprocess.run(compile_, check=True, stdout=log, stderr=subprocess.STDOUT)
    took = time.perf_counter() - start
    shutil.rmtree(build, ignore_errors=True)
    return took


def _first_line_after(path: Path, start: float, done: threading.Event) -> list[float]:
    seen: list[float] = []

    def watch() -> None:
        while not done.is_set():
            if path.is_file() and path.stat().st_size > 0:
                seen.append(time.perf_counter() - start)
                return
            time.sleep(0.05)

    threading.Thread(target=watch, daemon=True).start()
    return seen


def _tool(argv: list[str], results: Path) -> tuple[float, float | None]:
    start = time.perf_counter()
    done = threading.Event()
    first = _first_line_after(results / "results.jsonl", start, done)
    subprocess.run([*argv, "--results", str(results)], check=False, capture_output=True)
    took = time.perf_counter() - start
    done.set()
    return took, (first[0] if first else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, required=True)
    parser.add_argument("--catch2", type=Path, required=True)
    parser.add_argument("--target", action="append", default=[])
    parser.add_argument("--cudnn", default="9.24.0.43")
    parser.add_argument("--cuda", default="13.0")
    parser.add_argument("--frontend", default="1.27.0")
    parser.add_argument("--driver", default="580")
    parser.add_argument("--arch", default="sm90")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "cudnn-matrix")
    parser.add_argument(
        "--tool-first",
        action="store_true",
        help="the tool's cold build before the frontend's (the second finds the headers in the "
        "page cache: run both orders to see the order's share)",
    )
    args = parser.parse_args()
    checkout, catch2 = args.checkout.resolve(), args.catch2.resolve()
    if catch2.is_file():  # the baseline takes a folder: unpacked once, outside the timing
        where = Path(tempfile.mkdtemp(prefix="catch2-"))
        shutil.unpack_archive(catch2, where)
        (catch2_dir,) = [p for p in where.iterdir() if p.is_dir()]
    else:
        catch2_dir = catch2
    nvidia = _env_python(args.cache, args.cudnn)
    cpus = os.cpu_count()
    print(f"host: {cpus} CPUs; {subprocess.getoutput('c++ --version').splitlines()[0]}")
    print(
        f"checkout: {checkout} ({subprocess.getoutput(f'git -C {checkout} rev-parse --short HEAD 2>/dev/null') or 'no git'})"
    )
    print(f"targets: {', '.join(args.target) or 'all'}; backend: {nvidia / 'cudnn'}")

    print(f"order: {'tool first' if args.tool_first else 'frontend first'}")
    fe_s = float("nan")
    if not args.tool_first:
        fe_s = _frontend_build(checkout, nvidia, catch2_dir, args.target)
        print(f"frontend's instructions (cmake -G Ninja + cmake --build): {fe_s:8.1f} s")

    bench_cache = Path(tempfile.mkdtemp(prefix="cpp-bench-cache-"))
    (bench_cache / "envs").symlink_to(args.cache / "envs")
    tool = [
        sys.executable,
        "-m",
        "validate",
        "validate",
        "--cudnn",
        args.cudnn,
        "--cuda",
        args.cuda,
        "--frontend",
        args.frontend,
        "--driver",
        args.driver,
        "--arch",
        args.arch,
        "--cache-dir",
        str(bench_cache),
        "--cpp",
        str(checkout),
        "--cpp-catch2",
        str(catch2),
        *(f"--cpp-target={t}" for t in args.target),
    ]
    runs = Path(tempfile.mkdtemp(prefix="cpp-bench-runs-"))
    cold_s, _ = _tool(tool, runs / "cold")
    manifests = sorted((bench_cache / "cpp").glob("*/manifest.json"))
    build_s = json.loads(manifests[0].read_text())["build_s"] if manifests else float("nan")
    print(f"tool, cold build (manifest build_s):                        {build_s:8.1f} s")
    print(f"tool, cold validate (build + list + every TEST_CASE):        {cold_s:8.1f} s")
    if args.tool_first:
        fe_s = _frontend_build(checkout, nvidia, catch2_dir, args.target)
        print(f"frontend's instructions (cmake -G Ninja + cmake --build): {fe_s:8.1f} s")
    warm_s, first = _tool(tool, runs / "warm")
    first_text = f"{first:8.1f} s" if first is not None else "   none"
    print(f"tool, warm validate: time to the first TEST_CASE result:     {first_text}")
    print(f"tool, warm validate (reused build, every TEST_CASE):         {warm_s:8.1f} s")
    print(f"ratio tool cold build / frontend's instructions:             {build_s / fe_s:8.2f}x")
    results = runs / "cold" / "results.jsonl"
    if results.is_file():
        counts: dict[str, int] = {}
        for line in results.read_text().splitlines():
            row = json.loads(line)
            counts[row["outcome"]] = counts.get(row["outcome"], 0) + 1
        print(f"cold run results: {sum(counts.values())} lines, {counts}; folder {runs / 'cold'}")
    print(f"the tool's build (kept): {manifests[0].parent if manifests else 'none'}")


if __name__ == "__main__":
    main()
