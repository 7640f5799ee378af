"""`cudnn-matrix images build|list|prune`: cell images through the docker SDK (ImageBuilder)."""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from tabulate import tabulate

from validate.cli import add_selector_args, caller_path, caller_source, split_list
from validate.env.images import LOCAL_BASE_IMAGE
from validate.model.axes import axis_named

if TYPE_CHECKING:
    import argparse

    from validate.env.builder import ImageBuilder, ImageInfo
    from validate.env.images import ImageSpec

__all__ = ["register"]

logger = logging.getLogger(__name__)
_LIST_COLUMNS = ("tag", "kind", "cudnn", "frontend", "cuda", "backend-source", "compat", "size_mb")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `images` with its build, list and prune sub-commands."""
    parser = subparsers.add_parser("images", help="build, list or prune cell container images")
    sub = parser.add_subparsers(dest="images_command", metavar="ACTION", required=True)
    build = sub.add_parser("build", help="build (or refresh) the image of every planned cell")
    add_selector_args(build)
    build.add_argument(
        "--base-image",
        metavar="IMAGE",
        help="base image (default nvidia/cuda:<cuda>.0-runtime-ubuntu24.04, "
        f"or {LOCAL_BASE_IMAGE} where only that one is on the daemon)",
    )
    build.add_argument(
        "--backend-source",
        type=caller_source,
        metavar="SPEC",
        help="backend wheel file or library folder",
    )
    build.add_argument(
        "--frontend-source", type=caller_source, metavar="SPEC", help="frontend wheel file"
    )
    build.add_argument("--torch", metavar="V", help="add a torch layer with this torch version")
    build.add_argument("--offline", action="store_true", help="build with network_mode=none")
    build.add_argument(
        "--log-dir", metavar="DIR", type=caller_path, help="keep each build log here"
    )
    build.set_defaults(func=_build)
    listing = sub.add_parser("list", help="list the cell images on the docker daemon")
    listing.add_argument(
        "--format", choices=("table", "json"), default="table", help="output (default: table)"
    )
    listing.set_defaults(func=_list)
    prune = sub.add_parser("prune", help="remove cell images (all, or those matching the filters)")
    for axis in ("cudnn", "frontend", "cuda"):
        prune.add_argument(f"--{axis}", action="append", metavar="V[,V]", help=f"only this {axis}")
    prune.add_argument("--dry-run", action="store_true", help="only print what would go")
    prune.set_defaults(func=_prune)
    for action in (build, listing, prune):
        action.add_argument(
            "--wheelhouse", metavar="DIR", type=caller_path, help="shared wheel folder"
        )


def _builder(args: argparse.Namespace, *, offline: bool = False) -> ImageBuilder:
    from validate.env.builder import ImageBuilder

    return ImageBuilder(wheelhouse=args.wheelhouse, network="none" if offline else None)


def _specs(args: argparse.Namespace, builder: ImageBuilder) -> list[ImageSpec]:
    from validate.config import Selectors
    from validate.env.sources import parse_backend_source, parse_frontend_source
    from validate.model.matrix import load_matrix
    from validate.plan.rules import load_rules, plan_cells

    selectors = Selectors.from_args(args)
    plan = plan_cells(load_matrix(selectors.matrix), load_rules(selectors.rules), selectors)
    specs: dict[str, ImageSpec] = {}
    for cell in plan.planned:
        backend = (
            parse_backend_source(args.backend_source, declared=cell.cudnn)
            if args.backend_source
            else None
        )
        frontend = parse_frontend_source(args.frontend_source) if args.frontend_source else None
        spec = builder.spec_for(
            cell,
            backend=backend,
            frontend=frontend,
            base_image=args.base_image,
            torch=args.torch,
        )
        specs.setdefault(spec.tag, spec)  # cells differing only in driver/arch share an image
    return list(specs.values())


def _build(args: argparse.Namespace) -> int:
    builder = _builder(args, offline=args.offline)
    rows = []
    for spec in _specs(args, builder):
        log_path = args.log_dir / f"{spec.digest}.log" if args.log_dir else None
        if log_path:
            log_path.parent.mkdir(parents=True, exist_ok=True)
        result = builder.build(spec, log_path=log_path)
        ran = len(result.rebuilt)
        rows.append(
            [spec.tag, spec.cudnn, spec.frontend, spec.cuda, ran, f"{result.duration_s:.1f}"]
        )
        logger.info("built %s in %.1fs (%d steps ran)", spec.tag, result.duration_s, ran)
    headers = ("tag", "cudnn", "frontend", "cuda", "steps run", "seconds")
    print(tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True))
    return 0


def _row(info: ImageInfo) -> dict[str, str]:
    return {
        "tag": info.tag,
        **{name: info.label(name) for name in _LIST_COLUMNS[1:-1]},
        "size_mb": f"{info.size_mb:.0f}",
    }


def _list(args: argparse.Namespace) -> int:
    rows = [_row(info) for info in _builder(args).list_images()]
    if args.format == "json":
        print(json.dumps(rows, indent=2))
    else:
        table = [[row[c] for c in _LIST_COLUMNS] for row in rows]
        print(tabulate(table, headers=_LIST_COLUMNS, tablefmt="simple", disable_numparse=True))
    return 0


def _prune(args: argparse.Namespace) -> int:
    builder = _builder(args)
    wanted = {axis: split_list(getattr(args, axis)) for axis in ("cudnn", "frontend", "cuda")}
    chosen = [
        info
        for info in builder.list_images()
        if all(
            not values or any(axis_named(axis).same(info.label(axis), v) for v in values)
            for axis, values in wanted.items()
        )
    ]
    if args.dry_run:
        for info in chosen:
            print(f"would remove {info.tag}")
        return 0
    for tag in builder.prune(chosen):
        print(f"removed {tag}")
    return 0
