#!/usr/bin/env bash
# Issue-8 figures on one GPU host, side by side in one call (run on the lent H200):
#
#   bench/gpu_speed.sh WHEELHOUSE SAMPLES_CHECKOUT OUT_DIR
#
# A. `validate` over the 24 sample notebooks for one cell (backend = the machine's 9.19.0.56,
#    frontend 1.27.0 from the wheelhouse), default --jobs, no duration history: given order.
# B. the same into a new run folder: the duration history from A orders the longest cases first.
# C. `validate --resume` of B: nothing changed, nothing re-runs.
# E. as B with --jobs 24 (every notebook at once) instead of the default (16 here).
# D. the frontend CI's loop: `jupyter execute` on each notebook one after another.
# Prints every figure as a ratio to D and writes speed.json.
set -uo pipefail
WH=$(realpath "$1"); SAMPLES=$(realpath "$2"); OUT=$(realpath "$3")
REPO=$(cd "$(dirname "$0")/.." && pwd); cd "$REPO"; mkdir -p "$OUT"; export PYTHONUNBUFFERED=1
ls "$WH"/*.whl | grep -v -e frontend-1.26 -e /packaging- -e /psutil- -e /typing_extensions- \
  -e /attrs- -e /pygments- -e /python_dateutil- -e /tzdata- -e /six- -e /nvidia_ml_py- >/tmp/site.txt
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $(cat /tmp/site.txt) || exit 1
CELL=(--env current --cudnn 9.19.0.56 --frontend 1.27.0 --cuda 13.0 --driver 580 --arch sm90
      --wheelhouse "$WH" --cache-dir /tmp/speed-cache --samples "$SAMPLES" --timeout 300)
t() { local s e; s=$(date +%s.%N); "$@" >/tmp/last.out 2>/tmp/last.err; local rc=$?; e=$(date +%s.%N)
      python3 -c "print(round($e-$s,2))"; return $rc; }
A=$(t python3 -m validate validate "${CELL[@]}" --results /tmp/speedA); tail -4 /tmp/last.out
B=$(t python3 -m validate validate "${CELL[@]}" --results /tmp/speedB); tail -4 /tmp/last.out
C=$(t python3 -m validate validate "${CELL[@]}" --results /tmp/speedB --resume); tail -2 /tmp/last.out
E=$(t python3 -m validate validate "${CELL[@]}" --results /tmp/speedE --jobs 24); tail -3 /tmp/last.out
grep -h "at once" /tmp/last.err | head -2
D=$(t env PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH bash -c '
  cd "$0/samples/python" && for nb in *.ipynb; do jupyter execute --timeout=300 "$nb" >/dev/null 2>&1; done' "$SAMPLES")
python3 - "$A" "$B" "$C" "$D" "$E" "$OUT/speed.json" <<'PY'
import json, sys
from pathlib import Path
a, b, c, d, e = map(float, sys.argv[1:6])
def verdicts(run):
    return len({json.loads(l)["case"] for l in Path(run, "results.jsonl").read_text().splitlines()})
import os, subprocess
gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip()
out = {"date": __import__("datetime").datetime.now(__import__("datetime").timezone.utc).isoformat(timespec="seconds"),
       "gpu": gpu, "cpus": os.cpu_count(), "tool_commit": os.environ.get("TOOL_COMMIT", "unknown"),
       "sequential_jupyter_execute_s": d, "validate_first_s": a, "validate_longest_first_s": b,
       "validate_resume_s": c, "verdicts_first": verdicts("/tmp/speedA"),
       "verdicts_longest_first": verdicts("/tmp/speedB"),
       "ratio_first_to_sequential": round(a / d, 3), "ratio_longest_first_to_sequential": round(b / d, 3),
       "ratio_resume_to_first": round(c / b, 3), "validate_jobs24_longest_first_s": e,
       "ratio_jobs24_to_sequential": round(e / d, 3)}
Path(sys.argv[6]).write_text(json.dumps(out, indent=1))
print(json.dumps(out, indent=1))
PY
cp /tmp/speedB/results.jsonl "$OUT/speedB_results.jsonl"; cp /tmp/speedB/run.json "$OUT/speedB_run.json"
cp /tmp/speedA/results.jsonl "$OUT/speedA_results.jsonl"
