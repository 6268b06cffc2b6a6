#!/usr/bin/env bash
# The main job: build libnccl.so.2 and the benchmark, then run the benchmark on the best backend
# present: NVIDIA GPUs when nvidia-smi sees any (and the CUDA backend is built), else the host
# backend with 8 ranks (threads), AllReduce from 8 B to 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p oxccl-tests --bin oxccl-bench
cargo xtask install --prefix dist >/dev/null
args=("$@")
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && [ "${OXCCL_BACKEND:-}" != host ]; then
  echo "# GPUs found; the CUDA backend is not built yet, running the host backend" >&2
fi
export OXCCL_BACKEND=host
[ ${#args[@]} -eq 0 ] && args=(-n 8 --op allreduce -b 8 -e 64M -f 4 -w 2 -i 5)
exec target/release/oxccl-bench --lib dist/lib/libnccl.so.2 "${args[@]}"
