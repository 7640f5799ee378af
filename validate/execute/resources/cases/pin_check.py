"""Pin check case: import the frontend, load the backend and say which ones this process got.

Runs in the case environment (not the tool's). The runner's in-process capture and pin check
turn a backend or frontend other than the cell's pins into an ERROR; this script only makes the
loading happen the way a user's program would (``import cudnn`` first, nothing pre-imported) and
prints what it saw. Works without a GPU (DOMAIN.md §2: backend_version() needs no driver).
"""

from __future__ import annotations

import sys
from pathlib import Path


def _mapped_libcudnn() -> list[str]:
    paths: set[str] = set()
    try:
        with Path("/proc/self/maps").open(encoding="utf-8") as fh:
            for line in fh:
                name = line.rsplit(" ", 1)[-1].strip()
                if "/libcudnn" in name and ".so" in name:
                    paths.add(name)
    except OSError:
        pass
    return sorted(paths)


def main() -> int:
    # No try/except: a frontend that does not import (ModuleNotFoundError) or a backend that does
    # not load ("Unable to find symbol cudnnGetVersion") propagates, and the runner classifies
    # it as an environment ERROR rather than a product failure.
    import cudnn

    print(f"frontend {cudnn.__version__} from {cudnn.__file__}")
    version = cudnn.backend_version()
    print(f"backend_version() = {version}")
    for path in _mapped_libcudnn():
        print(f"mapped {path}")
    print(f"VERDICT pass: frontend {cudnn.__version__}, backend {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
