#!/usr/bin/env bash
# Installs the GPU compilers that build oxccl's device kernels on a machine without a GPU:
#   - nvcc 13.0 from NVIDIA's PyPI wheels, into $OXCCL_CUDA_PREFIX (default ~/.cache/oxccl-cuda);
#   - hipcc 5.2 from Debian's packages (hipcc, libamdhip64-dev, rocm-device-libs).
# Idempotent: a second run only re-checks both compilers. Each compiler is smoke-tested by
# compiling a small kernel, then the environment the build scripts need is written to
# $OXCCL_GPU_ENV_FILE (default .ci/gpu-compilers.env, git-ignored) for `source`.
#
# Usage: .ci/install-gpu-compilers.sh [--no-cuda] [--no-hip]
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cuda_prefix=${OXCCL_CUDA_PREFIX:-${HOME}/.cache/oxccl-cuda}
env_file=${OXCCL_GPU_ENV_FILE:-${root}/.ci/gpu-compilers.env}
want_cuda=1
want_hip=1
for arg in "$@"; do
  case "$arg" in
    --no-cuda) want_cuda=0 ;;
    --no-hip) want_hip=0 ;;
    *) echo "usage: $0 [--no-cuda] [--no-hip]" >&2; exit 2 ;;
  esac
done

# All five wheels must come from the same release: a 13.0 nvcc with a newer nvvm/crt breaks ptxas.
cuda_wheels=(
  'nvidia-cuda-nvcc==13.0.*'
  'nvidia-nvvm==13.0.*'
  'nvidia-cuda-crt==13.0.*'
  'nvidia-cuda-runtime==13.0.*'
  'nvidia-cuda-cccl==13.0.*'
)
hip_packages=(hipcc libamdhip64-dev rocm-device-libs)

log() { echo "install-gpu-compilers: $*" >&2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/smoke.cu" <<'EOF'
#include <cuda_fp16.h>
extern "C" __global__ void smoke(float* p) { p[threadIdx.x] = __half2float(__float2half(p[0])); }
EOF
cat >"$work/smoke_hip.cu" <<'EOF'
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
extern "C" __global__ void smoke(float* p) { p[threadIdx.x] = __half2float(__float2half(p[0])) + warpSize; }
EOF

find_nvcc() {
  # The wheels unpack into site/nvidia/cu13/{bin,nvvm,include,lib}; nvcc.profile beside nvcc finds
  # cicc, libdevice and the headers relative to itself, so nvcc runs in place without a wrapper.
  [ -d "$cuda_prefix/site" ] || return 0
  find "$cuda_prefix/site" -path '*/bin/nvcc' -type f | sort | head -n 1
}

nvcc_works() {
  local nvcc=$1
  [ -x "$nvcc" ] || return 1
  "$nvcc" --version 2>/dev/null | grep -q 'release 13\.0' || return 1
  "$nvcc" --fatbin -gencode arch=compute_90,code=sm_90 -o "$work/smoke.fatbin" "$work/smoke.cu" \
    >"$work/nvcc.log" 2>&1 || { cat "$work/nvcc.log" >&2; return 1; }
}

install_cuda() {
  local stamp="$cuda_prefix/installed"
  local want="${cuda_wheels[*]}"
  local nvcc
  nvcc=$(find_nvcc)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -n "$nvcc" ] && nvcc_works "$nvcc"; then
    log "nvcc already installed: $nvcc"
  else
    log "installing ${want} into $cuda_prefix/site"
    rm -rf "$cuda_prefix/site" "$stamp"
    mkdir -p "$cuda_prefix"
    local pip=(python3 -m pip)
    "${pip[@]}" --version >/dev/null 2>&1 || pip=(pip3)
    # --target keeps the toolkit out of every Python environment; nothing else imports it.
    "${pip[@]}" install --quiet --disable-pip-version-check --no-input --no-deps --root-user-action=ignore \
      --target "$cuda_prefix/site" "${cuda_wheels[@]}"
    nvcc=$(find_nvcc)
    if [ -z "$nvcc" ]; then
      log "no bin/nvcc under $cuda_prefix/site after installing the wheels"
      exit 1
    fi
    nvcc_works "$nvcc" || { log "nvcc at $nvcc failed its smoke test"; exit 1; }
    echo "$want" >"$stamp"
  fi
  cuda_home=$(cd "$(dirname "$nvcc")/.." && pwd)
  nvcc_path="$cuda_home/bin/nvcc"
}

hipcc_works() {
  command -v hipcc >/dev/null 2>&1 || return 1
  # HIP_PLATFORM: hipcc picks the NVIDIA platform whenever it sees an nvcc.
  HIP_PLATFORM=amd hipcc --genco --offload-arch=gfx90a -O2 -o "$work/smoke.hipfb" "$work/smoke_hip.cu" \
    >"$work/hipcc.log" 2>&1 || { cat "$work/hipcc.log" >&2; return 1; }
}

install_hip() {
  if hipcc_works; then
    log "hipcc already installed: $(command -v hipcc)"
  else
    local sudo=()
    if [ "$(id -u)" != 0 ]; then sudo=(sudo); fi
    log "installing ${hip_packages[*]} from Debian"
    export DEBIAN_FRONTEND=noninteractive
    if ! "${sudo[@]}" apt-get install -y --no-install-recommends "${hip_packages[@]}" >"$work/apt.log" 2>&1; then
      # A fresh machine has no package lists yet.
      "${sudo[@]}" apt-get update -qq
      "${sudo[@]}" apt-get install -y --no-install-recommends "${hip_packages[@]}" >"$work/apt.log" 2>&1 ||
        { cat "$work/apt.log" >&2; exit 1; }
    fi
    hipcc_works || { log "hipcc failed its smoke test"; exit 1; }
  fi
  hipcc_path=$(command -v hipcc)
}

cuda_home=
nvcc_path=
hipcc_path=
if [ "$want_cuda" = 1 ]; then install_cuda; fi
if [ "$want_hip" = 1 ]; then install_hip; fi

{
  echo "# Written by .ci/install-gpu-compilers.sh; source it before cargo to build the kernels."
  if [ -n "$nvcc_path" ]; then
    echo "export NVCC='$nvcc_path'"
    echo "export CUDA_HOME='$cuda_home'"
    echo "export PATH='$cuda_home/bin':\"\$PATH\""
  fi
  if [ -n "$hipcc_path" ]; then
    echo "export HIPCC='$hipcc_path'"
  fi
  # With nvcc on PATH, hipcc would otherwise target NVIDIA.
  echo "export HIP_PLATFORM=amd"
} >"$env_file"
log "wrote $env_file:"
cat "$env_file"
