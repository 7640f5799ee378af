"""Small wheel files written by tests, as pip and uv read them (one builder for every test)."""

from __future__ import annotations

import zipfile
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path


def make_wheel(
    folder: Path,
    name: str,
    version: str,
    *,
    requires: tuple[str, ...] = (),
    files: dict[str, bytes] | None = None,
) -> Path:
    """A wheel file as pip reads it: WHEEL, METADATA (with Requires-Dist) and RECORD."""
    dist = f"{name.replace('-', '_')}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {req}\n" for req in requires)
    members = {
        f"{dist}.dist-info/METADATA": meta.encode(),
        f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        **(files or {}),
    }
    record = "".join(f"{member},,\n" for member in members) + f"{dist}.dist-info/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as whl:
        for member, data in members.items():
            whl.writestr(member, data)
        whl.writestr(f"{dist}.dist-info/RECORD", record)
    return path
