"""Sample the host's CPU use once a second, as nvidia-smi does the GPU's, until killed.

    python bench/cpu_sample.py OUT.csv

Each line: ``unix_time,busy_pct,cpus`` where busy_pct is the share of every CPU's time (user,
nice, system, irq, softirq, steal) in the last second, from /proc/stat; 100 = every CPU busy.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def _stat() -> tuple[int, int]:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [int(v) for v in fields]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return sum(values[:8]), idle


def main(out: Path) -> None:
    cpus = os.cpu_count() or 1
    total, idle = _stat()
    with out.open("a", encoding="utf-8") as fh:
        while True:
            time.sleep(1.0)
            total2, idle2 = _stat()
            span = max(1, total2 - total)
            busy = 100.0 * (span - (idle2 - idle)) / span
            fh.write(f"{time.time():.0f},{busy:.1f},{cpus}\n")
            fh.flush()
            total, idle = total2, idle2


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
