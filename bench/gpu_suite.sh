#!/usr/bin/env bash
# Issues #27 and #29 on the lent H200, as a user runs the tool (after bench/gpu_pool_prepare.sh
# unpacked the kit into KIT: store/, wh/, samples/, and KIT/frontend/test/python, the frontend
# checkout's suite at the samples' commit):
#
#   bench/gpu_suite.sh PART KIT OUT_DIR
#
#   PART=suite  `validate --tests KIT/frontend/test/python` on backends 9.24.0.43 and 9.25.1.1 with
#               frontend 1.27.0, the selection SELECT (default: the 9 files of DOMAIN §9, -m L0);
#   PART=xdist  bench/pytest_bench.py on the same selection, backend 9.24.0.43 pinned as the tool
#               pins it (its folder on the library path, its dispatcher preloaded): `pytest -n 8`
#               against `cudnn-matrix run --tests ... --jobs 8`, verdicts counted on both sides;
#   PART=l0     `validate --tests` with the suite's own selection (its addopts: -m L0, every file,
#               fe_api/ included) on CUDNN (default 9.25.1.1), --jobs JOBS (default 16): the whole
#               L0 suite of one cell (L0_SELECT="ARGS": that --tests-select instead, e.g. a
#               stated part of L0 that fits the device time); longer than one device call, so start
#               it in the background and `--resume` it (RESUME=1) in a later call if the first did
#               not finish;
#   PART=pytestl0  plain `pytest -n JOBS` (default 16) over the same selection as l0 (L0_SELECT, or
#               the suite's own addopts) with backend CUDNN (default 9.24.0.43) pinned as the xdist
#               part pins it and frontend 1.27.0 from /tmp/site, --timeout 300 where pytest-timeout
#               is installed, --continue-on-collection-errors (else one module that fails to
#               collect, e.g. fe_api/test_api_base_logging.py without cutlass, stops the whole
#               run; the tool records it as one error and goes on): its JUnit XML (junit.xml),
#               output and wall time beside the tool's (issue #39 item 2: agreement id by id and
#               the wall-time ratio, bench/gpu_39_figures.py);
#   PART=speed  `validate` of the causal_conv1d samples on backends 9.22.0.52, 9.24.0.43 and
#               9.25.1.1 with frontend 1.27.0: the speed stage re-runs each candidate alone
#               --speed-repeats times (#29). Longer than one device call: start it in the
#               background and collect OUT_DIR/speed in a later call.
# FAULT=1 (suite, xdist): first copies bench/gpu_fault/test_zz_injected_cuda_fault.py (ours: a
# device-side assert that kills the process, then a test after it) into the suite and adds it to
# the selection, so both sides of the comparison meet a real CUDA fault.
# HISTORY=FILE (l0): a durations.json (bench/history_from_run.py) copied into the cache before
#   the run, so that the shares are cut by an earlier run's measured durations; HISTORY_FROM says
#   which run, for the provenance.
# NAME=DIR: the part's folder under OUT_DIR (default PART), e.g. NAME=l0-9.24.0.43, so that l0
# runs of two backends in one OUT_DIR keep their own files.
# Each part writes OUT_DIR/PART/{provenance.txt, validate.txt, validate.err, ...} (RESUME=1: the
# same names with -resume, beside the first call's), and OUT_DIR/PART/done (done-resume) last. A
# background part's poll waits for that file, not for `pgrep -f gpu_suite.sh` (which matches the
# poll's own command line), and copies the results out in the same call: a machine left idle is
# given back with its /tmp (reports/gpu/2026-12-04-h200-l0-rerun lost its folder that way).
set -uo pipefail
PART=$1; KIT=$(realpath "$2"); OUT=$(realpath -m "$3")
REPO=$(cd "$(dirname "$0")/.." && pwd); cd "$REPO"
DIR="$OUT/${NAME:-$PART}"; mkdir -p "$DIR"; export PYTHONUNBUFFERED=1
T=${RESUME:+-resume}  # a resumed part keeps the first call's files beside its own
rm -f "$DIR/done$T"; trap 'touch "$DIR/done$T"' EXIT
SELECT=${SELECT:-"-m L0 test_kernel_cache.py test_layernorm.py test_rmsnorm.py test_batchnorm.py test_instancenorm.py test_matmul_bias_relu.py test_slice.py test_wgrads.py test_conv_bias.py"}
SUITE="$KIT/frontend/test/python"
if [ "${FAULT:-0}" = 1 ]; then
  cp "$REPO/bench/gpu_fault/test_zz_injected_cuda_fault.py" "$SUITE/"
  SELECT="$SELECT test_zz_injected_cuda_fault.py"
fi
COMMON=(--env current --backend-store "$KIT/store" --cuda 13.0 --driver 580 --arch sm90
  --wheelhouse "$KIT/wh" --frontend 1.27.0 --timeout 300)
stamp() { date -u +%Y-%m-%dT%H:%M:%SZ; }
{
  echo "date: $(stamp)"
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader
  echo "cpus: $(nproc)"
  python3 -c "import torch,sys,pytest; print('python', sys.version.split()[0], 'torch', torch.__version__, 'pytest', pytest.__version__)"
  echo "backends in the store: $(ls "$KIT/store" | tr '\n' ' ')"
  echo "frontend checkout (samples, test/python): $(cat "$KIT/samples/COMMIT" 2>/dev/null)"
  echo "tool commit: ${TOOL_COMMIT:-$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)}"
} >"$DIR/provenance$T.txt" 2>&1
run() {  # the tool as a user runs it; its wall time beside its output
  local s e; s=$(date +%s.%N)
  python3 -m validate "$@" >"$DIR/validate$T.txt" 2>"$DIR/validate$T.err"
  echo "rc=$?" >>"$DIR/validate$T.txt"; e=$(date +%s.%N)
  python3 -c "print(round($e-$s,1))" >"$DIR/wall_s$T"
  echo "$PART: $(cat "$DIR/wall_s$T") s"; tail -n 8 "$DIR/validate$T.txt"
}
case $PART in
  suite)
    echo "validate: cudnn-matrix validate ${COMMON[*]} --cudnn 9.24.0.43,9.25.1.1 --tests $SUITE --tests-select '$SELECT' --with looseversion==1.3.0" >>"$DIR/provenance$T.txt"
    # the suite's conftest imports looseversion, which the frontend wheel does not require
    run validate "${COMMON[@]}" --cudnn 9.24.0.43,9.25.1.1 --tests "$SUITE" --tests-select "$SELECT" \
      --with looseversion==1.3.0 \
      --cache-dir /tmp/envs-suite --results "$DIR/validate" ;;
  l0)
    CELL=${CUDNN:-9.25.1.1}
    SEL=(); [ -n "${L0_SELECT:-}" ] && SEL=(--tests-select "$L0_SELECT")
    echo "validate: cudnn-matrix validate ${COMMON[*]} --cudnn $CELL --tests $SUITE ${L0_SELECT:+--tests-select '$L0_SELECT' }--jobs ${JOBS:-16} --with looseversion==1.3.0 ${RESUME:+--resume}" >>"$DIR/provenance$T.txt"
    if [ -n "${HISTORY:-}" ] && [ -z "$T" ]; then  # the cache's history, as a user's later run has it
      mkdir -p /tmp/envs-suite && cp "$HISTORY" /tmp/envs-suite/durations.json
      echo "history: the cache's durations.json seeded from $HISTORY (${HISTORY_FROM:-?}), sha256 $(sha256sum "$HISTORY" | cut -c1-16)" >>"$DIR/provenance$T.txt"
    fi
    run validate "${COMMON[@]}" --cudnn "$CELL" --tests "$SUITE" "${SEL[@]}" --jobs "${JOBS:-16}" \
      --with looseversion==1.3.0 --cache-dir /tmp/envs-suite --results "$DIR/validate" \
      ${RESUME:+--resume} ;;
  xdist)
    LIB="$KIT/store/9.24.0.43/lib"
    echo "bench: pytest_bench.py --suite $SUITE --select '$SELECT' --python python3 --jobs 8 --rounds ${ROUNDS:-1}, backend 9.24.0.43 preloaded, frontend 1.27.0 from /tmp/site" >>"$DIR/provenance$T.txt"
    env PYTHONPATH=/tmp/site LD_LIBRARY_PATH="$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      LD_PRELOAD="$LIB/libcudnn.so.9" python3 bench/pytest_bench.py --suite "$SUITE" \
      --select "$SELECT" --python "$(command -v python3)" --jobs 8 --timeout 300 --rounds "${ROUNDS:-1}" \
      >"$DIR/bench.txt" 2>&1
    echo "rc=$?" >>"$DIR/bench.txt"; tail -n 15 "$DIR/bench.txt" ;;
  pytestl0)
    CELL=${CUDNN:-9.24.0.43}; LIB="$KIT/store/$CELL/lib"
    SEL=(); [ -n "${L0_SELECT:-}" ] && read -r -a SEL <<<"$L0_SELECT"
    EXTRA=(); python3 -c "import pytest_timeout" 2>/dev/null && EXTRA=(--timeout 300)
    python3 -c "import xdist" || { echo "no pytest-xdist" >"$DIR/pytest.txt"; exit 1; }
    INTERRUPTIBLE='import signal, sys, pytest; signal.signal(signal.SIGINT, signal.default_int_handler); sys.exit(pytest.main())'
    echo "pytest: cd $SUITE && PYTHONPATH=/tmp/site LD_LIBRARY_PATH=$LIB LD_PRELOAD=$LIB/libcudnn.so.9 python3 -m pytest (as python3 -c: pytest.main() with SIGINT handled) -n ${JOBS:-16} -p no:cacheprovider -q ${EXTRA[*]} --continue-on-collection-errors --junitxml=$DIR/junit.xml ${SEL[*]}" >>"$DIR/provenance$T.txt"
    # `python3 -m pytest`, with SIGINT's default handler back (a background job of this shell
    # starts with SIGINT ignored): gpu_39.sh stop interrupts it (pytest.pid) and pytest then
    # writes the JUnit of the ids it finished, where a SIGTERM left no report at all
    s=$(date +%s.%N)
    (cd "$SUITE" && exec env PYTHONPATH=/tmp/site LD_LIBRARY_PATH="$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      LD_PRELOAD="$LIB/libcudnn.so.9" python3 -c "$INTERRUPTIBLE" -n "${JOBS:-16}" -p no:cacheprovider -q \
      "${EXTRA[@]}" --continue-on-collection-errors --junitxml="$DIR/junit.xml" "${SEL[@]}" >"$DIR/pytest.txt" 2>&1) &
    echo $! >"$DIR/pytest.pid"; wait $!
    echo "rc=$?" >>"$DIR/pytest.txt"; e=$(date +%s.%N); rm -f "$DIR/pytest.pid"
    python3 -c "print(round($e-$s,1))" >"$DIR/wall_s"
    echo "$PART: $(cat "$DIR/wall_s") s"; tail -n 3 "$DIR/pytest.txt" ;;
  speed)
    echo "validate: cudnn-matrix validate ${COMMON[*]} --cudnn ${CUDNN:-9.22.0.52,9.24.0.43,9.25.1.1} --samples $KIT/samples --case '${CASE:-*causal_conv1d*}' --speed-repeats ${REPEATS:-3}" >>"$DIR/provenance$T.txt"
    run validate "${COMMON[@]}" --cudnn "${CUDNN:-9.22.0.52,9.24.0.43,9.25.1.1}" --samples "$KIT/samples" \
      --case "${CASE:-*causal_conv1d*}" --speed-repeats "${REPEATS:-3}" --cache-dir /tmp/envs-speed \
      --results "$DIR/validate" ;;
  *) echo "PART must be suite, l0, xdist, pytestl0 or speed" >&2; exit 2 ;;
esac
