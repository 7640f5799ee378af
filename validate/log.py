"""Logging setup and a `step()` context manager that prints ✓/✕ with timing (and CI folding)."""

from __future__ import annotations

import logging
import os
import sys
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["setup_logging", "step", "symbols"]

_HANDLER_NAME = "cudnn-matrix"


def setup_logging(verbose: int = 0) -> None:
    """Install one stderr handler on the `validate` logger; safe to call twice."""
    logger = logging.getLogger("validate")
    level = logging.DEBUG if verbose > 0 else logging.INFO
    logger.setLevel(level)
    for existing in logger.handlers:
        if existing.get_name() == _HANDLER_NAME and isinstance(existing, logging.StreamHandler):
            existing.setStream(sys.stderr)  # stderr may have been replaced since (e.g. by pytest)
            return
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    logger.propagate = False


def symbols() -> tuple[str, str]:
    """(ok, bad) marks, falling back to ASCII when stdout cannot encode them."""
    enc = (getattr(sys.stdout, "encoding", None) or "ascii").lower()
    try:
        "✓✕".encode(enc)
    except (UnicodeEncodeError, LookupError):
        return ("OK", "X")
    return ("✓", "✕")


@contextmanager
def step(title: str) -> Iterator[None]:
    """Log a step with its duration; folds into a group on GitHub Actions / GitLab."""
    log = logging.getLogger("validate")
    ok, bad = symbols()
    gha = os.environ.get("GITHUB_ACTIONS") == "true"
    if gha:
        print(f"::group::{title}", file=sys.stderr, flush=True)
    log.info("» %s", title)
    start = time.monotonic()
    try:
        yield
    except BaseException:
        log.info("%s %s (%.2fs)", bad, title, time.monotonic() - start)
        raise
    finally:
        if gha:
            print("::endgroup::", file=sys.stderr, flush=True)
    log.info("%s %s (%.2fs)", ok, title, time.monotonic() - start)
