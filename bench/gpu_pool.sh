#!/usr/bin/env bash
# The one-pool issue's GPU figures on the lent H200, as a user runs the tool.
#
#   bench/gpu_pool.sh PART WHEELHOUSE SAMPLES_CHECKOUT BACKEND_STORE OUT_DIR
#
# The cells of the two-cell figure are those of the affected/fixed known issue (KI-1): backend
# 9.24.0.43 (affected) and 9.25.1.1 (fixed), both with frontend 1.27.0.
#   PART=a  the frontend CI's loop (`jupyter execute` one notebook after another) for cell 1
#           (9.24.0.43, frontend 1.27.0);
#   PART=b  the same loop for cell 2 (9.25.1.1, frontend 1.27.0), then `validate` on those two
#           cells, fresh environment cache, default slots;
#   PART=c  `validate` on the whole matrix: backends 9.19.0.56..9.25.1.1 x frontends 1.26.0, 1.27.0,
#           1.32.0 (15 cells), fresh environment cache holding only the duration history that
#           part b wrote (what a user has after the two-cell run), default slots. GUARD=SECONDS
#           interrupts it (SIGINT) when a device call's limit is near; `--resume` completes it.
#   PART=two  a and b one after another (the two-cell figure alone, ~750 s on the H200);
#   PART=all  a, b and c one after another in one process (one run: start it in the background
#           where a device call is shorter than the whole, and collect OUT_DIR later). A lent
#           machine left idle for ~30 s is given back, and a background run with it: follow the
#           call that starts it with calls that wait on it (`sleep 500; tail OUT_DIR/...`) back
#           to back, and copy OUT_DIR to $OUT in the last one.
# A device call is capped at 600 s and the loop over one cell alone takes ~300-370 s.
# The loop pins its backend the way the tool does for `--env current` (the store's folder on the
# library path, its dispatcher preloaded) so that torch and the frontend bind to the same copy.
# bench/gpu_pool_figures.py turns OUT_DIR/{a,b,c} into the ratios (figures.json, figures.md).
set -uo pipefail
PART=$1; WH=$(realpath "$2"); SAMPLES=$(realpath "$3"); STORE=$(realpath "$4"); OUT=$(realpath -m "$5")
REPO=$(cd "$(dirname "$0")/.." && pwd); cd "$REPO"
mkdir -p "$OUT/$PART"; export PYTHONUNBUFFERED=1
stamp() { date -u +%Y-%m-%dT%H:%M:%SZ; }
COMMON=(--env current --backend-store "$STORE" --cuda 13.0 --driver 580 --arch sm90 --wheelhouse "$WH"
  --samples "$SAMPLES" --cases validate/execute/resources/cases --timeout 300)
if [ "$PART" = all ] || [ "$PART" = two ]; then
  parts=(a b); [ "$PART" = all ] && parts+=(c)
  for p in "${parts[@]}"; do "$0" "$p" "$WH" "$SAMPLES" "$STORE" "$OUT" || exit $?; done
  exit 0
fi
case $PART in
  a) LOOP=9.24.0.43; CUDNN=; FE= ;;
  b) LOOP=9.25.1.1; CUDNN=9.24.0.43,9.25.1.1; FE=1.27.0 ;;
  c) LOOP=; CUDNN=9.19.0.56,9.21.1.3,9.22.0.52,9.24.0.43,9.25.1.1; FE=1.26.0,1.27.0,1.32.0 ;;
  *) echo "PART must be a, b, c, two or all" >&2; exit 2 ;;
esac
# what this part needs, checked before any device time goes into it (one line, exit 2)
[ -f "$REPO/matrix/default.toml" ] || { echo "gpu_pool.sh: $REPO/matrix/default.toml missing (copy the whole checkout)" >&2; exit 2; }
for b in ${LOOP:-} ${CUDNN//,/ }; do
  [ -f "$STORE/$b/lib/libcudnn.so.9" ] || { echo "gpu_pool.sh: part $PART needs backend $b in $STORE" >&2; exit 2; }
done
for f in ${FE//,/ }; do
  ls "$WH"/nvidia_cudnn_frontend-"$f"-*.whl >/dev/null 2>&1 || { echo "gpu_pool.sh: part $PART needs frontend $f in $WH" >&2; exit 2; }
done
{
  echo "date: $(stamp)"
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader
  echo "cpus: $(nproc)"
  python3 -c "import torch,sys; print('python', sys.version.split()[0], 'torch', torch.__version__)"
  echo "backends in the store: $(ls "$STORE" | tr '\n' ' ')"
  echo "samples commit: $(cat "$SAMPLES/COMMIT" 2>/dev/null)"
  echo "tool commit: ${TOOL_COMMIT:-$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)}"
  [ -n "$LOOP" ] && echo "loop: jupyter execute --timeout=300, backend $LOOP, frontend 1.27.0"
  [ -n "$CUDNN" ] && echo "validate: cudnn-matrix validate ${COMMON[*]} --cudnn $CUDNN --frontend $FE"
} >"$OUT/$PART/provenance.txt" 2>&1
cat "$OUT/$PART/provenance.txt"
if [ -n "$LOOP" ]; then
  echo "== loop $LOOP ($(stamp))"
  LIB="$STORE/$LOOP/lib"
  env PYTHONPATH=/tmp/site PATH="/tmp/site/bin:$PATH" LD_LIBRARY_PATH="$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    LD_PRELOAD="$LIB/libcudnn.so.9" python3 bench/jupyter_loop.py "$SAMPLES" "$OUT/$PART/loop.json"
fi
[ -n "$CUDNN" ] || exit 0
CACHE="/tmp/envs-pool-$PART"; rm -rf "$CACHE"; mkdir -p "$CACHE"
if [ "$PART" = c ]; then
  if [ -f /tmp/envs-pool-b/durations.json ]; then
    cp /tmp/envs-pool-b/durations.json "$CACHE/" && cp "$CACHE/durations.json" "$OUT/c/history_in.json"
    echo "history: part b's durations.json ($(python3 -c "import json,sys; print(sum(isinstance(v,(int,float)) for v in json.load(open(sys.argv[1])).values()))" "$CACHE/durations.json") cases)" | tee -a "$OUT/c/provenance.txt"
  else
    echo "history: none (part b did not run here)" | tee -a "$OUT/c/provenance.txt"
  fi
fi
WRAP=(); [ "$PART" = c ] && [ -n "${GUARD:-}" ] && WRAP=(timeout -s INT "$GUARD")
echo "== validate ($(stamp))"
s=$(date +%s.%N)
"${WRAP[@]}" python3 -m validate validate "${COMMON[@]}" --cudnn "$CUDNN" --frontend "$FE" \
  --cache-dir "$CACHE" --results "$OUT/$PART/validate" >"$OUT/$PART/validate.txt" 2>"$OUT/$PART/validate.err"
echo "rc=$?" >>"$OUT/$PART/validate.txt"
e=$(date +%s.%N)
python3 -c "print(round($e-$s,1))" >"$OUT/$PART/validate_wall_s"
echo "validate wall: $(cat "$OUT/$PART/validate_wall_s") s ($(stamp))"
grep -m3 -e "slots" "$OUT/$PART/validate.err"
tail -n 6 "$OUT/$PART/validate.txt"
