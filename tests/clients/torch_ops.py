#!/usr/bin/env python3
"""Every torch.distributed operation PyTorch users reach, checked against references computed
locally, at 2 processes (rank i on cuda:i with --backend nccl; CPU with --backend gloo, which
exercises this script's own logic where no GPU is present).

Usage:
  python3 torch_ops.py --backend nccl [--phases main,nonblocking,register,abort]
                       [--expect-lib PATH] [--expect-version 22809] [--verbose]
Each phase runs in fresh processes:
  main         lazy communicator init; every op x dtype; new_group; CUDA graph; mem pool; destroy
  nonblocking  TORCH_NCCL_USE_COMM_NONBLOCKING=1, eager init (device_id), split_group, new_group
  register     TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1 (ncclCommRegister on every segment)
  abort        eager blocking init, split_group, abort of a subgroup (idle and with a collective in
               flight), abort of the world, re-init afterwards
Output: one line per case, 'PASS name', 'FAIL name: reason' or 'SKIP name: reason' (a refusal by
torch itself, before the library is called), INFO lines, and 'SUMMARY passed=N failed=M skipped=K'.
Exit status 0 when nothing failed.

Results are exchanged through a TCPStore held by the launcher, not through the library under
test. Inputs are deterministic in (rank, index, salt) and chosen so that every reference is
exactly representable in the dtype; only AVG and PREMUL_SUM on floats use a tolerance.
"""
import argparse
import datetime
import functools
import os
import socket
import sys
import threading
import time
import traceback

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts (nccl_probe, mock_cupy)

# Never let NCCL (ours or NVIDIA's) or PyTorch use NVLink multicast on the shared GPU machine.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import nccl_probe  # noqa: E402 - beside this file

TIMEOUT = datetime.timedelta(seconds=90)  # process-group and store timeout

# ---------------------------------------------------------------------------------------------
# dtypes and deterministic inputs
# ---------------------------------------------------------------------------------------------
DTYPES = {
    "f32": torch.float32,
    "bf16": torch.bfloat16,
    "f16": torch.float16,
    "i64": torch.int64,
    "u8": torch.uint8,
    "e4m3": getattr(torch, "float8_e4m3fn", None),
    "e5m2": getattr(torch, "float8_e5m2", None),
}
FLOATS = ("f32", "bf16", "f16", "e4m3", "e5m2")
INTS = ("i64", "u8")
# Raw integer patterns lie in [-H, H) (u8: [0, 2H)) and are divided by DIV; with 2 ranks every sum
# of two such values (and each value) is exactly representable in the dtype.
HALF = {"f32": 1 << 20, "bf16": 64, "f16": 512, "i64": 1 << 40, "u8": 64, "e4m3": 4, "e5m2": 2}
DIV = {"f32": 4, "bf16": 2, "f16": 4, "e4m3": 2, "e5m2": 2, "i64": 1, "u8": 1}
I64_SCALE = 1 << 20  # int64 values reach 2**60: anything that goes through a double would show
# relative tolerance for AVG / PREMUL_SUM (about two ulps of the dtype)
RTOL = {"f32": 1e-6, "bf16": 2.0 ** -7, "f16": 2.0 ** -9, "e4m3": 2.0 ** -2, "e5m2": 2.0 ** -1}

N = 1031  # elements per rank in the dtype table: odd, not a power of two


def pattern(n, rank, salt, mod):
    """int64 tensor of n values in [0, mod), deterministic in (rank, index, salt)."""
    i = torch.arange(n, dtype=torch.int64)
    return (i * 2654435761 + (i >> 3) * (rank + 1) * 7 + rank * 40503 + salt * 9973) % mod


def raw_vals(dt, rank, n, salt, world):
    """Exact values as float64 (floats) or int64 (ints), before casting to the dtype."""
    h = max(1, HALF[dt] * 2 // world)
    p = pattern(n, rank, salt, 2 * h)
    if dt == "u8":
        return p
    v = p - h
    if dt == "i64":
        return v * I64_SCALE + rank
    return v.double() / DIV[dt]


def prod_vals(dt, rank, n, salt):
    """+-2**k, k in 0..2: products of two are exact in every dtype, fp8 included."""
    v = torch.ones(n, dtype=torch.int64) << pattern(n, rank, salt, 3)
    if dt != "u8":
        v = torch.where(pattern(n, rank, salt + 1, 5) == 0, -v, v)
    return v.double() if dt in FLOATS else v


def avg_vals(dt, rank, n, salt, world):
    """b + d*(2r-(W-1)): the sum over ranks is W*b, so the mean b is exact."""
    h = max(2, HALF[dt] * 2 // world)
    b = pattern(n, 0, salt, h)
    d = pattern(n, 0, salt + 1, max(1, h // (2 * max(1, world - 1))))
    b = b + h // 2 if dt == "u8" else b - h // 2
    v = b + d * (2 * rank - (world - 1))
    if dt == "i64":
        return v * I64_SCALE
    return v.double() / DIV[dt] if dt in FLOATS else v


def cast(raw, dt):
    return raw.to(DTYPES[dt])


def canon(t):
    """A CPU tensor that compares exactly: floats (fp8 included) widen to float64 exactly."""
    t = t.detach().cpu()
    return t.double() if t.is_floating_point() else t.long()


class Skip(Exception):
    pass


def first_diff(got, want):
    bad = (got != want).reshape(-1)
    k = int(bad.nonzero()[0])
    return int(bad.sum()), k, got.reshape(-1)[k].item(), want.reshape(-1)[k].item()


def diff_equal(got, want, what=""):
    """None when got (any device) equals want (CPU, expected dtype) exactly, else a message."""
    if got.dtype != want.dtype:
        return f"{what}dtype {got.dtype}, expected {want.dtype}"
    g, w = canon(got), canon(want)
    if g.shape != w.shape:
        return f"{what}shape {tuple(g.shape)}, expected {tuple(w.shape)}"
    if not torch.equal(g, w):
        nbad, k, gv, wv = first_diff(g, w)
        return f"{what}{nbad}/{g.numel()} wrong, first [{k}]: got {gv} want {wv}"
    return None


def diff_close(got, exact, dt, what=""):
    """exact: float64 reference before rounding to the dtype."""
    g = canon(got)
    if g.shape != exact.shape:
        return f"{what}shape {tuple(g.shape)}, expected {tuple(exact.shape)}"
    tol = RTOL[dt] * exact.abs() + RTOL[dt]
    bad = (g - exact).abs() > tol
    if bool(bad.any()):
        k = int(bad.reshape(-1).nonzero()[0])
        return (f"{what}{int(bad.sum())}/{g.numel()} outside rtol {RTOL[dt]:.3g}, first [{k}]: "
                f"got {g.reshape(-1)[k].item()} want {exact.reshape(-1)[k].item()}")
    return None


# Messages of refusals made by torch itself before the library is called (same with any
# libnccl). A message that comes from the library is never a refusal.
REFUSALS = ("not currenlty supported", "not currently supported", "Cannot use ReduceOp",
            "PreMulSum Data type must be", "does not support", "not supported",
            "Unsupported", "unsupported", "Invalid scalar type", "Invalid datatype",
            "not implemented", "NotImplemented", "is not supported", "does not implement")
LIBRARY_ERRORS = ("NCCL error", "ncclInvalid", "ncclInternal", "ncclSystem", "ncclUnhandled",
                  "ncclRemote", "ncclInProgress", "NCCL communicator", "Last error")


def refusal(exc):
    msg = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, (AssertionError, Skip)) or any(s in msg for s in LIBRARY_ERRORS):
        return None
    if isinstance(exc, NotImplementedError) or any(s in msg for s in REFUSALS):
        return msg.splitlines()[0][:160]
    return None


def one_line(exc, limit=300):
    msg = f"{type(exc).__name__}: {exc}" if not isinstance(exc, AssertionError) else str(exc)
    lines = [ln.strip() for ln in msg.splitlines() if ln.strip()]
    return (" | ".join(lines[:3]))[:limit]


# ---------------------------------------------------------------------------------------------
# per-process context: rank, device, result exchange through the launcher's store
# ---------------------------------------------------------------------------------------------
class Ctx:
    def __init__(self, rank, world, backend, phase, store, verbose):
        self.rank, self.world, self.backend, self.phase = rank, world, backend, phase
        self.store, self.verbose = store, verbose
        self.nccl = backend == "nccl"
        # Ranks share GPUs where there are fewer (oxccl allows it; NVIDIA's NCCL refuses).
        self.dev = (torch.device("cuda", rank % torch.cuda.device_count()) if self.nccl
                    else torch.device("cpu"))
        self.ncase = 0
        self.counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
        self.ninit = 0
        self.errors = []

    # Checks never raise: a rank that stopped half-way through a case would leave its peers
    # waiting in the next collective. Mismatches are collected and fail the case at its end.
    def expect(self, msg):
        if msg:
            self.errors.append(msg)

    def expect_equal(self, got, want, what=""):
        self.expect(diff_equal(got, want, what))

    def expect_close(self, got, exact, dt, what=""):
        self.expect(diff_close(got, exact, dt, what))

    # inputs on this rank's device
    def vals(self, dt, rank, n, salt=0):
        return cast(raw_vals(dt, rank, n, salt, self.world), dt)

    def to_dev(self, t):
        return t.to(self.dev, copy=True)  # never an alias of a reference

    def empty(self, n, dt):
        return torch.empty(n, dtype=DTYPES[dt], device=self.dev)

    def sync(self):
        if self.nccl:
            torch.cuda.synchronize(self.dev)

    def init_pg(self, tag, device_id=False, **kw):
        """init_process_group over a fresh prefix of the launcher's store (re-init safe)."""
        self.ninit += 1
        store = dist.PrefixStore(f"pg{self.ninit}-{tag}/", self.store)
        extra = {}
        if device_id and self.nccl:
            extra["device_id"] = self.dev
        dist.init_process_group(self.backend, store=store, rank=self.rank,
                                world_size=self.world, timeout=TIMEOUT, **extra, **kw)

    # one case: run fn on every rank, publish the status, rank 0 prints the combined line
    def case(self, name, fn, *args):
        self.ncase += 1
        key = f"res/{self.ncase}"
        self.store.set(f"cur/{self.rank}", name)
        self.errors = []
        try:
            fn(*args)
            self.sync()
            if self.errors:
                raise AssertionError("; ".join(self.errors[:3]))
            status = "PASS"
        except Skip as e:
            status = f"SKIP {e}"
        except Exception as e:  # noqa: BLE001 - every failure becomes a FAIL line
            why = refusal(e)
            if why is not None:
                status = f"SKIP torch refuses: {why}"
            else:
                status = f"FAIL {one_line(e)}"
                if self.verbose:
                    traceback.print_exc(limit=8, file=sys.stderr)
        self.store.set(f"{key}/{self.rank}", status)
        if self.rank == 0:
            sts = [self.store.get(f"{key}/{r}").decode() for r in range(self.world)]
            self.report(name, sts)

    def report(self, name, sts):
        kinds = [s.split(" ", 1)[0] for s in sts]
        if all(k == "PASS" for k in kinds):
            line, kind = f"PASS {name}", "PASS"
        elif all(k == "SKIP" for k in kinds):
            line, kind = f"SKIP {name}: {sts[0][5:]}", "SKIP"
        else:
            bad = [(r, s) for r, s in enumerate(sts) if not s.startswith("PASS")]
            if len(bad) == len(sts) and len(set(sts)) == 1:
                why = f"all ranks: {sts[0]}"
            else:
                why = "; ".join(f"r{r}: {s}" for r, s in bad)
            if "FAIL" not in kinds:
                why = "ranks disagree: " + why
            line, kind = f"FAIL {name}: {why}", "FAIL"
        self.counts[kind] += 1
        print(line, flush=True)

    def info(self, msg):
        if self.rank == 0:
            print(f"INFO {msg}", flush=True)


# ---------------------------------------------------------------------------------------------
# reference computations
# ---------------------------------------------------------------------------------------------
def ref_reduce(ctx, op, dt, n, salt, factor=None):
    """(expected tensor in dt or None, exact float64 or None for tolerance ops)."""
    W = ctx.world
    if op == "product":
        ins = [prod_vals(dt, r, n, salt) for r in range(W)]
    elif op == "avg":
        ins = [avg_vals(dt, r, n, salt, W) for r in range(W)]
    else:
        ins = [raw_vals(dt, r, n, salt, W) for r in range(W)]
    st = torch.stack(ins)
    inputs = [cast(x, dt) for x in ins]
    if op == "sum":
        return inputs, cast(st.sum(0), dt), None
    if op == "product":
        return inputs, cast(st.prod(0), dt), None
    if op == "min":
        return inputs, cast(st.amin(0), dt), None
    if op == "max":
        return inputs, cast(st.amax(0), dt), None
    if op in ("band", "bor", "bxor"):
        f = {"band": torch.bitwise_and, "bor": torch.bitwise_or, "bxor": torch.bitwise_xor}[op]
        return inputs, cast(functools.reduce(f, list(st)), dt), None
    if op == "avg":
        if dt in INTS:  # the sum is W*b by construction: exact
            return inputs, cast(st.sum(0) // W, dt), None
        return inputs, None, st.double().sum(0) / W
    if op == "premul_sum":
        return inputs, None, (st.double() * factor).sum(0)
    raise ValueError(op)


def torch_op(ctx, op, dt, factor):
    R = dist.ReduceOp
    if op == "avg" and dt in INTS and not ctx.nccl:
        raise Skip("gloo divides AVG in place, which torch refuses for integer tensors")
    if op == "premul_sum":
        if not ctx.nccl:
            raise Skip("PREMUL_SUM is NCCL-only")
        if not hasattr(dist, "_make_nccl_premul_sum"):
            raise Skip("torch has no _make_nccl_premul_sum")
        if isinstance(factor, str):  # "tensor:<x>": factor as a device scalar (ncclScalarDevice)
            f = torch.tensor([float(factor.split(":")[1])], dtype=DTYPES[dt], device=ctx.dev)
            return dist._make_nccl_premul_sum(f)
        return dist._make_nccl_premul_sum(factor)
    return {"sum": R.SUM, "product": R.PRODUCT, "min": R.MIN, "max": R.MAX, "avg": R.AVG,
            "band": R.BAND, "bor": R.BOR, "bxor": R.BXOR}[op]


# ---------------------------------------------------------------------------------------------
# cases: collectives
# ---------------------------------------------------------------------------------------------
def c_all_reduce(ctx, op, dt, n=N, factor=None, salt=1, group=None):
    fnum = float(factor.split(":")[1]) if isinstance(factor, str) else factor
    inputs, want, exact = ref_reduce(ctx, op, dt, n, salt, fnum)
    t = ctx.to_dev(inputs[ctx.rank])
    dist.all_reduce(t, op=torch_op(ctx, op, dt, factor), group=group)
    if want is not None:
        ctx.expect_equal(t, want)
    else:
        ctx.expect_close(t, exact, dt)


def c_all_reduce_async_many(ctx, dt="f32", k=8):
    """k outstanding async all_reduces of different sizes, then wait on each."""
    ts, works, wants = [], [], []
    for j in range(k):
        n = 17 + 997 * j
        inputs, want, _ = ref_reduce(ctx, "sum", dt, n, 40 + j)
        t = ctx.to_dev(inputs[ctx.rank])
        works.append(dist.all_reduce(t, async_op=True))
        ts.append(t)
        wants.append(want)
    for j, (w, t, want) in enumerate(zip(works, ts, wants)):
        w.wait()
        ctx.expect_equal(t, want, f"op {j}: ")


def c_coalesced(ctx, dt="f32"):
    """_coalescing_manager: several all_reduces fused into one group (as FSDP/DDP do)."""
    if not hasattr(dist, "_coalescing_manager"):
        raise Skip("torch has no _coalescing_manager")
    ts, wants = [], []
    for j in range(4):
        inputs, want, _ = ref_reduce(ctx, "sum", dt, 100 + 31 * j, 60 + j)
        ts.append(ctx.to_dev(inputs[ctx.rank]))
        wants.append(want)
    with dist._coalescing_manager(device=ctx.dev, async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t)
    cm.wait()
    for j, (t, want) in enumerate(zip(ts, wants)):
        ctx.expect_equal(t, want, f"tensor {j}: ")


def c_broadcast(ctx, dt, src):
    want = ctx.vals(dt, src, N, 2)
    t = ctx.to_dev(want if ctx.rank == src else ctx.vals(dt, ctx.rank, N, 99))
    dist.broadcast(t, src=src)
    ctx.expect_equal(t, want)


def c_reduce(ctx, dt, dst, op="sum"):
    inputs, want, _ = ref_reduce(ctx, op, dt, N, 3)
    t = ctx.to_dev(inputs[ctx.rank])
    dist.reduce(t, dst=dst, op=torch_op(ctx, op, dt, None))
    if ctx.rank == dst:
        ctx.expect_equal(t, want)


def c_all_gather(ctx, dt):
    outs = [ctx.empty(N, dt) for _ in range(ctx.world)]
    dist.all_gather(outs, ctx.to_dev(ctx.vals(dt, ctx.rank, N, 4)))
    for r, o in enumerate(outs):
        ctx.expect_equal(o, ctx.vals(dt, r, N, 4), f"from rank {r}: ")


def c_all_gather_into_tensor(ctx, dt):
    out = ctx.empty(ctx.world * N, dt)
    dist.all_gather_into_tensor(out, ctx.to_dev(ctx.vals(dt, ctx.rank, N, 5)))
    ctx.expect_equal(out, torch.cat([ctx.vals(dt, r, N, 5) for r in range(ctx.world)]))


def c_reduce_scatter_tensor(ctx, dt, op="sum"):
    W, r = ctx.world, ctx.rank
    inputs, want, exact = ref_reduce(ctx, op, dt, W * N, 6)
    out = ctx.empty(N, dt)
    dist.reduce_scatter_tensor(out, ctx.to_dev(inputs[r]), op=torch_op(ctx, op, dt, None))
    if want is not None:
        ctx.expect_equal(out, want[r * N:(r + 1) * N])
    else:
        ctx.expect_close(out, exact[r * N:(r + 1) * N], dt)


def c_reduce_scatter_list(ctx, dt):
    W, r = ctx.world, ctx.rank
    inputs, want, _ = ref_reduce(ctx, "sum", dt, W * N, 7)
    out = ctx.empty(N, dt)
    dist.reduce_scatter(out, [ctx.to_dev(c) for c in inputs[r].chunk(W)])
    ctx.expect_equal(out, want[r * N:(r + 1) * N])


def split_len(src, dst):
    """Unequal all_to_all split: elements rank src sends to rank dst (some are 0)."""
    return (3 * src + 5 * dst + 1) % 4 * 97


def c_all_to_all_single(ctx, dt, equal):
    W, r = ctx.world, ctx.rank
    if equal:
        inp = ctx.vals(dt, r, W * N, 8)
        want = torch.cat([ctx.vals(dt, q, W * N, 8)[r * N:(r + 1) * N] for q in range(W)])
        out = ctx.empty(W * N, dt)
        dist.all_to_all_single(out, ctx.to_dev(inp))
    else:
        seg = lambda s, d: ctx.vals(dt, s, split_len(s, d), 100 + d)  # noqa: E731
        inp = torch.cat([seg(r, d) for d in range(W)])
        want = torch.cat([seg(s, r) for s in range(W)])
        out = ctx.empty(want.numel(), dt)
        dist.all_to_all_single(out, ctx.to_dev(inp),
                               output_split_sizes=[split_len(s, r) for s in range(W)],
                               input_split_sizes=[split_len(r, d) for d in range(W)])
    ctx.expect_equal(out, want)


def c_all_to_all_list(ctx, dt):
    W, r = ctx.world, ctx.rank
    ins = [ctx.to_dev(ctx.vals(dt, r, 53, 110 + d)) for d in range(W)]
    outs = [ctx.empty(53, dt) for _ in range(W)]
    dist.all_to_all(outs, ins)
    for s, o in enumerate(outs):
        ctx.expect_equal(o, ctx.vals(dt, s, 53, 110 + r), f"from rank {s}: ")


def c_gather(ctx, dt, dst):
    t = ctx.to_dev(ctx.vals(dt, ctx.rank, N, 9))
    outs = [ctx.empty(N, dt) for _ in range(ctx.world)] if ctx.rank == dst else None
    dist.gather(t, gather_list=outs, dst=dst)
    if ctx.rank == dst:
        for r, o in enumerate(outs):
            ctx.expect_equal(o, ctx.vals(dt, r, N, 9), f"from rank {r}: ")


def c_scatter(ctx, dt, src):
    ins = [ctx.to_dev(ctx.vals(dt, src, N, 200 + q)) for q in range(ctx.world)] \
        if ctx.rank == src else None
    out = ctx.empty(N, dt)
    dist.scatter(out, scatter_list=ins, src=src)
    ctx.expect_equal(out, ctx.vals(dt, src, N, 200 + ctx.rank))


def ring_peers(ctx):
    return (ctx.rank + 1) % ctx.world, (ctx.rank - 1) % ctx.world


def c_send_recv(ctx, dt, n=N, nonblocking=False):
    nxt, prv = ring_peers(ctx)
    snd = ctx.to_dev(ctx.vals(dt, ctx.rank, n, 300))
    rcv = ctx.empty(n, dt)
    # even ranks send first, odd ranks receive first: no rank waits on a peer that waits on it
    if nonblocking:
        steps = [lambda: dist.isend(snd, nxt), lambda: dist.irecv(rcv, prv)]
        if ctx.rank % 2:
            steps.reverse()
        for step in steps:
            step().wait()
    else:
        steps = [lambda: dist.send(snd, nxt), lambda: dist.recv(rcv, prv)]
        if ctx.rank % 2:
            steps.reverse()
        for step in steps:
            step()
    ctx.expect_equal(rcv, ctx.vals(dt, prv, n, 300))


def c_batch_isend_irecv(ctx, dt):
    nxt, prv = ring_peers(ctx)
    a = ctx.to_dev(ctx.vals(dt, ctx.rank, N, 310))
    b = ctx.to_dev(ctx.vals(dt, ctx.rank, 77, 311))
    ra, rb = ctx.empty(N, dt), ctx.empty(77, dt)
    ops = [dist.P2POp(dist.isend, a, nxt), dist.P2POp(dist.isend, b, nxt),
           dist.P2POp(dist.irecv, ra, prv), dist.P2POp(dist.irecv, rb, prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    ctx.expect_equal(ra, ctx.vals(dt, prv, N, 310), "first message: ")
    ctx.expect_equal(rb, ctx.vals(dt, prv, 77, 311), "second message: ")


def c_barrier(ctx):
    """Rank W-1 arrives late; nobody may leave the barrier before it arrived."""
    if ctx.rank == ctx.world - 1:
        time.sleep(1.0)
        ctx.store.set(f"barrier{ctx.ncase}", repr(time.time()))
    dist.barrier()
    left = time.time()
    late = float(ctx.store.get(f"barrier{ctx.ncase}").decode())
    if left < late:
        raise AssertionError(f"left the barrier {late - left:.3f}s before the last rank arrived")


# ---------------------------------------------------------------------------------------------
# cases: groups
# ---------------------------------------------------------------------------------------------
def check_group(ctx, g, members, dt="f32"):
    """On a member: ranks agree on the group's order, all_reduce and broadcast work in it."""
    grank, gsize = dist.get_rank(g), dist.get_world_size(g)
    if gsize != len(members):
        ctx.expect(f"group size {gsize}, expected {len(members)}")
    order = [ctx.empty(1, "i64") for _ in range(gsize)]
    dist.all_gather(order, torch.tensor([ctx.rank], device=ctx.dev), group=g)
    got = [int(o.item()) for o in order]
    want = [dist.get_global_rank(g, i) for i in range(gsize)]
    if got != want or sorted(got) != sorted(members) or got[grank] != ctx.rank:
        ctx.expect(f"group order {got}, get_global_rank says {want}")
    vals = {m: ctx.vals(dt, m, N, 400) for m in members}
    t = ctx.to_dev(vals[ctx.rank])
    dist.all_reduce(t, group=g)
    ctx.expect_equal(t, cast(sum(raw_vals(dt, m, N, 400, ctx.world) for m in members), dt),
                "group all_reduce: ")
    root = want[-1]
    t = ctx.to_dev(vals[ctx.rank])
    dist.broadcast(t, src=root, group=g)
    ctx.expect_equal(t, vals[root], "group broadcast: ")


def c_new_group(ctx):
    """A group of every rank (listed backwards) and one group per rank."""
    W = ctx.world
    g_all = dist.new_group(list(reversed(range(W))))
    singles = [dist.new_group([r]) for r in range(W)]  # every rank creates every group
    check_group(ctx, g_all, list(range(W)))
    check_group(ctx, singles[ctx.rank], [ctx.rank])
    dist.destroy_process_group(g_all)


def c_split_group(ctx):
    if not hasattr(dist, "split_group"):
        raise Skip("torch has no split_group")
    if not ctx.nccl and getattr(dist.group.WORLD, "bound_device_id", None) is None:
        raise Skip("split_group needs a process group bound to a device (device_id); "
                   "gloo cannot bind one in this torch")
    W = ctx.world
    full = dist.split_group(split_ranks=[list(range(W))])
    check_group(ctx, full, list(range(W)))
    halves = [list(range(0, W, 2)), list(range(1, W, 2))]
    mine = dist.split_group(split_ranks=halves)
    check_group(ctx, mine, halves[ctx.rank % 2])


# ---------------------------------------------------------------------------------------------
# cases: NCCL-only features
# ---------------------------------------------------------------------------------------------
def c_cuda_graph(ctx, replays=100):
    """Capture two all_reduces (f32 and bf16) in one CUDA graph; replay with new inputs."""
    if not ctx.nccl:
        raise Skip("CUDA graphs need the nccl backend")
    n = 4099
    x = ctx.empty(n, "f32")
    y = ctx.empty(n, "bf16")
    s = torch.cuda.Stream(ctx.dev)
    s.wait_stream(torch.cuda.current_stream(ctx.dev))
    with torch.cuda.stream(s):  # warm up outside capture (communicator init, connections)
        for _ in range(3):
            x.copy_(ctx.vals("f32", ctx.rank, n, 0))
            dist.all_reduce(x)
            y.copy_(ctx.vals("bf16", ctx.rank, n, 0))
            dist.all_reduce(y)
    torch.cuda.current_stream(ctx.dev).wait_stream(s)
    torch.cuda.synchronize(ctx.dev)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        dist.all_reduce(x)
        dist.all_reduce(y)
    for k in range(replays):
        salt = 500 + k
        x.copy_(ctx.vals("f32", ctx.rank, n, salt))
        y.copy_(ctx.vals("bf16", ctx.rank, n, salt))
        g.replay()
        _, wx, _ = ref_reduce(ctx, "sum", "f32", n, salt)
        _, wy, _ = ref_reduce(ctx, "sum", "bf16", n, salt)
        ctx.expect_equal(x, wx, f"replay {k} f32: ")
        ctx.expect_equal(y, wy, f"replay {k} bf16: ")
    del g


def c_mem_pool(ctx):
    """Tensors from ncclMemAlloc (backend.mem_allocator), registered with ncclCommRegister."""
    if not ctx.nccl:
        raise Skip("ncclMemAlloc pools need the nccl backend")
    backend = dist.group.WORLD._get_backend(ctx.dev)
    if not (hasattr(backend, "mem_allocator") and hasattr(torch.cuda, "MemPool")
            and hasattr(torch.cuda, "use_mem_pool")):
        raise Skip("torch has no NCCL mem pool API")
    pool = torch.cuda.MemPool(backend.mem_allocator)
    with torch.cuda.use_mem_pool(pool):
        t = torch.empty(1 << 20, dtype=torch.float32, device=ctx.dev)
        o = torch.empty(ctx.world << 20, dtype=torch.float32, device=ctx.dev)
    registered = hasattr(backend, "register_mem_pool")
    if registered:
        backend.register_mem_pool(pool)
    inputs, want, _ = ref_reduce(ctx, "sum", "f32", 1 << 20, 600)
    t.copy_(inputs[ctx.rank])
    dist.all_reduce(t)
    ctx.expect_equal(t, want, "all_reduce: ")
    dist.all_gather_into_tensor(o, t)
    ctx.expect_equal(o, torch.cat([want] * ctx.world), "all_gather: ")
    torch.cuda.synchronize(ctx.dev)
    if registered and hasattr(backend, "deregister_mem_pool"):
        backend.deregister_mem_pool(pool)
    del t, o, pool


def c_library(ctx, expect_lib, expect_version):
    """The libnccl that libtorch_cuda's NCCL calls bind to, and its ncclGetVersion()."""
    client = nccl_probe.torch_client()
    if client is None:
        raise Skip("libtorch_cuda.so is not loaded (CPU-only torch)")
    ctx.expect(nccl_probe.check(client, expect_lib, expect_version))


# ---------------------------------------------------------------------------------------------
# cases: lifecycle
# ---------------------------------------------------------------------------------------------
def c_destroy_and_reinit(ctx, device_id=False):
    dist.destroy_process_group()
    if dist.is_initialized():
        ctx.expect("still initialized after destroy_process_group")
    ctx.init_pg("reinit", device_id=device_id)
    inputs, want, _ = ref_reduce(ctx, "sum", "f32", N, 700)
    t = ctx.to_dev(inputs[ctx.rank])
    dist.all_reduce(t)
    ctx.expect_equal(t, want, "after re-init: ")
    dist.destroy_process_group()
    if dist.is_initialized():
        raise AssertionError("still initialized after the second destroy_process_group")


def abort_group(g=None):
    if hasattr(dist.distributed_c10d, "_abort_process_group"):
        dist.distributed_c10d._abort_process_group(g)
    else:
        (g or dist.group.WORLD).abort()


def c_abort_subgroup(ctx):
    """Abort an idle subgroup; the world keeps working."""
    W = ctx.world
    g = dist.new_group(list(range(W)))
    check_group(ctx, g, list(range(W)))
    ctx.sync()
    t0 = time.time()
    abort_group(g)
    if time.time() - t0 > 30:
        ctx.expect(f"abort took {time.time() - t0:.1f}s")
    inputs, want, _ = ref_reduce(ctx, "sum", "f32", N, 800)
    t = ctx.to_dev(inputs[ctx.rank])
    dist.all_reduce(t)
    ctx.expect_equal(t, want, "world all_reduce after subgroup abort: ")


def c_abort_inflight(ctx):
    """Rank 0 starts an all_reduce that rank 1 never joins, then aborts the group: the abort must
    stop the waiting kernel (abort flag), and the world group must still work afterwards."""
    if not ctx.nccl:
        raise Skip("needs the nccl backend (the GPU kernel must observe the abort)")
    W = ctx.world
    g = dist.new_group(list(range(W)))
    t = ctx.to_dev(ctx.vals("f32", ctx.rank, 1 << 16, 900))
    dist.all_reduce(t, group=g)  # connect once with every rank, same size as below
    ctx.sync()
    key = f"inflight{ctx.ncase}"
    if ctx.rank == 0:
        works = [dist.all_reduce(t, group=g, async_op=True)]  # rank 1 never joins
        time.sleep(2.0)
        t0 = time.time()
        abort_group(g)
        took = time.time() - t0
        # the aborted kernel must leave the GPU: synchronize, but from a thread we can give up on
        done = threading.Event()
        threading.Thread(target=lambda: (torch.cuda.synchronize(ctx.dev), done.set()),
                         daemon=True).start()
        drained = done.wait(60)
        ctx.store.set(key, "ok" if drained else "hung")
        works.clear()  # held until here so the Work object outlives the abort
        if not drained:
            raise AssertionError(f"abort returned after {took:.1f}s but the aborted all_reduce "
                                 "still runs on the GPU 60s later")
        if took > 30:
            ctx.expect(f"abort took {took:.1f}s")
    elif ctx.store.get(key).decode() != "ok":  # wait while rank 0 aborts
        raise Skip("rank 0's aborted kernel did not drain")
    inputs, want, _ = ref_reduce(ctx, "sum", "f32", N, 901)
    t = ctx.to_dev(inputs[ctx.rank])
    dist.all_reduce(t)
    ctx.expect_equal(t, want, "world all_reduce after the abort: ")


def c_abort_world(ctx):
    """Abort every group, then build a new world and use it."""
    t0 = time.time()
    abort_group(None)
    took = time.time() - t0
    if dist.is_initialized():
        ctx.expect("still initialized after aborting the world")
    if took > 30:
        ctx.expect(f"abort took {took:.1f}s")
    ctx.init_pg("after-abort", device_id=True)
    inputs, want, _ = ref_reduce(ctx, "sum", "f32", N, 950)
    t = ctx.to_dev(inputs[ctx.rank])
    dist.all_reduce(t)
    ctx.expect_equal(t, want, "all_reduce in the new world: ")
    dist.destroy_process_group()


# ---------------------------------------------------------------------------------------------
# phases
# ---------------------------------------------------------------------------------------------
REDUCE_OPS = ("sum", "product", "min", "max", "avg", "band", "bor", "bxor")


def dtype_table(ctx):
    """(name, fn, args) for every op x dtype."""
    rows = []
    for dn, dt in DTYPES.items():
        if dt is None:
            continue
        for op in REDUCE_OPS:
            if op in ("band", "bor", "bxor") and dn in FLOATS:
                continue  # bitwise reductions are defined for integers only
            rows.append((f"all_reduce.{op}.{dn}", c_all_reduce, (ctx, op, dn)))
        if dn in FLOATS:
            rows.append((f"all_reduce.premul_sum.{dn}", c_all_reduce,
                         (ctx, "premul_sum", dn, N, 0.5)))
            rows.append((f"all_reduce.premul_sum_tensor.{dn}", c_all_reduce,
                         (ctx, "premul_sum", dn, N, "tensor:3.0")))
    for dn, dt in DTYPES.items():
        if dt is None:
            continue
        W = ctx.world
        rows += [
            (f"broadcast.{dn}", c_broadcast, (ctx, dn, W - 1)),
            (f"reduce.{dn}", c_reduce, (ctx, dn, W - 1)),
            (f"all_gather.{dn}", c_all_gather, (ctx, dn)),
            (f"all_gather_into_tensor.{dn}", c_all_gather_into_tensor, (ctx, dn)),
            (f"reduce_scatter_tensor.{dn}", c_reduce_scatter_tensor, (ctx, dn)),
            (f"all_to_all_single.equal.{dn}", c_all_to_all_single, (ctx, dn, True)),
            (f"all_to_all_single.unequal.{dn}", c_all_to_all_single, (ctx, dn, False)),
            (f"gather.{dn}", c_gather, (ctx, dn, W - 1)),
            (f"scatter.{dn}", c_scatter, (ctx, dn, 0)),
            (f"send_recv.{dn}", c_send_recv, (ctx, dn)),
            (f"batch_isend_irecv.{dn}", c_batch_isend_irecv, (ctx, dn)),
        ]
    return rows


def phase_main(ctx, args):
    ctx.init_pg("main")  # lazy: communicators are created by the first operation
    ctx.info(f"torch {torch.__version__} cuda {torch.version.cuda} backend {ctx.backend} "
             f"world {ctx.world}")
    # first collective creates the communicator
    ctx.case("all_reduce.first.f32", c_all_reduce, ctx, "sum", "f32")
    ctx.info(f"torch.cuda.nccl.version() = {torch.cuda.nccl.version()}; "
             f"{nccl_probe.describe(nccl_probe.torch_client())}")
    ctx.case("library", c_library, ctx, args.expect_lib, args.expect_version)
    sizes = [1, 2, 3, 255, 4096, (1 << 20) + 1]
    if ctx.nccl:
        sizes.append((1 << 24) + 5)  # 64 MiB of float32
    for n in sizes:
        ctx.case(f"all_reduce.sum.f32.n{n}", c_all_reduce, ctx, "sum", "f32", n)
    ctx.case(f"all_reduce.sum.bf16.n{(1 << 20) + 1}", c_all_reduce, ctx, "sum", "bf16",
             (1 << 20) + 1)
    for name, fn, fargs in dtype_table(ctx):
        ctx.case(name, fn, *fargs)
    ctx.case("broadcast.root0.f32", c_broadcast, ctx, "f32", 0)
    ctx.case("reduce.max.root0.f32", c_reduce, ctx, "f32", 0, "max")
    ctx.case("reduce_scatter_tensor.avg.f32", c_reduce_scatter_tensor, ctx, "f32", "avg")
    ctx.case("reduce_scatter_tensor.max.bf16", c_reduce_scatter_tensor, ctx, "bf16", "max")
    ctx.case("reduce_scatter.list.f32", c_reduce_scatter_list, ctx, "f32")
    ctx.case("all_to_all.list.f32", c_all_to_all_list, ctx, "f32")
    ctx.case("isend_irecv.f32", c_send_recv, ctx, "f32", N, True)
    ctx.case("send_recv.f32.n4194304", c_send_recv, ctx, "f32", 1 << 22)
    ctx.case("all_reduce.async_many.f32", c_all_reduce_async_many, ctx)
    ctx.case("coalescing_manager.all_reduce.f32", c_coalesced, ctx)
    ctx.case("barrier", c_barrier, ctx)
    ctx.case("new_group", c_new_group, ctx)
    ctx.case("cuda_graph.all_reduce.x100", c_cuda_graph, ctx)
    ctx.case("mem_pool.ncclMemAlloc+register", c_mem_pool, ctx)
    ctx.case("destroy_process_group+reinit", c_destroy_and_reinit, ctx)


def phase_nonblocking(ctx, args):
    os.environ["TORCH_NCCL_USE_COMM_NONBLOCKING"] = "1"
    ctx.case("nb.init_process_group(device_id)", ctx.init_pg, "nb", True)
    if not dist.is_initialized():
        return
    for dn in ("f32", "bf16"):
        ctx.case(f"nb.all_reduce.sum.{dn}", c_all_reduce, ctx, "sum", dn)
    ctx.case("nb.broadcast.f32", c_broadcast, ctx, "f32", ctx.world - 1)
    ctx.case("nb.all_gather_into_tensor.f32", c_all_gather_into_tensor, ctx, "f32")
    ctx.case("nb.reduce_scatter_tensor.f32", c_reduce_scatter_tensor, ctx, "f32")
    ctx.case("nb.all_to_all_single.unequal.f32", c_all_to_all_single, ctx, "f32", False)
    ctx.case("nb.send_recv.f32", c_send_recv, ctx, "f32")
    ctx.case("nb.new_group", c_new_group, ctx)
    ctx.case("nb.split_group", c_split_group, ctx)
    ctx.case("nb.barrier", c_barrier, ctx)
    ctx.case("nb.destroy_process_group+reinit", c_destroy_and_reinit, ctx, True)


def phase_register(ctx, args):
    os.environ["TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK"] = "1"
    ctx.init_pg("reg")
    for dn in ("f32", "bf16"):
        ctx.case(f"reg.all_reduce.sum.{dn}", c_all_reduce, ctx, "sum", dn, (1 << 20) + 1)
        ctx.case(f"reg.all_gather_into_tensor.{dn}", c_all_gather_into_tensor, ctx, dn)
        ctx.case(f"reg.reduce_scatter_tensor.{dn}", c_reduce_scatter_tensor, ctx, dn)
        ctx.case(f"reg.all_to_all_single.equal.{dn}", c_all_to_all_single, ctx, dn, True)
    ctx.case("reg.destroy_process_group", dist.destroy_process_group)


def phase_abort(ctx, args):
    os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "0"  # as _abort_process_group asks
    ctx.init_pg("ab", device_id=True)  # eager, blocking
    ctx.case("ab.all_reduce.sum.f32", c_all_reduce, ctx, "sum", "f32")
    ctx.case("ab.split_group", c_split_group, ctx)
    ctx.case("ab.abort_subgroup", c_abort_subgroup, ctx)
    ctx.case("ab.abort_inflight", c_abort_inflight, ctx)
    ctx.case("ab.abort_world+reinit", c_abort_world, ctx)


PHASES = {"main": phase_main, "nonblocking": phase_nonblocking, "register": phase_register,
          "abort": phase_abort}


# ---------------------------------------------------------------------------------------------
# processes
# ---------------------------------------------------------------------------------------------
def set_test_host(rank, world):
    """OXCCL_TEST_HOSTS=K: K contiguous groups of ranks, each its own host (NCCL_HOSTID), so
    that NVIDIA's NCCL and ours both connect them over the network."""
    hosts = os.environ.get("OXCCL_TEST_HOSTS")
    if hosts:
        k = max(1, min(int(hosts), world))
        os.environ["NCCL_HOSTID"] = f"oxccl-test-host{rank * k // world}"


def worker(rank, world, backend, phase, store_port, args):
    os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(world)
    set_test_host(rank, world)
    store = dist.TCPStore("127.0.0.1", store_port, world_size=None, is_master=False,
                          timeout=TIMEOUT + datetime.timedelta(seconds=30))
    ctx = Ctx(rank, world, backend, phase, store, args.verbose)
    try:
        if ctx.nccl:
            torch.cuda.set_device(ctx.dev)
        PHASES[phase](ctx, args)
    except Exception as e:  # noqa: BLE001 - a phase that cannot go on reports one FAIL
        store.set(f"setup/{rank}", one_line(e))
        if args.verbose:
            traceback.print_exc(limit=8, file=sys.stderr)
    finally:
        if rank == 0:
            store.set("counts", " ".join(str(ctx.counts[k]) for k in ("PASS", "FAIL", "SKIP")))
        store.set(f"done/{rank}", "1")
    if dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown (CUDA/NCCL atexit ordering is not under test)


def run_phase(phase, args):
    """Runs one phase in fresh processes; returns (passed, failed, skipped)."""
    store = dist.TCPStore("127.0.0.1", 0, world_size=None, is_master=True,
                          wait_for_workers=False, timeout=datetime.timedelta(seconds=5))
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=worker, args=(r, args.nprocs, args.backend, phase, store.port,
                                              args), daemon=True) for r in range(args.nprocs)]
    for p in procs:
        p.start()
    deadline = time.time() + args.phase_timeout
    while time.time() < deadline and any(p.is_alive() for p in procs):
        if any(p.exitcode not in (None, 0) for p in procs):
            time.sleep(5)  # let the others notice, then stop them below
            break
        time.sleep(0.2)
    failed_extra = 0
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    crashed = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
    for r in range(args.nprocs):
        if store.check([f"setup/{r}"]):
            print(f"FAIL {phase}.setup: r{r}: {store.get(f'setup/{r}').decode()}", flush=True)
            failed_extra += 1
    if hung or crashed:
        cur = {r: store.get(f"cur/{r}").decode() if store.check([f"cur/{r}"]) else "?"
               for r in range(args.nprocs)}
        what = ", ".join(f"r{r} {'hung' if r in hung else 'exited %s' % procs[r].exitcode}"
                         f" in {cur[r]}" for r in hung + crashed)
        print(f"FAIL {phase}.processes: {what}", flush=True)
        failed_extra += 1
    for p in procs:
        if p.is_alive():
            p.kill()
        p.join(5)
    counts = [0, 0, 0]
    if store.check(["counts"]):
        counts = [int(x) for x in store.get("counts").decode().split()]
    counts[1] += failed_extra
    return counts


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    ap.add_argument("--nprocs", type=int, default=2)
    ap.add_argument("--phases", default="main,nonblocking,register,abort")
    ap.add_argument("--phase-timeout", type=float, default=280.0)
    ap.add_argument("--expect-lib", default="", help="the libnccl.so.2 that must be mapped")
    ap.add_argument("--expect-version", default="", help="e.g. 22809")
    ap.add_argument("--verbose", action="store_true", help="tracebacks of failures on stderr")
    args = ap.parse_args()
    # CLIENTS_SHARE_GPUS=1: ranks share the GPUs there are (only oxccl takes that).
    # OXCCL_TEST_HOSTS: every group of ranks is its own host, where NVIDIA's NCCL shares GPUs too.
    if (args.backend == "nccl" and torch.cuda.device_count() < args.nprocs
            and os.environ.get("CLIENTS_SHARE_GPUS") != "1"
            and not os.environ.get("OXCCL_TEST_HOSTS")):
        print(f"FAIL setup: {torch.cuda.device_count()} GPUs, need {args.nprocs}")
        print("SUMMARY passed=0 failed=1 skipped=0")
        return 1
    total = [0, 0, 0]
    for phase in args.phases.split(","):
        print(f"INFO phase {phase}", flush=True)
        c = run_phase(phase, args)
        total = [a + b for a, b in zip(total, c)]
    print(f"SUMMARY passed={total[0]} failed={total[1]} skipped={total[2]}", flush=True)
    return 1 if total[1] else 0


if __name__ == "__main__":
    sys.exit(main())
