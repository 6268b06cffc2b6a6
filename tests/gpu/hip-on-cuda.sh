#!/usr/bin/env bash
# Runs the GPU check through the HIP backend (librccl.so.1's code path) on an NVIDIA GPU, over
# the test HIP runtime of tests/hip-on-cuda, and prints pass/fail counts per configuration the
# way tests/gpu/run.sh does.
#
# Usage: tests/gpu/hip-on-cuda.sh [BIN_DIR] [LOG_DIR]
#   BIN_DIR holds gpu-check, libamdhip64.so and hip-on-cuda-kernels (default: target/release):
#     cargo build --release -p oxccl-tests --bins
#     cargo build --release -p oxccl-hip-on-cuda
#   OXCCL_HIP_RUNTIME (default BIN_DIR/libamdhip64.so) and OXCCL_HIP_CODE_OBJECT (default: what
#   BIN_DIR/hip-on-cuda-kernels writes, nvcc's kernels with HIP's launch ABI) override the two.
#   ROCM=1 runs the same configurations on an AMD GPU instead: ROCm's libamdhip64.so (found
#   through ROCM_PATH) and the code objects built in (OXCCL_HIP_ARCHS at build time); nothing
#   of tests/hip-on-cuda is needed then.
#   RCCL_PREFIX=DIR (an install of librccl.so.1: DIR/lib/librccl.so.1, DIR/include/rccl/rccl.h,
#   from `cargo xtask install --rccl --prefix DIR`) adds the C ABI test (tests/c/abi_test.c, RCCL
#   flavour) in GPU mode against that library, as hip-abi-test (needs gcc).
#   COMPARE=1 also runs every configuration through the CUDA backend (names cuda1-*, cuda2-*, ...), so the two
#   totals can be compared. QUICK=1 drops the 1M-element cases, ONLY=REGEX selects
#   configurations by name and SKIP=REGEX leaves some out, LIMIT sets each one's time limit
#   (default 120 s), as in run.sh.
#
# Configurations (one GPU is enough; rank r runs on GPU r % GPUs):
#   hip1-initall                   one rank, every operation x type x operator
#   hip2/3/4-initall-auto          2-4 ranks in one thread (ranks share a GPU where there are fewer)
#   hip2-initall-{ring,tree,direct}, hip2-initall-{LL,Simple}   each algorithm and protocol forced
#   hip2/4-threads-offsets[-vmm]   a thread per rank; buffers in arenas allocated once (a hipFree
#                                  between cases would wait for the other ranks' kernels on a
#                                  shared GPU), hipMalloc or VMM (--vmm)
#   hip4-initall-split             on a communicator split from the world one, ranks reversed
#   hip2-threads-auto              a thread per rank, one GPU each (2 GPUs or more only)
#   hip2/3-procs-*                 a process per rank: FIFOs exported as VMM file descriptors and
#                                  imported with pidfd_getfd; a peer that dies mid-operation
#   hip1/2-*-graph                 every case captured into a HIP graph (hipStreamBeginCapture),
#                                  replayed 10 times; one rank, two ranks sharing a GPU, processes
#   hip2/3-*-shm*                  NCCL_P2P_DISABLE=1: SHM FIFOs in /dev/shm (hipHostRegister)
#   hip2/4/8-procs-net*            OXCCL_TEST_HOSTS=K: NET connections over the built-in sockets
#                                  (the shared transport's proxy and pinned host FIFOs)
#   hip2-device-api, hip2-device-gin with RCCL_PREFIX: kernels written against NCCL's device API
#                                  on librccl.so.1 (symmetric windows through HIP's VMM calls;
#                                  GIN through the host proxy)
set -u
BIN=${1:-target/release}
LOG=${2:-/tmp/oxccl-hip-on-cuda-logs}
mkdir -p "$LOG"
LIMIT=${LIMIT:-120}
TOTAL_PASS=0; TOTAL_FAIL=0; CUDA_PASS=0; CUDA_FAIL=0; SUMMARY=()
export NCCL_NVLS_ENABLE=0
# shellcheck source=tests/gpu/lib.sh
source "$(dirname "$0")/lib.sh"

if [ "${ROCM:-0}" = 1 ]; then
  NGPU=$(rocm-smi --showid 2>/dev/null | grep -o '^GPU\[[0-9]*\]' | sort -u | wc -l)
  RUNTIME="ROCm"
else
  NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
  BIN_ABS=$(cd "$BIN" && pwd)
  export OXCCL_HIP_RUNTIME=${OXCCL_HIP_RUNTIME:-$BIN_ABS/libamdhip64.so}
  if [ -z "${OXCCL_HIP_CODE_OBJECT:-}" ]; then
    OXCCL_HIP_CODE_OBJECT=$LOG/oxccl-hip-abi.fatbin
    if ! "$BIN/hip-on-cuda-kernels" "$OXCCL_HIP_CODE_OBJECT"; then
      echo "hip-on-cuda.sh: no code object (build oxccl-hip-on-cuda with nvcc, or set OXCCL_HIP_CODE_OBJECT)"
      exit 2
    fi
  fi
  export OXCCL_HIP_CODE_OBJECT
  for f in "$OXCCL_HIP_RUNTIME" "$OXCCL_HIP_CODE_OBJECT"; do
    if [ ! -e "$f" ]; then
      echo "hip-on-cuda.sh: $f not found"
      exit 2
    fi
  done
  echo "OXCCL_HIP_RUNTIME=$OXCCL_HIP_RUNTIME"
  echo "OXCCL_HIP_CODE_OBJECT=$OXCCL_HIP_CODE_OBJECT"
  RUNTIME=$(basename "$OXCCL_HIP_RUNTIME")
fi
if [ ! -x "$BIN/gpu-check" ]; then
  echo "hip-on-cuda.sh: $BIN/gpu-check not found"
  exit 2
fi

# One configuration: name, env..., -- gpu-check arguments; counted by its RESULT line as
# run.sh counts (tests/gpu/lib.sh: a missing RESULT line or a time-out counts as a failure).
check() {
  local name=$1; shift
  selected "$name" || return 0
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  one "$name" hip "${envs[@]}" -- "$@"
  if [ "${COMPARE:-0}" = 1 ]; then
    one "cuda${name#hip}" cuda "${envs[@]}" -- "$@"
  fi
}

one() { # name, backend, env..., -- args
  local name=$1 backend=$2; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local t0=$(date +%s)
  env "${envs[@]}" timeout -k 5 "$LIMIT" "$BIN/gpu-check" --backend "$backend" "$@" \
    >"$LOG/$name.log" 2>&1
  local rc=$? t1=$(date +%s)
  result_counts "$LOG/$name.log" $rc
  if [ "$backend" = hip ]; then
    TOTAL_PASS=$((TOTAL_PASS+P)); TOTAL_FAIL=$((TOTAL_FAIL+F))
  else
    CUDA_PASS=$((CUDA_PASS+P)); CUDA_FAIL=$((CUDA_FAIL+F))
  fi
  summary_line "$name" $rc $P $F $((t1-t0))
  grep -m5 -E '^(FAIL|HANG|GUARD|SKIP|\[proc)' "$LOG/$name.log" | cut -c1-300
}

SMALL="--counts 0,1,7 --types all"
if [ "${QUICK:-0}" = 1 ]; then
  BIG="--big-count 0"; BIG1="--big-count 0"
else
  BIG="--big-count 1048579 --big-types f32,bf16,i8,f64"
  BIG1="--big-count 1048579 --big-types f32"
fi

if [ "$NGPU" -lt 1 ]; then
  echo "hip-on-cuda.sh: no GPU (nvidia-smi -L, or rocm-smi --showid with ROCM=1, lists none)"
  exit 2
fi
check hip1-initall -- --mode initall --ranks 1 $SMALL $BIG
check hip2-initall-auto -- --mode initall --ranks 2 $SMALL $BIG1
for a in ring tree direct; do
  check hip2-initall-$a NCCL_ALGO=$a -- --mode initall --ranks 2 $SMALL $BIG1
done
for p in LL Simple; do
  check hip2-initall-$p NCCL_PROTO=$p -- --mode initall --ranks 2 $SMALL $BIG1
done
check hip3-initall-auto -- --mode initall --ranks 3 $SMALL $BIG1
check hip4-initall-auto -- --mode initall --ranks 4 $SMALL $BIG1
check hip4-initall-split -- --mode initall --ranks 4 $SMALL --big-count 0 --split
check hip2-threads-offsets -- --mode threads --ranks 2 $SMALL $BIG1 --offsets
check hip4-threads-offsets-vmm -- --mode threads --ranks 4 $SMALL --big-count 0 --offsets --vmm
if [ "$NGPU" -ge 2 ]; then
  check hip2-threads-auto -- --mode threads --ranks 2 $SMALL $BIG
fi
# Processes sharing a GPU take turns on it (no MPS), so their spinning kernels are slow: few cases.
check hip2-procs-auto -- --mode procs --ranks 2 $SMALL $BIG1
check hip2-procs-offsets-vmm -- --mode procs --ranks 2 $SMALL --big-count 0 --offsets --vmm
check hip3-procs-dead-peer -- --mode procs --ranks 3 --dead-peer 1048579
# Graph capture (the shared transport's capture path: argument blocks by address, in memory kept
# for the communicator's life, and loopback flags reset by a memset node).
GRAPH="--graph 10"
check hip1-initall-graph -- --mode initall --ranks 1 $SMALL $BIG1 $GRAPH
check hip2-initall-graph -- --mode initall --ranks 2 $SMALL $BIG1 $GRAPH
check hip2-procs-graph -- --mode procs --ranks 2 $SMALL --big-count 0 $GRAPH
# SHM and NET through the HIP backend (the same transport code as the CUDA backend's).
check hip2-initall-shm NCCL_P2P_DISABLE=1 -- --mode initall --ranks 2 $SMALL $BIG1
check hip2-procs-shm NCCL_P2P_DISABLE=1 -- --mode procs --ranks 2 $SMALL --big-count 0
check hip3-procs-shm-graph NCCL_P2P_DISABLE=1 -- --mode procs --ranks 3 --counts 0,1,7 --types bf16,f32,f64 --big-count 0 $GRAPH
check hip2-procs-net OXCCL_TEST_HOSTS=2 -- --mode procs --ranks 2 $SMALL --big-count 0
check hip4-procs-net-mixed OXCCL_TEST_HOSTS=2 -- --mode procs --ranks 4 --counts 0,1,7 --types bf16,f32,f64 --big-count 0
# 8 hosts: the peers no ring or tree joins connect on first use (AlltoAll, gather, scatter).
check hip8-procs-net OXCCL_TEST_HOSTS=8 -- --mode procs --ranks 8 --counts 0,1,7 --types f32,i8 --big-count 0

# The C ABI test of the RCCL flavour: one rank per GPU (at most 4), CUDA managed buffers and
# CUDA streams, which are HIP's under the test runtime. Counted as one configuration.
if [ -n "${RCCL_PREFIX:-}" ] && { [ -z "${ONLY:-}" ] || [[ hip-abi-test =~ $ONLY ]]; }; then
  ABI_BIN=$LOG/abi-test-rccl
  if gcc -O1 -Wall -Werror -pthread -DOXCCL_TEST_RCCL -I"$RCCL_PREFIX/include" \
    "$(dirname "$0")/../c/abi_test.c" -L"$RCCL_PREFIX/lib" -l:librccl.so.1 -ldl -o "$ABI_BIN" \
    >"$LOG/hip-abi-test.log" 2>&1; then
    t0=$(date +%s)
    OXCCL_TEST_GPU=1 LD_LIBRARY_PATH="$(cd "$RCCL_PREFIX/lib" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      timeout -k 5 "$LIMIT" "$ABI_BIN" >>"$LOG/hip-abi-test.log" 2>&1
    rc=$?; t1=$(date +%s)
  else
    rc=2; t0=0; t1=0
  fi
  if [ $rc -eq 0 ] && grep -q "ALL PASS" "$LOG/hip-abi-test.log"; then p=1; f=0; else p=0; f=1; fi
  TOTAL_PASS=$((TOTAL_PASS+p)); TOTAL_FAIL=$((TOTAL_FAIL+f))
  summary_line hip-abi-test "$rc" "$p" "$f" $((t1-t0))
  grep -m5 -E '(FAIL|error)' "$LOG/hip-abi-test.log" | cut -c1-300
fi

# The device API on the HIP backend: BIN/device-api-check and BIN/device-gin-check (CUDA
# programs written against NVIDIA's nccl_device.h, built by scripts/nccl-tests/pack.sh) with
# librccl.so.1 in the place of libnccl.so.2: windows mapped flat through HIP's VMM calls, GIN's
# words written through HIP's stream writes, 2 ranks sharing the GPUs.
for pair in hip2-device-api:device-api-check hip2-device-gin:device-gin-check; do
  name=${pair%%:*}; prog=$BIN/${pair#*:}
  if [ -n "${RCCL_PREFIX:-}" ] && [ -x "$prog" ] && selected "$name"; then
    as_nccl=$LOG/rccl-as-nccl
    mkdir -p "$as_nccl"
    ln -sf "$(cd "$RCCL_PREFIX/lib" && pwd)/librccl.so.1" "$as_nccl/libnccl.so.2"
    t0=$(date +%s)
    OXCCL_BACKEND=hip LD_LIBRARY_PATH="$as_nccl" timeout -k 5 "$LIMIT" "$prog" 2 65537 3 \
      >"$LOG/$name.log" 2>&1
    rc=$?; t1=$(date +%s)
    result_counts "$LOG/$name.log" $rc
    TOTAL_PASS=$((TOTAL_PASS+P)); TOTAL_FAIL=$((TOTAL_FAIL+F))
    summary_line "$name" "$rc" "$P" "$F" $((t1-t0))
    grep -m5 -E '(rank|error)' "$LOG/$name.log" | cut -c1-300
  fi
done

echo "==== summary ($NGPU GPUs, HIP backend on $RUNTIME) ===="
printf '%s\n' "${SUMMARY[@]}"
if [ "${COMPARE:-0}" = 1 ]; then
  echo "CUDA pass=$CUDA_PASS fail=$CUDA_FAIL"
fi
echo "TOTAL pass=$TOTAL_PASS fail=$TOTAL_FAIL"
