"""Small shims so the package runs on Python 3.10 (StrEnum, tomllib, assert_never)."""

from __future__ import annotations

import sys
from enum import Enum
from typing import NoReturn

__all__ = ["StrEnum", "assert_never", "tomllib"]

if sys.version_info >= (3, 11):
    from enum import StrEnum
    from typing import assert_never

    import tomllib
else:  # pragma: no cover - exercised only on 3.10
    import tomli as tomllib

    class StrEnum(str, Enum):
        """Backport of enum.StrEnum: members are their string values."""

        def __str__(self) -> str:
            return str(self.value)

    def assert_never(arg: NoReturn, /) -> NoReturn:
        """Backport of typing.assert_never: mypy flags a call it can reach; at run time it raises."""
        msg = f"Expected code to be unreachable, but got: {arg!r}"
        raise AssertionError(msg)
