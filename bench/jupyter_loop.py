"""The frontend CI's way, for comparison: `jupyter execute` one sample notebook after another.

    python bench/jupyter_loop.py SAMPLES_CHECKOUT OUT.json

Every notebook is run (where `set -e` would have stopped is recorded, not obeyed), each in the
samples folder with `--timeout=300`; the interpreter, PATH and library path are the caller's.
Writes total and per-notebook seconds, return codes and the tail of each failure's stderr.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def main(samples: Path, out: Path) -> int:
    notebooks = sorted((samples / "samples" / "python").glob("*.ipynb"))
    rows: list[dict[str, Any]] = []
    t0 = time.monotonic()
    for nb in notebooks:
        start = time.monotonic()
        proc = subprocess.run(
            ["jupyter", "execute", "--timeout=300", str(nb)],
            cwd=nb.parent,
            capture_output=True,
            text=True,
            check=False,
        )
        rows.append(
            {
                "notebook": nb.name,
                "rc": proc.returncode,
                "seconds": round(time.monotonic() - start, 2),
                "tail": (proc.stderr or "")[-300:] if proc.returncode else "",
            }
        )
        print(f"{nb.name}: rc {proc.returncode}, {rows[-1]['seconds']} s", flush=True)
    total = time.monotonic() - t0
    stop = next((i for i, r in enumerate(rows) if r["rc"]), None)
    kept = rows if stop is None else rows[: stop + 1]
    result = {
        "total_s": round(total, 1),
        "notebooks": len(rows),
        "ok": sum(r["rc"] == 0 for r in rows),
        "set_e_would_stop_at": None if stop is None else rows[stop]["notebook"],
        "set_e_verdicts": len(kept),
        "set_e_wall_s": round(sum(r["seconds"] for r in kept), 1),
        "rows": rows,
    }
    out.write_text(json.dumps(result, indent=1))
    print(
        f"loop total {result['total_s']} s; {result['ok']}/{result['notebooks']} ok; "
        f"set -e stops at {result['set_e_would_stop_at']}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
