#!/usr/bin/env bash
# One GPU session that produces the committed reports under reports/gpu/ (run on the lent H200).
#
#   bench/gpu_session.sh WHEELHOUSE SAMPLES_CHECKOUT OUT_DIR [JOBS]
#   (JOBS empty: the tool's default concurrency; SEQUENTIAL=0 skips step 3, e.g. when
#   bench/gpu_speed.sh runs the same loop in the same call)
#
# 1. `cudnn-matrix run` on our own GPU notebook/script cases (one passes, one faults the GPU).
# 2. `cudnn-matrix validate --env current` (the machine's torch + cuDNN backend) with frontends
#    1.26.0 and 1.27.0 from the offline wheelhouse, over the shipped repro variants and every
#    sample notebook of the checkout.
# 3. The frontend CI's way for comparison, in the same call: `jupyter execute` one notebook after
#    another with frontend 1.27.0 (every notebook is run; where `set -e` would have stopped is noted).
# 4. Reports (md, html, junit, json) rendered from the stored run.
set -uo pipefail
WH=$(realpath "$1"); SAMPLES=$(realpath "$2"); OUT=$(realpath "$3"); JOBS=${4-16}
JOBS_FLAG=(); [ -n "$JOBS" ] && JOBS_FLAG=(--jobs "$JOBS")
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
stamp() { date -u +%Y-%m-%dT%H:%M:%SZ; }

# Tool-side python: the machine's (torch 2.11 + nvidia-cudnn-cu13 9.19); the tool needs only
# packaging/tabulate/rich, which it has. For the baseline loop and `run` (which use the current
# interpreter) frontend 1.27.0 + nbclient/ipykernel go to /tmp/site.
ls "$WH"/*.whl | grep -v -e frontend-1.26 -e /packaging- -e /psutil- -e /typing_extensions- \
  -e /attrs- -e /pygments- -e /python_dateutil- -e /tzdata- -e /six- -e /nvidia_ml_py- >/tmp/site.txt
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $(cat /tmp/site.txt) \
  || { echo "wheel install failed"; exit 1; }
SITE="PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH"

{
  echo "date: $(stamp)"
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader
  echo "cpus: $(nproc)"
  python3 -c "import torch,sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'torch cudnn', torch.backends.cudnn.version())"
  python3 -m pip list 2>/dev/null | grep -i -e nvidia-cudnn -e "^torch " -e cuda-bindings
  echo "samples commit: $(cat "$SAMPLES/COMMIT" 2>/dev/null)"
  echo "tool commit: ${TOOL_COMMIT:-$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)}"
} >"$OUT/provenance.txt" 2>&1
cat "$OUT/provenance.txt"

echo "== 1. runner on GPU cases ($(stamp))"
env $SITE python3 -m validate run tests/resources/gpu --results /tmp/runner-gpu --json --timeout 120 \
  --jobs 4 >"$OUT/runner_gpu.json" 2>/tmp/runner-gpu.err
echo "rc=$?"; tail -5 /tmp/runner-gpu.err

echo "== 2. validate --env current ($(stamp))"
RUN=/tmp/gpu-run
start=$(date +%s.%N)
python3 -m validate validate --env current --cudnn 9.19.0.56 --frontend 1.26.0,1.27.0 --cuda 13.0 \
  --driver 580 --arch sm90 --wheelhouse "$WH" --cache-dir /tmp/envs --samples "$SAMPLES" \
  --cases validate/execute/resources/cases "${JOBS_FLAG[@]}" --timeout 300 --results "$RUN" \
  >"$OUT/validate.txt" 2>/tmp/validate.err
echo "rc=$?" >>"$OUT/validate.txt"
end=$(date +%s.%N)
echo "validate wall: $(python3 -c "print(round($end-$start,1))") s" | tee -a "$OUT/validate.txt"
tail -40 /tmp/validate.err >"$OUT/validate_stderr_tail.txt"

echo "== 3. sequential jupyter execute loop, frontend 1.27.0 ($(stamp))"
[ "${SEQUENTIAL:-1}" = 0 ] || env $SITE python3 bench/jupyter_loop.py "$SAMPLES" "$OUT/sequential.json"

echo "== 4. reports ($(stamp))"
for fmt in md html junit json; do
  python3 -m validate report --results "$RUN" --format $fmt --out "$RUN/compat.$fmt" >/dev/null 2>&1
done
python3 -m validate report --results "$RUN" --format md 2>&1 | tail -30
tar -C /tmp -czf "$OUT/gpu-run.tar.gz" gpu-run runner-gpu
ls -la "$OUT"
