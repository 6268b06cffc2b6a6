#!/usr/bin/env bash
# The main job: build libnccl.so.2 and the benchmark, then run the benchmark on the best backend
# present. With NVIDIA GPUs: every operation, one process driving every GPU, 8 B to 256 MiB,
# side by side with NVIDIA's NCCL when PyTorch's copy of it is found (or NCCL_REF=<libnccl.so.2>).
# Without GPUs: the host backend, 8 ranks (threads), AllReduce from 8 B to 64 MiB.
# Extra arguments go to oxccl-bench and override the defaults (see `oxccl-bench --help`), e.g.
#   --launch procs (one process per GPU), --inplace, --graph (CUDA graphs),
#   --reg register|window (ncclCommRegister / ncclMemAlloc + symmetric windows), -e 8G.
# OXCCL_BENCH_JSON=FILE also writes every row as JSON (plot: bench/tools/plot.py FILE OUT.png).
# Tuning variables (NCCL_*, OXCCL_*) pass through to both libraries and are printed.
# Kernels are compiled for the GPUs this machine has, unless OXCCL_CUDA_ARCHS / OXCCL_HIP_ARCHS
# say otherwise: every target costs minutes (docs/kernels.md, "Compile times"), and a flavour
# with no GPU here builds none (its backend then reports that it has no kernels).
# `cargo xtask install` run by itself builds every default target.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${OXCCL_CUDA_ARCHS+set}" ]; then
  caps=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d . | sort -u | paste -sd, || true)
  export OXCCL_CUDA_ARCHS="${caps:- }"
fi
if [ -z "${OXCCL_HIP_ARCHS+set}" ]; then
  gfx=$(rocminfo 2>/dev/null | grep -o 'gfx[0-9a-f]*' | sort -u | paste -sd, || true)
  export OXCCL_HIP_ARCHS="${gfx:- }"
fi
echo "main-job: kernels for CUDA [${OXCCL_CUDA_ARCHS}] HIP [${OXCCL_HIP_ARCHS}]" >&2
if [ -z "${OXCCL_PREBUILT:-}" ]; then
  cargo build --release -p oxccl-bench
  cargo xtask install --prefix dist >/dev/null
fi
bench=${OXCCL_BENCH:-target/release/oxccl-bench}
lib=${OXCCL_LIB:-dist/lib/libnccl.so.2}
json=()
[ -n "${OXCCL_BENCH_JSON:-}" ] && json=(--json "$OXCCL_BENCH_JSON")
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
if [ "${OXCCL_BACKEND:-}" != host ] && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  ref=${NCCL_REF:-}
  if [ -z "$ref" ]; then
    dir=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
    [ -n "$dir" ] && [ -f "$dir/lib/libnccl.so.2" ] && ref="$dir/lib/libnccl.so.2"
  fi
  args=(--mem cuda --op all -b 8 -e 256M -f 4 -w 5 -i 20)
  [ -n "$ref" ] && args+=(--compare "$ref")
  exec "$bench" --lib "$lib" "${args[@]}" ${json[@]+"${json[@]}"} "$@"
fi
export OXCCL_BACKEND=host
if [ $# -eq 0 ]; then set -- -n 8 --op allreduce -b 8 -e 64M -f 4 -w 2 -i 5; fi
exec "$bench" --lib "$lib" --mem host ${json[@]+"${json[@]}"} "$@"
