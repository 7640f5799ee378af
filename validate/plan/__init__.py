"""The plan stage."""
