#!/usr/bin/env bash
# Runs the GPU checks of the CUDA backend and prints pass/fail counts per configuration.
#
# Usage: tests/gpu/run.sh [BIN_DIR] [LOG_DIR]
#   BIN_DIR holds gpu-check (default: target/release). Each configuration runs under a time limit
#   so a hang costs one configuration, not the run. Set QUICK=1 for small counts only (no
#   1M-element cases, no 256M-element case).
#
# Configurations (2 GPUs; about 7 minutes in all):
#   r*-initall/threads/procs-auto  every operation x type x operator, tuner's choice
#   r2-initall-{ring,tree,direct}  each algorithm forced, one process driving both GPUs
#   r2-*-{LL,Simple}               each protocol forced
#   r2-procs-{ring,tree,direct}    each algorithm forced, one process per GPU
#   g*-graph                       every case captured into a CUDA graph, replayed 100 times
#   s2-*-split                     on a communicator split from the world one, ranks reversed
#   o2-*-offsets-vmm               ncclMemAlloc (VMM) arenas, buffer addresses moving inside them
#   m*-procs-window(-zc)           the same arenas registered as symmetric windows: zero copy
#                                  across processes (forced at every size with -zc)
#   z2-*                           zero-copy plans at every size (OXCCL_ZERO_COPY=1), and their
#                                  fallback branch (rank 1's buffers from a pool its peer cannot map)
#   x2-*                           one-shot kernels wherever they take the message
#                                  (OXCCL_ONE_SHOT=1: LL up to 256 KiB per peer, Simple to 2 MiB;
#                                  NCCL_PROTO=Simple: Simple at every size), and small messages
#                                  without them (=0)
#   *-twoshot*                     the two-shot AllReduce wherever it takes the vector
#                                  (OXCCL_TWO_SHOT=1: up to 1 MiB per rank)
#   h2-initall-256M                256M f32 elements (1-2 GiB per buffer) for the main operations
#   m3/m4/m8-*                     3, 4 and 8 ranks on however many GPUs there are (rank r on GPU
#                                  r % GPUs, one GPU is enough), one process or one per rank: the
#                                  paths of more than two ranks, ranks sharing a GPU taking an
#                                  equal share of its SMs; a peer process that dies mid-operation
#   n2/n3/n4/n8/n20-*              several "hosts" (OXCCL_TEST_HOSTS: one NCCL_HOSTID per group of
#                                  ranks; `Kr`: rank r on host r % K): NET between hosts, P2P
#                                  inside (n4-procs-mixed), rings and trees ordered by host
#                                  (n*-rr-*), NET inside one process (P2P and SHM disabled);
#                                  *-p2p-alltoall: AlltoAll as grouped sends/receives to every rank
#   n16-bench-uneven-exit-*        oxccl-bench (checked) at 16 ranks as 16 hosts that destroy
#                                  their communicators one by one as each finishes
#   n2-procs-gdr*                  NET with GPUDirect RDMA over our test plugin in its cuda mode
#                                  (OXCCL_GDR_PLUGIN=path of libnccl-net-oxtest-gdr-cuda.so; skipped
#                                  when unset): slots registered as CUDA memory, receives flushed
#                                  (NCCL_NET_FORCE_FLUSH=1), slots registered through a dma-buf;
#                                  -far: the device beyond NCCL_NET_GDR_LEVEL, no GDR
#   n2-procs-nic-nearest           the same plugin in host memory with three devices: every
#                                  channel on the one nearest the GPU's PCI place
#   sh2/sh3/sh4/sh8-*              SHM: one host, P2P disabled (NCCL_P2P_DISABLE=1), in one
#                                  process and across processes, each protocol forced
#                                  (sh*-procs-LL/Simple); SHM inside two "hosts" and NET
#                                  between them (sh4-procs-shm-net). NET_ONLY=1 runs only the n*
#                                  and sh* configurations. Start MPS first (tests/gpu/mps.sh) or
#                                  they crawl
#   a1/a3-safe-matrix              the safe Rust API (safe-check) on 1 rank per GPU and on 3
#   d2/d4-device-api               a kernel written against NVIDIA's NCCL 2.28 device API
#                                  (tests/gpu/device_api): LSA windows and barriers;
#                                  d2-device-api-ox: the same source built on oxccl's own
#                                  nccl_device.h
#   p*-device-api/gin              the same programs with a process per rank (p2: one host; p2h2,
#                                  p4h2: two "hosts", GIN across them); start MPS first
#   d2/d4-device-gin(-ox)          a GIN kernel written against the same API (puts, a putValue,
#                                  signals, counters, flush, world barriers)
#   t5-safe-cycles                 init / AllReduce / finalize cycles: fds, threads, GPU memory flat
#   t12/t13-torch-*                torch.distributed on BIN/libnccl.so.2: a stalled rank named by
#                                  the watchdog, a mismatched count refused by OXCCL_CHECK=1
# ONLY=REGEX runs only the configurations whose names match; SKIP=REGEX leaves out those that do.
set -u
BIN=${1:-target/release}
LOG=${2:-/tmp/oxccl-gpu-logs}
mkdir -p "$LOG"
LIMIT=${LIMIT:-90}
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
TOTAL_PASS=0; TOTAL_FAIL=0; SUMMARY=()
export NCCL_NVLS_ENABLE=0
# shellcheck source=tests/gpu/lib.sh
source "$(dirname "$0")/lib.sh"

run() { run_exe "$BIN/gpu-check" "$@"; }

run_exe() { # executable, name, env..., -- args...: one configuration, counted by its RESULT line
  local exe=$1 name=$2; shift 2
  selected "$name" || return 0
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local t0=$(date +%s)
  env "${envs[@]}" timeout -k 5 "$LIMIT" "$exe" "$@" >"$LOG/$name.log" 2>&1
  local rc=$? t1=$(date +%s)
  result_counts "$LOG/$name.log" $rc
  TOTAL_PASS=$((TOTAL_PASS+P)); TOTAL_FAIL=$((TOTAL_FAIL+F))
  summary_line "$name" $rc $P $F $((t1-t0))
  grep -m5 -E '^(FAIL|HANG|GUARD|\[proc)' "$LOG/$name.log" | cut -c1-300
}

# `run` under another time limit (bash's dynamic scoping: `run` sees this LIMIT).
run_limit() { # seconds, then run's arguments
  local LIMIT=$1; shift
  run "$@"
}

SMALL="--counts 0,1,7 --types all"
if [ "${QUICK:-0}" = 1 ]; then
  BIG="--big-count 0"; BIG1="--big-count 0"; BIG2="--big-count 0"
else
  BIG="--big-count 1048579 --big-types f32,bf16,i8,f64"
  BIG1="--big-count 1048579 --big-types f32"
  BIG2="--big-count 1048579 --big-types f32,bf16"
fi
GRAPH="--graph 100"
SAFE_COUNTS="--counts 0,1,7,1048579"
CYCLES=300
[ "${QUICK:-0}" = 1 ] && SAFE_COUNTS="--counts 0,1,7" && CYCLES=50
# The one-shot kernels' sizes (see x2-*) for the configurations of more ranks than GPUs.
ONESHOT_M="--counts 0,1,7,257,4095,8193,40000,65537,300001 --types all --big-count 0 --p2p-counts none"
HUGE="--counts none --p2p-counts none --big-count 268435456 --big-types f32
  --big-ops allreduce,allgather,reducescatter,broadcast,reduce,alltoall,sendrecv
  --big-redops sum,premulsum"

# Several "hosts" on this machine (OXCCL_TEST_HOSTS=K gives the workers K NCCL_HOSTIDs): NET
# connections over the built-in sockets between hosts, P2P inside one.
net_configs() {
  run n2-procs-auto      OXCCL_TEST_HOSTS=2 -- --mode procs --ranks 2 $SMALL $BIG1
  run n2-procs-graph     OXCCL_TEST_HOSTS=2 -- --mode procs --ranks 2 $SMALL --big-count 0 --graph 10
  for a in ring tree direct; do
    run n2-procs-$a NCCL_ALGO=$a OXCCL_TEST_HOSTS=2 -- --mode procs --ranks 2 $SMALL --big-count 0
  done
  # LL over the network (LL FIFOs on connections of their own) and Simple, each forced.
  for p in LL Simple; do
    run n2-procs-$p NCCL_PROTO=$p OXCCL_TEST_HOSTS=2 -- --mode procs --ranks 2 $SMALL $BIG1
    run n3-procs-$p NCCL_PROTO=$p OXCCL_TEST_HOSTS=3 -- --mode procs --ranks 3 --counts 0,1,7 --types all --big-count 0
  done
  run n2-procs-LL-graph  NCCL_PROTO=LL OXCCL_TEST_HOSTS=2 -- --mode procs --ranks 2 $SMALL --big-count 0 --graph 10
  run n2-procs-split     OXCCL_TEST_HOSTS=2 -- --mode procs --ranks 2 $SMALL --big-count 0 --split
  run n2-initall-p2p-shm-disabled NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 -- --mode initall --ranks 2 $SMALL $BIG1
  run n3-procs-auto      OXCCL_TEST_HOSTS=3 -- --mode procs --ranks 3 $SMALL $BIG1
  # Every data socket on one of two socket helper threads (non-blocking calls), big messages.
  run n3-procs-shared-helpers OXCCL_SOCKET_WORKERS=2 OXCCL_TEST_HOSTS=3 -- --mode procs --ranks 3 $SMALL $BIG1
  run n4-procs-mixed     OXCCL_TEST_HOSTS=2 -- --mode procs --ranks 4 $SMALL $BIG1
  # Hosts' ranks not numbered together (rank r on host r % 2): rings and trees ordered by host.
  for a in ring tree; do
    run n4-procs-rr-$a NCCL_ALGO=$a OXCCL_TEST_HOSTS=2r -- --mode procs --ranks 4 $SMALL --big-count 0
  done
  run n8-procs-rr-tree   NCCL_ALGO=tree OXCCL_TEST_HOSTS=3r -- --mode procs --ranks 8 --counts 0,1,7,1000 --types f32,bf16,i8 --big-count 0
  run n4-procs-auto      OXCCL_TEST_HOSTS=4 -- --mode procs --ranks 4 $SMALL --big-count 0
  run n4-procs-graph     OXCCL_TEST_HOSTS=4 -- --mode procs --ranks 4 --counts 0,1,7 --types bf16,f32,f64 --big-count 0 --graph 10
  # 8 hosts: each rank's ring and tree peers are connected at init, the other 2-3 on first use
  # (AlltoAll, gather, scatter: NCCL_RUNTIME_CONNECT), also inside a graph capture; and all at
  # init.
  run_want n8-procs-auto 'connected on first use' OXCCL_TEST_HOSTS=8 NCCL_DEBUG=INFO \
    NCCL_DEBUG_SUBSYS=INIT,NET -- --mode procs --ranks 8 --counts 0,1,7 --types all --big-count 0
  run_want n8-procs-graph 'connected on first use' OXCCL_TEST_HOSTS=8 NCCL_DEBUG=INFO \
    NCCL_DEBUG_SUBSYS=INIT,NET -- --mode procs --ranks 8 --counts 0,1,7 --types f32,bf16 --big-count 0 --graph 10
  # 20 hosts: beyond 16 ranks small AllReduce takes the tree, not a direct plan, and 13-15 peers
  # per rank wait for their first use (AlltoAll, gather, scatter).
  run_want n20-procs-auto 'connected on first use' OXCCL_TEST_HOSTS=20 NCCL_DEBUG=INFO \
    NCCL_DEBUG_SUBSYS=INIT,NET -- --mode procs --ranks 20 --counts 0,1,7,1000 --types f32,i8 --big-count 0
  # 16 ranks as hosts, each leaving as soon as it is done: a rank's last slots may still be in
  # its proxy when its kernel ends, and must reach the ranks below it in the tree before its
  # communicator closes the connections (wrong results in about half the runs before).
  for k in 1 2; do
    run_bench n16-bench-uneven-exit-$k OXCCL_TEST_HOSTS=16 NCCL_ALGO=tree -- --mem cuda \
      --launch procs -n 16 --op allreduce -b 32K -e 64K -f 2 -w 5 -i 20
  done
  run n8-procs-connect-at-init NCCL_RUNTIME_CONNECT=0 OXCCL_TEST_HOSTS=8 -- --mode procs --ranks 8 --counts 0,1,7 --types f32,i8 --big-count 0
  # AlltoAll as grouped sends/receives: a channel per rank distance, beyond the pairs' NET
  # connections (2 for pairs no ring or tree joins), which then share them.
  run n8-procs-p2p-alltoall OXCCL_TEST_HOSTS=8 -- --mode procs --ranks 8 --counts 0,1,7,4099 --types f32,i8 --big-count 0 --p2p-alltoall
  run n4-procs-dead-peer OXCCL_TEST_HOSTS=4 -- --mode procs --ranks 4 --dead-peer 1048579
  gdr_configs
  nic_configs
}

# Channels on the network devices nearest the GPU: the test plugin (OXCCL_GDR_PLUGIN, in host
# memory here) reports three loopback devices: one on another root bus, one at a PCI place
# below the GPU's own (nearer than anything else, whatever this machine's PCI tree), one without
# a PCI path. Every channel must go through the middle one: "via NET/OxTest/1", never 0 or 2.
nic_configs() {
  local name=n2-procs-nic-nearest
  selected "$name" || return 0
  if [ -z "${OXCCL_GDR_PLUGIN:-}" ]; then
    echo "$name: skipped: OXCCL_GDR_PLUGIN is not set"
    return 0
  fi
  local gpu
  gpu=$(gpu_sysfs_path)
  local paths="/sys/devices/pci0000:ff/0000:ff:01.0/0000:fe:00.0;$gpu/0000:fd:00.0;-"
  run_want "$name" 'via NET/OxTest/1' NCCL_NET_PLUGIN="$OXCCL_GDR_PLUGIN" NCCL_NET=OxTest \
    OXTEST_NET_GDR=0 OXTEST_NET_PCI_PATHS="$paths" OXCCL_TEST_HOSTS=2 NCCL_DEBUG=INFO \
    NCCL_DEBUG_SUBSYS=INIT,NET -- --mode procs --ranks 2 $SMALL --big-count 0
  if grep -q 'via NET/OxTest/[02]' "$LOG/$name.log"; then
    echo "$name: a channel on a device farther from the GPU (NET/OxTest/0 or /2)"
    TOTAL_FAIL=$((TOTAL_FAIL+1))
  fi
}
# oxccl-bench as a check (BIN/oxccl-bench on BIN/libnccl.so.2): every size it times is checked
# element by element, and its RESULT line counts a pass per size without a wrong element. Its
# ranks end unevenly: each destroys its communicator and exits once its own output checks out.
run_bench() { # name, env..., -- bench args
  local name=$1; shift
  selected "$name" || return 0
  if ! [ -x "$BIN/oxccl-bench" ] || ! [ -f "$BIN/libnccl.so.2" ]; then
    echo "$name: skipped: $BIN has no oxccl-bench and libnccl.so.2"
    return 0
  fi
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  run_exe "$BIN/oxccl-bench" "$name" "${envs[@]}" -- --lib "$BIN/libnccl.so.2" "$@"
}

# `run`, then a failure more unless the log has a line matching WANT.
run_want() { # name, WANT, then run's env... -- args...
  local name=$1 want=$2; shift 2
  selected "$name" || return 0
  run "$name" "$@"
  if ! grep -q "$want" "$LOG/$name.log"; then
    echo "$name: no '$want' in $LOG/$name.log"
    TOTAL_FAIL=$((TOTAL_FAIL+1))
  fi
}

# `run_want` with the plugin's line WANT, then a failure more unless the log shows GPUDirect
# RDMA: a connection named ".../GDRDMA".
run_gdr() { # name, WANT, then run's env... -- args...
  local name=$1
  selected "$name" || return 0
  run_want "$@"
  if ! grep -q '/GDRDMA' "$LOG/$name.log"; then
    echo "$name: GPUDirect RDMA not taken: no '/GDRDMA' in $LOG/$name.log"
    TOTAL_FAIL=$((TOTAL_FAIL+1))
  fi
}

# NET with GPUDirect RDMA: 2 ranks as 2 hosts over the test plugin in its cuda mode, which
# copies GPU memory through the CUDA driver (net/build.rs builds it as
# target/release/build/oxccl-net-*/out/libnccl-net-oxtest-gdr-cuda.so). The FIFOs' slots are in
# GPU memory: registered with regMr as CUDA memory, then with every receive flushed, then
# through a dma-buf (needs CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED; without it oxccl falls back to
# regMr and the configuration fails its check).
gdr_configs() {
  if [ -z "${OXCCL_GDR_PLUGIN:-}" ]; then
    local found
    found=$(ls "$BIN"/build/oxccl-net-*/out/libnccl-net-oxtest-gdr-cuda.so 2>/dev/null | head -1)
    echo "n2-procs-gdr*: skipped: OXCCL_GDR_PLUGIN is not set${found:+ (built: $found)}"
    return 0
  fi
  # The plugin's device at a PCI place below the GPU's (PIX): GDR passes NCCL_NET_GDR_LEVEL's
  # default (PXB) as it would beside a NIC on the GPU's switch.
  local gpu
  gpu=$(gpu_sysfs_path)
  local G=(NCCL_NET_PLUGIN="$OXCCL_GDR_PLUGIN" NCCL_NET=OxTest OXCCL_TEST_HOSTS=2
    OXTEST_NET_PCI_PATHS="$gpu/0000:fd:00.0" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET)
  run_gdr n2-procs-gdr 'OxTest: regMr CUDA' "${G[@]}" -- --mode procs --ranks 2 $SMALL $BIG1
  run_gdr n2-procs-gdr-flush 'OxTest: iflush' "${G[@]}" NCCL_NET_FORCE_FLUSH=1 -- \
    --mode procs --ranks 2 $SMALL $BIG1
  run_gdr n2-procs-gdr-dmabuf 'OxTest: regMrDmaBuf' "${G[@]}" OXTEST_NET_DMABUF=1 -- \
    --mode procs --ranks 2 $SMALL $BIG1
  # The device on another root bus (PHB, beyond PXB): no GDR, host slots, as NCCL decides.
  local name=n2-procs-gdr-far
  run_want "$name" 'GPU Direct RDMA off' "${G[@]}" \
    OXTEST_NET_PCI_PATHS="/sys/devices/pci0000:ff/0000:ff:01.0/0000:fe:00.0" -- \
    --mode procs --ranks 2 $SMALL --big-count 0
  if selected "$name" && grep -q '/GDRDMA' "$LOG/$name.log"; then
    echo "$name: GPUDirect RDMA taken with the device beyond NCCL_NET_GDR_LEVEL"
    TOTAL_FAIL=$((TOTAL_FAIL+1))
  fi
}

# The GPU's /sys/devices path (its PCI place), from nvidia-smi's bus id.
gpu_sysfs_path() {
  local id
  id=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader -i 0 | head -1 | tr 'A-F' 'a-f')
  readlink -f "/sys/bus/pci/devices/${id#0000}"
}

# One host without P2P (NCCL_P2P_DISABLE=1): SHM FIFOs in /dev/shm between every pair.
shm_configs() {
  local S="NCCL_P2P_DISABLE=1"
  run sh2-initall-auto      $S -- --mode initall --ranks 2 $SMALL $BIG1
  run sh2-procs-auto        $S -- --mode procs --ranks 2 $SMALL $BIG1
  run sh2-procs-graph       $S -- --mode procs --ranks 2 $SMALL --big-count 0 --graph 10
  for a in ring tree direct; do
    run sh2-procs-$a $S NCCL_ALGO=$a -- --mode procs --ranks 2 $SMALL --big-count 0
  done
  # SHM runs LL too (packets through the shared segment): each protocol forced, every size.
  for p in LL Simple; do
    run sh2-procs-$p $S NCCL_PROTO=$p -- --mode procs --ranks 2 $SMALL $BIG1
    run sh3-procs-$p $S NCCL_PROTO=$p -- --mode procs --ranks 3 --counts 0,1,7 --types all --big-count 0
  done
  run sh2-procs-split       $S -- --mode procs --ranks 2 $SMALL --big-count 0 --split
  run sh2-procs-offsets-vmm $S -- --mode procs --ranks 2 $SMALL --big-count 0 --offsets --vmm
  run sh3-procs-auto        $S -- --mode procs --ranks 3 $SMALL $BIG1
  run sh4-procs-auto        $S -- --mode procs --ranks 4 $SMALL $BIG1
  run sh4-initall-graph     $S -- --mode initall --ranks 4 --counts 0,1,7 --types bf16,f32,f64 --big-count 0 --graph 10
  run sh4-procs-shm-net     $S OXCCL_TEST_HOSTS=2 -- --mode procs --ranks 4 $SMALL $BIG1
  run sh8-procs-auto        $S -- --mode procs --ranks 8 --counts 0,1,7 --types all --big-count 0
  run sh8-procs-p2p-alltoall $S -- --mode procs --ranks 8 --counts 0,1,7,4099 --types f32,i8 --big-count 0 --p2p-alltoall
  run sh4-procs-dead-peer   $S -- --mode procs --ranks 4 --dead-peer 1048579
}
# The safe Rust API's matrix (safe-check, when built into BIN) and the reliability checks that
# torch.distributed drives on the C library (BIN/libnccl.so.2): the watchdog's report of a
# stalled rank (T12) and check mode's refusal of a mismatched count (T13).
api_configs() {
  if [ -x "$BIN/safe-check" ]; then
    # Its misuse scenarios put several ranks of the process on one GPU: 32 hardware queues, or
    # under MPS they hang (docs/kernels.md, ranks sharing a GPU).
    local Q=CUDA_DEVICE_MAX_CONNECTIONS=32
    run_exe "$BIN/safe-check" a1-safe-matrix $Q -- --backend cuda $SAFE_COUNTS
    run_exe "$BIN/safe-check" a3-safe-matrix $Q -- --backend cuda --ranks 3 --counts 0,1,7,4099
    run_exe "$BIN/safe-check" t5-safe-cycles $Q -- --backend cuda --ranks 2 --cycles $CYCLES
  fi
  # A kernel compiled against NVIDIA's nccl_device.h (device-api-check, built by
  # scripts/nccl-tests/pack.sh) on BIN/libnccl.so.2: LSA windows, barriers and the window table,
  # 2 and 4 ranks (sharing GPUs where there are fewer), one thread each. device-api-check-ox is
  # the same program compiled against oxccl's include/nccl_device.h.
  if [ -f "$BIN/libnccl.so.2" ]; then
    local dir
    dir="$(cd "$BIN" && pwd)"
    if [ -x "$BIN/device-api-check" ]; then
      run_exe "$BIN/device-api-check" d2-device-api LD_LIBRARY_PATH="$dir" -- 2 1048579 3
      run_exe "$BIN/device-api-check" d4-device-api LD_LIBRARY_PATH="$dir" -- 4 65537 5
    fi
    if [ -x "$BIN/device-api-check" ]; then
      # A process per rank on one host: the LSA windows imported across processes.
      run_exe "$BIN/device-api-check" p2-device-api LD_LIBRARY_PATH="$dir" DEVICE_CHECK_HOSTS=1 -- 2 65537 3
    fi
    if [ -x "$BIN/device-api-check-ox" ]; then
      run_exe "$BIN/device-api-check-ox" d2-device-api-ox LD_LIBRARY_PATH="$dir" -- 2 1048579 3
    fi
    # GIN through oxccl's host proxy (device-gin-check, the same way): every rank puts into
    # every rank, itself included. Ranks sharing a GPU make more streams than CUDA's default 8
    # hardware queues, and a window copy sharing a queue with a kernel that waits for it would
    # stall (oxccl warns and names this variable), hence 32 queues.
    if [ -x "$BIN/device-gin-check" ]; then
      run_exe "$BIN/device-gin-check" d2-device-gin LD_LIBRARY_PATH="$dir" CUDA_DEVICE_MAX_CONNECTIONS=32 -- 2 65537 3
      run_exe "$BIN/device-gin-check" d4-device-gin LD_LIBRARY_PATH="$dir" CUDA_DEVICE_MAX_CONNECTIONS=32 -- 4 1048579 2
      # A process per rank (DEVICE_CHECK_HOSTS, check.h), on two "hosts": every put and the
      # world barrier's rail half cross the network; with four, LSA pairs inside each host.
      run_exe "$BIN/device-gin-check" p2h2-device-gin LD_LIBRARY_PATH="$dir" DEVICE_CHECK_HOSTS=2 -- 2 65537 3
      run_exe "$BIN/device-gin-check" p4h2-device-gin LD_LIBRARY_PATH="$dir" DEVICE_CHECK_HOSTS=2 -- 4 65537 2
    fi
    if [ -x "$BIN/device-gin-check-ox" ]; then
      run_exe "$BIN/device-gin-check-ox" d2-device-gin-ox LD_LIBRARY_PATH="$dir" CUDA_DEVICE_MAX_CONNECTIONS=32 -- 2 65537 3
    fi
  fi
  if [ -f "$BIN/libnccl.so.2" ] && python3 -c "import torch" 2>/dev/null; then
    local lib share=
    lib="$(cd "$BIN" && pwd)/libnccl.so.2"
    [ "$NGPU" -lt 2 ] && share=--share-gpu
    run_exe python3 t12-torch-stall LD_PRELOAD="$lib" -- tests/clients/torch_hang.py stall $share
    run_exe python3 t13-torch-count LD_PRELOAD="$lib" -- tests/clients/torch_hang.py count $share
  fi
}
if [ "${NET_ONLY:-0}" = 1 ]; then
  net_configs
  shm_configs
  echo "==== summary ($NGPU GPUs) ===="
  printf '%s\n' "${SUMMARY[@]}"
  echo "TOTAL pass=$TOTAL_PASS fail=$TOTAL_FAIL"
  exit 0
fi

run r1-initall -- --mode initall --ranks 1 $SMALL $BIG
run g1-initall-graph -- --mode initall --ranks 1 $SMALL $BIG1 $GRAPH
if [ "$NGPU" -ge 2 ]; then
  run r2-initall-auto   -- --mode initall --ranks 2 $SMALL $BIG
  for a in ring tree direct; do
    run r2-initall-$a NCCL_ALGO=$a -- --mode initall --ranks 2 $SMALL $BIG
  done
  # Each protocol forced (LL also on the 1M-element cases it would never get by default).
  for p in LL Simple; do
    run r2-initall-$p NCCL_PROTO=$p -- --mode initall --ranks 2 $SMALL $BIG
  done
  run r2-procs-LL NCCL_PROTO=LL -- --mode procs --ranks 2 $SMALL $BIG1
  run r2-threads-auto   -- --mode threads --ranks 2 $SMALL $BIG
  run r2-procs-auto     -- --mode procs --ranks 2 $SMALL $BIG
  # Each algorithm forced across processes; the threads variants duplicated these and the
  # initall ones and were dropped to make room for the configurations below.
  for a in ring tree direct; do
    run r2-procs-$a NCCL_ALGO=$a -- --mode procs --ranks 2 $SMALL --big-count 0
  done
  run g2-initall-graph  -- --mode initall --ranks 2 $SMALL $BIG1 $GRAPH
  run g2-procs-graph    -- --mode procs --ranks 2 $SMALL $BIG1 $GRAPH
  run s2-threads-split  -- --mode threads --ranks 2 $SMALL $BIG1 --split
  run s2-procs-split    -- --mode procs --ranks 2 $SMALL $BIG1 --split
  run o2-initall-offsets-vmm -- --mode initall --ranks 2 $SMALL $BIG2 --offsets --vmm
  run o2-procs-offsets-vmm   -- --mode procs --ranks 2 $SMALL $BIG2 --offsets --vmm
  # Without VMM (NCCL's switch): cuMemAlloc FIFOs, peer access in one process, cuIpc between two.
  run l2-initall-legacy NCCL_CUMEM_ENABLE=0 -- --mode initall --ranks 2 $SMALL $BIG1
  run l2-procs-legacy   NCCL_CUMEM_ENABLE=0 -- --mode procs --ranks 2 $SMALL $BIG1 --vmm
  # Zero-copy plans at every size, in a graph too, and their fallback branch.
  run z2-initall-zc       OXCCL_ZERO_COPY=1 -- --mode initall --ranks 2 $SMALL $BIG
  run z2-threads-zc-graph OXCCL_ZERO_COPY=1 -- --mode threads --ranks 2 $SMALL $BIG1 $GRAPH
  run_want z2-initall-zc-hide1 "exposed false" OXCCL_ZERO_COPY=1 NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=COLL \
    -- --mode initall --ranks 2 $SMALL $BIG1 --hide-rank 1
  # One-shot kernels at every size they take: LL with one to four packets per thread, then
  # Simple (300001 f64 elements do not fit: the plans run); Simple alone at every size; in a
  # graph across processes too; and the plans the tuner gives small messages without them.
  # AlltoAllv at 4095 int8 once hung (ranks tuned it apart).
  ONESHOT="--counts 0,1,7,257,4095,8193,40000,65537,300001 --types all --big-count 0 --p2p-counts none"
  run x2-initall-oneshot       OXCCL_ONE_SHOT=1 -- --mode initall --ranks 2 $ONESHOT
  run x2-procs-oneshot-graph   OXCCL_ONE_SHOT=1 -- --mode procs --ranks 2 $ONESHOT $GRAPH
  run x2-initall-oneshot-simple OXCCL_ONE_SHOT=1 NCCL_PROTO=Simple -- --mode initall --ranks 2 $ONESHOT
  run x2-initall-no-oneshot    OXCCL_ONE_SHOT=0 -- --mode initall --ranks 2 $SMALL --big-count 0
  # The HIP backend's block shape (256 threads) on the shared kernels.
  run w2-initall-256threads OXCCL_BLOCK_THREADS=256 -- --mode initall --ranks 2 $SMALL $BIG
  run w2-procs-256threads   OXCCL_BLOCK_THREADS=256 -- --mode procs --ranks 2 $SMALL $BIG1
  # Send/receive groups and AlltoAll from 64 MiB per message run their sends and receives in
  # blocks of their own (split_directions_min): out of place, and AlltoAll in place (order
  # tokens).
  run p2-initall-split-64M -- --mode initall --ranks 2 --counts none --p2p-counts none \
    --big-count 16777216 --big-types f32 --big-ops alltoall,sendrecv,scatter,gather --in-place-alltoall
  if [ "${QUICK:-0}" != 1 ]; then
    run_limit 180 h2-initall-256M -- --mode initall --ranks 2 $HUGE
  fi
fi
# More ranks than two, sharing GPUs where there are fewer. No thread per rank: the test's own
# cuMemFree would wait for the whole device, peers' kernels included, which wait for the freeing
# rank's next launch.
if [ "$NGPU" -ge 1 ]; then
  run m3-initall-auto -- --mode initall --ranks 3 $SMALL $BIG1
  run m4-initall-auto -- --mode initall --ranks 4 $SMALL $BIG1
  for a in ring tree direct; do
    run m4-initall-$a NCCL_ALGO=$a -- --mode initall --ranks 4 $SMALL $BIG1
  done
  for p in LL Simple; do
    run m4-initall-$p NCCL_PROTO=$p -- --mode initall --ranks 4 $SMALL --big-count 0
  done
  run m4-initall-graph -- --mode initall --ranks 4 $SMALL --big-count 0 --graph 10
  run m4-initall-zc OXCCL_ZERO_COPY=1 -- --mode initall --ranks 4 $SMALL $BIG1
  run m4-initall-split -- --mode initall --ranks 4 $SMALL --big-count 0 --split
  run m4-initall-offsets-vmm -- --mode initall --ranks 4 $SMALL --big-count 0 --offsets --vmm
  # 22464 checks (14976 at 8 ranks), most at 40000-300001 elements: over 60 s on one H100,
  # where 25 s reached case 4812 (they are slow, not stuck).
  run_limit 240 m4-initall-oneshot OXCCL_ONE_SHOT=1 -- --mode initall --ranks 4 $ONESHOT_M
  run_limit 240 m4-initall-oneshot-simple OXCCL_ONE_SHOT=1 NCCL_PROTO=Simple -- --mode initall --ranks 4 $ONESHOT_M
  run m8-initall-auto -- --mode initall --ranks 8 $SMALL $BIG1
  run m8-initall-graph -- --mode initall --ranks 8 $SMALL --big-count 0 --graph 10
  # A process per rank: every peer's FIFO imported through VMM handles. Processes sharing a GPU
  # take turns on it (no MPS), so each spinning kernel waits for its peers' time slices: slow,
  # hence few cases.
  run m4-procs-auto -- --mode procs --ranks 4 $SMALL $BIG1
  run m8-procs-auto -- --mode procs --ranks 8 $SMALL --big-count 0
  # Arenas registered as symmetric windows, mapped at one address in every process: zero-copy
  # plans read and write the peers' arenas across processes (forced at every size; one-shot
  # kernels off so that small cases reach the plans), then the tuner's choice.
  run_want m2-procs-window-zc "zero-copy true exposed true" OXCCL_ZERO_COPY=1 OXCCL_ONE_SHOT=0 \
    NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=COLL -- --mode procs --ranks 2 $SMALL $BIG1 --window
  run_want m4-procs-window-zc "zero-copy true exposed true" OXCCL_ZERO_COPY=1 OXCCL_ONE_SHOT=0 \
    NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=COLL -- --mode procs --ranks 4 $SMALL --big-count 0 --window
  run m4-procs-window -- --mode procs --ranks 4 $SMALL $BIG1 --window
  # A rank exits without a goodbye: the others' AllReduce (plan, one-shot) ends with an error.
  run m4-procs-dead-peer -- --mode procs --ranks 4 --dead-peer 1048579
  run m2-procs-dead-peer-oneshot OXCCL_ONE_SHOT=1 -- --mode procs --ranks 2 --dead-peer 1000
  run m4-procs-oneshot-graph OXCCL_ONE_SHOT=1 -- --mode procs --ranks 4 $ONESHOT_M --types bf16,f64 --graph 10
  run_limit 240 m8-initall-oneshot OXCCL_ONE_SHOT=1 -- --mode initall --ranks 8 $ONESHOT_M --types i8,bf16,f32,f64
  # The two-shot AllReduce at every size it takes (parts of 3 ranks are uneven; 2 ranks take
  # its two-operand path), the log showing it ran; other operations run as they would.
  run_want m3-initall-twoshot "one-shot TwoShot" OXCCL_TWO_SHOT=1 NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=COLL \
    -- --mode initall --ranks 3 --counts 0,1,7,4095,65537,300001 --types f32,f16 --big-count 0 --p2p-counts none
  run_limit 240 m4-initall-twoshot OXCCL_TWO_SHOT=1 -- --mode initall --ranks 4 $ONESHOT_M
  run m2-initall-twoshot OXCCL_TWO_SHOT=1 -- --mode initall --ranks 2 $ONESHOT_M --types i8,bf16,f32,f64
  run m4-procs-twoshot-graph OXCCL_TWO_SHOT=1 -- --mode procs --ranks 4 $ONESHOT_M --types bf16,f64 --graph 10
  run_limit 240 m8-initall-twoshot OXCCL_TWO_SHOT=1 -- --mode initall --ranks 8 $ONESHOT_M --types i8,bf16,f32,f64
  run m4-procs-dead-peer-twoshot OXCCL_TWO_SHOT=1 -- --mode procs --ranks 4 --dead-peer 1000
fi
net_configs
shm_configs
api_configs
echo "==== summary ($NGPU GPUs) ===="
printf '%s\n' "${SUMMARY[@]}"
echo "TOTAL pass=$TOTAL_PASS fail=$TOTAL_FAIL"
