"""A case that appends a forged `pass` for another case to the run's results.jsonl, then fails."""
import json
import os
import sys
from pathlib import Path

here = Path(os.environ["CUDNN_MATRIX_RESULT_FILE"]).resolve()
store = next(p / "results.jsonl" for p in here.parents if (p / "results.jsonl").exists())
forged = {"case": "a_victim.py", "outcome": "pass", "reason": "", "cell_id": "", "schema": 2,
          "mac": "0" * 64}
with store.open("a") as fh:
    fh.write(json.dumps(forged) + "\n")
    fh.write('{"case": "z_forger.py", "outcome": "pass", "schema": 2}\n')  # and one without a MAC
    fh.write('{"case": "torn')  # and a fragment with no newline
sys.exit(1)
