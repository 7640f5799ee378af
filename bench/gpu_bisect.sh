#!/usr/bin/env bash
# The two GPU bisects of the bisect issue, as a user runs them on the lent H200 (`--env current`:
# the machine's torch and Python; backends from an unpacked store; frontends from the wheelhouse).
#
#   bench/gpu_bisect.sh WHEELHOUSE SAMPLES_CHECKOUT BACKEND_STORE OUT_DIR
#
# 1. the fusion repro's crash (KI-1) over the backends of the store, frontend 1.27.0 pinned;
# 2. notebook 26's kernel death over the frontend releases 1.26.0..1.27.0, backend 9.24.0.43 pinned.
set -uo pipefail
WH=$(realpath "$1"); SAMPLES=$(realpath "$2"); STORE=$(realpath "$3"); OUT=$(realpath -m "$4")
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
COMMON=(--env current --backend-store "$STORE" --cuda 13.0 --driver 580 --arch sm90
  --wheelhouse "$WH" --cache-dir /tmp/envs-bisect --timeout 300)
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader
  echo "backends in the store: $(ls "$STORE" | tr '\n' ' ')"
  echo "samples commit: $(cat "$SAMPLES/COMMIT" 2>/dev/null)"
  echo "tool commit: ${TOOL_COMMIT:-unknown}"
} >"$OUT/provenance.txt" 2>&1
cat "$OUT/provenance.txt"
set -x
python3 -m validate bisect --axis cudnn --good 9.19.0.56 --bad 9.24.0.43 --frontend 1.27.0 \
  --case 'repro_fusion_uid[graph-pygraph-auto]' "${COMMON[@]}" --results "$OUT/backend" \
  >"$OUT/backend.txt" 2>"$OUT/backend.err"
echo "backend bisect rc=$?" | tee -a "$OUT/backend.txt"
python3 -m validate bisect --axis frontend --good 1.26.0 --bad 1.27.0 --cudnn 9.24.0.43 \
  --samples "$SAMPLES" --case '26_*' "${COMMON[@]}" --results "$OUT/frontend" \
  >"$OUT/frontend.txt" 2>"$OUT/frontend.err"
echo "frontend bisect rc=$?" | tee -a "$OUT/frontend.txt"
tail -n 30 "$OUT/backend.txt" "$OUT/frontend.txt"; tail -n 5 "$OUT/backend.err" "$OUT/frontend.err"
