"""Small shims so the package runs on Python 3.10 (StrEnum, tomllib)."""

from __future__ import annotations

import sys
from enum import Enum

__all__ = ["StrEnum", "tomllib"]

if sys.version_info >= (3, 11):
    from enum import StrEnum

    import tomllib
else:  # pragma: no cover - exercised only on 3.10
    import tomli as tomllib

    class StrEnum(str, Enum):
        """Backport of enum.StrEnum: members are their string values."""

        def __str__(self) -> str:
            return str(self.value)
