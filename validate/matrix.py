"""The matrix model: axes, cells with stable ids. Loading/expansion is added by the foundation work."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Final

__all__ = ["AXES", "Cell"]

#: Axis names in their canonical order; a cell id hashes the pins in this order.
AXES: Final = ("cudnn", "frontend", "cuda", "driver", "arch")


@dataclass(frozen=True, kw_only=True, order=True)
class Cell:
    """One combination of pins. Values are the strings as declared (versions normalised by the loader)."""

    cudnn: str
    frontend: str
    cuda: str
    driver: str
    arch: str

    @property
    def id(self) -> str:
        """Short hash of the pins: the same on every machine and Python version."""
        text = ";".join(f"{axis}={getattr(self, axis)}" for axis in AXES)
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    def pins(self) -> dict[str, str]:
        return {axis: getattr(self, axis) for axis in AXES}

    @property
    def label(self) -> str:
        return f"cudnn {self.cudnn} / fe {self.frontend} / cuda {self.cuda} / drv {self.driver} / {self.arch}"
