#!/usr/bin/env bash
# Build NVIDIA's Inspector profiler plugin (NCCL's plugins/profiler/inspector, unchanged, with
# its own Makefile) on a machine without a GPU, for core/tests/profiler_plugin_inspector.rs:
#   OXCCL_NV_PROFILER_INSPECTOR=$(scripts/nv-inspector.sh) \
#     cargo test --release -p oxccl-core --test profiler_plugin_inspector
# Its source is NOT part of this repository: it is exported from a local clone of NVIDIA/nccl
# (a work tree or a bare git dir) or cloned from GitHub, at the pinned tag. It needs CUDA's
# headers and libcudart.so at build time only (the test runs it with our CUDA stand-ins,
# tests/c/cuda_stub/); the pip toolkit .ci/install-gpu-compilers.sh installs has both.
#
# Usage: scripts/nv-inspector.sh [--src PATH]      prints the library's path on stdout
#   --src PATH   a local clone of NVIDIA/nccl (also NCCL_SRC=PATH); default: clone from GitHub
# Environment:
#   NV_INSPECTOR_CACHE  work folder (default: ~/.cache/oxccl-nv-inspector)
#   CUDA_HOME           a CUDA toolkit with include/cuda.h and lib*/libcudart.so*; by default the
#                       pip toolkit of .ci/install-gpu-compilers.sh
set -euo pipefail

TAG=v2.30.7-1   # the newest NCCL release with the Inspector when pinned (v2.29.7-1 has it too)
URL=https://github.com/NVIDIA/nccl
src=${NCCL_SRC:-}
while [ $# -gt 0 ]; do
  case "$1" in
    --src) src=$2; shift 2 ;;
    *) echo "nv-inspector: unknown argument $1" >&2; exit 2 ;;
  esac
done
cache=${NV_INSPECTOR_CACHE:-$HOME/.cache/oxccl-nv-inspector}
cuda=${CUDA_HOME:-$HOME/.cache/oxccl-cuda/site/nvidia/cu13}
if [ ! -f "$cuda/include/cuda.h" ]; then
  echo "nv-inspector: no CUDA headers in $cuda (set CUDA_HOME, or run .ci/install-gpu-compilers.sh)" >&2
  exit 1
fi
work=$cache/$TAG
lib=$work/plugins/profiler/inspector/libnccl-profiler-inspector.so
if [ ! -f "$lib" ]; then
  rm -rf "$work" && mkdir -p "$work"
  if [ -z "$src" ]; then
    src=$cache/nccl.git
    [ -d "$src" ] || git clone --quiet --bare --filter=blob:none "$URL" "$src" >&2
  fi
  git -C "$src" archive "$TAG" plugins/profiler/inspector | tar -x -C "$work"
  # The Makefile links -lcudart from CUDA_LIB; pip's toolkit has only libcudart.so.<major>.
  mkdir -p "$work/cudart"
  for so in "$cuda"/lib*/libcudart.so*; do
    [ -e "$so" ] && ln -sf "$so" "$work/cudart/libcudart.so"
  done
  make -C "$work/plugins/profiler/inspector" -j"$(nproc)" CUDA_HOME="$cuda" \
    CUDA_LIB="$work/cudart" >&2
fi
echo "$lib"
