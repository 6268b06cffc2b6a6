#!/usr/bin/env python3
"""The watchdog's hang report and check mode driven by torch.distributed on oxccl's libnccl.so.2
(reliability suite T12/T13 on GPUs; the host-backend versions run in CI).

Usage (2 GPUs, or 2 ranks sharing one GPU with --share-gpu):
  LD_PRELOAD=dist/lib/libnccl.so.2 python3 tests/clients/torch_hang.py stall [--share-gpu]
  LD_PRELOAD=dist/lib/libnccl.so.2 python3 tests/clients/torch_hang.py count [--share-gpu]

stall  OXCCL_WATCHDOG_SECONDS=5: rank 1 stalls 12 s before its fourth all_reduce; rank 0's
       report (a WARN line of oxccl::watchdog, on fd 2) must name rank 1 and where it is, and
       the result must be right once rank 1 joins. (With OXCCL_WATCHDOG_ABORT=1 the library
       aborts the communicator after the report; torch then ends the process, as it does on
       any NCCL asynchronous error.)
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


WATCHDOG_S = 5
STALL_S = 12


def run(rank, world, scenario, share, port, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # The library logs to fd 2: keep a copy to look for the report in.
    errlog = f"/tmp/torch_hang_{port}_{rank}.log"
    fd = os.open(errlog, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)
    if scenario == "stall":
        os.environ.update(OXCCL_WATCHDOG_SECONDS=str(WATCHDOG_S))
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
        # Rank 1 stalls (alive and answering the watchdog, but not calling) for STALL_S seconds,
        # then joins: rank 0's report must name rank 1 and where it is, and the result must be
        # right afterwards.
        if rank == 1:
            time.sleep(STALL_S)
        dist.all_reduce(x)
        torch.cuda.synchronize()
        took = time.time() - t
        right = bool((x == 16.0).all())
        sys.stderr.flush()
        with open(errlog) as f:
            report = [line.split("oxccl::watchdog: ")[-1] for line in f
                      if "oxccl::watchdog" in line and "rank 1 is at #" in line]
        if rank == 0:
            ok = right and report and took >= STALL_S - 1
            outcome = (("PASS" if ok else "FAIL") + f" rank 0 waited {took:.1f} s, result "
                       + ("right" if right else "WRONG") + "; report: "
                       + (report[0].strip() if report else "NONE"))
        else:
            outcome = ("PASS" if right else "FAIL") + f" rank 1 stalled {STALL_S} s, result " + (
                "right" if right else "WRONG")
    else:
        y = torch.ones((1 << 20) if rank == 0 else (1 << 19), device=dev)
        try:
            dist.all_reduce(y)
            torch.cuda.synchronize()
            outcome = "FAIL mismatched all_reduce did not fail"
        except Exception as e:
            # torch's exception names the code; the library's sentence (ncclGetLastError's,
            # also logged at WARN) names the ranks and the counts.
            took = time.time() - t
            sys.stderr.flush()
            with open(errlog) as f:
                said = [line.split("check mode")[-1].strip() for line in f
                        if "check mode" in line and "1048576" in line and "524288" in line]
            ok = "nvalid usage" in str(e) and said
            outcome = (("PASS" if ok else "FAIL") + f" rank {rank} invalid usage after {took:.1f} s: "
                       + ("check mode" + said[0] if said else f"no sentence; torch said {str(e)[:300]}"))
    results[rank] = outcome
    if not outcome.startswith("PASS"):
        with open(errlog) as f:
            results[f"log{rank}"] = f.read()[-3000:]
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
        passed = 0
        for r in range(2):
            line = results.get(r, "FAIL no result")
            print(f"{scenario} rank {r}: {line}")
            if f"log{r}" in results:
                print(f"-- rank {r}'s log (end):\n{results[f'log{r}']}")
            ok &= line.startswith("PASS")
            passed += line.startswith("PASS")
        print(f"RESULT pass={passed} fail={2 - passed}")
    print("SUMMARY", "ok" if ok else "failed",
          "(the report itself is the WARN line 'oxccl::watchdog ... entered it; rank 1 is at #...' above)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
