"""Deletes the other case files beside it whose names start with `victim`."""

from pathlib import Path

for other in Path(__file__).resolve().parent.glob("victim*"):
    other.unlink()
print("VERDICT pass")
