"""Version-aware ordering of axis values: packaging order for versions, natural order otherwise."""

from __future__ import annotations

import re

from packaging.version import InvalidVersion, Version

__all__ = ["natural_key", "parse_version", "value_key"]


def parse_version(text: str) -> Version | None:
    """A packaging Version, or None when the text is not one."""
    try:
        return Version(text)
    except InvalidVersion:
        return None


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders digits numerically: sm90 < sm100, KI-2 < KI-10."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", text) if part
    )


def value_key(text: str) -> tuple[int, Version, tuple[tuple[int, int | str], ...]]:
    """Versions first in packaging order (never string order), everything else naturally."""
    version = parse_version(text)
    if version is not None:
        return (0, version, ())
    return (1, Version("0"), natural_key(text))
