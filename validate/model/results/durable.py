"""Writes that survive a kill or a power cut: all bytes written, fsynced, names made durable."""

from __future__ import annotations

import errno
import json
import os
from typing import TYPE_CHECKING, Any

from validate.textsafe import redact_obj

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

__all__ = ["fsync_dir", "write_all", "write_durable", "write_json"]


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` (a write may take only part of it) and fsync."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


def fsync_dir(folder: Path) -> None:
    """fsync a folder, so the names created or renamed in it survive a power loss (an fsync of a
    file makes its bytes durable, not its directory entry). A file system that cannot fsync a
    folder (EINVAL) gives no more than this."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
    finally:
        os.close(fd)


def write_durable(path: Path, data: bytes, mode: int = 0o666) -> None:
    """Replace `path` with `data` (temp file, fsync, rename, fsync of the folder)."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        write_all(fd, data)
    finally:
        os.close(fd)
    tmp.replace(path)
    fsync_dir(path.parent)


def write_json(path: Path, data: Mapping[str, Any]) -> None:
    """Replace `path` atomically (temp file + rename): a reader never sees half a file; secrets
    are redacted (run.json keeps the command line)."""
    tmp = path.with_suffix(".tmp")
    text = json.dumps(redact_obj(dict(data)), indent=2, sort_keys=True, default=str)
    tmp.write_text(text + "\n", encoding="utf-8")
    tmp.replace(path)
