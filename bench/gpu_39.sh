#!/usr/bin/env bash
# Issue #39 items 2 and 3 in one lease on one lent H100/H200 (plan: bench/GPU_PLAN_39.md).
#
#   bash .carry2/bench/gpu_39.sh prepare PIECES_DIR SHA256 ZSTANDARD_WHEEL   (from the carried checkout)
#   bash /tmp/tool/bench/gpu_39.sh start [PHASE...]     (default: bisect l0 backward)
#   CALL_T0=EPOCH bash /tmp/tool/bench/gpu_39.sh poll OUT UNTIL_S   (wait until the phases are done or
#                      UNTIL_S seconds have passed since EPOCH, the call's start; then pack into OUT)
#   bash /tmp/tool/bench/gpu_39.sh stop OUT              (SIGTERM the phases' process group, pack)
#
# prepare: copies the carried checkout (less .carry*, .whl, .gl, reports/) to /tmp/tool and lays
#   the carried bench/ (.carry2/bench, this branch's scripts) over its bench/, so later calls are
#   immune to the next call's copy of the working tree; then bench/gpu_pool_prepare.sh joins and
#   unpacks the kit into /tmp/kit (backends 9.22.0.52 9.23.0.39 9.23.1.3 9.23.2.1 9.24.0.43
#   9.25.1.1 + the machine's 9.19.0.56, frontend 1.27.0, samples and test/python of the frontend
#   checkout) and installs frontend 1.27.0 + looseversion into /tmp/site.
# start: runs `drive` in its own session (setsid), so it outlives the call while the machine stays
#   warm; each phase writes /tmp/w39/PHASE/ and /tmp/w39/PHASE.done when it ends.
# Phases, in order of value per device minute:
#   bisect   item 3: `validate bisect --axis cudnn --good 9.22.0.52 --bad 9.24.0.43 --slower-than
#            1.5 --unit 'cell 18'` on 60_causal_conv1d_forward.ipynb, each probe --speed-repeats
#            (REPEATS, default 3) runs alone; the store holds the three 9.23 releases between.
#   l0       item 2: `validate --tests` over the stated part of L0 (L0_SELECT) for 9.24.0.43, then
#            9.25.1.1 (bench/gpu_suite.sh l0, one run folder each), then plain `pytest -n 16` over
#            the same selection on 9.24.0.43 (bench/gpu_suite.sh pytestl0).
#   backward item 3: 61_causal_conv1d_backward.ipynb alone (one case, one cell per run, no other
#            load) on 9.25.1.1 and 9.22.0.52 in turn, BACKWARD_RUNS (default 2) times each.
# poll/stop pack at most 6 files into OUT (the device tool returns 8): status.txt, provenance.txt and
#   one .tgz per phase (cases/ folders left out of any .tgz over 15 MiB, and said so).
set -uo pipefail
W=${W39:-/tmp/w39}; KIT=${KIT39:-/tmp/kit}; TOOL=${TOOL39:-/tmp/tool}  # overridable for a dry run
# L0_SELECT= (set and empty): the whole L0, the suite's own selection. L0_CELLS: the backends
# `validate --tests` runs, in turn (default 9.24.0.43 9.25.1.1); PYTEST_CELL: the one plain
# `pytest -n 16` runs (default 9.24.0.43).
# L0 without its three slowest files (98 % of the test time of the H200's whole-L0 run,
# reports/gpu/2026-12-04-h200-l0): 4,999 of its 41,612 ids
L0_SELECT=${L0_SELECT-"-m L0 --ignore=test_mhas.py --ignore=test_mhas_v2.py --ignore=test_matmul_fuzzer.py"}
COMMON=(--env current --backend-store "$KIT/store" --cuda 13.0 --driver 580 --arch sm90
  --wheelhouse "$KIT/wh" --frontend 1.27.0 --timeout 300)
stamp() { date -u +%Y-%m-%dT%H:%M:%SZ; }
export PYTHONUNBUFFERED=1

prepare() {
  local pieces=$1 sha=$2 zs=$3 t0; t0=$(date +%s)
  rm -rf "$TOOL" "$W"; mkdir -p "$TOOL" "$W"
  tar --exclude=./.carry2 --exclude=./.carry --exclude=./.whl --exclude=./.gl --exclude=./reports \
    -cf - . | tar -xf - -C "$TOOL"
  [ -d .carry2/bench ] && cp -a .carry2/bench/. "$TOOL/bench/"
  local head dirty; head=$(git -C "$TOOL" rev-parse --short HEAD 2>/dev/null || echo unknown)
  # the device copy's git metadata can be older than its files (it once named f89c32c for 81ee555):
  # .carry/TOOL_COMMIT, written here before the calls (the commit and its tracked changes), wins
  dirty=$(git -C "$TOOL" status --porcelain -uno 2>/dev/null | grep -v ' bench/' | wc -l)
  echo "$head (tracked files changed outside bench/: $dirty); bench/ from $(cat .carry2/bench/ORIGIN 2>/dev/null || echo '?')" >"$W/tool_commit"
  [ -f .carry/TOOL_COMMIT ] && cp .carry/TOOL_COMMIT "$W/tool_commit"
  bash "$TOOL/bench/gpu_pool_prepare.sh" "$pieces" "$sha" "$zs" "$KIT" || return 1
  rm -rf "$pieces"  # the joined kit is unpacked; free the disk
  {
    echo "date: $(stamp)"
    nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader
    echo "cpus: $(nproc)"
    python3 -c "import torch,sys,pytest; print('python', sys.version.split()[0], 'torch', torch.__version__, 'pytest', pytest.__version__)"
    python3 -c "import xdist; print('pytest-xdist', xdist.__version__)" 2>&1 | tail -1
    python3 -c "import pytest_timeout; print('pytest-timeout present')" 2>&1 | tail -1
    echo "kit sha256: $sha"
    echo "backends in the store: $(ls "$KIT/store" | tr '\n' ' ')"
    echo "frontend checkout (samples, test/python): $(cat "$KIT/samples/COMMIT")"
    echo "tool commit: $(cat "$W/tool_commit")"
    echo "prepare: $(( $(date +%s) - t0 )) s"
  } >"$W/provenance.txt" 2>&1
  cat "$W/provenance.txt"
}

phase_bisect() {
  local d=$W/bisect; mkdir -p "$d"
  local cmd=(bisect --axis cudnn --good 9.22.0.52 --bad 9.24.0.43 --samples "$KIT/samples"
    --case 60_causal_conv1d_forward.ipynb --slower-than "${SLOWER_THAN:-1.5}" --unit 'cell 18'
    --speed-repeats "${REPEATS:-3}" "${COMMON[@]}" --cache-dir /tmp/envs-bisect --results "$d/run")
  echo "command: cudnn-matrix ${cmd[*]}" >"$d/command.txt"
  local s; s=$(date +%s.%N)
  (cd "$TOOL" && python3 -m validate "${cmd[@]}" >"$d/bisect.txt" 2>"$d/bisect.err")
  echo "rc=$?" >>"$d/bisect.txt"
  python3 -c "print(round($(date +%s.%N)-$s,1))" >"$d/wall_s"
}

phase_l0() {
  local d=$W/l0; mkdir -p "$d"
  export TOOL_COMMIT; TOOL_COMMIT=$(cat "$W/tool_commit")
  for cell in ${L0_CELLS:-9.24.0.43 9.25.1.1}; do
    NAME=l0-$cell CUDNN=$cell L0_SELECT="$L0_SELECT" bash "$TOOL/bench/gpu_suite.sh" l0 "$KIT" "$d"
  done
  NAME=pytest-${PYTEST_CELL:-9.24.0.43} CUDNN=${PYTEST_CELL:-9.24.0.43} L0_SELECT="$L0_SELECT" \
    bash "$TOOL/bench/gpu_suite.sh" pytestl0 "$KIT" "$d"
}

phase_backward() {
  local d=$W/backward; mkdir -p "$d"
  local n cell s
  for n in $(seq 1 "${BACKWARD_RUNS:-2}"); do
    for cell in 9.25.1.1 9.22.0.52; do
      local r="$d/$cell-r$n"; mkdir -p "$r"
      local cmd=(validate "${COMMON[@]}" --cudnn "$cell" --samples "$KIT/samples"
        --case 61_causal_conv1d_backward.ipynb --no-speed --cache-dir /tmp/envs-bisect
        --results "$r/validate")
      echo "command: cudnn-matrix ${cmd[*]}" >"$r/command.txt"
      s=$(date +%s.%N)
      (cd "$TOOL" && python3 -m validate "${cmd[@]}" >"$r/validate.txt" 2>"$r/validate.err")
      echo "rc=$?" >>"$r/validate.txt"
      python3 -c "print(round($(date +%s.%N)-$s,1))" >"$r/wall_s"
    done
  done
}

drive() {
  local p
  ps -o pgid= $$ | tr -d ' ' >"$W/driver.pgid"  # setsid made this bash its session's leader
  for p in "$@"; do
    echo "$(stamp) start $p"
    "phase_$p" >"$W/$p.log" 2>&1
    echo "$(stamp) end $p"; touch "$W/$p.done"
  done
  touch "$W/all.done"
}

pack() {
  local out=$1 p f; mkdir -p "$out"
  cp "$W/provenance.txt" "$out/" 2>/dev/null
  {
    echo "packed: $(stamp)"; cat "$W/driver.log" 2>/dev/null
    for p in bisect l0 backward; do
      [ -d "$W/$p" ] || continue
      f="$out/$p.tgz"
      tar -C "$W" -czf "$f" "$p" "$p.log" $( [ -f "$W/$p.done" ] && echo "$p.done" ) 2>/dev/null
      if [ "$(stat -c %s "$f")" -gt $((15 * 1024 * 1024)) ]; then
        tar -C "$W" --exclude='*/cases' -czf "$f" "$p" "$p.log" 2>/dev/null
        echo "$p.tgz: over 15 MiB with cases/, packed without them"
      fi
      echo "$p: $( [ -f "$W/$p.done" ] && echo done || echo running or not started ), $(stat -c %s "$f") bytes"
    done
    tail -n 5 "$W"/bisect/bisect.txt "$W"/l0/*/wall_s "$W"/l0/*/validate.txt "$W"/l0/*/pytest.txt 2>/dev/null
    df -h /tmp | tail -1
  } >"$out/status.txt" 2>&1
  cat "$out/status.txt"
}

case ${1:-} in
  prepare) shift; prepare "$@" ;;
  start)
    shift; [ $# -gt 0 ] || set -- bisect l0 backward
    rm -f "$W"/*.done
    setsid nohup bash "$TOOL/bench/gpu_39.sh" drive "$@" >>"$W/driver.log" 2>&1 </dev/null &
    sleep 2; echo "driver, process group $(cat "$W/driver.pgid"): $*" ;;
  drive) shift; drive "$@" ;;
  poll)  # CALL_T0: the call's start (date +%s), so that UNTIL_S counts the whole call
    t0=${CALL_T0:-$(date +%s)}; until=${3:-560}
    while [ ! -f "$W/all.done" ] && [ $(( $(date +%s) - t0 )) -lt "$until" ]; do sleep 5; done
    pack "$2" ;;
  stop)  # a running pytest -n side gets SIGINT first (gpu_suite.sh restored its handler), so it
    # writes the JUnit of what it finished; then SIGTERM for the rest (a background job of a
    # non-interactive shell ignores SIGINT)
    for f in "$W"/l0/pytest-*/pytest.pid; do
      [ -f "$f" ] || continue
      kill -INT "$(cat "$f")" 2>/dev/null
      for _ in $(seq 1 30); do [ -f "$f" ] || break; sleep 1; done
    done
    pgid=$(cat "$W/driver.pgid" 2>/dev/null) && kill -TERM -- "-$pgid" 2>/dev/null
    sleep 10; echo "$(stamp) stopped by a call" >>"$W/driver.log"; pack "$2" ;;
  *) echo "usage: $0 prepare|start|poll|stop ..." >&2; exit 2 ;;
esac
