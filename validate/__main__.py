"""`python -m validate` entry point."""

from __future__ import annotations

from validate.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
