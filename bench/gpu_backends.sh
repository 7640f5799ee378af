#!/usr/bin/env bash
# Several cuDNN backends in one run on the lent H200, as a user runs it (issue: the known-issue table).
#
#   bench/gpu_backends.sh WHEELHOUSE SAMPLES_CHECKOUT BACKEND_STORE OUT_DIR CUDNN_LIST [JOBS]
#
# BACKEND_STORE holds one unpacked backend per version (a wheel's nvidia/cudnn tree per folder, every
# sub-library carried); the machine's torch (2.11.0+cu130) and Python are the base (`--env current`),
# frontends 1.26.0 and 1.27.0 come from the offline wheelhouse, and the cases are the sample notebooks
# of the checkout plus the shipped repro cases. Writes OUT_DIR/provenance.txt, OUT_DIR/validate/ (the
# run folder) and OUT_DIR/validate.txt (the tool's stdout).
set -uo pipefail
WH=$(realpath "$1"); SAMPLES=$(realpath "$2"); STORE=$(realpath "$3"); OUT=$(realpath -m "$4")
CUDNN=$5; JOBS=${6-}
JOBS_FLAG=(); [ -n "$JOBS" ] && JOBS_FLAG=(--jobs "$JOBS")
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
stamp() { date -u +%Y-%m-%dT%H:%M:%SZ; }
{
  echo "date: $(stamp)"
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader
  echo "cpus: $(nproc)"
  python3 -c "import torch,sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'torch cudnn', torch.backends.cudnn.version())"
  echo "backends in the store: $(ls "$STORE" | tr '\n' ' ')"
  echo "samples commit: $(cat "$SAMPLES/COMMIT" 2>/dev/null)"
  echo "tool commit: ${TOOL_COMMIT:-$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)}"
  echo "command: cudnn-matrix validate --env current --backend-store STORE --cudnn $CUDNN --frontend 1.26.0,1.27.0 --cuda 13.0 --driver 580 --arch sm90 --wheelhouse WH --samples SAMPLES --cases validate/execute/resources/cases ${JOBS_FLAG[*]} --timeout 300"
} >"$OUT/provenance.txt" 2>&1
cat "$OUT/provenance.txt"
start=$(date +%s.%N)
python3 -m validate validate --env current --backend-store "$STORE" --cudnn "$CUDNN" \
  --frontend 1.26.0,1.27.0 --cuda 13.0 --driver 580 --arch sm90 --wheelhouse "$WH" \
  --cache-dir "${CACHE_DIR:-/tmp/envs}" --samples "$SAMPLES" --cases validate/execute/resources/cases \
  "${JOBS_FLAG[@]}" --timeout 300 --results "$OUT/validate" >"$OUT/validate.txt" 2>"$OUT/validate.err"
echo "rc=$?" >>"$OUT/validate.txt"
end=$(date +%s.%N)
echo "validate wall: $(python3 -c "print(round($end-$start,1))") s ($(stamp))" | tee -a "$OUT/validate.txt"
tail -n 25 "$OUT/validate.txt"
tail -n 5 "$OUT/validate.err"
