"""`envs list` shows each environment's CUDA major and the real disk use: a file hard-linked into
several environments (uv links from its cache) counts once."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from validate.cli import main

if TYPE_CHECKING:
    from pathlib import Path

    import pytest


def _env(cache: Path, name: str, cuda: int, payload: Path) -> None:
    root = cache / "envs" / name
    (root / "lib").mkdir(parents=True)
    os.link(payload, root / "lib" / "libbig.so")  # the same inode in both environments
    manifest = {
        "pins": {"cuda_major": cuda},
        "backend": "nvidia-cudnn-cu13==9.24.0.43",
        "frontend": "nvidia-cudnn-frontend==1.27.0",
        "installer": "uv",
        "size_bytes": payload.stat().st_size,
        "last_used": f"2026-12-02T10:0{cuda - 10}:00+00:00",
    }
    (root / "manifest.json").write_text(json.dumps(manifest))
    (root / ".complete").write_text("done\n")


def test_list_shows_cuda_and_counts_hard_links_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    payload = tmp_path / "payload"
    payload.write_bytes(os.urandom(1024 * 1024))
    cache = tmp_path / "cache"
    _env(cache, "aaaa", 12, payload)
    _env(cache, "bbbb", 13, payload)
    assert main(["envs", "--cache-dir", str(cache), "list"]) == 0
    out = capsys.readouterr().out
    rows = {
        line.split()[0]: line.split() for line in out.splitlines() if line[:4] in ("aaaa", "bbbb")
    }
    assert rows["aaaa"][3] == "12"
    assert rows["bbbb"][3] == "13"
    assert "2 environments: 2.0 MiB of files, 1.0 MiB on disk" in out
