"""Passes after a short sleep (used by the kill -9 / resume test)."""
import time

time.sleep(1.5)
