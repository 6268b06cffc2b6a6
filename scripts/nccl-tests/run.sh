#!/usr/bin/env bash
# Run NVIDIA's nccl-tests (packed by scripts/nccl-tests/build.sh into .carry/nccl-tests.tar.xz)
# on this GPU machine twice per test, first with NVIDIA's libnccl.so.2 and then with ours, and
# summarise both side by side (scripts/nccl-tests/table.py -> OUTDIR/summary.md). The binaries
# load libnccl.so.2 dynamically, so LD_LIBRARY_PATH alone chooses the library.
# Run from the repository root. See docs/perf/nccl-tests.md.
#
# Usage: scripts/nccl-tests/run.sh --ours DIR --out OUTDIR [options] [-- extra nccl-tests args]
#   --ours DIR      folder holding our libnccl.so.2 (or the file itself), e.g. dist/lib
#   --out OUTDIR    where the logs and summary.md / summary.json go (created)
#   --ops LIST      comma-separated (default: all_reduce,all_gather,broadcast,reduce,
#                   reduce_scatter,alltoall,scatter,gather,sendrecv)
#   --modes LIST    comma-separated, of:  g  one thread drives every GPU (-g N)
#                                         t  one thread per GPU (-t N -g 1)
#                                         G  CUDA graphs (-g N -G 20)
#                                         R  symmetric registration (-g N -R 2)
#                                         D1, D2  nccl-tests' device-API kernels on registered
#                                            windows (-g N -R 2 -D 1 or 2; all_reduce and
#                                            alltoall have them, other ops are skipped)
#                                         p  a process per GPU (-g 1), nccl-tests' MPI build
#                                            started by mpi-shim/launch.sh (no MPI needed)
#                   (default: g,t,G,R)
#   --min SIZE --max SIZE   sizes to sweep, doubling (default 8 and 1G)
#   --ngpus N       GPUs to use (default: all that nvidia-smi lists)
#   --iters N       timed iterations per size (-n; default: nccl-tests' own)
#   --warmup N      warm-up iterations (-w; default: nccl-tests' own)
#   --repeat K      run each nv/ours pair K times, alternating (logs *.1.log .. *.K.log)
#   --timeout S     seconds before one run is killed (default 120)
#   --ours-env NAME=VALUE  set for our runs only (NVIDIA's keep its defaults), e.g.
#                   NCCL_PROTO=Simple to time a forced choice against them; may be repeated
#   --nv DIR        NVIDIA's libnccl.so.2 folder (or file), instead of finding PyTorch's
#   --tar FILE      the nccl-tests tarball (default .carry/nccl-tests.tar.xz)
#   --dry-run       print the runs without starting them
# Exit status: 0 when every run exited 0, 1 when any failed or timed out (all are still run and
# summarised), 2 on bad usage or missing inputs.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
ours="" out="" nv="${NCCL_REF:-}"
ops="all_reduce,all_gather,broadcast,reduce,reduce_scatter,alltoall,scatter,gather,sendrecv"
modes="g,t,G,R" min=8 max=1G ngpus="" iters="" warmup="" repeat=1 tmo=120
tar_file=".carry/nccl-tests.tar.xz" dry=0
ours_env=()
extra=()
die() { echo "nccl-tests/run: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --ours) ours=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --min) min=$2; shift 2 ;;
    --max) max=$2; shift 2 ;;
    --ngpus) ngpus=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --timeout) tmo=$2; shift 2 ;;
    --ours-env) ours_env+=("$2"); shift 2 ;;
    --nv) nv=$2; shift 2 ;;
    --tar) tar_file=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) awk 'NR > 1 && /^#/ { print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) die "unknown argument $1 (--help lists them)" ;;
  esac
done
[ -n "$ours" ] || die "--ours DIR is required"
[ -n "$out" ] || die "--out OUTDIR is required"
[[ "$repeat" =~ ^[1-9][0-9]*$ ]] || die "--repeat wants a positive integer"

# A folder or the library file itself -> the absolute folder that holds libnccl.so.2.
lib_dir() {
  local p=$1
  [ -f "$p" ] && p=$(dirname "$p")
  [ -f "$p/libnccl.so.2" ] || return 1
  (cd "$p" && pwd -P)
}
ours_dir=$(lib_dir "$ours") || die "no libnccl.so.2 in $ours"

# NVIDIA's library: --nv / NCCL_REF if given, else the nvidia-nccl wheel PyTorch depends on.
# nvidia.nccl is a namespace package (no __init__.py, so __file__ is None): use __path__. If that
# import fails, look for nvidia/nccl/lib in every site-packages folder python3 knows, then ask
# the dynamic loader's cache.
find_nv() {
  local d
  d=$(python3 - <<'EOF' 2>/dev/null || true
import os, sys, site
cands = []
try:
    import nvidia.nccl
    cands += [os.path.join(p, "lib") for p in nvidia.nccl.__path__]
except Exception:
    pass
paths = list(sys.path)
try:
    paths += site.getsitepackages() + [site.getusersitepackages()]
except Exception:
    pass
cands += [os.path.join(p, "nvidia", "nccl", "lib") for p in paths if p]
for c in cands:
    if os.path.isfile(os.path.join(c, "libnccl.so.2")):
        print(c)
        break
EOF
  )
  if [ -z "$d" ]; then
    d=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF; exit}')
  fi
  [ -n "$d" ] && lib_dir "$d"
}
if [ -n "$nv" ]; then
  nv_dir=$(lib_dir "$nv") || die "no libnccl.so.2 in $nv"
else
  nv_dir=$(find_nv) || die "NVIDIA's libnccl.so.2 not found (pass --nv DIR or NCCL_REF=FILE)"
fi
# Comparing a library with itself would silently produce a table of 1.00s.
if [ "$(readlink -f "$nv_dir/libnccl.so.2")" = "$(readlink -f "$ours_dir/libnccl.so.2")" ]; then
  die "--ours and NVIDIA's library are the same file: $nv_dir/libnccl.so.2"
fi

if [ -z "$ngpus" ]; then
  ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  [ "$ngpus" -gt 0 ] 2>/dev/null || ngpus=$(python3 -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
  [ "$ngpus" -gt 0 ] || { [ "$dry" = 1 ] && ngpus=2; } || die "no GPU found (nvidia-smi -L); pass --ngpus N"
fi

[ -f "$tar_file" ] || die "$tar_file missing: run scripts/nccl-tests/build.sh where it can build, and carry it"
# Unpacked afresh each call into a temporary folder (removed on exit): the tarball is the one
# source of the binaries, so a stale copy can never be run.
tmp=$(mktemp -d "${TMPDIR:-/tmp}/nccl-tests.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
tar -xJf "$tar_file" -C "$tmp"
bin="$tmp/nccl-tests"
IFS=, read -r -a op_list <<<"$ops"
# Every op must have its binary: a typo should fail now, not after an hour of runs.
for op in "${op_list[@]}"; do
  [ -x "$bin/${op}_perf" ] || die "no ${op}_perf in $tar_file (have: $(cd "$bin" && printf "%s\n" *_perf | sed 's/_perf$//' | paste -sd, -))"
done
IFS=, read -r -a mode_list <<<"$modes"
# Mode p (a process per GPU) runs the MPI build that build.sh packs in nccl-tests/mpi/.
kept=()
for m in "${mode_list[@]}"; do
  case "$m" in
    g|t|G|R|D1|D2) kept+=("$m") ;;
    p) if [ -x "$bin/mpi/all_reduce_perf" ]; then kept+=("$m"); else
         echo "nccl-tests/run: mode p needs the MPI build (rerun build.sh); skipped" >&2; fi ;;
    *) die "unknown mode $m (g, t, G, R, D1, D2 or p)" ;;
  esac
done
[ "${#kept[@]}" -gt 0 ] || die "no mode left to run"
mode_list=("${kept[@]}")

[ "$dry" = 1 ] || mkdir -p "$out"
# NVLink multicast (NVLS) stays off on the shared GPU hosts: mandatory, for both libraries.
export NCCL_NVLS_ENABLE=0
# Warnings only, and the same for both libraries so neither pays for extra logging.
export NCCL_DEBUG=WARN
# /usr/local/cuda/lib64 as asked of the binaries' users; the caller's path (the driver's folder
# may be there) after it. The library folder of the run goes first, so it alone decides.
base_ld=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# nccl-tests builds each result row from several printf calls into a block-buffered stdout, while
# a library may write its warnings straight to stderr: line buffering keeps rows whole in the log.
linebuf=()
command -v stdbuf >/dev/null 2>&1 && linebuf=(stdbuf -oL)

# Record what produced these logs (also committed with them).
[ "$dry" = 1 ] || {
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -n)"
  # The working tree's commit, unless the library was built from another one (OXCCL_COMMIT).
  echo "commit: ${OXCCL_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (dirty)')}"
  echo "command: $0 --ours $ours --out $out --ops $ops --modes $modes --min $min --max $max --ngpus $ngpus --iters ${iters:-default} --warmup ${warmup:-default} --repeat $repeat --timeout $tmo${extra[*]:+ -- ${extra[*]}}"
  echo "nv lib: $nv_dir/libnccl.so.2"
  echo "ours lib: $ours_dir/libnccl.so.2"
  echo "nccl-tests: $(head -1 "$bin/BUILD-INFO" 2>/dev/null || echo unknown)"
  echo "environment (NCCL_*, OXCCL_*, CUDA_*):"
  env | grep -E '^(NCCL_|OXCCL_|CUDA_)' | sort | sed 's/^/  /' || true
  echo "ours only: ${ours_env[*]:-none}"
  echo "GPUs:"
  nvidia-smi -L 2>/dev/null | sed 's/^/  /' || true
  echo "topology:"
  nvidia-smi topo -m 2>/dev/null | sed 's/^/  /' || true
} >"$out/env.txt"

common=(-b "$min" -e "$max" -f 2 -c 1)
[ -n "$iters" ] && common+=(-n "$iters")
[ -n "$warmup" ] && common+=(-w "$warmup")

# The device-API modes exist only for the binaries that have device kernels.
has_mode() { # op, mode
  case "$2" in D1 | D2) [ "$1" = all_reduce ] || [ "$1" = alltoall ] ;; *) true ;; esac
}
total=0
for op in "${op_list[@]}"; do
  for m in "${mode_list[@]}"; do
    if has_mode "$op" "$m"; then total=$((total + 2 * repeat)); fi
  done
done
n=0 failed=0
for op in "${op_list[@]}"; do
  exe="$bin/${op}_perf"
  for m in "${mode_list[@]}"; do
    has_mode "$op" "$m" || continue
    run=("$exe")
    ld_extra=""
    case "$m" in
      p) flags=(-g 1) run=("$here/mpi-shim/launch.sh" "$ngpus" -- "$bin/mpi/${op}_perf")
         ld_extra="$bin/mpi:" ;;
      g) flags=(-g "$ngpus") ;;
      t) flags=(-t "$ngpus" -g 1) ;;
      G) flags=(-g "$ngpus" -G 20) ;;
      R) flags=(-g "$ngpus" -R 2) ;;
      D1 | D2) flags=(-g "$ngpus" -R 2 -D "${m#D}") ;;
    esac
    for ((r = 1; r <= repeat; r++)); do
      for side in nv ours; do
        n=$((n + 1))
        side_env=()
        if [ "$side" = nv ]; then dir=$nv_dir; else dir=$ours_dir side_env=(${ours_env[@]+"${ours_env[@]}"}); fi
        suffix=""
        [ "$repeat" -gt 1 ] && suffix=".$r"
        log="$out/$op-$m-$side$suffix.log"
        cmd=("${run[@]}" "${common[@]}" "${flags[@]}" ${extra[@]+"${extra[@]}"})
        if [ "$dry" = 1 ]; then
          echo "[$n/$total] LD_LIBRARY_PATH=$dir:$ld_extra/usr/local/cuda/lib64 ${side_env[*]} ${cmd[*]} > $log"
          continue
        fi
        {
          echo "# run.sh: lib=$dir/libnccl.so.2"
          echo "# run.sh: cmd=${op}_perf ${cmd[*]:${#run[@]}}"
          [ "${#side_env[@]}" = 0 ] || echo "# run.sh: env=${side_env[*]}"
        } >"$log"
        t0=$(date +%s.%N)
        rc=0
        # -k: a run that ignores SIGTERM (stuck in a kernel wait) is killed 10 s later.
        LD_LIBRARY_PATH="$dir:$ld_extra$base_ld" env ${side_env[@]+"${side_env[@]}"} timeout -k 10 "$tmo" \
          ${linebuf[@]+"${linebuf[@]}"} "${cmd[@]}" \
          >>"$log" 2>&1 || rc=$?
        t1=$(date +%s.%N)
        wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')
        note=""
        case "$rc" in 0) ;; 124|137) note=" TIMEOUT after ${tmo}s" ;; *) note=" FAILED" ;; esac
        # table.py reads this trailer: a run that died mid-sweep is reported as such.
        echo "# run.sh: rc=$rc wall=${wall}s" >>"$log"
        [ "$rc" = 0 ] || failed=$((failed + 1))
        ver=$(sed -n 's/.*nccl-library=\([0-9]*\).*/\1/p' "$log" | head -1)
        printf '[%d/%d] %-15s %s %-4s rc=%d %6ss lib=%s%s\n' "$n" "$total" "$op" "$m" "$side" \
          "$rc" "$wall" "${ver:-?}" "$note"
      done
    done
  done
done
[ "$dry" = 1 ] && exit 0

python3 "$here/table.py" "$out" >"$out/summary.md"
python3 "$here/table.py" --json "$out" >"$out/summary.json"
echo "nccl-tests/run: wrote $out/summary.md ($failed failed run(s) of $total)"
[ "$failed" = 0 ]
