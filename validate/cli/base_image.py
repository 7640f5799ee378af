"""`python -m validate.cli.base_image`: build the local base image (`nox -s base_image`)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from validate.cli import OneLineParser
from validate.env.base_image import (
    BOOTSTRAP_TOOLS,
    DEBIAN_MIRROR,
    base_image_exists,
    build_base_image,
)
from validate.env.images import LOCAL_BASE_IMAGE
from validate.errors import ValidateError
from validate.log import setup_logging

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m validate.cli.base_image [--tag T] [--suite S] [--mirror URL] [--tool T] [--if-missing]`."""
    parser = OneLineParser(
        prog="base_image", description="local Python base image from Debian packages"
    )
    parser.add_argument("--tag", default=LOCAL_BASE_IMAGE)
    parser.add_argument("--suite", default="bookworm")
    parser.add_argument("--mirror", default=DEBIAN_MIRROR)
    parser.add_argument("--tool", choices=("auto", *BOOTSTRAP_TOOLS), default="auto")
    parser.add_argument(
        "--if-missing", action="store_true", help="do nothing when the image exists"
    )
    args = parser.parse_args(argv)
    setup_logging(1)
    try:
        if args.if_missing and base_image_exists(args.tag):
            print(f"{args.tag} already present")
            return 0
        image_id = build_base_image(
            tag=args.tag, suite=args.suite, mirror=args.mirror, tool=args.tool
        )
    except ValidateError as exc:
        print(f"base_image: error: {exc}", file=sys.stderr)
        return exc.return_code
    print(f"{args.tag} {image_id}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
