"""Fails: a forged pass for it must never count."""
import sys

sys.exit(1)
