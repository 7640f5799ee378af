"""Cold cell-image build vs rebuild after a frontend-only change, as ratios measured in one run.

    python bench/image_bench.py [--cudnn 9.24.0.43] [--frontends 1.26.0,1.27.0] [--wheelhouse DIR]

Target: the frontend-change rebuild takes <= 10 % of the cold build (the backend layer is cached).
Wheels are fetched into the wheelhouse before timing; the local base image must exist
(`nox -s base_image`). The images built here are removed at the end unless --keep.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from validate.env.builder import BuildResult, ImageBuilder
from validate.env.images import LOCAL_BASE_IMAGE, ImageSpec
from validate.model.matrix import Cell

ROOT = Path(__file__).resolve().parents[1]


def _row(name: str, result: BuildResult, cold: BuildResult) -> str:
    ratio = result.duration_s / cold.duration_s
    ran = len(result.rebuilt)
    return f"{name:<28} {result.duration_s:7.1f} s  {ratio:7.1%}  {ran:3d}/{len(result.steps)} steps ran"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cudnn", default="9.24.0.43")
    parser.add_argument("--cuda", default="13.0")
    parser.add_argument("--frontends", default="1.26.0,1.27.0")
    parser.add_argument("--base-image", default=LOCAL_BASE_IMAGE)
    parser.add_argument("--python", default="3.11")
    parser.add_argument("--wheelhouse", type=Path, default=ROOT / ".cache" / "wheelhouse")
    parser.add_argument("--keep", action="store_true", help="keep the built images")
    args = parser.parse_args()
    first, second = args.frontends.split(",")
    builder = ImageBuilder(wheelhouse=args.wheelhouse, network="none")
    specs: list[ImageSpec] = [
        builder.spec_for(
            Cell(
                cudnn=args.cudnn,
                frontend=fe,
                cuda=args.cuda,
                driver="580",
                arch="sm90",
                python=args.python,  # the python axis picks the image's Python
            ),
            base_image=args.base_image,
        )
        for fe in (first, second)
    ]
    tags = {spec.tag for spec in specs} | {spec.backend_tag for spec in specs}
    builder.prune(info for info in builder.list_images() if info.tag in tags)  # really cold
    try:
        cold = builder.build(specs[0])
        change = builder.build(specs[1])
        again = builder.build(specs[1])
    finally:
        if not args.keep:
            builder.prune(info for info in builder.list_images() if info.tag in tags)
    backend = Path(specs[0].backend_wheel or "").name
    print(f"backend {backend} ({(args.wheelhouse / backend).stat().st_size / 1e6:.0f} MB wheel)")
    print(f"{'build':<28} {'time':>9}  {'vs cold':>7}")
    print(_row(f"cold (frontend {first})", cold, cold))
    print(_row(f"frontend {first} -> {second}", change, cold))
    print(_row("no change", again, cold))
    ratio = change.duration_s / cold.duration_s
    print(f"frontend-change rebuild / cold build = {ratio:.1%} (target <= 10 %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
