#!/usr/bin/env bash
# One device call's worth of NET work on a one-GPU machine: MPS up, the NET configurations of
# the GPU suite, then AllReduce over NET side by side with NVIDIA's NCCL (both with one
# NCCL_HOSTID per rank), then MPS down.
#   tests/gpu/net-session.sh BIN_DIR LIB_DIR OUT_DIR
# BIN_DIR holds gpu-check and oxccl-bench, LIB_DIR our libnccl.so.2. NCCL_REF=<libnccl.so.2>
# names NVIDIA's (default: PyTorch's copy).
set -u
BIN=$1; LIB=$2; OUT=${3:-/tmp/oxccl-net}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
# shellcheck disable=SC1091
source "$(dirname "$0")/mps.sh" start
ref=${NCCL_REF:-}
if [ -z "$ref" ]; then
  dir=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
  [ -n "$dir" ] && ref="$dir/lib/libnccl.so.2"
fi
if [ "${SKIP_SUITE:-0}" != 1 ]; then
  LIMIT=${LIMIT:-60} NET_ONLY=1 bash "$(dirname "$0")/run.sh" "$BIN" "$OUT/logs" 2>&1 | tee "$OUT/suite.txt"
fi
for n in ${BENCH_RANKS:-2}; do
  echo "==== AllReduce float, $n ranks, one host each, MPS ===="
  OXCCL_TEST_HOSTS=$n timeout -k 5 ${BENCH_LIMIT:-240} "$BIN/oxccl-bench" --lib "$LIB/libnccl.so.2" \
    ${ref:+--compare "$ref"} --mem cuda --launch procs -n "$n" --op allreduce -d float \
    -b 8 -e ${BENCH_MAX:-256M} -f 4 -w 5 -i 20 2>&1 | tee "$OUT/bench-$n.txt"
done
bash "$(dirname "$0")/mps.sh" stop
