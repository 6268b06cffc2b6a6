#!/usr/bin/env bash
# One call on the GPU machine (from the repository root, .carry carried): unpacks our build
# (pack.sh) and runs the steps named on the command line, within BUDGET seconds (default 540);
# everything it wrote comes back as $OUT/logs.tgz.
#
#   safe                     safe-check on every GPU (matrix and misuse scenarios)
#   hip                      tests/gpu/hip-on-cuda.sh, QUICK, with the C ABI test (needs
#                            .carry/hip.tar.xz from pack.sh --hip; HIP_ONLY=REGEX selects)
#   suite                    tests/gpu/run.sh, QUICK
#   clients                  tests/clients/run.sh --only ${CLIENTS_ONLY:-torch_ops} (torch_ops:
#                            PyTorch's collectives on every GPU; symm_mem: TORCH_SYMMMEM=NCCL),
#                            ours beside NVIDIA's
#   modes:OP[:ENV]           our library alone, OP 512 KiB-64 MiB in four ways of driving the GPUs:
#                            one thread (-g N), a thread each (-t N -g 1), and both in CUDA
#                            graphs (-G 10): which costs come from the GPUs, which from the host
#   sweep:OP:VAR=A/B/..[:ENV] our library alone, OP 512 KiB-64 MiB with one thread driving every
#                            GPU, once per value of VAR (ENV: more VAR=value pairs joined by +,
#                            set in every run), e.g. sweep:all_reduce:OXCCL_FIFO_SLOTS=4/8/16:NCCL_ALGO=ring
#   plugins                  NVIDIA's example tuner, example profiler and Inspector (built here,
#                            unchanged, into .carry/nv-plugins/) under all_reduce_perf on 2 GPUs,
#                            one thread per GPU: the tuner's CSV choice in our TUNING log, every
#                            rank's AllReduce in the profiler's dumps and the Inspector's JSON,
#                            and the 8-byte AllReduce with and without the profiler, both libraries
#   proxy-events             NVIDIA's example profiler (.carry/nv-plugins) on two "hosts" of this
#                            machine (NET between them, Simple then LL forced), under
#                            gpu-check's every-operation run: the ProxyOp and ProxyStep events
#                            in each rank's dump (each counted as its begin and end lines)
#   gin                      GIN through oxccl's host proxy on GPUs: the GPU
#                            suite's device API configurations (LSA d*-device-api and GIN
#                            d*-device-gin, ranks sharing GPUs where there are fewer), then
#                            nccl-tests' GIN and hybrid LSA+GIN AlltoAll
#                            (alltoall_perf -R 2 -D 3 and -D 4, a thread per GPU, 8 B-16 MiB,
#                            -c 1), ours beside NVIDIA's (which needs InfiniBand or a GIN plugin
#                            for it); GIN_SUITE=REGEX picks other suite configurations
#   gin4                     nccl-tests' GIN and hybrid AlltoAll (-R 2 -D 3, -D 4, 8 B-16 MiB,
#                            -c 1) at 4 ranks as 2 hosts of 2 (ranks 0-1 and 2-3: NCCL_HOSTID
#                            and OXCCL_MPI_HOSTNAME), a process per rank through nccl-tests' MPI
#                            build and scripts/nccl-tests/mpi-shim; GPUs 0-3 where there are 4,
#                            else each host's ranks on GPUs 0 and 1 under MPS; ours beside NVIDIA's
#   ntN:OPS/MODES            run.sh on N GPUs, e.g. nt2:all_reduce,sendrecv/g,t,G,R (mode p: a
#                            process per GPU)
#   tune                     oxccl-bench tune --column nvlink on every GPU, 8 B-1 GiB (the derived
#                            column and the raw rows in tune/; here, `oxccl-bench tune --column
#                            nvlink --from DIR --apply core/src/plan/heuristics.txt` writes it)
#   chan:OP                  our library only, OP (e.g. sendrecv) 8 KiB-4 MiB with one thread per
#                            GPU and in CUDA graphs, with OXCCL_NCHANNELS 4/8/16/32 and (sendrecv)
#                            NCCL_P2P_LL_THRESHOLD 0: which channel count and protocol win where
#   api-cost                 oxccl-bench api-cost on every GPU, our library and NVIDIA's: the
#                            host time of ncclCommCount and ncclCommUserRank per call
#   reg:OP                   our library and NVIDIA's, OP 64 KiB-4 MiB driven by one thread with
#                            -R 0, 1 and 2 (plain, ncclCommRegister, symmetric windows): what
#                            registration costs each
#   window:OPS               oxccl-bench, one process per GPU (--launch procs), OPS (e.g.
#                            allreduce,allgather) 64 KiB-256 MiB out of place, buffers from
#                            cudaMalloc and from ncclMemAlloc registered as symmetric windows,
#                            our library beside NVIDIA's (--compare): what windows give each
#
# OXCCL_COMMIT names the commit the build came from in the logs.
set -u
work=/tmp/device-run
mkdir -p "$work" /tmp/oxccl-build
tar -C /tmp/oxccl-build -xJf .carry/oxccl-gpu.tar.xz
export NCCL_NVLS_ENABLE=0
end=$(( $(date +%s) + ${BUDGET:-540} ))
left() { echo $(( end - $(date +%s) )); }
pack() { tar -C "$work" -czf "$OUT/logs.tgz" . ; }
trap pack EXIT
{ nvidia-smi -L; nvidia-smi topo -m; } > "$work/gpus.txt" 2>&1
ngpus=$(nvidia-smi -L | wc -l)
# NVIDIA's library directory (PyTorch's wheel).
nvlib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib"))' 2>/dev/null)
# lib_dir ours|nv: the directory of that library's libnccl.so.2.
lib_dir() { if [ "$1" = ours ]; then echo /tmp/oxccl-build/lib; else echo "$nvlib"; fi; }
# perf_bin OP: nccl-tests' OP_perf, unpacked from .carry on first use.
perf_bin() {
  [ -x "$work/nt-bin/nccl-tests/$1_perf" ] || { mkdir -p "$work/nt-bin"; tar -xJf .carry/nccl-tests.tar.xz -C "$work/nt-bin"; }
  echo "$work/nt-bin/nccl-tests/$1_perf"
}
# row_times LOG: size:out-of-place-time for every row of an nccl-tests log, on one line.
row_times() { awk '/^ +[0-9]+ +[0-9]+/{printf "%s:%s ", $1, $6}' "$1"; }
# counts OUT: the configurations and pass/fail totals of a test script's output. Each
# configuration's line appears as it ends and again in the summary: with a summary, only its
# lines count (a run cut short has only the first).
counts() {
  awk '/^==== summary/{n=p=f=0; next}
       /rc=/{n++; for(i=1;i<=NF;i++){if($i~/^pass=/){split($i,a,"=");p+=a[2]} if($i~/^fail=/){split($i,b,"=");f+=b[2]}}}
       END{print n" configurations, pass "p", fail "f}' "$1"
}
# ours_mid DIR TAG OP "FLAGS" [VAR=VALUE...]: our library alone, OP 512 KiB-64 MiB with FLAGS
# and the variables, logged to DIR/TAG.log; prints the tag and the times.
ours_mid() {
  local dir=$1 tag=$2 op=$3 flags=$4 bin; shift 4
  bin=$(perf_bin "$op"); mkdir -p "$work/$dir"
  # shellcheck disable=SC2086 # FLAGS are words
  env LD_LIBRARY_PATH=/tmp/oxccl-build/lib "$@" timeout 40 "$bin" -b 512K -e 64M -f 4 $flags -c 0 -w 5 -n 20 \
    > "$work/$dir/$tag.log" 2>&1
  echo "$tag $(row_times "$work/$dir/$tag.log")"
}
for step in "$@"; do
  [ "$(left)" -gt 20 ] || { echo "out of time before $step"; break; }
  echo "== $step ($(left) s left)"
  case "$step" in
    safe)
      timeout $(( $(left) - 10 )) /tmp/oxccl-build/bin/safe-check --backend cuda > "$work/safe-check.log" 2>&1
      echo "safe-check rc=$?"; grep RESULT "$work/safe-check.log" ;;
    hip)
      mkdir -p "$work/hip" /tmp/oxccl-hip
      tar -C /tmp/oxccl-hip -xJf .carry/hip.tar.xz
      cp /tmp/oxccl-hip/hip/bin/* /tmp/oxccl-build/bin/
      RCCL_PREFIX=/tmp/oxccl-hip/hip QUICK=1 ONLY="${HIP_ONLY:-.}" timeout $(( $(left) - 10 )) \
        tests/gpu/hip-on-cuda.sh /tmp/oxccl-build/bin "$work/hip" > "$work/hip.out" 2>&1
      echo "hip-on-cuda rc=$?"; counts "$work/hip.out" ;;
    suite)
      mkdir -p "$work/suite"
      QUICK=1 timeout $(( $(left) - 10 )) tests/gpu/run.sh /tmp/oxccl-build/bin "$work/suite" > "$work/suite.out" 2>&1
      echo "suite rc=$?"; counts "$work/suite.out" ;;
    clients)
      CLIENT_TIMEOUT=$(( $(left) / 2 - 10 )) LOG_DIR="$work/clients" timeout $(( $(left) - 10 )) \
        bash tests/clients/run.sh /tmp/oxccl-build/lib --only "${CLIENTS_ONLY:-torch_ops}" > "$work/clients.log" 2>&1
      echo "clients rc=$?"; tail -15 "$work/clients.log" ;;
    plugins)
      mkdir -p "$work/plugins"
      P=$PWD/.carry/nv-plugins; ar=$(perf_bin all_reduce); pd="$work/plugins"
      ours="LD_LIBRARY_PATH=/tmp/oxccl-build/lib:/usr/local/cuda/lib64"
      printf 'allreduce,0,65536,tree,simple,-1,-1,-1,-1,-1\nallreduce,65537,4294967295,ring,simple,3,-1,-1,-1,-1\n' > "$pd/tuner.conf"
      env $ours NCCL_TUNER_PLUGIN=$P/libnccl-tuner-example.so NCCL_TUNER_CONFIG_FILE="$pd/tuner.conf" \
        NCCL_DEBUG=TRACE NCCL_DEBUG_SUBSYS=TUNING timeout 60 "$ar" -t 2 -g 1 -b 4K -e 1M -f 16 -c 1 -n 5 -w 1 > "$pd/tuner.log" 2>&1
      echo "tuner rc=$? $(grep -c 'tuner plugin chose Tree/Simple' "$pd/tuner.log") tree/simple, $(grep -c 'tuner plugin chose Ring/Simple x3' "$pd/tuner.log") ring/simple x3, wrong: $(awk '/^ +[0-9]+ +[0-9]+/{w+=$9+$13} END{print w+0}' "$pd/tuner.log")"
      mkdir -p "$pd/dump"
      env $ours NCCL_PROFILER_PLUGIN=$P/libnccl-profiler-example.so NCCL_PROFILE_EVENT_MASK=2054 \
        NCCL_PROFILE_DUMP_FILE="$pd/dump/ours" timeout 60 "$ar" -t 2 -g 1 -b 8 -e 64K -f 32 -c 1 -n 5 -w 1 > "$pd/profiler.log" 2>&1
      echo "profiler rc=$? dumps: $(ls "$pd/dump" | wc -l), with AllReduce: $(grep -l '"name": "AllReduce"' "$pd"/dump/* 2>/dev/null | wc -l), with kernel launches: $(grep -l KERNEL_LAUNCH "$pd"/dump/* 2>/dev/null | wc -l)"
      mkdir -p "$pd/inspector"
      env $ours NCCL_PROFILER_PLUGIN=$P/libnccl-profiler-inspector.so NCCL_INSPECTOR_ENABLE=1 \
        NCCL_INSPECTOR_DUMP_DIR="$pd/inspector" NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=100000 \
        timeout 60 "$ar" -t 2 -g 1 -b 64K -e 16M -f 4 -c 1 -n 20 -w 2 > "$pd/inspector.log" 2>&1
      echo "inspector rc=$? files: $(find "$pd/inspector" -type f | wc -l), AllReduce lines: $(cat $(find "$pd/inspector" -type f) 2>/dev/null | grep -ci allreduce), kernel_gpu: $(cat $(find "$pd/inspector" -type f) 2>/dev/null | grep -c kernel_gpu)"
      for lib in ours nv; do
        dir=$(lib_dir $lib)
        for prof in none example; do
          [ "$(left)" -gt 15 ] || break
          extra=(); [ $prof = example ] && extra=(NCCL_PROFILER_PLUGIN=$P/libnccl-profiler-example.so NCCL_PROFILE_EVENT_MASK=4095 NCCL_PROFILE_DUMP_FILE="$pd/cost-$lib")
          env LD_LIBRARY_PATH=$dir:/usr/local/cuda/lib64 "${extra[@]}" timeout 60 "$ar" -t 2 -g 1 -b 8 -e 8 -c 0 -n 2000 -w 200 > "$pd/cost-$lib-$prof.log" 2>&1
          echo "8-byte AllReduce $lib, profiler $prof: $(awk '/^ +8 +2/{print $6" / "$10" us"}' "$pd/cost-$lib-$prof.log")"
        done
      done ;;
    gin)
      mkdir -p "$work/gin"
      # The process-per-rank configurations share the GPU(s) concurrently under MPS.
      # shellcheck disable=SC1091
      source tests/gpu/mps.sh start > "$work/gin/mps.log" 2>&1
      QUICK=1 ONLY="${GIN_SUITE:-device-}" timeout $(( $(left) / 2 )) tests/gpu/run.sh /tmp/oxccl-build/bin "$work/gin/suite" > "$work/gin/suite.out" 2>&1
      echo "device API rc=$?"; counts "$work/gin/suite.out"
      bin=$(perf_bin alltoall)
      for d in 3 4; do
        for lib in ours nv; do
          log="$work/gin/alltoall-D$d-$lib.log"
          env LD_LIBRARY_PATH="$(lib_dir $lib):/usr/local/cuda/lib64" timeout 120 "$bin" -t "$ngpus" -g 1 \
            -R 2 -D $d -b 8 -e 16M -f 4 -c 1 -n 5 -w 1 > "$log" 2>&1
          echo "GIN AlltoAll -D $d, $lib: rc=$? wrong: $(awk '/^ +[0-9]+ +[0-9]+/{w+=$9+$13} END{print w+0}' "$log")"
          tail -4 "$log"
        done
      done
      bash tests/gpu/mps.sh stop >> "$work/gin/mps.log" 2>&1 ;;
    gin4)
      mkdir -p "$work/gin4"
      bin=$(perf_bin alltoall); mpi=$(dirname "$bin")/mpi
      [ "$ngpus" -ge 4 ] || { source tests/gpu/mps.sh start > "$work/gin4/mps.log" 2>&1; }
      for d in 3 4; do
        for lib in ours nv; do
          log="$work/gin4/alltoall-D$d-$lib.log"
          # Each host's ranks are its local ranks 0 and 1: on 4 GPUs, host h sees GPUs 2h, 2h+1.
          env LD_LIBRARY_PATH="$(lib_dir $lib):$mpi:/usr/local/cuda/lib64" NGPUS="$ngpus" \
            timeout -k 10 120 scripts/nccl-tests/mpi-shim/launch.sh 4 -- sh -c \
            'h=$((OXCCL_MPI_RANK / 2)); [ "$NGPUS" -ge 4 ] && export CUDA_VISIBLE_DEVICES=$((2 * h)),$((2 * h + 1));
             NCCL_HOSTID=host$h OXCCL_MPI_HOSTNAME=host$h exec "$0" "$@"' \
            "$mpi/alltoall_perf" -g 1 -R 2 -D $d -b 8 -e 16M -f 4 -c 1 -n 5 -w 1 > "$log" 2>&1
          echo "GIN AlltoAll -D $d at 4 ranks as 2 hosts, $lib: rc=$? wrong: $(awk '/^ +[0-9]+ +[0-9]+/{w+=$9+$13} END{print w+0}' "$log")"
          tail -4 "$log"
        done
      done
      [ "$ngpus" -ge 4 ] || bash tests/gpu/mps.sh stop >> "$work/gin4/mps.log" 2>&1 ;;
    proxy-events)
      P=$PWD/.carry/nv-plugins
      for proto in Simple LL; do
        pe="$work/proxy-events-$proto"; mkdir -p "$pe/dump"
        env LD_LIBRARY_PATH=/tmp/oxccl-build/lib:/usr/local/cuda/lib64 OXCCL_TEST_HOSTS=2 NCCL_PROTO=$proto \
          NCCL_PROFILER_PLUGIN=$P/libnccl-profiler-example.so NCCL_PROFILE_EVENT_MASK=26 \
          NCCL_PROFILE_DUMP_FILE="$pe/dump/ours" timeout 120 /tmp/oxccl-build/bin/gpu-check --mode procs \
          --ranks 2 --counts 0,1,7,300001 --types f32,bf16 --big-count 0 > "$pe/check.log" 2>&1
        echo "proxy events, $proto: rc=$? $(grep -h RESULT "$pe/check.log" | tail -1) dumps: $(ls "$pe/dump" | wc -l)"
        for f in "$pe"/dump/*; do
          echo "  $(basename "$f"): $(for n in ProgressSend ProgressRecv SendWait RecvWait; do printf '%s %s ' $n "$(grep -c "\"$n\"" "$f")"; done)"
        done
      done ;;
    modes:*)
      IFS=: read -r _ op fixed <<< "$step"
      extra=(); [ -n "$fixed" ] && IFS=+ read -r -a extra <<< "$fixed"
      for mode in "-g $ngpus" "-t $ngpus -g 1" "-g $ngpus -G 10" "-t $ngpus -g 1 -G 10"; do
        [ "$(left)" -gt 15 ] || break
        ours_mid modes "$op$(echo "$mode" | tr -d ' ')${fixed:+-${fixed//[=+]/_}}" "$op" "$mode" "${extra[@]}"
      done ;;
    sweep:*)
      IFS=: read -r _ op spec fixed <<< "$step"; var=${spec%%=*}; vals=${spec#*=}
      extra=(); [ -n "$fixed" ] && IFS=+ read -r -a extra <<< "$fixed"
      for v in ${vals//\// }; do
        [ "$(left)" -gt 15 ] || break
        ours_mid sweep "$op-$var-$v${fixed:+-${fixed//[=+]/_}}" "$op" "-g $ngpus" "${extra[@]}" "$var=$v"
      done ;;
    nt*:*)
      n=${step#nt}; n=${n%%:*}; rest=${step#*:}; ops=${rest%%/*}; modes=${rest#*/}
      timeout $(( $(left) - 10 )) scripts/nccl-tests/run.sh --ours /tmp/oxccl-build/lib --out "$work/nt$n" \
        --ngpus "$n" --ops "$ops" --modes "$modes" --timeout 60 > "$work/nt$n-run.log" 2>&1
      echo "nccl-tests on $n GPUs rc=$?"; tail -3 "$work/nt$n-run.log" ;;
    tune)
      timeout $(( $(left) - 10 )) /tmp/oxccl-build/bin/oxccl-bench tune --column nvlink --out "$work/tune" \
        -- --lib /tmp/oxccl-build/lib/libnccl.so.2 -b 8 -e 1G -f 4 -w 2 -i 10 -c 0 > "$work/tune.log" 2>&1
      echo "tune rc=$?"; tail -12 "$work/tune.log" ;;
    chan:*)
      op=${step#chan:}; mkdir -p "$work/chan"; bin=$(perf_bin "$op")
      for mode in "-t $ngpus -g 1" "-t $ngpus -g 1 -G 10"; do
        for th in "" 0; do
          for ch in 4 8 16 32; do
            [ "$(left)" -gt 15 ] || break
            tag="$op-$(echo "$mode" | tr -d ' ')-ch$ch${th:+-ll$th}"
            env LD_LIBRARY_PATH=/tmp/oxccl-build/lib OXCCL_NCHANNELS=$ch ${th:+NCCL_P2P_LL_THRESHOLD=$th} \
              timeout 30 "$bin" -b 8K -e 4M -f 2 $mode -c 0 -w 5 -n 50 > "$work/chan/$tag.log" 2>&1
            echo "$tag $(row_times "$work/chan/$tag.log")"
          done
          [ "$op" = sendrecv ] || break
        done
      done ;;
    api-cost)
      for lib in ours nv; do
        dir=$(lib_dir $lib)
        timeout 60 /tmp/oxccl-build/bin/oxccl-bench api-cost --lib "$dir/libnccl.so.2" "$ngpus" \
          > "$work/api-cost-$lib.log" 2>&1
        echo "api-cost $lib rc=$?: $(awk '/^rank/{printf "%s ", $3}' "$work/api-cost-$lib.log")ns"
      done ;;
    reg:*)
      op=${step#reg:}; mkdir -p "$work/reg"; bin=$(perf_bin "$op")
      for r in 0 1 2; do
        for lib in ours nv; do
          [ "$(left)" -gt 15 ] || break
          dir=$(lib_dir $lib)
          tag="$op-R$r-$lib"
          env LD_LIBRARY_PATH=$dir timeout 30 "$bin" -b 64K -e 4M -f 2 \
            -g "$ngpus" -R $r -c 0 -w 5 -n 50 > "$work/reg/$tag.log" 2>&1
          echo "$tag $(row_times "$work/reg/$tag.log")"
        done
      done ;;
    window:*)
      ops=${step#window:}; mkdir -p "$work/window"
      for reg in none window; do
        [ "$(left)" -gt 30 ] || break
        timeout $(( $(left) / 2 )) /tmp/oxccl-build/bin/oxccl-bench --lib /tmp/oxccl-build/lib/libnccl.so.2 \
          --compare "$nvlib/libnccl.so.2" --launch procs -n "$ngpus" --op "$ops" --reg $reg \
          -b 64K -e 256M -f 4 -w 5 -i 20 -c 1 --json "$work/window/$reg.json" > "$work/window/$reg.log" 2>&1
        echo "window:$ops --reg $reg rc=$?"; grep -E "^#  *[a-z]+ \(|^  *[0-9]|RESULT" "$work/window/$reg.log"
      done ;;
    *) echo "unknown step $step" ;;
  esac
done
