#!/usr/bin/env python3
"""The watchdog's hang report and check mode driven by torch.distributed on oxccl's libnccl.so.2
(users.md T12/T13 on GPUs; the host-backend versions run in CI).

Usage (2 GPUs, or 2 ranks sharing one GPU with --share-gpu):
  LD_PRELOAD=dist/lib/libnccl.so.2 python3 tests/clients/torch_hang.py stall [--share-gpu]
  LD_PRELOAD=dist/lib/libnccl.so.2 python3 tests/clients/torch_hang.py count [--share-gpu]

stall  OXCCL_WATCHDOG_SECONDS=5 OXCCL_WATCHDOG_ABORT=1: rank 1 skips the last all_reduce and
       waits; rank 0's report (WARN, on stderr) must name rank 1 and where it is, and the
       communicator is aborted so rank 0's wait ends.
count  OXCCL_CHECK=1: rank 1 passes a tensor of another size to all_reduce; both ranks must fail
       with ncclInvalidUsage and a message naming the ranks and both counts.
Prints PASS/FAIL lines; exit status 0 when both ranks pass. Needs NCCL_NVLS_ENABLE=0 on the shared
machine (set here).
"""
import datetime
import os
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("NCCL_DEBUG", "WARN")
# Keep torch from tearing the process down on the async error: the script reports it itself.
os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def run(rank, world, scenario, share, port, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if scenario == "stall":
        os.environ.update(OXCCL_WATCHDOG_SECONDS="5", OXCCL_WATCHDOG_ABORT="1")
    else:
        os.environ.update(OXCCL_CHECK="1")
    dev = torch.device("cuda", 0 if share else rank)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev,
                            timeout=datetime.timedelta(seconds=120))
    x = torch.ones(1 << 20, device=dev)
    for _ in range(3):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    outcome = "FAIL no outcome"
    t = time.time()
    if scenario == "stall":
        if rank == 0:
            # Rank 1 never joins this one. The abort ends the kernel: torch either raises here
            # or finds the error later through ncclCommGetAsyncError.
            try:
                dist.all_reduce(x)
                torch.cuda.synchronize()
                how = "returned"
            except Exception as e:
                how = f"raised {str(e)[:200]}"
            took = time.time() - t
            outcome = ("PASS" if 4.5 <= took <= 60 else "FAIL") + f" rank 0 {how} after {took:.1f} s"
        else:
            time.sleep(30)  # alive and answering the watchdog, but never calling
            outcome = "PASS rank 1 waited"
    else:
        y = torch.ones((1 << 20) if rank == 0 else (1 << 19), device=dev)
        try:
            dist.all_reduce(y)
            torch.cuda.synchronize()
            outcome = "FAIL mismatched all_reduce did not fail"
        except Exception as e:
            msg = str(e)
            ok = "1048576" in msg and "524288" in msg or "nvalid usage" in msg
            outcome = ("PASS" if ok else "FAIL") + f" rank {rank} after {time.time() - t:.1f} s: {msg[:400]}"
    results[rank] = outcome
    try:
        dist.destroy_process_group()
    except Exception:
        pass


def main():
    scenario = sys.argv[1] if len(sys.argv) > 1 else "stall"
    share = "--share-gpu" in sys.argv
    port = 29500 + os.getpid() % 1000
    with mp.Manager() as m:
        results = m.dict()
        mp.spawn(run, args=(2, scenario, share, port, results), nprocs=2, join=True)
        ok = True
        for r in range(2):
            line = results.get(r, "FAIL no result")
            print(f"{scenario} rank {r}: {line}")
            ok &= line.startswith("PASS")
    print("SUMMARY", "ok" if ok else "failed",
          "(the report itself is the WARN line 'oxccl::watchdog ... entered it; rank 1 is at #...' above)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
