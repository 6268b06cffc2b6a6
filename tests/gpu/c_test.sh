#!/usr/bin/env bash
# Builds the C ABI test (tests/c/abi_test.c) against an installed oxccl and runs it in GPU mode:
# one rank per GPU (at most 4), managed buffers, a stream per rank. Needs only gcc: the program
# loads the CUDA driver with dlopen, so nothing of CUDA is linked.
#
# Usage: tests/gpu/c_test.sh [PREFIX] [RUN_LIB_DIR]
#   PREFIX       install prefix holding include/nccl.h and lib/libnccl.so.2 (default: dist), as
#                `cargo xtask install --prefix PREFIX` lays it out
#   RUN_LIB_DIR  directory whose libnccl.so.2 the binary runs against (default: PREFIX/lib);
#                point it at NVIDIA's library to compare. The binary is always built against
#                our header, and skips the checks of oxccl-only behaviour on another library.
# Environment: OUT_BIN (where the binary goes, default /tmp/oxccl-abi-test-gpu), LIMIT (seconds,
# default 120). Exits with the program's status (124: time limit).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
SRC="$HERE/../c/abi_test.c"
PREFIX=${1:-dist}
RUN_LIB=${2:-$PREFIX/lib}
OUT_BIN=${OUT_BIN:-/tmp/oxccl-abi-test-gpu}
LIMIT=${LIMIT:-120}

for f in "$PREFIX/include/nccl.h" "$PREFIX/lib/libnccl.so.2" "$RUN_LIB/libnccl.so.2"; do
  if [ ! -e "$f" ]; then
    echo "c_test.sh: $f not found" >&2
    exit 2
  fi
done
# The loader resolves LD_LIBRARY_PATH entries against the working directory at run time.
RUN_LIB=$(cd "$RUN_LIB" && pwd)

# -l:libnccl.so.2 because an install may have no libnccl.so development link.
echo "+ gcc -O1 -Wall -Werror -pthread -I$PREFIX/include $SRC -L$PREFIX/lib -l:libnccl.so.2 -ldl -o $OUT_BIN"
if ! gcc -O1 -Wall -Werror -pthread -I"$PREFIX/include" "$SRC" -L"$PREFIX/lib" -l:libnccl.so.2 \
  -ldl -o "$OUT_BIN"; then
  echo "c_test.sh: build failed"
  exit 2
fi

export OXCCL_TEST_GPU=1
export NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH="$RUN_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "+ running against $(ldd "$OUT_BIN" | grep -m1 'libnccl\.so\.2' | sed 's/^[[:space:]]*//')"
echo "+ OXCCL_TEST_GPU=1 NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$LD_LIBRARY_PATH timeout $LIMIT $OUT_BIN"
timeout -k 5 "$LIMIT" "$OUT_BIN" 2>&1
rc=$?
case $rc in
  0) echo "exit status: 0 (ALL PASS)" ;;
  124 | 137) echo "exit status: $rc (killed after ${LIMIT}s)" ;;
  *) echo "exit status: $rc" ;;
esac
exit $rc
