#!/usr/bin/env bash
# The contention issue's (#25) GPU figures on the lent H200, as a user runs the tool.
#
#   bench/gpu_contention.sh PART KIT_DIR OUT_DIR
#
# KIT_DIR: what bench/gpu_pool_prepare.sh unpacked (store/, wh/, samples/); /tmp/site holds the
# loop's packages (frontend 1.27.0, nbclient, ipykernel). The whole matrix is backends
# 9.19.0.56..9.25.1.1 x frontends 1.26.0, 1.27.0, 1.32.0 (15 cells), the 24 sample notebooks +
# the shipped cases (29 per cell), default slots, `--timeout 300` (the loop's limit).
#   PART=loop  the frontend CI's `jupyter execute --timeout=300` loop over one cell (backend
#              9.24.0.43, frontend 1.27.0; bench/jupyter_loop.py);
#   PART=m1    `validate` on the whole matrix with an empty history (a fresh cache);
#   PART=m2    the same with a fresh cache that holds only the duration history m1 wrote.
# RESUME=1 completes an interrupted m1/m2 (`--resume`, same results folder and cache); GUARD=S
# interrupts validate (SIGINT) after S seconds, so a device call's 600 s limit is never hit with
# results unsaved. Each part writes OUT_DIR/PART/: provenance.txt, validate.txt/.err (or
# resume.*), *_wall_s, smi.csv (nvidia-smi utilization.gpu every second, beside the tool's own
# NVML figures in validate/gpu_utilization.json), cpu.csv (bench/cpu_sample.py: the host's CPU
# busy share every second).
set -uo pipefail
PART=$1; KIT=$(realpath "$2"); OUT=$(realpath -m "$3")
REPO=$(cd "$(dirname "$0")/.." && pwd); cd "$REPO"
STORE="$KIT/store"; WH="$KIT/wh"; SAMPLES="$KIT/samples"
mkdir -p "$OUT/$PART"; export PYTHONUNBUFFERED=1
stamp() { date -u +%Y-%m-%dT%H:%M:%SZ; }
COMMON=(--env current --backend-store "$STORE" --cuda 13.0 --driver 580 --arch sm90 --wheelhouse "$WH"
  --samples "$SAMPLES" --cases validate/execute/resources/cases --timeout 300
  --cudnn 9.19.0.56,9.21.1.3,9.22.0.52,9.24.0.43,9.25.1.1 --frontend 1.26.0,1.27.0,1.32.0)
case $PART in loop | m1 | m2) ;; *) echo "PART must be loop, m1 or m2" >&2; exit 2 ;; esac
for b in 9.19.0.56 9.21.1.3 9.22.0.52 9.24.0.43 9.25.1.1; do
  [ -f "$STORE/$b/lib/libcudnn.so.9" ] || { echo "gpu_contention.sh: backend $b missing in $STORE" >&2; exit 2; }
done
{
  echo "date: $(stamp)"
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader
  echo "cpus: $(nproc)"
  python3 -c "import torch,sys; print('python', sys.version.split()[0], 'torch', torch.__version__)"
  echo "samples commit: $(cat "$SAMPLES/COMMIT" 2>/dev/null)"
  echo "tool commit: ${TOOL_COMMIT:-unknown}"
} >>"$OUT/$PART/provenance.txt" 2>&1
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader -l 1 \
  >>"$OUT/$PART/smi.csv" 2>/dev/null &
SMI=$!
python3 bench/cpu_sample.py "$OUT/$PART/cpu.csv" &
CPU=$!
trap 'kill $SMI $CPU 2>/dev/null' EXIT
if [ "$PART" = loop ]; then
  echo "loop: jupyter execute --timeout=300, backend 9.24.0.43, frontend 1.27.0" >>"$OUT/$PART/provenance.txt"
  LIB="$STORE/9.24.0.43/lib"
  env PYTHONPATH=/tmp/site PATH="/tmp/site/bin:$PATH" LD_LIBRARY_PATH="$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    LD_PRELOAD="$LIB/libcudnn.so.9" python3 bench/jupyter_loop.py "$SAMPLES" "$OUT/$PART/loop.json"
  exit 0
fi
CACHE="/tmp/envs-$PART"
NAME=validate; EXTRA=()
if [ "${RESUME:-0}" = 1 ]; then
  NAME=resume; EXTRA=(--resume)
else
  rm -rf "$CACHE" "$OUT/$PART/validate"; mkdir -p "$CACHE"
  if [ "$PART" = m2 ]; then
    cp /tmp/envs-m1/durations.json "$CACHE/" && cp "$CACHE/durations.json" "$OUT/m2/history_in.json"
  fi
fi
echo "$NAME: cudnn-matrix validate ${COMMON[*]} ${EXTRA[*]} (history: $(ls "$CACHE"/durations.json 2>/dev/null || echo none))" >>"$OUT/$PART/provenance.txt"
WRAP=(); [ -n "${GUARD:-}" ] && WRAP=(timeout -s INT "$GUARD")
s=$(date +%s.%N)
"${WRAP[@]}" python3 -m validate validate "${COMMON[@]}" "${EXTRA[@]}" --cache-dir "$CACHE" \
  --results "$OUT/$PART/validate" >"$OUT/$PART/$NAME.txt" 2>"$OUT/$PART/$NAME.err"
echo "rc=$?" >>"$OUT/$PART/$NAME.txt"
e=$(date +%s.%N)
python3 -c "print(round($e-$s,1))" >"$OUT/$PART/${NAME}_wall_s"
echo "$NAME wall: $(cat "$OUT/$PART/${NAME}_wall_s") s ($(stamp))"
grep -m2 -e "slots" -e "gpu utilization" "$OUT/$PART/$NAME.err"
tail -n 4 "$OUT/$PART/$NAME.txt"
