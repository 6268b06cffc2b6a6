#!/usr/bin/env bash
# Builds our libnccl.so.2 and the GPU test programs for Hopper (sm_90) on this machine (no GPU
# needed: nvcc from .ci/install-gpu-compilers.sh) and packs them, stripped, into
# .carry/oxccl-gpu.tar.xz (lib/ and bin/, libnccl.so.2 in both) for the GPU machine, beside
# .carry/nccl-tests.tar.xz from build.sh. scripts/nccl-tests/device-run.sh unpacks it there.
#
# Usage: scripts/nccl-tests/pack.sh [--hip]      (OXCCL_CUDA_ARCHS overrides 90)
#   --hip also packs .carry/hip.tar.xz for tests/gpu/hip-on-cuda.sh: librccl.so.1 and its headers
#   (hip/lib, hip/include) and the test HIP runtime with its kernels (hip/bin/libamdhip64.so,
#   hip/bin/hip-on-cuda-kernels); copy hip/bin next to gpu-check and pass RCCL_PREFIX.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -f .ci/gpu-compilers.env ] || bash .ci/install-gpu-compilers.sh --no-hip
# shellcheck disable=SC1091
source .ci/gpu-compilers.env
export OXCCL_CUDA_ARCHS=${OXCCL_CUDA_ARCHS:-90}
# A target directory of its own: the host-only builds of the workspace then keep theirs.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target-gpu}
cargo xtask install --prefix dist
cargo build --release -p oxccl-tests -p oxccl-bench --bins
pack=$(mktemp -d)
trap 'rm -rf "$pack"' EXIT
mkdir -p "$pack/lib" "$pack/bin" .carry
cp -a dist/lib/libnccl.so* "$pack/lib/"
cp "$CARGO_TARGET_DIR"/release/{safe-check,gpu-check,oxccl-bench} "$pack/bin/"
# The device API checks (LSA: lsa_sum.cu; GIN: gin_put.cu) are compiled twice from the same
# source: against NVIDIA's nccl_device.h (the wheel build.sh unpacks), as a user's kernel is,
# and against ours in include/ (device-api-check-ox, device-gin-check-ox). All link the wheel's
# libnccl.so.2 only for its soname; skipped with a message when build.sh has not run.
nv=${NCCL_TESTS_CACHE:-$HOME/.cache/oxccl-nccl-tests}/nccl-2.28.9
if [ -f "$nv/include/nccl_device.h" ]; then
  device_check() { # NAME INCLUDE_DIR SOURCE
    "$CUDA_HOME/bin/nvcc" -std=c++17 -arch="sm_${OXCCL_CUDA_ARCHS%%,*}" -I"$2" \
      "tests/gpu/device_api/$3" -o "$pack/bin/$1" \
      -L"$CUDA_HOME/lib" -L"$nv/lib" -l:libnccl.so.2 -cudart static
  }
  device_check device-api-check "$nv/include" lsa_sum.cu
  device_check device-api-check-ox include lsa_sum.cu
  device_check device-gin-check "$nv/include" gin_put.cu
  device_check device-gin-check-ox include gin_put.cu
else
  echo "pack.sh: no $nv/include/nccl_device.h (run scripts/nccl-tests/build.sh): device-api-check(-ox) and device-gin-check(-ox) not built" >&2
fi
strip --strip-debug "$pack"/lib/libnccl.so.2.* "$pack"/bin/*
cp -a "$pack"/lib/libnccl.so* "$pack/bin/"
tar -C "$pack" -cJf .carry/oxccl-gpu.tar.xz lib bin
ls -l .carry/oxccl-gpu.tar.xz
if [ "${1:-}" = --hip ]; then
  # librccl.so.1 in a target directory of its own (the nccl and rccl features exclude each
  # other); no AMD code objects: on NVIDIA the kernels come from hip-on-cuda-kernels.
  OXCCL_HIP_ARCHS=" " CARGO_TARGET_DIR="$CARGO_TARGET_DIR-rccl" cargo xtask install --rccl --prefix "$pack/hip"
  cargo build --release -p oxccl-hip-on-cuda
  mkdir -p "$pack/hip/bin"
  cp "$CARGO_TARGET_DIR"/release/{libamdhip64.so,hip-on-cuda-kernels} "$pack/hip/bin/"
  strip --strip-debug "$pack"/hip/lib/librccl.so.1.* "$pack"/hip/bin/*
  tar -C "$pack" -cJf .carry/hip.tar.xz hip
  ls -l .carry/hip.tar.xz
fi
