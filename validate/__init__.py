"""cudnn-matrix: release validation for the cuDNN frontend across a declared matrix."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
