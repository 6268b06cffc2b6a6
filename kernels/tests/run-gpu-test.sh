#!/usr/bin/env bash
# Builds kernels/tests/gpu_exec_test.cu with nvcc and runs it on this machine's GPUs against a
# fatbin: the argument, else the newest one cargo built (target/oxccl-kernels/).
# Needs a GPU, libcuda and nvcc ($NVCC, else nvcc on PATH, else /usr/local/cuda/bin/nvcc).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
fatbin=${1:-$(ls -t "$root"/target/oxccl-kernels/oxccl.fatbin-*.bin 2>/dev/null | head -n 1)}
if [ -z "$fatbin" ]; then
  echo "no fatbin: build backend-cuda with nvcc first, or pass one" >&2
  exit 2
fi
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
exe=$(mktemp -d)/gpu_exec_test
"$nvcc" -std=c++17 -O2 -I"$root/kernels/common" \
  "$root/kernels/tests/gpu_exec_test.cu" -lcuda -o "$exe"
"$exe" "$fatbin"
