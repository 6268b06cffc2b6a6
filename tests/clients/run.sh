#!/usr/bin/env bash
# Runs the real-client tests (PyTorch distributed, DDP, CuPy) on the GPU machine against our
# libnccl.so.2 and, as the baseline, against NVIDIA's libnccl.so.2 that PyTorch ships with.
#
#   bash tests/clients/run.sh OURS_LIB_DIR [--no-baseline] [--only torch_ops|ddp|cupy|symm_mem]...
#                                          [--phases main,nonblocking,register,abort] [--full]
#
# OURS_LIB_DIR holds our libnccl.so.2 (e.g. dist/lib). Ours is loaded with LD_PRELOAD (and
# LD_LIBRARY_PATH, which CuPy's soname lookup uses); each case checks that the client's NCCL
# symbols really bind to it (nccl_probe.py). NVLink multicast stays off in every run.
# Output is compact: per script the counts and every FAIL/SKIP line of ours, the cases whose
# status differs from NVIDIA's, and a table. Full logs (every PASS line) go to $LOG_DIR
# (default: $OUT/clients-logs when $OUT is set, else a fresh /tmp directory); --full prints them.
# Environment: PYTHON (default python3), CLIENT_TIMEOUT (seconds per python run, default 300),
# OURS_VERSION (the ncclGetVersion() ours must report, default 22809), CLIENTS_SHARE_GPUS=1
# (torch_ops: ranks share the GPUs there are, which only oxccl accepts; use --no-baseline),
# TORCH_NPROCS=N (torch_ops and torch_symm_mem: N processes, one GPU each; default 2),
# OXCCL_TEST_HOSTS=K (torch_ops, torch_ddp: K groups of ranks, each its own NCCL_HOSTID, so both
# libraries connect them over the network and accept ranks sharing a GPU; start MPS first).
# CLIENT_BACKEND=gloo is a dry run of this script where there is no GPU: the torch scripts use
# gloo, and cupy_nccl.py runs on the NumPy stand-in (mock_cupy/) over oxccl's host backend.
# Exit status: 0 when ours has no FAIL and no case does worse on ours than on NVIDIA's.
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${PYTHON:-python3}"
TMO="${CLIENT_TIMEOUT:-300}"
OURS_VERSION="${OURS_VERSION:-22809}"
BACKEND="${CLIENT_BACKEND:-nccl}"

[ $# -ge 1 ] || { sed -n '2,19p' "$0"; exit 2; }
OURS_DIR="$(cd "$1" 2>/dev/null && pwd)" || { echo "no such directory: $1"; exit 2; }
shift
OURS="$OURS_DIR/libnccl.so.2"
[ -e "$OURS" ] || { echo "no libnccl.so.2 in $OURS_DIR"; exit 2; }
BASELINE=1 FULL=0 ONLY="" PHASES="main,nonblocking,register,abort"
while [ $# -gt 0 ]; do
  case "$1" in
    --no-baseline) BASELINE=0 ;;
    --full) FULL=1 ;;
    --only) ONLY="$ONLY $2"; shift ;;
    --phases) PHASES="$2"; shift ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
  shift
done
want() { [ -z "$ONLY" ] || [[ " $ONLY " == *" $1 "* ]]; }
EXTRA_ENV=()

# Never NVLink multicast on the shared machine (KINDS.md), in every process we start.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
unset OXCCL_BACKEND NCCL_DEBUG_FILE
CUPY_ENV=()
if [ "$BACKEND" = gloo ]; then
  CUPY_ENV=(PYTHONPATH="$HERE/mock_cupy" OXCCL_BACKEND=host)
  echo "   dry run: torch scripts on gloo, cupy_nccl.py on mock_cupy + oxccl's host backend"
fi

NV_DIR="$("$PY" -c 'import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null)"
NV="$NV_DIR/libnccl.so.2"
if [ ! -e "$NV" ]; then
  echo "NVIDIA's libnccl.so.2 not found (python package nvidia.nccl); baseline off"
  BASELINE=0 NV=""
fi
if [ -n "${LOG_DIR:-}" ]; then :; elif [ -n "${OUT:-}" ]; then LOG_DIR="$OUT/clients-logs"
else LOG_DIR="$(mktemp -d /tmp/oxccl-clients.XXXXXX)"; fi
mkdir -p "$LOG_DIR"

echo "== oxccl client tests  ours: $(readlink -f "$OURS")"
echo "   nvidia: $([ -n "$NV" ] && readlink -f "$NV" || echo none)  logs: $LOG_DIR"
"$PY" -c 'import torch; print("   torch", torch.__version__, "gpus", torch.cuda.device_count(),
  torch.cuda.get_device_name(0) if torch.cuda.device_count() else "")' 2>&1 | tail -1
"$PY" -c 'import cupy; print("   cupy", cupy.__version__)' 2>&1 | tail -1

# run NAME LIB(ours|nvidia) CMD...: one python run under the timeout, log to $LOG_DIR/NAME.LIB.log
run() {
  local name="$1" which="$2"; shift 2
  local log="$LOG_DIR/$name.$which.log" t0=$SECONDS rc
  if [ "$which" = ours ]; then
    timeout -k 10 "$TMO" env "${EXTRA_ENV[@]}" LD_PRELOAD="$OURS" \
      LD_LIBRARY_PATH="$OURS_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      "$PY" "$@" --expect-lib "$OURS" --expect-version "$OURS_VERSION" >"$log" 2>&1
  else
    timeout -k 10 "$TMO" env "${EXTRA_ENV[@]}" LD_LIBRARY_PATH="$NV_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      "$PY" "$@" --expect-lib "$NV" >"$log" 2>&1
  fi
  rc=$?
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "FAIL $name.timeout: killed after ${TMO}s" >>"$log"
  echo "TIME $((SECONDS - t0))s rc=$rc" >>"$log"
  show "$name" "$which" "$log"
}

# show NAME LIB LOG: the counts; for ours its INFO and FAIL lines (at most 30) and the names of
# its SKIPs; for a run that ended without a SUMMARY, the end of its output
show() {
  local name="$1" which="$2" log="$3" summary took nfail nskip
  summary="$(grep -E '^SUMMARY ' "$log" | tail -1)"
  took="$(grep -E '^TIME ' "$log" | tail -1 | cut -d' ' -f2-)"
  printf -- '-- %-24s [%-6s] %s%s\n' "$name" "$which" "${summary:-SUMMARY missing}" "${took:+ ($took)}"
  if [ "$FULL" = 1 ] && [ "$which" = ours ]; then
    grep -E '^(PASS|FAIL|SKIP|INFO) ' "$log" | grep -v '^INFO phase' | cut -c1-300
  elif [ "$which" = ours ] || [ -z "$summary" ]; then
    grep -E '^INFO ' "$log" | grep -v '^INFO phase' | cut -c1-300
    nfail=$(grep -cE '^FAIL ' "$log")
    grep -E '^FAIL ' "$log" | head -30 | cut -c1-240
    [ "$nfail" -gt 30 ] && echo "   ... $((nfail - 30)) more FAIL lines in $log"
    nskip=$(grep -cE '^SKIP ' "$log")
    [ "$nskip" -gt 0 ] && echo "   SKIP ($nskip, reasons in the log): $(grep -E '^SKIP ' "$log" \
      | sed -E 's/^SKIP ([^:]*):.*/\1/' | tr '\n' ' ' | cut -c1-900)"
  fi
  if [ -z "$summary" ]; then  # crashed before its summary: show the end of its output
    echo "   (no SUMMARY; last lines of $log:)"
    grep -vE '^(PASS|SKIP|INFO) ' "$log" | tail -15 | cut -c1-240 | sed 's/^/   | /'
  fi
  return 0
}

LIBS="ours"; [ "$BASELINE" = 1 ] && LIBS="ours nvidia"
if want torch_ops; then
  for phase in ${PHASES//,/ }; do
    for which in $LIBS; do
      run "torch_ops.$phase" "$which" "$HERE/torch_ops.py" --backend "$BACKEND" --phases "$phase" \
        --phase-timeout $(( TMO > 60 ? TMO - 20 : TMO * 2 / 3 )) ${TORCH_NPROCS:+--nprocs "$TORCH_NPROCS"}
    done
  done
fi
if want ddp; then
  for which in $LIBS; do
    run "torch_ddp" "$which" "$HERE/torch_ddp.py" --backend "$BACKEND" --out "$LOG_DIR/ddp.$which.json"
  done
  if [ "$BASELINE" = 1 ]; then
    "$PY" "$HERE/compare_losses.py" "$LOG_DIR/ddp.nvidia.json" "$LOG_DIR/ddp.ours.json" \
      >"$LOG_DIR/ddp_compare.ours.log" 2>&1
    show "ddp_compare(nvidia,ours)" ours "$LOG_DIR/ddp_compare.ours.log"
  fi
fi
if want symm_mem && [ "$BACKEND" != gloo ]; then  # TORCH_SYMMMEM=NCCL: symmetric windows and the device API under PyTorch
  for which in $LIBS; do
    run "torch_symm_mem" "$which" "$HERE/torch_symm_mem.py" ${TORCH_NPROCS:+--world "$TORCH_NPROCS"}
  done
fi
if want cupy; then
  if [ "$BACKEND" = gloo ]; then  # NVIDIA's library cannot take host pointers: ours only
    CUPY_LIBS=ours
  else
    CUPY_LIBS="$LIBS"
  fi
  for which in $CUPY_LIBS; do
    EXTRA_ENV=("${CUPY_ENV[@]}")
    run "cupy_nccl" "$which" "$HERE/cupy_nccl.py"
    EXTRA_ENV=()
  done
fi

# Differences from NVIDIA's per case, a table, and the verdict.
"$PY" - "$LOG_DIR" <<'EOF'
import glob, os, re, sys
d = sys.argv[1]
line = re.compile(r"^(PASS|FAIL|SKIP) ([^:]*?)(?: \(.*\))?(?::.*)?$")
def cases(path):
    out = {}
    for ln in open(path, errors="replace"):
        m = line.match(ln.rstrip("\n"))
        if m:
            # torch's C++ warnings on stderr can land inside a result line ("name[rank1]:[W...");
            # case names never contain "[".
            out[m.group(2).split("[")[0]] = m.group(1)
    return out
def summary(path):
    s = [ln for ln in open(path, errors="replace") if ln.startswith("SUMMARY ")]
    if not s:
        return None
    return tuple(int(x) for x in re.findall(r"=(\d+)", s[-1]))
rows, worse, diffs_all, both, own, tot = [], 0, [], [], 0, [0, 0, 0]
for ours in sorted(glob.glob(os.path.join(d, "*.ours.log"))):
    name = os.path.basename(ours)[:-len(".ours.log")]
    nv = os.path.join(d, name + ".nvidia.log")
    have_nv = os.path.exists(nv)
    so, sn = summary(ours), (summary(nv) if have_nv else None)
    if so is None:
        so = (0, 1, 0)  # crashed before its summary
    tot = [a + b for a, b in zip(tot, so)]
    co = cases(ours)
    if not have_nv:
        own += so[1]
        rows.append((name, "/".join(map(str, so)), "-", "-"))
        continue
    cn = cases(nv)
    diffs = [(k, co.get(k, "absent"), cn.get(k, "absent"))
             for k in sorted(set(co) | set(cn)) if co.get(k) != cn.get(k)]
    for k, a, b in diffs:
        bad = a != "PASS" and (b == "PASS" or a == "FAIL")
        worse += bad
        diffs_all.append(f"   {'WORSE' if bad else 'diff '} {name} {k}: ours={a} nvidia={b}")
    both += [f"   {name} {k}" for k, v in sorted(co.items()) if v == "FAIL" and cn.get(k) == "FAIL"]
    if so[1] and not any(v == "FAIL" for v in co.values()):
        own += 1  # a failure without a case line (a crash): count it against ours
    rows.append((name, "/".join(map(str, so)), "/".join(map(str, sn)) if sn else "crashed",
                 str(len(diffs))))
if diffs_all:
    print("== cases whose status differs from NVIDIA's libnccl")
    print("\n".join(diffs_all[:40]) + (f"\n   ... {len(diffs_all) - 40} more" if len(diffs_all) > 40 else ""))
if both:
    print("== cases that fail with NVIDIA's libnccl too (torch/NCCL behaviour, not held against ours)")
    print("\n".join(both[:20]) + (f"\n   ... {len(both) - 20} more" if len(both) > 20 else ""))
print("== table (passed/failed/skipped)")
print(f"   {'script':28} {'ours':>12} {'nvidia':>12} {'diffs':>6}")
for r in rows:
    print(f"   {r[0]:28} {r[1]:>12} {r[2]:>12} {r[3]:>6}")
print(f"clients: {tot[0]} passed, {tot[1]} failed, {tot[2]} skipped")
verdict = "PASS" if worse == 0 and own == 0 else "FAIL"
print(f"RESULT {verdict} (ours: {tot[1]} failed, {len(both)} of them also with NVIDIA's; "
      f"{worse} cases worse than NVIDIA's)")
sys.exit(0 if verdict == "PASS" else 1)
EOF
