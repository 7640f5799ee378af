#!/usr/bin/env bash
# Issue #39 item 4 on one lent GPU: the frontend's C++ samples through the tool (`validate --cpp`)
# against running the built `samples` binary directly, as the frontend's CI does, in one lease.
#
#   bash /tmp/tool/bench/gpu_cpp.sh start CPPKIT          (after bench/gpu_39.sh prepare: /tmp/kit)
#   CALL_T0=EPOCH bash /tmp/tool/bench/gpu_cpp.sh poll OUT UNTIL_S
#
# CPPKIT (.carry/cpp, made here by hand, see reports/gpu/*-cpp/NOTES.md): frontend-REF.tgz (the
# checkout's samples/cpp, test/cpp, include, cmake, CMakeLists.txt under frontend/),
# Catch2-3.3.2.tar.gz (../shared/third_party), and a ninja wheel (the machine has cmake, nvcc).
# Steps, each timed (W/<step>/wall_s) with its command in W/<step>/command.txt:
#   cold    `validate --cpp FE --cpp-target samples` on CUDNN (default 9.24.0.43): the build, then
#           one result per TEST_CASE (each in a process of its own), --jobs 16;
#   warm    the same command into a new results folder: the build is the cache's;
#   direct  the binary the tool built, run as the frontend's CI runs it (`samples -r junit`), with
#           the backend on LD_LIBRARY_PATH, one process for every TEST_CASE.
# bench/gpu_cpp_figures.py compares them TEST_CASE by TEST_CASE and prints the ratios.
set -uo pipefail
W=${WCPP:-/tmp/wcpp}; KIT=${KIT39:-/tmp/kit}; TOOL=${TOOL39:-/tmp/tool}
CELL=${CUDNN:-9.24.0.43}
stamp() { date -u +%Y-%m-%dT%H:%M:%SZ; }
export PYTHONUNBUFFERED=1

timed() {  # STEP CMD...: run CMD in TOOL, its output and wall time under W/STEP
  local d=$W/$1 s; shift; mkdir -p "$d"
  echo "command: $*" >"$d/command.txt"
  s=$(date +%s.%N)
  (cd "$TOOL" && "$@" >"$d/out.txt" 2>"$d/err.txt")
  echo "rc=$?" >>"$d/out.txt"
  python3 -c "print(round($(date +%s.%N)-$s,1))" >"$d/wall_s"
}

drive() {
  local ck=$1 fe
  ps -o pgid= $$ | tr -d ' ' >"$W/driver.pgid"
  mkdir -p "$W/src" && tar -xzf "$ck"/frontend-*.tgz -C "$W/src"
  fe=$W/src/frontend
  python3 -m pip install -q --no-index --target /tmp/ninja-site "$ck"/ninja-*.whl
  export PATH=/tmp/ninja-site/bin:$PATH
  {
    echo "date: $(stamp)"
    nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader
    echo "cpus: $(nproc)"; cmake --version | head -1; ninja --version; nvcc --version | tail -1
    c++ --version | head -1
    echo "frontend: $(ls "$ck"/frontend-*.tgz)"; echo "tool commit: $(cat /tmp/w39/tool_commit 2>/dev/null)"
  } >"$W/provenance.txt" 2>&1
  local cmd=(python3 -m validate validate --env current --backend-store "$KIT/store" --cuda 13.0
    --driver 580 --arch sm90 --wheelhouse "$KIT/wh" --frontend 1.27.0 --cudnn "$CELL"
    --cpp "$fe" --cpp-target samples --cpp-catch2 "$ck/Catch2-3.3.2.tar.gz" --jobs 16
    --timeout 300 --no-speed --cache-dir /tmp/envs-cpp)
  echo "$(stamp) cold"; timed cold "${cmd[@]}" --results "$W/cold/run"
  echo "$(stamp) warm"; timed warm "${cmd[@]}" --results "$W/warm/run"
  local bin lib=$KIT/store/$CELL/lib
  bin=$(find /tmp/envs-cpp -path '*/bin/samples' -type f | head -1)
  echo "binary: $bin" >>"$W/provenance.txt"
  echo "$(stamp) direct"
  timed direct env LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$bin" -r junit -o "$W/direct/junit.xml"
  echo "$(stamp) end"; touch "$W/all.done"
}

pack() {
  local out=$1; mkdir -p "$out"
  cp "$W/provenance.txt" "$out/" 2>/dev/null
  tar -C "$W" --exclude=./src --exclude='*/cases' -czf "$out/cpp.tgz" . 2>/dev/null
  { echo "packed: $(stamp)"; cat "$W/driver.log" 2>/dev/null
    for s in cold warm direct; do echo "$s: $(cat "$W/$s/wall_s" 2>/dev/null) s"; tail -n 4 "$W/$s/out.txt" 2>/dev/null; done
  } >"$out/status.txt"
  cat "$out/status.txt"
}

case ${1:-} in
  start)
    rm -rf "$W"; mkdir -p "$W"
    setsid nohup bash "$TOOL/bench/gpu_cpp.sh" drive "$(realpath "$2")" >>"$W/driver.log" 2>&1 </dev/null &
    sleep 2; echo "driver started" ;;
  drive) shift; drive "$@" ;;
  poll)
    t0=${CALL_T0:-$(date +%s)}; until=${3:-560}
    while [ ! -f "$W/all.done" ] && [ $(( $(date +%s) - t0 )) -lt "$until" ]; do sleep 5; done
    pack "$2" ;;
  *) echo "usage: $0 start CPPKIT | poll OUT UNTIL_S" >&2; exit 2 ;;
esac
