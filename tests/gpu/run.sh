#!/usr/bin/env bash
# Runs the GPU checks of the CUDA backend and prints pass/fail counts per configuration.
#
# Usage: tests/gpu/run.sh [BIN_DIR] [LOG_DIR]
#   BIN_DIR holds gpu-check (default: target/release). Each configuration runs under a time limit
#   so a hang costs one configuration, not the run. Set QUICK=1 for small counts only.
set -u
BIN=${1:-target/release}
LOG=${2:-/tmp/oxccl-gpu-logs}
mkdir -p "$LOG"
LIMIT=${LIMIT:-90}
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
TOTAL_PASS=0; TOTAL_FAIL=0; SUMMARY=()
export NCCL_NVLS_ENABLE=0

run() { # name, env..., -- args...
  local name=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local t0=$(date +%s)
  env "${envs[@]}" timeout -k 5 "$LIMIT" "$BIN/gpu-check" "$@" >"$LOG/$name.log" 2>&1
  local rc=$? t1=$(date +%s)
  local line=$(grep '^RESULT' "$LOG/$name.log" | tail -1)
  local p=$(echo "$line" | sed -n 's/.*pass=\([0-9]*\).*/\1/p'); p=${p:-0}
  local f=$(echo "$line" | sed -n 's/.*fail=\([0-9]*\).*/\1/p'); f=${f:-1}
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && f=$((f+1)) && line="TIMEOUT after ${LIMIT}s"
  TOTAL_PASS=$((TOTAL_PASS+p)); TOTAL_FAIL=$((TOTAL_FAIL+f))
  SUMMARY+=("$(printf '%-28s rc=%-3s pass=%-6s fail=%-5s %3ss' "$name" "$rc" "$p" "$f" $((t1-t0)))")
  grep -m5 -E '^(FAIL|HANG|\[proc)' "$LOG/$name.log" | cut -c1-300
}

SMALL="--counts 0,1,7 --types all"
if [ "${QUICK:-0}" = 1 ]; then BIG="--big-count 0"; else BIG="--big-count 1048579 --big-types f32,bf16,i8,f64"; fi
run r1-initall -- --mode initall --ranks 1 $SMALL $BIG
if [ "$NGPU" -ge 2 ]; then
  run r2-initall-auto   -- --mode initall --ranks 2 $SMALL $BIG
  for a in ring tree direct; do
    run r2-initall-$a NCCL_ALGO=$a -- --mode initall --ranks 2 $SMALL $BIG
  done
  run r2-threads-auto   -- --mode threads --ranks 2 $SMALL $BIG
  run r2-procs-auto     -- --mode procs --ranks 2 $SMALL $BIG
  for a in ring tree direct; do
    run r2-procs-$a NCCL_ALGO=$a -- --mode procs --ranks 2 $SMALL --big-count 0
    run r2-threads-$a NCCL_ALGO=$a -- --mode threads --ranks 2 $SMALL --big-count 0
  done
fi
echo "==== summary ($NGPU GPUs) ===="
printf '%s\n' "${SUMMARY[@]}"
echo "TOTAL pass=$TOTAL_PASS fail=$TOTAL_FAIL"
