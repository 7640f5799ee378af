"""Fills the file system that holds the run folder (beside its own evidence), then claims a pass."""

import os
from pathlib import Path

target = Path(os.environ["CUDNN_MATRIX_RESULT_FILE"]).parent / "filler.bin"
with target.open("wb") as fh:
    try:
        while True:
            fh.write(b"\0" * 65536)
            fh.flush()
    except OSError:  # ENOSPC: the disk is full now
        pass
print("VERDICT pass")
