#!/usr/bin/env bash
# Build NVIDIA's nccl-tests (a pinned release) on a machine without a GPU, against the headers
# of NVIDIA's NCCL 2.28.9 (from its pip wheel), and pack the stripped *_perf binaries into ONE
# xz tarball, .carry/nccl-tests.tar.xz, that is carried to the GPU machine and unpacked there by
# scripts/nccl-tests/run.sh (see docs/perf/nccl-tests.md).
#
# The binaries link libnccl.so.2 dynamically, so LD_LIBRARY_PATH picks NVIDIA's library or ours
# at run time; the CUDA runtime is linked statically (CUDARTLIB=cudart_static), so they need only
# the driver there. Their source is NOT part of this repository: it is cloned (or copied from a
# local clone) at the pinned tag and the commit is checked.
#
# A second build with MPI=1 goes to nccl-tests/mpi/ with libmpi.so, our stand-in for MPI
# (scripts/nccl-tests/mpi-shim/): run.sh's mode p starts one process per GPU with it, through
# mpi-shim/launch.sh, on a machine without MPI.
#
# Usage: scripts/nccl-tests/build.sh [--src PATH] [--force]
#   --src PATH   a local clone of NVIDIA/nccl-tests (a work tree or a bare git dir) to take the
#                source from instead of cloning from GitHub (also NCCL_TESTS_SRC=PATH)
#   --force      rebuild and repack even if the tarball is up to date
# Environment:
#   NVCC_GENCODE       GPU targets (default: sm_90, the H100/H200)
#   NCCL_TESTS_CACHE   work folder (default: ~/.cache/oxccl-nccl-tests); kept between runs so a
#                      second run only checks the stamp (or re-runs an incremental make)
#   CUDA_HOME          a CUDA toolkit with bin/nvcc and lib*/libcudart_static.a; by default the
#                      pip toolkit that .ci/install-gpu-compilers.sh --no-hip installs
set -euo pipefail

# --- pinned versions: change these together, and the stamp below forces a rebuild -------------
TESTS_TAG=v2.19.6
TESTS_COMMIT=a0b82b2260cf5152b9f8c061bbf7eaf0ba096432   # what $TESTS_TAG pointed at when pinned
TESTS_URL=https://github.com/NVIDIA/nccl-tests
NCCL_PIP=nvidia-nccl-cu13
NCCL_VER=2.28.9
# The nine collectives/p2p tests we compare, plus the two extra ones nccl-tests builds anyway.
BINS=(all_reduce all_gather broadcast reduce reduce_scatter alltoall scatter gather sendrecv
      hypercube alltoallv)

repo=$(cd "$(dirname "$0")/../.." && pwd)
out="$repo/.carry/nccl-tests.tar.xz"
cache=${NCCL_TESTS_CACHE:-$HOME/.cache/oxccl-nccl-tests}
gencode=${NVCC_GENCODE:--gencode=arch=compute_90,code=sm_90}
src_arg=${NCCL_TESTS_SRC:-}
force=0
while [ $# -gt 0 ]; do
  case "$1" in
    --src) src_arg=$2; shift 2 ;;
    --force) force=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "build.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
log() { echo "nccl-tests/build: $*" >&2; }

# --- compiler: the pip CUDA toolkit, unless CUDA_HOME already names a usable one ---------------
if [ -z "${CUDA_HOME:-}" ] || [ ! -x "${CUDA_HOME}/bin/nvcc" ]; then
  env_file="$repo/.ci/gpu-compilers.env"
  if [ ! -f "$env_file" ]; then
    log "no CUDA toolkit: run .ci/install-gpu-compilers.sh --no-hip first (it writes $env_file)"
    exit 1
  fi
  # shellcheck disable=SC1090
  source "$env_file"
fi
nvcc="$CUDA_HOME/bin/nvcc"
# The pip toolkit keeps its libraries in lib/, a system one in lib64/.
cuda_lib="$CUDA_HOME/lib64"
[ -f "$cuda_lib/libcudart_static.a" ] || cuda_lib="$CUDA_HOME/lib"
if [ ! -f "$cuda_lib/libcudart_static.a" ]; then
  log "no libcudart_static.a under $CUDA_HOME/lib64 or $CUDA_HOME/lib (the nvidia-cuda-runtime wheel brings it)"
  exit 1
fi
nvcc_ver=$("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')

# --- up to date already? The stamp names everything that changes the binaries. ----------------
shim_src="$repo/scripts/nccl-tests/mpi-shim"
stamp_want="tests=$TESTS_COMMIT nccl=$NCCL_VER nvcc=$nvcc_ver gencode=$gencode script=$(sha256sum "$0" | cut -c1-16) shim=$(cat "$shim_src/mpi.h" "$shim_src/mpi_shim.c" | sha256sum | cut -c1-16)"
stamp="$out.stamp"
if [ "$force" = 0 ] && [ -f "$out" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_want" ]; then
  log "up to date: $out ($(du -h "$out" | cut -f1)); --force rebuilds"
  exit 0
fi
mkdir -p "$cache"

# --- NVIDIA's NCCL headers and library, from the pip wheel (only to compile and link against) ---
nccl_home="$cache/nccl-$NCCL_VER"
if [ ! -f "$nccl_home/lib/libnccl.so.2" ] || [ ! -f "$nccl_home/include/nccl.h" ]; then
  log "fetching $NCCL_PIP==$NCCL_VER"
  rm -rf "$cache/wheel" "$nccl_home.tmp"
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$cache/wheel" "$NCCL_PIP==$NCCL_VER"
  mkdir -p "$nccl_home.tmp"
  # Only the headers and the library; unzip keeps the wheel's nvidia/nccl/ prefix.
  unzip -q -o "$cache"/wheel/*.whl 'nvidia/nccl/include/*' 'nvidia/nccl/lib/*' -d "$nccl_home.tmp"
  rm -rf "$nccl_home"
  mv "$nccl_home.tmp/nvidia/nccl" "$nccl_home"
  rm -rf "$nccl_home.tmp" "$cache/wheel"
fi
# The linker's -lnccl looks for libnccl.so; the wheel has only the soname file.
ln -sf libnccl.so.2 "$nccl_home/lib/libnccl.so"

# --- nccl-tests source at the pinned commit -----------------------------------------------------
src="$cache/src-$TESTS_TAG"
if [ ! -f "$src/.commit" ] || [ "$(cat "$src/.commit")" != "$TESTS_COMMIT" ]; then
  rm -rf "$src" "$src.tmp"
  mkdir -p "$src.tmp"
  if [ -n "$src_arg" ]; then
    # A local clone: export the pinned commit from it (works for a bare git dir or a work tree).
    if gitdir=$(git -C "$src_arg" rev-parse --absolute-git-dir 2>/dev/null) ||
       gitdir=$(git --git-dir="$src_arg" rev-parse --absolute-git-dir 2>/dev/null); then
      if ! git --git-dir="$gitdir" cat-file -e "$TESTS_COMMIT^{commit}" 2>/dev/null; then
        log "$src_arg has no commit $TESTS_COMMIT ($TESTS_TAG): update that clone"
        exit 1
      fi
      log "exporting $TESTS_TAG ($TESTS_COMMIT) from $src_arg"
      git --git-dir="$gitdir" archive "$TESTS_COMMIT" | tar -x -C "$src.tmp"
    else
      log "$src_arg is not a git clone; refusing: the commit could not be checked"
      exit 1
    fi
  else
    log "cloning $TESTS_URL at $TESTS_TAG"
    rm -rf "$src.tmp"
    git -c advice.detachedHead=false clone -q --depth 1 --branch "$TESTS_TAG" "$TESTS_URL" "$src.tmp"
    got=$(git -C "$src.tmp" rev-parse HEAD)
    if [ "$got" != "$TESTS_COMMIT" ]; then
      log "tag $TESTS_TAG is now $got, not the pinned $TESTS_COMMIT: check and re-pin"
      exit 1
    fi
  fi
  echo "$TESTS_COMMIT" >"$src.tmp/.commit"
  mv "$src.tmp" "$src"
fi

# --- build (make is incremental: a second run with the same settings recompiles nothing) --------
# One build folder per target set and compiler, so changing either does not mix objects.
build="$cache/build-$(echo "$gencode $nvcc_ver $NCCL_VER" | sha256sum | cut -c1-12)"
log "building with nvcc $nvcc_ver for [$gencode] in $build"
# MPI=0: one process drives every GPU (threads or -g), which is all we compare.
# CUDARTLIB=cudart_static: no libcudart.so needed on the GPU machine.
# NVCC/CUDA_LIB: the pip toolkit's layout (lib/, not lib64/).
make -C "$src/src" -j"$(nproc)" build \
  BUILDDIR="$build" MPI=0 \
  CUDA_HOME="$CUDA_HOME" NVCC="$nvcc" CUDA_LIB="$cuda_lib" CUDARTLIB=cudart_static \
  NCCL_HOME="$nccl_home" NVCC_GENCODE="$gencode" >&2
# The MPI build, against the stand-in (mpi-shim/), in a folder of its own.
shim="$cache/mpi-shim"
mkdir -p "$shim/include" "$shim/lib"
cp "$shim_src/mpi.h" "$shim/include/"
gcc -O2 -fPIC -shared -Wall -Wextra -Werror -o "$shim/lib/libmpi.so" "$shim_src/mpi_shim.c"
make -C "$src/src" -j"$(nproc)" build \
  BUILDDIR="$build-mpi" MPI=1 MPI_HOME="$shim" \
  CUDA_HOME="$CUDA_HOME" NVCC="$nvcc" CUDA_LIB="$cuda_lib" CUDARTLIB=cudart_static \
  NCCL_HOME="$nccl_home" NVCC_GENCODE="$gencode" >&2

# --- stage, strip and pack ----------------------------------------------------------------------
stage="$cache/stage"
rm -rf "$stage"
mkdir -p "$stage/nccl-tests/mpi"
for b in "${BINS[@]}"; do
  for d in "" /mpi; do
    f="$build${d/\//-}/${b}_perf"
    [ -x "$f" ] || { log "missing $f after make"; exit 1; }
    cp "$f" "$stage/nccl-tests$d/"
    strip --strip-unneeded "$stage/nccl-tests$d/${b}_perf"
  done
done
cp "$shim/lib/libmpi.so" "$stage/nccl-tests/mpi/"
# Guard the two properties run.sh relies on: libnccl.so.2 is dynamic, cudart is not.
for f in "$stage"/nccl-tests/*_perf "$stage"/nccl-tests/mpi/*_perf; do
  need=$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  case " $need " in *" libnccl.so.2 "*) ;; *) log "$f does not load libnccl.so.2: $need"; exit 1 ;; esac
  case " $need " in *libcudart*) log "$f links libcudart dynamically: $need"; exit 1 ;; esac
done
cat >"$stage/nccl-tests/BUILD-INFO" <<EOF
nccl-tests $TESTS_TAG ($TESTS_COMMIT), built by scripts/nccl-tests/build.sh
headers: $NCCL_PIP $NCCL_VER; CUDA $nvcc_ver (runtime linked statically); targets: $gencode
NEEDED: $(readelf -d "$stage/nccl-tests/all_reduce_perf" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
EOF
mkdir -p "$(dirname "$out")"
# Reproducible archive (sorted names, fixed owner and times). xz -9 single-threaded: one stream
# with a 64 MiB dictionary shares the code the binaries have in common, which is most of it.
tar -C "$stage" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - nccl-tests |
  xz -9 -T1 >"$out.tmp"
mv "$out.tmp" "$out"
echo "$stamp_want" >"$stamp"
log "wrote $out ($(du -h "$out" | cut -f1)); unpacked $(du -sh "$stage/nccl-tests" | cut -f1)"
