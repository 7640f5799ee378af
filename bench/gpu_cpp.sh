#!/usr/bin/env bash
# Issue #39 item 4 on one lent GPU: the frontend's C++ samples and tests through the tool
# (`validate --cpp`) against running the built binaries directly, as the frontend's CI does, in one
# lease.
#
#   bash /tmp/tool/bench/gpu_cpp.sh start CPPKIT          (after bench/gpu_39.sh prepare: /tmp/kit)
#   CALL_T0=EPOCH bash /tmp/tool/bench/gpu_cpp.sh poll OUT UNTIL_S
#
# CPPKIT (.carry/cpp, made here by hand): frontend-REF.tgz, the frontend's CMake tree under frontend/:
#   git --git-dir=FRONTEND_GIT archive --prefix=frontend/ -o frontend-REF.tgz REF samples/CMakeLists.txt \
#     samples/cpp samples/legacy_samples test/CMakeLists.txt test/cpp include cmake CMakeLists.txt \
#     cudnn_frontend-config.cmake.in LICENSE.txt README.md dlpack_version.txt requirements.txt \
#     setup.py pyproject.toml
# (samples/CMakeLists.txt and test/CMakeLists.txt are the folders the top-level add_subdirectory()s:
# without them the configure fails, as in stop 46's lease), Catch2-3.3.2.tar.gz
# (../shared/third_party), and a ninja wheel (the machine has cmake and nvcc).
# CELLS (default "9.24.0.43 9.25.1.1"), TARGETS (default "samples tests"). Steps, each timed
# (W/<step>/wall_s, W/<step>/rc) with its command in W/<step>/command.txt, in order of value:
#   cold              `validate --cpp FE --cpp-target T... --cudnn C,C` : the builds (one per cell),
#                     then one result per TEST_CASE, each in a process of its own, --jobs 16;
#   direct/CELL/T     the binary the tool built for CELL, run as the frontend's CI runs it
#                     (`T -r junit`), the cell's backend on LD_LIBRARY_PATH, one process for every
#                     TEST_CASE, under `timeout DIRECT_T` (default 900 s), its exit status kept;
#                     Catch2's XML reporter beside the JUnit (stream.xml): it is written as each
#                     TEST_CASE ends, the JUnit only at the end, so a cut run keeps what it did;
#                     first for the first cell, then `warm`, then the other cells;
#   warm              the cold command into a new results folder: the builds are the cache's
#                     (WARM=0 leaves it out where the device time is short; the warm re-run is
#                     also measured on CPU by bench/cpp_build_bench.py).
# bench/gpu_cpp_figures.py compares them TEST_CASE by TEST_CASE and prints the ratios.
set -uo pipefail
W=${WCPP:-/tmp/wcpp}; KIT=${KIT39:-/tmp/kit}; TOOL=${TOOL39:-/tmp/tool}
read -r -a CELLS <<<"${CELLS:-9.24.0.43 9.25.1.1}"
read -r -a TARGETS <<<"${TARGETS:-samples tests}"
stamp() { date -u +%Y-%m-%dT%H:%M:%SZ; }
export PYTHONUNBUFFERED=1

timed() {  # STEP CMD...: run CMD in TOOL, its output, exit status and wall time under W/STEP
  local d=$W/$1 s; shift; mkdir -p "$d"
  echo "command: $*" >"$d/command.txt"
  s=$(date +%s.%N)
  (cd "$TOOL" && "$@" >"$d/out.txt" 2>"$d/err.txt")
  echo $? >"$d/rc"
  python3 -c "print(round($(date +%s.%N)-$s,1))" >"$d/wall_s"
}

direct() {  # CELL: each target's binary, built by the tool for CELL, run directly
  local cell=$1 t bin
  for t in "${TARGETS[@]}"; do
    # the cold run's results name each TEST_CASE's binary (case_path) and its cell
    bin=$(python3 -c '
import json, sys
from pathlib import Path
for line in Path(sys.argv[1]).read_text().splitlines():
    row = json.loads(line)
    path = str(row.get("case_path", ""))
    if row.get("cell", {}).get("cudnn") == sys.argv[2] and Path(path).name == sys.argv[3]:
        print(path)
        break
' "$W/cold/run/results.jsonl" "$cell" "$t")
    echo "direct $cell $t: ${bin:-none (not in the cold results)}" >>"$W/provenance.txt"
    [ -n "$bin" ] || continue
    echo "$(stamp) direct $cell $t"
    timed "direct/$cell/$t" env LD_LIBRARY_PATH="$KIT/store/$cell/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      timeout -s TERM "${DIRECT_T:-900}" "$bin" -r junit -o "$W/direct/$cell/$t/junit.xml" \
      -r "xml::out=$W/direct/$cell/$t/stream.xml"
  done
}

drive() {
  local ck=$1 fe own
  ps -o pgid= $$ | tr -d ' ' >"$W/driver.pgid"
  mkdir -p "$W/src" && tar -xzf "$ck"/frontend-*.tgz -C "$W/src"
  fe=$W/src/frontend
  python3 -m pip install -q --no-index --target /tmp/ninja-site "$ck"/ninja-*.whl
  export PATH=/tmp/ninja-site/bin:$PATH
  # the store's backends need cuBLASLt and NVRTC beside them, as in an installed nvidia/ tree: the
  # machine's CUDA 13 wheels (nvidia/cu13, beside torch's cudnn)
  own=$(python3 -c "import nvidia.cudnn as m, os; print(os.path.dirname(list(m.__path__)[0]))")
  [ -e "$KIT/store/cu13" ] || ln -s "$own/cu13" "$KIT/store/cu13"
  {
    echo "date: $(stamp)"
    nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader
    echo "cpus: $(nproc)"; cmake --version | head -1; ninja --version; nvcc --version | tail -1
    c++ --version | head -1
    echo "frontend: $(ls "$ck"/frontend-*.tgz)"; echo "tool commit: $(cat /tmp/w39/tool_commit 2>/dev/null)"
    echo "cells: ${CELLS[*]}; targets: ${TARGETS[*]}; cuBLASLt/NVRTC: $(readlink "$KIT/store/cu13")"
  } >"$W/provenance.txt" 2>&1
  local cells targets=() t
  cells=$(IFS=,; echo "${CELLS[*]}")
  for t in "${TARGETS[@]}"; do targets+=(--cpp-target "$t"); done
  local cmd=(python3 -m validate validate --env current --backend-store "$KIT/store" --cuda 13.0
    --driver 580 --arch sm90 --wheelhouse "$KIT/wh" --frontend 1.27.0 --cudnn "$cells"
    --cpp "$fe" "${targets[@]}" --cpp-catch2 "$ck/Catch2-3.3.2.tar.gz" --jobs 16
    --timeout 300 --no-speed --cache-dir /tmp/envs-cpp)
  echo "$(stamp) cold"; timed cold "${cmd[@]}" --results "$W/cold/run"
  direct "${CELLS[0]}"
  if [ "${WARM:-1}" != 0 ]; then echo "$(stamp) warm"; timed warm "${cmd[@]}" --results "$W/warm/run"; fi
  for cell in "${CELLS[@]:1}"; do direct "$cell"; done
  echo "$(stamp) end"; touch "$W/all.done"
}

pack() {
  local out=$1 s; mkdir -p "$out"
  cp "$W/provenance.txt" "$out/" 2>/dev/null
  tar -C "$W" --exclude=./src --exclude='*/cases' -czf "$out/cpp.tgz" . 2>/dev/null
  { echo "packed: $(stamp)"; cat "$W/driver.log" 2>/dev/null
    for s in cold warm "$W"/direct/*/*; do  # the glob is W's (stop 53's status had no direct line)
      s=${s#"$W"/}; [ -d "$W/$s" ] || continue
      echo "$s: $(cat "$W/$s/wall_s" 2>/dev/null) s, rc $(cat "$W/$s/rc" 2>/dev/null)"
      tail -n 3 "$W/$s/out.txt" 2>/dev/null
    done
  } >"$out/status.txt"
  cat "$out/status.txt"
}

case ${1:-} in
  start)
    rm -rf "$W"; mkdir -p "$W"
    # CELLS and TARGETS are arrays here (read -a above), which bash does not export: the driver
    # gets them as the words they were given (stop 46: it ran the default cells instead)
    CELLS="${CELLS[*]}" TARGETS="${TARGETS[*]}" \
      setsid nohup bash "$TOOL/bench/gpu_cpp.sh" drive "$(realpath "$2")" >>"$W/driver.log" 2>&1 </dev/null &
    sleep 2; echo "driver started" ;;
  drive) shift; drive "$@" ;;
  poll)
    t0=${CALL_T0:-$(date +%s)}; until=${3:-560}
    while [ ! -f "$W/all.done" ] && [ $(( $(date +%s) - t0 )) -lt "$until" ]; do sleep 5; done
    pack "$2" ;;
  *) echo "usage: $0 start CPPKIT | poll OUT UNTIL_S" >&2; exit 2 ;;
esac
