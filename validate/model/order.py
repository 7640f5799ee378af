"""Version-aware ordering of axis values: packaging order for versions, natural order otherwise."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from packaging.version import Version

__all__ = ["natural_key", "parse_version", "value_key", "version"]

_CLASS: list[type[Version]] = []


def version(text: str) -> Version:
    """packaging's Version of `text`; raises ValueError (InvalidVersion is one). packaging.version
    is imported on the first call, not with this module: it is ~8 ms of every command's start,
    and `run` on cases without a version requirement never needs it."""
    if not _CLASS:
        from packaging.version import Version

        _CLASS.append(Version)
    return _CLASS[0](text)


@lru_cache(maxsize=4096)  # the same few versions, asked once per result of a large run
def parse_version(text: str) -> Version | None:
    """A packaging Version, or None when the text is not one."""
    try:
        return version(text)
    except ValueError:
        return None


@lru_cache(maxsize=1 << 17)  # case names repeat once per cell (40,000 tests x 25 cells)
def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders digits numerically: sm90 < sm100, KI-2 < KI-10."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", text) if part
    )


@lru_cache(maxsize=4096)
def value_key(text: str) -> tuple[int, Version, tuple[tuple[int, int | str], ...]]:
    """Versions first in packaging order (never string order), everything else naturally."""
    parsed = parse_version(text)
    if parsed is not None:
        return (0, parsed, ())
    return (1, version("0"), natural_key(text))
