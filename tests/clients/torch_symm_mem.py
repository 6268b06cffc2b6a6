#!/usr/bin/env python3
"""PyTorch's symmetric memory on NCCL's device API (TORCH_SYMMMEM=NCCL), one process per GPU.

Usage:
  python3 torch_symm_mem.py [--world N] [--count 4099] [--expect-lib PATH] [--expect-version V]
With CLIENTS_SHARE_GPUS=1, ranks share the GPUs there are (oxccl takes that, NVIDIA's NCCL not).
PyTorch's NCCL backend for symmetric memory allocates with ncclMemAlloc, registers the tensor as
a symmetric window (ncclCommWindowRegister) and builds a device communicator
(ncclDevCommCreate); its kernels then read the peers' windows through the device API. Cases:
  library           the NCCL symbols bind to --expect-lib (and report --expect-version)
  rendezvous        symm_mem.empty + rendezvous on the world group (after one all_reduce: the
                    backend looks the communicator up, it does not create it)
  peer_buffers      every rank's tensor as seen through the handle, for every peer
  one_shot_all_reduce  torch.ops.symm_mem.one_shot_all_reduce on the symmetric tensor
  c10d_all_reduce   an ordinary dist.all_reduce on the symmetric tensor
  barrier           the handle's barrier, twice
Output: 'PASS name', 'FAIL name: reason', 'SKIP name: reason' (torch lacks the API), INFO lines,
and 'SUMMARY passed=N failed=M skipped=K'; exit status 0 when nothing failed. Values are small
integers in float32, so every sum is exact.
"""
import argparse
import datetime
import os
import socket
import sys
import traceback

sys.dont_write_bytecode = True

# Read by PyTorch when it loads, so before the import; no NVLink multicast on the shared machine.
os.environ["TORCH_SYMMMEM"] = "NCCL"
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import nccl_probe  # noqa: E402 - beside this file


def values(rank, n, salt):
    """float32 small integers, deterministic in (rank, index, salt)."""
    i = torch.arange(n, dtype=torch.int64)
    return ((i * 7 + rank * 13 + salt) % 61).to(torch.float32)


def first_wrong(got, want):
    """A sentence naming the first differing element, or None."""
    bad = (got.cpu() != want.cpu()).nonzero()
    if bad.numel() == 0:
        return None
    k = int(bad[0][0])
    return f"{bad.shape[0]} wrong elements, first [{k}] = {float(got[k])}, want {float(want[k])}"


def worker(rank, world, port, count, expect, out):
    lines = []

    def say(kind, name, why=""):
        lines.append(f"{kind} {name}" + (f": {why}" if why else ""))

    def case(name, fn):
        try:
            why = fn()
        except (AttributeError, NotImplementedError) as e:
            say("SKIP", name, f"{type(e).__name__}: {e}"[:300])
            return
        except Exception as e:  # noqa: BLE001 - every failure is a result here
            say("FAIL", name, f"{type(e).__name__}: {e}"[:300])
            traceback.print_exc(file=sys.stderr)
            return
        say("FAIL" if why else "PASS", name, why or "")

    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        # Ranks share GPUs where there are fewer (CLIENTS_SHARE_GPUS=1; only oxccl takes that).
        dev = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        dist.init_process_group("nccl", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=90))
        case("library", lambda: nccl_probe.check(nccl_probe.torch_client(), *expect))
        warm = torch.ones(8, device=dev)
        dist.all_reduce(warm)
        torch.cuda.synchronize()
        import torch.distributed._symmetric_memory as symm_mem

        group = dist.group.WORLD.group_name
        state = {}

        def rendezvous():
            t = symm_mem.empty(count, dtype=torch.float32, device=dev)
            t.copy_(values(rank, count, 1).to(dev))
            state["t"] = t
            state["hdl"] = symm_mem.rendezvous(t, group=group)
            torch.cuda.synchronize()
            return None

        def peer_buffers():
            hdl = state["hdl"]
            hdl.barrier()
            for peer in range(world):
                buf = hdl.get_buffer(peer, (count,), torch.float32)
                why = first_wrong(buf, values(peer, count, 1))
                if why:
                    return f"peer {peer}: {why}"
            hdl.barrier()
            return None

        def one_shot_all_reduce():
            t = state["t"]
            t.copy_(values(rank, count, 2).to(dev))
            state["hdl"].barrier()
            got = torch.ops.symm_mem.one_shot_all_reduce(t, "sum", group)
            torch.cuda.synchronize()
            want = sum(values(r, count, 2) for r in range(world))
            return first_wrong(got, want)

        def c10d_all_reduce():
            t = state["t"]
            t.copy_(values(rank, count, 3).to(dev))
            dist.all_reduce(t)
            torch.cuda.synchronize()
            return first_wrong(t, sum(values(r, count, 3) for r in range(world)))

        def barrier():
            state["hdl"].barrier()
            state["hdl"].barrier()
            torch.cuda.synchronize()
            return None

        case("rendezvous", rendezvous)
        if "hdl" in state:
            case("peer_buffers", peer_buffers)
            case("one_shot_all_reduce", one_shot_all_reduce)
            case("c10d_all_reduce", c10d_all_reduce)
            case("barrier", barrier)
        else:
            for name in ("peer_buffers", "one_shot_all_reduce", "c10d_all_reduce", "barrier"):
                say("FAIL", name, "no symmetric tensor (rendezvous failed)")
        state.clear()
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001
        say("FAIL", "setup", f"{type(e).__name__}: {e}"[:300])
        traceback.print_exc(file=sys.stderr)
    out.put((rank, lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--count", type=int, default=4099)
    ap.add_argument("--expect-lib", default="")
    ap.add_argument("--expect-version", default="")
    a = ap.parse_args()
    if torch.cuda.device_count() < a.world and os.environ.get("CLIENTS_SHARE_GPUS") != "1":
        print(f"SKIP all: {a.world} GPUs needed, {torch.cuda.device_count()} present")
        print("SUMMARY passed=0 failed=0 skipped=1")
        return 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, a.world, port, a.count, (a.expect_lib, a.expect_version), q))
             for r in range(a.world)]
    for p in procs:
        p.start()
    results = {}
    for _ in procs:
        try:
            r, lines = q.get(timeout=240)
        except Exception:  # noqa: BLE001 - a rank that never reported
            break
        results[r] = lines
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
    passed = failed = skipped = 0
    for r in range(a.world):
        lines = results.get(r, [f"FAIL rank: rank {r} reported nothing (crashed or hung)"])
        # Rank 0's lines stand for every rank's; another rank adds only its failures.
        for ln in lines:
            kind = ln.split(" ", 1)[0]
            if kind == "FAIL":
                print(f"{ln} (rank {r})")
                failed += 1
            elif r == 0:
                print(ln)
                passed += kind == "PASS"
                skipped += kind == "SKIP"
    print(f"SUMMARY passed={passed} failed={failed} skipped={skipped}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
