#!/usr/bin/env python3
"""CuPy's NCCL binding (cupy.cuda.nccl) on whatever libnccl.so.2 the process loads, at 2 processes
(rank i on GPU i), plus ncclCommInitAll driving both GPUs from one process.

Usage: python3 cupy_nccl.py [--nprocs 2] [--expect-lib PATH] [--expect-version 22809]
Prints 'PASS name' / 'FAIL name: reason' / 'SKIP name: reason', INFO lines, and
'SUMMARY passed=N failed=M skipped=K'; exit status 1 when something failed.

CuPy resolves libnccl.so.2 by its soname (the extension module's DT_NEEDED entry; its preload step,
if any, dlopens 'libnccl.so.2' from the default search path), so LD_PRELOAD or LD_LIBRARY_PATH
picks the library; the 'library' case checks where the module's NCCL symbols bind (nccl_probe).

For checking this script without GPUs: PYTHONPATH=mock_cupy OXCCL_BACKEND=host
LD_PRELOAD=<oxccl>/libnccl.so.2 runs it against a NumPy stand-in for cupy (see mock_cupy/).
"""
import argparse
import os
import queue
import sys
import time
import traceback

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts (nccl_probe, mock_cupy)

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

import multiprocessing as mp  # noqa: E402

import numpy as np  # noqa: E402

import nccl_probe  # noqa: E402 - beside this file

N = 1031


def vals(rank, n, salt, dtype=np.float32):
    """Deterministic values; sums of two are exact in float32 (|v| < 2**18, quarters)."""
    i = np.arange(n, dtype=np.int64)
    p = (i * 2654435761 + (i >> 3) * (rank + 1) * 7 + rank * 40503 + salt * 9973) % (1 << 20)
    if np.dtype(dtype).kind == "f":
        scale = 4.0 if dtype == np.float32 else 1.0
        mod = (1 << 20) if dtype == np.float32 else 1024  # float16: |v| < 512, integers
        return (((p % mod) - mod // 2) / scale).astype(dtype)
    return ((p - (1 << 19)) << 40).astype(dtype)  # int64 beyond 2**53


def pow2_vals(rank, n, salt):
    i = np.arange(n, dtype=np.int64)
    k = (i * 7 + rank * 3 + salt) % 3
    sign = np.where((i + 2 * rank + salt) % 5 == 0, -1.0, 1.0)
    return (sign * (2.0 ** k)).astype(np.float32)


class Skip(Exception):
    pass


def diff(got, want, what=""):
    if got.shape != want.shape:
        return f"{what}shape {got.shape}, expected {want.shape}"
    bad = got != want
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        return f"{what}{int(bad.sum())}/{got.size} wrong, first [{k}]: got {got.flat[k]} " \
               f"want {want.flat[k]}"
    return None


# ---------------------------------------------------------------------------------------------
# one rank
# ---------------------------------------------------------------------------------------------
class Rank:
    def __init__(self, cp, nccl, comm, rank, world, stream):
        self.cp, self.nccl, self.comm = cp, nccl, comm
        self.rank, self.world, self.stream = rank, world, stream
        self.errors = []

    def dev(self, a):
        # A copy from pageable host memory may still be in flight when asarray returns, and the
        # NCCL stream does not wait for it: finish it before any operation reads the array.
        d = self.cp.asarray(a)
        self.cp.cuda.runtime.deviceSynchronize()
        return d

    def host(self, a):
        self.stream.synchronize()
        return self.cp.asnumpy(a)

    def expect(self, got_dev, want, what=""):
        msg = diff(self.host(got_dev), want, what)
        if msg:
            self.errors.append(msg)

    # --- cases (every rank makes the same calls; checks only collect messages) ---------------
    def all_reduce(self, op, n=N, dtype=np.float32, inplace=False):
        nc, W = self.nccl, self.world
        if op == "avg" and not hasattr(nc, "NCCL_AVG"):
            raise Skip("this CuPy has no NCCL_AVG")
        ins = [pow2_vals(r, n, 1) if op == "prod" else vals(r, n, 1, dtype) for r in range(W)]
        ref = {"sum": lambda s: s.sum(0), "prod": lambda s: s.prod(0),
               "max": lambda s: s.max(0), "min": lambda s: s.min(0),
               "avg": lambda s: s.astype(np.float64).mean(0)}[op](np.stack(ins)).astype(dtype)
        ntype = {np.float32: nc.NCCL_FLOAT32, np.float16: nc.NCCL_FLOAT16,
                 np.int64: nc.NCCL_INT64}[dtype]
        nop = {"sum": nc.NCCL_SUM, "prod": nc.NCCL_PROD, "max": nc.NCCL_MAX,
               "min": nc.NCCL_MIN, "avg": getattr(nc, "NCCL_AVG", None)}[op]
        send = self.dev(ins[self.rank])
        recv = send if inplace else self.cp.empty(n, dtype=dtype)
        self.comm.allReduce(send.data.ptr, recv.data.ptr, n, ntype, nop, self.stream.ptr)
        if op == "avg":  # mean of W values: allow one rounding
            got = self.host(recv).astype(np.float64)
            if not np.allclose(got, ref.astype(np.float64), rtol=1e-6, atol=1e-6):
                self.errors.append(f"avg outside tolerance, max err {np.abs(got - ref).max()}")
        else:
            self.expect(recv, ref)

    def bcast(self, root, inplace):
        nc = self.nccl
        want = vals(root, N, 2)
        buf = self.dev(want if self.rank == root else vals(self.rank, N, 99))
        if inplace:
            self.comm.bcast(buf.data.ptr, N, nc.NCCL_FLOAT32, root, self.stream.ptr)
            self.expect(buf, want)
        else:
            out = self.cp.empty(N, dtype=np.float32)
            self.comm.broadcast(buf.data.ptr, out.data.ptr, N, nc.NCCL_FLOAT32, root,
                                self.stream.ptr)
            self.expect(out, want)

    def reduce(self, root):
        nc = self.nccl
        ins = [vals(r, N, 3) for r in range(self.world)]
        send, recv = self.dev(ins[self.rank]), self.cp.empty(N, dtype=np.float32)
        self.comm.reduce(send.data.ptr, recv.data.ptr, N, nc.NCCL_FLOAT32, nc.NCCL_SUM, root,
                         self.stream.ptr)
        if self.rank == root:
            self.expect(recv, np.stack(ins).sum(0).astype(np.float32))
        else:
            self.stream.synchronize()

    def all_gather(self):
        nc, W = self.nccl, self.world
        send, recv = self.dev(vals(self.rank, N, 4)), self.cp.empty(W * N, dtype=np.float32)
        self.comm.allGather(send.data.ptr, recv.data.ptr, N, nc.NCCL_FLOAT32, self.stream.ptr)
        self.expect(recv, np.concatenate([vals(r, N, 4) for r in range(W)]))

    def reduce_scatter(self):
        nc, W, r = self.nccl, self.world, self.rank
        ins = [vals(q, W * N, 5) for q in range(W)]
        send, recv = self.dev(ins[r]), self.cp.empty(N, dtype=np.float32)
        self.comm.reduceScatter(send.data.ptr, recv.data.ptr, N, nc.NCCL_FLOAT32, nc.NCCL_SUM,
                                self.stream.ptr)
        self.expect(recv, np.stack(ins).sum(0)[r * N:(r + 1) * N].astype(np.float32))

    def send_recv(self, n=N):
        """Each rank sends to the next and receives from the previous, in one group."""
        nc, W, r = self.nccl, self.world, self.rank
        nxt, prv = (r + 1) % W, (r - 1) % W
        send, recv = self.dev(vals(r, n, 6)), self.cp.empty(n, dtype=np.float32)
        nc.groupStart()
        self.comm.send(send.data.ptr, n, nc.NCCL_FLOAT32, nxt, self.stream.ptr)
        self.comm.recv(recv.data.ptr, n, nc.NCCL_FLOAT32, prv, self.stream.ptr)
        nc.groupEnd()
        self.expect(recv, vals(prv, n, 6))

    def all_to_all_uneven(self):
        """All-to-all from grouped send/recv with uneven (and zero) sizes, self included."""
        nc, W, r = self.nccl, self.world, self.rank
        size = lambda s, d: (3 * s + 5 * d + 1) % 4 * 61  # noqa: E731
        sends = [self.dev(vals(r, size(r, d), 10 + d)) for d in range(W)]
        recvs = [self.cp.empty(size(s, r), dtype=np.float32) for s in range(W)]
        nc.groupStart()
        for d in range(W):
            if size(r, d):
                self.comm.send(sends[d].data.ptr, size(r, d), nc.NCCL_FLOAT32, d, self.stream.ptr)
        for s in range(W):
            if size(s, r):
                self.comm.recv(recvs[s].data.ptr, size(s, r), nc.NCCL_FLOAT32, s, self.stream.ptr)
        nc.groupEnd()
        for s in range(W):
            self.expect(recvs[s], vals(s, size(s, r), 10 + r), f"from rank {s}: ")

    def grouped_collectives(self):
        """Three all_reduces and an all_gather fused in one group."""
        nc, W = self.nccl, self.world
        bufs, wants = [], []
        nc.groupStart()
        for j in range(3):
            ins = [vals(q, 100 + 37 * j, 20 + j) for q in range(W)]
            b = self.dev(ins[self.rank])
            self.comm.allReduce(b.data.ptr, b.data.ptr, b.size, nc.NCCL_FLOAT32, nc.NCCL_SUM,
                                self.stream.ptr)
            bufs.append(b)
            wants.append(np.stack(ins).sum(0).astype(np.float32))
        send, gat = self.dev(vals(self.rank, 50, 30)), self.cp.empty(W * 50, dtype=np.float32)
        self.comm.allGather(send.data.ptr, gat.data.ptr, 50, nc.NCCL_FLOAT32, self.stream.ptr)
        nc.groupEnd()
        for j, (b, w) in enumerate(zip(bufs, wants)):
            self.expect(b, w, f"all_reduce {j}: ")
        self.expect(gat, np.concatenate([vals(q, 50, 30) for q in range(W)]), "all_gather: ")

    def comm_info(self):
        got = (self.comm.rank_id(), self.comm.size(), self.comm.device_id())
        want = (self.rank, self.world, self.rank)
        if got != want:
            self.errors.append(f"(rank_id, size, device_id) = {got}, expected {want}")


def rank_main(rank, world, uid_q, res_q, args):
    """Runs every case; puts (index, name, rank, status) on res_q."""
    idx = [0]

    def put(name, status):
        idx[0] += 1
        res_q.put((idx[0], name, rank, status))

    try:
        import cupy as cp
        from cupy.cuda import nccl
        cp.cuda.Device(rank).use()
        if rank == 0:
            uid = nccl.get_unique_id()
            for _ in range(world - 1):
                uid_q.put(uid)
        else:
            uid = uid_q.get(timeout=120)
        t0 = time.time()
        comm = nccl.NcclCommunicator(world, uid, rank)
        put("init(NcclCommunicator)", f"PASS {time.time() - t0:.2f}s")
        R = Rank(cp, nccl, comm, rank, world, cp.cuda.Stream(non_blocking=True))
    except Exception as e:  # noqa: BLE001
        put("init(NcclCommunicator)", f"FAIL {type(e).__name__}: {e}"[:300])
        if args.verbose:
            traceback.print_exc(limit=6)
        res_q.put((None, None, rank, "done"))
        return

    def case(name, fn, *a, **k):
        R.errors = []
        try:
            fn(*a, **k)
            R.stream.synchronize()
            status = "FAIL " + "; ".join(R.errors[:3]) if R.errors else "PASS"
        except Skip as e:
            status = f"SKIP {e}"
        except Exception as e:  # noqa: BLE001
            status = f"FAIL {type(e).__name__}: {e}"[:300]
            if args.verbose:
                traceback.print_exc(limit=6)
        put(name, status)

    def library():
        client = nccl_probe.cupy_client()  # None with the NumPy stand-in: the global scope
        if rank == 0:
            res_q.put((0, "INFO", rank, f"{nccl_probe.describe(client)}; CuPy get_version() "
                       f"{nccl.get_version()}, built against {nccl.get_build_version()}"))
        msg = nccl_probe.check(client, args.expect_lib, args.expect_version)
        if msg:
            R.errors.append(msg)
        if args.expect_version and nccl.get_version() != int(args.expect_version):
            R.errors.append(f"get_version() = {nccl.get_version()}, "
                            f"expected {args.expect_version}")

    case("library", library)
    case("comm_info(rank_id,size,device_id)", R.comm_info)
    for op in ("sum", "prod", "max", "min", "avg"):
        case(f"all_reduce.{op}.f32", R.all_reduce, op)
    case("all_reduce.sum.f32.inplace", R.all_reduce, "sum", inplace=True)
    case("all_reduce.sum.f16", R.all_reduce, "sum", dtype=np.float16)
    case("all_reduce.max.i64", R.all_reduce, "max", dtype=np.int64)
    for n in (1, (1 << 22) + 3):
        case(f"all_reduce.sum.f32.n{n}", R.all_reduce, "sum", n=n)
    case("bcast.root1.inplace", R.bcast, world - 1, True)
    case("broadcast.root0", R.bcast, 0, False)
    case("reduce.sum.root1", R.reduce, world - 1)
    case("all_gather", R.all_gather)
    case("reduce_scatter", R.reduce_scatter)
    case("send_recv.group", R.send_recv)
    case("send_recv.group.n4194304", R.send_recv, 1 << 22)
    case("all_to_all.uneven.send_recv", R.all_to_all_uneven)
    case("group.3xall_reduce+all_gather", R.grouped_collectives)

    # a second communicator from a fresh unique id, aborted while idle; the first keeps working
    def second_comm_abort():
        if rank == 0:
            uid2 = nccl.get_unique_id()
            for _ in range(world - 1):
                uid_q.put(uid2)
        else:
            uid2 = uid_q.get(timeout=120)
        c2 = nccl.NcclCommunicator(world, uid2, rank)
        if c2.rank_id() != rank:
            R.errors.append(f"second comm rank_id {c2.rank_id()}")
        c2.abort()
        R.all_reduce("sum")

    case("second_comm.abort", second_comm_abort)
    case("destroy", comm.destroy)
    res_q.put((None, None, rank, "done"))


def init_all_main(world, res_q, args):
    """ncclCommInitAll over every GPU from one process, then one grouped all_reduce."""
    try:
        import cupy as cp
        from cupy.cuda import nccl
        comms = nccl.NcclCommunicator.initAll(list(range(world)))
        ins = [vals(r, N, 40) for r in range(world)]
        bufs, streams = [], []
        for d in range(world):
            with cp.cuda.Device(d):
                bufs.append(cp.asarray(ins[d]))
                streams.append(cp.cuda.Stream(non_blocking=True))
        nccl.groupStart()
        for d, c in enumerate(comms):
            with cp.cuda.Device(d):
                c.allReduce(bufs[d].data.ptr, bufs[d].data.ptr, N, nccl.NCCL_FLOAT32,
                            nccl.NCCL_SUM, streams[d].ptr)
        nccl.groupEnd()
        want = np.stack(ins).sum(0).astype(np.float32)
        errs = []
        for d in range(world):
            with cp.cuda.Device(d):
                streams[d].synchronize()
                msg = diff(cp.asnumpy(bufs[d]), want, f"device {d}: ")
                if msg:
                    errs.append(msg)
            if comms[d].rank_id() != d:
                errs.append(f"comm {d} rank_id {comms[d].rank_id()}")
        for c in comms:
            c.destroy()
        res_q.put((1, "initAll.all_reduce", 0, "FAIL " + "; ".join(errs) if errs else "PASS"))
    except Exception as e:  # noqa: BLE001
        res_q.put((1, "initAll.all_reduce", 0, f"FAIL {type(e).__name__}: {e}"[:300]))
    res_q.put((None, None, 0, "done"))


def collect(procs, res_q, nranks, timeout, counts):
    """Prints one line per case once every rank has reported it."""
    pending, done, deadline = {}, 0, time.time() + timeout
    last = {}
    while done < nranks:
        try:
            idx, name, rank, status = res_q.get(timeout=1.0)
        except queue.Empty:
            dead = [p for p in procs if not p.is_alive() and p.exitcode not in (0, None)]
            if time.time() > deadline or dead:
                what = ", ".join(f"r{r} {'hung' if p.is_alive() else f'exited {p.exitcode}'}"
                                 f" after {last.get(r, 'start')}" for r, p in enumerate(procs))
                print(f"FAIL processes: {what}", flush=True)
                counts["FAIL"] += 1
                return
            continue
        if idx is None:
            done += 1
            continue
        if name == "INFO":
            print(f"INFO {status}", flush=True)
            continue
        last[rank] = name
        pending.setdefault(idx, {})[rank] = (name, status)
        if len(pending[idx]) == nranks:
            sts = [pending[idx][r][1] for r in range(nranks)]
            kinds = [s.split(" ", 1)[0] for s in sts]
            if all(k == "PASS" for k in kinds):
                line, kind = f"PASS {name}", "PASS"
            elif all(k == "SKIP" for k in kinds):
                line, kind = f"SKIP {name}: {sts[0][5:]}", "SKIP"
            else:
                bad = [(r, s) for r, s in enumerate(sts) if not s.startswith("PASS")]
                if len(bad) == len(sts) and len(set(sts)) == 1:
                    line = f"FAIL {name}: all ranks: {sts[0]}"
                else:
                    line = f"FAIL {name}: " + "; ".join(f"r{r}: {s}" for r, s in bad)
                kind = "FAIL"
            counts[kind] += 1
            print(line, flush=True)
            del pending[idx]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nprocs", type=int, default=2)
    ap.add_argument("--expect-lib", default="")
    ap.add_argument("--expect-version", default="")
    ap.add_argument("--timeout", type=float, default=240.0)
    ap.add_argument("--no-init-all", action="store_true")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    uid_q, res_q = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, args.nprocs, uid_q, res_q, args),
                         daemon=True) for r in range(args.nprocs)]
    for p in procs:
        p.start()
    collect(procs, res_q, args.nprocs, args.timeout, counts)
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
    if not args.no_init_all:
        p = ctx.Process(target=init_all_main, args=(args.nprocs, res_q, args), daemon=True)
        p.start()
        collect([p], res_q, 1, 120, counts)
        p.join(10)
        if p.is_alive():
            p.kill()
    print(f"SUMMARY passed={counts['PASS']} failed={counts['FAIL']} skipped={counts['SKIP']}",
          flush=True)
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
