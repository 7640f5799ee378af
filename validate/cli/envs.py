"""`cudnn-matrix envs list|prune`: inspect and trim the cache of pinned environments."""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from tabulate import tabulate

from validate.cli import caller_path, positive
from validate.env.venvs import (
    cache_root,
    env_dirs,
    partial_builds,
    read_manifest,
    remove_partial_builds,
    tree_usage,
)

if TYPE_CHECKING:
    import argparse
    from pathlib import Path

    from validate.cli import OneLineParser

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[OneLineParser]) -> None:
    parser = subparsers.add_parser(
        "envs", help="list or prune cached environments", description=__doc__
    )
    parser.add_global_argument(  # also after the action: `envs list --cache-dir X`
        "--cache-dir",
        type=caller_path,
        metavar="DIR",
        help="cache folder (default: $CUDNN_MATRIX_CACHE or ~/.cache/cudnn-matrix)",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
    actions.required = True
    actions.add_parser("list", help="one line per cached environment")
    prune = actions.add_parser("prune", help="delete environments not used for a while")
    prune.add_argument(
        "--older-than",
        type=positive(float, 0, 36_500),  # at most 100 years: timedelta's range
        default=30.0,
        metavar="DAYS",
        help="delete those last used more than DAYS ago (default 30)",
    )
    prune.add_argument("--all", action="store_true", help="delete every cached environment")
    parser.set_defaults(func=_run)


def _size(num: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if num < 1024 or unit == "GiB":
            return f"{num:.0f} {unit}" if unit == "B" else f"{num:.1f} {unit}"
        num /= 1024
    return f"{num:.1f} GiB"


def _last_used(root: Path) -> datetime:
    text = str(read_manifest(root).get("last_used", ""))
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return datetime.fromtimestamp(root.stat().st_mtime, tz=timezone.utc)


def _run(args: argparse.Namespace) -> int:
    cache: Path = cache_root(args.cache_dir)
    roots = env_dirs(cache)
    if args.action == "list":
        rows = []
        seen: set[tuple[int, int]] = set()  # (device, inode): hard links (uv's cache) count once
        disk = 0
        for root in roots:
            m = read_manifest(root)
            used = tree_usage(root, seen)[1]
            disk += used
            pins = m.get("pins") or {}
            rows.append(
                [
                    root.name,
                    m.get("backend", "?"),
                    m.get("frontend", "?"),
                    str(pins.get("cuda_major", "?")) if isinstance(pins, dict) else "?",
                    m.get("installer", "?"),
                    _size(float(m.get("size_bytes", 0))),
                    _size(float(used)),
                    str(m.get("last_used", "?")),
                ]
            )
        headers = ["hash", "backend", "frontend", "cuda", "installer", "size", "disk", "last used"]
        partial = partial_builds(cache)
        if partial:  # not environments: listed apart, with what removes them
            size = sum(tree_usage(p)[1] for p in partial)
            print(
                f"{len(partial)} half-built environment folder(s), {_size(float(size))} on disk "
                "(interrupted builds, or builds in progress): `cudnn-matrix envs prune` removes "
                "those no build works on"
            )
        if not rows:
            print(f"no environments in {cache / 'envs'}")
            return 0
        # versions as declared and left-aligned ("13", "9.24"), never numbers tabulate right-aligns
        print(tabulate(rows, headers=headers, disable_numparse=True))
        listed = sum(float(read_manifest(r).get("size_bytes", 0)) for r in roots)
        print(
            f"{len(rows)} environments: {_size(listed)} of files, {_size(float(disk))} on disk "
            "(a file hard-linked into several environments or from uv's cache counted once, "
            "in the first environment that holds it)"
        )
        return 0
    gone, partial_freed = remove_partial_builds(cache)  # whatever their age
    if gone:
        print(
            f"removed {len(gone)} half-built environment folder(s) left by interrupted builds, "
            f"{_size(float(partial_freed))} freed"
        )
    cutoff = datetime.now(timezone.utc) - timedelta(days=args.older_than)
    doomed = [r for r in roots if args.all or _last_used(r) < cutoff]
    freed = 0
    for root in doomed:
        freed += int(read_manifest(root).get("size_bytes", 0))
        shutil.rmtree(root)
    print(f"removed {len(doomed)} of {len(roots)} environments, {_size(freed)} freed")
    return 0
