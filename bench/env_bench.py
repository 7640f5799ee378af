"""Environment for one pin set: cold vs reused, uv vs pip, measured side by side in one run.

    python bench/env_bench.py [--wheelhouse .cache/wheelhouse] [--repeat 5]
    (with the package installed, or PYTHONPATH=. from the repository root)

Pins: backend nvidia-cudnn-cu13 9.12.0.46 and frontend 1.26.0 wheel files, installed offline
from the wheelhouse (fill it with the integration tests or `pip download`). Prints seconds and
ratios; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from validate.env.sources import parse_backend_source, parse_frontend_source
from validate.env.venvs import EnvSpec, ensure_env, probe_backend

if TYPE_CHECKING:
    from collections.abc import Callable

_ROOT = Path(__file__).resolve().parents[1]


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _spec(wheelhouse: Path) -> EnvSpec:
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    backend = min(wheelhouse.glob("nvidia_cudnn_cu13-9.12.0.46-*.whl"))
    frontend = min(wheelhouse.glob(f"nvidia_cudnn_frontend-1.26.0-{py}-*.whl"))
    return EnvSpec(
        backend=parse_backend_source(str(backend), declared="9.12.0.46"),
        frontend=parse_frontend_source(str(frontend)),
        backend_deps=False,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheelhouse", type=Path, default=_ROOT / ".cache" / "wheelhouse")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each reuse measurement")
    args = parser.parse_args()
    spec = _spec(args.wheelhouse)
    rows: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="env-bench-", dir=_ROOT / ".cache") as tmp:
        base = Path(tmp)
        # uv cold with an empty uv cache too: what a fresh CI runner pays (minus the download).
        old = os.environ.get("UV_CACHE_DIR")
        os.environ["UV_CACHE_DIR"] = str(base / "uv-cache")
        rows["uv cold (empty uv cache)"] = _timed(
            lambda: ensure_env(spec, base / "uv0", wheelhouse=args.wheelhouse, installer="uv")
        )
        if old is None:
            del os.environ["UV_CACHE_DIR"]
        else:
            os.environ["UV_CACHE_DIR"] = old
        for tool in ("uv", "pip"):
            cache = base / tool
            label = "uv cold (warm uv cache)" if tool == "uv" else "pip cold"
            build = partial(ensure_env, spec, cache, wheelhouse=args.wheelhouse, installer=tool)
            rows[label] = _timed(build)
            reuse = [_timed(build) for _ in range(args.repeat)]
            rows[f"{tool} reused (median of {args.repeat})"] = statistics.median(reuse)
        handle = ensure_env(spec, base / "uv")
        rows["reused + probe_backend (verified ready)"] = _timed(
            lambda: (ensure_env(spec, base / "uv"), probe_backend(handle))
        )
    reused = rows[f"uv reused (median of {args.repeat})"]
    uv_cold = rows["uv cold (warm uv cache)"]
    print(f"{'measurement':42} {'seconds':>9} {'x uv reused':>12} {'x uv cold':>10}")
    for name, secs in rows.items():
        print(f"{name:42} {secs:9.3f} {secs / reused:12.0f} {secs / uv_cold:10.2f}")
    print(f"pip cold / uv cold: {rows['pip cold'] / uv_cold:.1f}x")
    print(f"uv cold / uv reused: {uv_cold / reused:.0f}x  (target: reused <= 3 s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
