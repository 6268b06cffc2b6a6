#!/usr/bin/env bash
# Builds aws-ofi-nccl's tuner plugin (libnccl-ofi-tuner.so) from an unpacked, unchanged
# aws-ofi-nccl source tree, for core/tests/tuner_plugin_ofi.rs (OXCCL_OFI_TUNER).
#
#   scripts/plugins/build-ofi-tuner.sh SRC_DIR OUT_DIR
#
# Tested with tag v1.21.1 (commit 2475c4c736907e68ebeadb3848f31231ee4a44d0), unpacked with
# `git archive v1.21.1 | tar -x -C SRC_DIR`. Downloads nothing; needs g++ (C++20) and the
# hwloc and libfabric development files (Debian: libhwloc-dev libfabric-dev).
#
# Why not their autotools build: it makes the tuner only with --enable-platform-aws, and then
# as one more copy of the whole network plugin (src/Makefile.am links libnccl-ofi-tuner.so from
# the same objects as libnccl-net-ofi.so), which wants CUDA, libfabric >= 1.22 and autotools.
# The tuner's own code needs little of that: this compiles its three sources (src/tuner/) and
# the sources its init reaches (parameters, product name, platform selection, the AWS platform,
# hwloc topology), with the compile flags their configure.ac sets for a release build and the
# defines configure would write into config.h for a CUDA build on AWS. Five symbols those
# sources name belong to the network plugin's other sources; a stub file gives them here.
# The tuner never reaches the three stub functions (only the network plugin's init and
# endpoint setup call them), and they abort if anything does.
set -euo pipefail

if [ $# -ne 2 ]; then
    echo "usage: $0 SRC_DIR OUT_DIR  (SRC_DIR: unpacked aws-ofi-nccl source, tag v1.21.1)" >&2
    exit 2
fi
src=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
build="$out/build"
mkdir -p "$build"

for f in src/tuner/nccl_ofi_tuner.cpp src/tuner/nccl_ofi_model.cpp src/tuner/nccl_ofi_regions.cpp \
    src/platform-aws.cpp include/nccl_ofi_config_bottom.h 3rd-party/nccl/cuda/include/nccl/tuner.h; do
    [ -f "$src/$f" ] || { echo "$src is not an aws-ofi-nccl source tree: no $f" >&2; exit 1; }
done
# v1.21.1's src/tuner/nccl_ofi_tuner.cpp; another tag may need other sources or stubs.
want=1d982efe91401b135f9899c7ae48ff36e8bfe1a63363c804cd3d300c0d4bb4c7
have=$(sha256sum "$src/src/tuner/nccl_ofi_tuner.cpp" | cut -d' ' -f1)
[ "$have" = "$want" ] || echo "warning: $src is not aws-ofi-nccl v1.21.1 (tuner source differs)" >&2

# What configure writes for `--with-cuda --enable-platform-aws` (the build that makes the
# tuner), less the features these sources do not test.
cat >"$build/config.h" <<'EOF'
#define WANT_AWS_PLATFORM 1
#define HAVE_CUDA 1
#define HAVE_ROCM 0
#define HAVE_NEURON 0
#define HAVE_GDRCOPY 0
#define HAVE_LIBLTTNG_UST 0
#define HAVE_NVTX_TRACING 0
#define ENABLE_HISTOGRAM 0
#define ENABLE_VALGRIND 0
#define ENABLE_ASAN 0
#define OFI_NCCL_TRACE 0
#define MEMCHECK_REDZONE_SIZE 0
#define NCCL_OFI_WANT_THREAD_ANALYSIS 0
#define HAVE_LINUX_LIMITS_H 1
#define PACKAGE_VERSION "1.21.1"
#define PACKAGE_STRING "aws-ofi-nccl 1.21.1"
#include "nccl_ofi_config_bottom.h"
EOF

# Definitions the network plugin's sources (nccl_ofi_api.cpp, nccl_ofi_net.cpp,
# nccl_ofi_nccl_compat.cpp, nccl_ofi_ofiutils.cpp) would give, declared by their headers.
cat >"$build/net_stubs.cpp" <<'EOF'
#include "config.h"
#include <stdlib.h>
#include "nccl_ofi.h"
#include "nccl_ofi_log.h"
#include "nccl_ofi_ofiutils.h"
nccl_ofi_logger_t ofi_log_function = NULL;
enum gdr_support_level_t support_gdr = GDR_UNKNOWN;
uint64_t getHostHash(void) { abort(); }
int nccl_net_ofi_configure_nccl_proto_simple(const char *) { abort(); }
void nccl_ofi_ofiutils_free_info_list(struct fi_info *) { abort(); }
EOF

# configure.ac's release flags (C++20, no RTTI, -O3, hidden visibility) and src/Makefile.am's
# include paths (the NCCL headers they ship under 3rd-party/nccl/cuda).
cxxflags=(-std=c++20 -fno-rtti -O3 -ffunction-sections -fdata-sections
    -fno-semantic-interposition -fvisibility=hidden -fPIC
    -I"$build" -I"$src/include" -isystem "$src/3rd-party"
    -isystem "$src/3rd-party/nccl/cuda/include" '-DXML_DIR="/nonexistent"')
objs=()
for f in tuner/nccl_ofi_tuner tuner/nccl_ofi_model tuner/nccl_ofi_regions nccl_ofi_param \
    nccl_ofi_system nccl_ofi_platform platform-aws nccl_ofi_topo nccl_ofi_assert \
    nccl_ofi_pthread; do
    o="$build/$(basename "$f").o"
    g++ "${cxxflags[@]}" -c "$src/src/$f.cpp" -o "$o"
    objs+=("$o")
done
g++ "${cxxflags[@]}" -c "$build/net_stubs.cpp" -o "$build/net_stubs.o"
objs+=("$build/net_stubs.o")
g++ -shared -Wl,-Bsymbolic -Wl,--no-undefined -o "$out/libnccl-ofi-tuner.so" "${objs[@]}" \
    -lhwloc -lfabric
# Their second name, the one NCCL_TUNER_PLUGIN=ofi finds (libnccl-tuner-<value>.so).
cp "$out/libnccl-ofi-tuner.so" "$out/libnccl-tuner-ofi.so"
echo "built $out/libnccl-ofi-tuner.so: $(nm -D --defined-only "$out/libnccl-ofi-tuner.so" |
    grep -o 'ncclTunerPlugin_v[0-9]*' | sort | tr '\n' ' ')"
