"""Speed test case whose time depends on its cell: it sleeps SPEED_FAST_S seconds, or SPEED_SLOW_S
from backend SPEED_SLOW_FROM on, and prints the figure as a timed unit (`CUDNN_MATRIX_TIME work`),
beside a unit that takes the same time everywhere (`setup`).

The cell's backend is the version folder of the backend store the runner preloads
(`<store>/<version>/lib/libcudnn.so.9`), else the backend the runner expects
(`CUDNN_MATRIX_EXPECT_BACKEND`). Load stand-in: with SPEED_LOAD_ONCE=DIR, a file in DIR named
after the backend is taken (deleted) by the first run in that cell, which sleeps SPEED_LOAD_S
longer, as a case slowed by its neighbours once would be. Crowded stand-in: with
SPEED_CROWD_ONCE=DIR, the first run in a cell whose backend names a file in DIR takes it and runs
SPEED_CROWD_X times slower as a whole (its untimed start-up of SPEED_START_S seconds too), as every
process on a saturated host is.
"""

import os
import re
import time
from pathlib import Path


def _backend() -> str:
    found = re.search(r"/(\d+\.\d+\.\d+\.\d+)/lib/libcudnn\.so", os.environ.get("LD_PRELOAD", ""))
    return found.group(1) if found else os.environ.get("CUDNN_MATRIX_EXPECT_BACKEND", "0")


def _key(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _take(folder: str, backend: str) -> bool:
    """Whether this run took the flag file named after its backend in `folder` (if any)."""
    if not folder:
        return False
    try:
        (Path(folder) / backend).unlink()
    except FileNotFoundError:
        return False
    return True


backend = _backend()
slow = _key(backend) >= _key(os.environ.get("SPEED_SLOW_FROM", "999"))
seconds = float(os.environ["SPEED_SLOW_S" if slow else "SPEED_FAST_S"])
if _take(os.environ.get("SPEED_LOAD_ONCE", ""), backend):
    seconds += float(os.environ["SPEED_LOAD_S"])
crowded = _take(os.environ.get("SPEED_CROWD_ONCE", ""), backend)
stretch = float(os.environ["SPEED_CROWD_X"]) if crowded else 1.0
time.sleep(float(os.environ.get("SPEED_START_S", "0")) * stretch)  # start-up: no unit times it
start = time.monotonic()
time.sleep(0.05 * stretch)
print(f"CUDNN_MATRIX_TIME setup {time.monotonic() - start:.4f}")
start = time.monotonic()
time.sleep(seconds * stretch)
print(f"CUDNN_MATRIX_TIME work {time.monotonic() - start:.4f}")
print(f"backend {backend}: slept {seconds} s")
