"""Speed test case whose time depends on its cell: it sleeps SPEED_FAST_S seconds, or SPEED_SLOW_S
from backend SPEED_SLOW_FROM on, and prints the figure as a timed unit (`CUDNN_MATRIX_TIME work`),
beside a unit that takes the same time everywhere (`setup`).

The cell's backend is the version folder of the backend store the runner preloads
(`<store>/<version>/lib/libcudnn.so.9`), else the backend the runner expects
(`CUDNN_MATRIX_EXPECT_BACKEND`). Load stand-in: with SPEED_LOAD_ONCE=DIR, a file in DIR named
after the backend is taken (deleted) by the first run in that cell, which sleeps SPEED_LOAD_S
longer, as a case slowed by its neighbours once would be.
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


backend = _backend()
slow = _key(backend) >= _key(os.environ.get("SPEED_SLOW_FROM", "999"))
seconds = float(os.environ["SPEED_SLOW_S" if slow else "SPEED_FAST_S"])
if os.environ.get("SPEED_LOAD_ONCE"):
    flag = Path(os.environ["SPEED_LOAD_ONCE"]) / backend
    try:
        flag.unlink()
    except FileNotFoundError:
        pass
    else:
        seconds += float(os.environ["SPEED_LOAD_S"])
start = time.monotonic()
time.sleep(0.05)
print(f"CUDNN_MATRIX_TIME setup {time.monotonic() - start:.4f}")
start = time.monotonic()
time.sleep(seconds)
print(f"CUDNN_MATRIX_TIME work {time.monotonic() - start:.4f}")
print(f"backend {backend}: slept {seconds} s")
