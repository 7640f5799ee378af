"""Writes the JSON result file named by $CUDNN_MATRIX_RESULT_FILE."""
import json
import os
from pathlib import Path

Path(os.environ["CUDNN_MATRIX_RESULT_FILE"]).write_text(
    json.dumps({"outcome": "fail", "reason": "second graph differs from reference"})
)
