#!/usr/bin/env python3
"""A small DistributedDataParallel training run at 2 processes; writes the per-step losses as JSON
so that two runs (NVIDIA's libnccl and ours) can be compared with compare_losses.py.

Usage:
  python3 torch_ddp.py --backend nccl --out losses.json [--steps 50]
                       [--expect-lib PATH] [--expect-version 22809]
Model: 4 Linear layers (about 150k parameters, several DDP buckets), fixed seed, fixed synthetic
data (different on each rank), SGD with momentum. Deterministic algorithms are on, so two runs
differ only where the communication library's results differ.
Checks here (PASS/FAIL lines, then SUMMARY): every rank ends with bitwise identical parameters
(DDP's invariant), the loss goes down, and (with --expect-lib) torch's NCCL calls bind to that
library.
"""
import argparse
import datetime
import hashlib
import json
import os
import sys
import time
import traceback

sys.dont_write_bytecode = True  # no __pycache__ beside the scripts (nccl_probe, mock_cupy)

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # needed by deterministic cuBLAS

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import nccl_probe  # noqa: E402 - beside this file

TIMEOUT = datetime.timedelta(seconds=120)
BATCH, DIN, HIDDEN, CLASSES = 32, 64, 256, 10


def make_model():
    torch.manual_seed(0)  # same initial weights everywhere (DDP also broadcasts rank 0's)
    return torch.nn.Sequential(
        torch.nn.Linear(DIN, HIDDEN), torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.ReLU(),
        torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.Tanh(),
        torch.nn.Linear(HIDDEN, CLASSES))


def make_data(rank, steps):
    """Inputs differ per rank; labels come from a fixed random 'teacher': a learnable task."""
    g = torch.Generator().manual_seed(1234)
    teacher = torch.randn(DIN, CLASSES, generator=g)
    g = torch.Generator().manual_seed(5678 + rank)
    xs = torch.randn(steps, BATCH, DIN, generator=g)
    ys = (xs @ teacher).argmax(-1)
    return xs, ys


def param_digest(model):
    h = hashlib.sha256()
    total = 0.0
    for p in model.parameters():
        t = p.detach().cpu().contiguous()
        h.update(t.numpy().tobytes())
        total += float(t.double().sum())
    return h.hexdigest()[:16], total


def worker(rank, world, backend, steps, store_port, expect_lib, expect_version):
    store = dist.TCPStore("127.0.0.1", store_port, world_size=None, is_master=False,
                          timeout=TIMEOUT)
    try:
        torch.use_deterministic_algorithms(True)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        nccl = backend == "nccl"
        hosts = os.environ.get("OXCCL_TEST_HOSTS")
        if hosts:
            # Each group of ranks its own host (NCCL_HOSTID); ranks then may share GPUs.
            k = max(1, min(int(hosts), world))
            os.environ["NCCL_HOSTID"] = f"oxccl-test-host{rank * k // world}"
        ngpu = max(1, torch.cuda.device_count()) if nccl else 1
        dev = torch.device("cuda", rank % ngpu) if nccl else torch.device("cpu")
        if nccl:
            torch.cuda.set_device(dev)
        dist.init_process_group(backend, store=dist.PrefixStore("ddp/", store), rank=rank,
                                world_size=world, timeout=TIMEOUT)
        model = make_model().to(dev)
        ddp = DDP(model, device_ids=[dev.index] if nccl else None, bucket_cap_mb=0.25)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
        xs, ys = make_data(rank, steps)
        losses = []
        for s in range(steps):
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(ddp(xs[s].to(dev)), ys[s].to(dev))
            loss.backward()
            opt.step()
            losses.append(float(loss.item()))
        digest, total = param_digest(model)
        client = nccl_probe.torch_client()
        lib_error = nccl_probe.check(client, expect_lib, expect_version) if client else None
        store.set(f"result/{rank}", json.dumps({"losses": losses, "param_hash": digest,
                                                "lib_error": lib_error,
                                                "param_sum": total,
                                                "libnccl": nccl_probe.describe(
                                                    nccl_probe.torch_client())}))
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001
        lines = traceback.format_exc().strip().splitlines()
        store.set(f"error/{rank}", " | ".join(lines[-3:])[:400] + f" ({type(e).__name__})")
    sys.stdout.flush()
    os._exit(0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--nprocs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=240.0)
    ap.add_argument("--expect-lib", default="", help="the libnccl.so.2 torch must call")
    ap.add_argument("--expect-version", default="", help="e.g. 22809")
    args = ap.parse_args()
    store = dist.TCPStore("127.0.0.1", 0, world_size=None, is_master=True,
                          wait_for_workers=False, timeout=datetime.timedelta(seconds=5))
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=worker, daemon=True,
                         args=(r, args.nprocs, args.backend, args.steps, store.port,
                               args.expect_lib, args.expect_version))
             for r in range(args.nprocs)]
    for p in procs:
        p.start()
    deadline = time.time() + args.timeout
    for p in procs:
        p.join(max(1.0, deadline - time.time()))
    passed = failed = 0

    def report(ok, name, why=""):
        nonlocal passed, failed
        print(f"PASS {name}" if ok else f"FAIL {name}: {why}", flush=True)
        passed, failed = passed + ok, failed + (not ok)

    results, problems = [], []
    for r, p in enumerate(procs):
        if store.check([f"result/{r}"]):
            results.append(json.loads(store.get(f"result/{r}")))
        elif store.check([f"error/{r}"]):
            problems.append(f"r{r}: {store.get(f'error/{r}').decode()}")
        else:
            problems.append(f"r{r}: {'hung' if p.is_alive() else f'exited {p.exitcode}'}")
        if p.is_alive():
            p.kill()
    report(not problems, "ddp.train", "; ".join(problems))
    if not problems:
        out = {"backend": args.backend, "world": args.nprocs, "steps": args.steps,
               "losses": [r["losses"] for r in results],
               "param_hash": [r["param_hash"] for r in results],
               "param_sum": [r["param_sum"] for r in results],
               "libnccl": results[0]["libnccl"]}
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
        print(f"INFO {out['libnccl']}")
        print(f"INFO loss step 0 {out['losses'][0][0]:.6f} -> step {args.steps - 1} "
              f"{out['losses'][0][-1]:.6f} (rank 0); param hash {out['param_hash'][0]}")
        lib_errors = [f"r{r}: {x['lib_error']}" for r, x in enumerate(results) if x["lib_error"]]
        report(not lib_errors, "ddp.library", "; ".join(lib_errors))
        hashes = set(out["param_hash"])
        report(len(hashes) == 1, "ddp.params_identical_on_all_ranks",
               f"parameter hashes differ: {out['param_hash']}")
        first = sum(ls[0] for ls in out["losses"]) / len(out["losses"])
        last = sum(sum(ls[-5:]) / 5 for ls in out["losses"]) / len(out["losses"])
        report(last < 0.8 * first, "ddp.loss_decreases",
               f"mean loss {first:.4f} at step 0, {last:.4f} over the last 5 steps")
    print(f"SUMMARY passed={passed} failed={failed} skipped=0", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
