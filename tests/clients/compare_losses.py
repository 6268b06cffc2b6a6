#!/usr/bin/env python3
"""Compares two torch_ddp.py outputs (e.g. NVIDIA's libnccl vs ours) step by step.

Usage: python3 compare_losses.py A.json B.json [--rtol 1e-5] [--atol 1e-7]
Prints PASS/FAIL lines and 'SUMMARY passed=N failed=M skipped=0'; exit status 1 on a mismatch.
"""
import argparse
import json
import sys


def close(a, b, rtol, atol):
    return abs(a - b) <= atol + rtol * max(abs(a), abs(b))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--atol", type=float, default=1e-7)
    args = ap.parse_args()
    results = []

    def report(ok, name, why=""):
        results.append(ok)
        print(f"PASS {name}" if ok else f"FAIL {name}: {why}", flush=True)

    try:
        with open(args.a) as f:
            a = json.load(f)
        with open(args.b) as f:
            b = json.load(f)
    except (OSError, ValueError) as e:
        report(False, "ddp.losses_match", f"cannot read the inputs: {e}")
        print("SUMMARY passed=0 failed=1 skipped=0")
        return 1

    la, lb = a["losses"], b["losses"]
    shape_a, shape_b = [len(x) for x in la], [len(x) for x in lb]
    if shape_a != shape_b:
        report(False, "ddp.losses_match", f"ranks x steps differ: {shape_a} vs {shape_b}")
    else:
        worst, where, first_bad = 0.0, None, None
        for r, (xa, xb) in enumerate(zip(la, lb)):
            for s, (va, vb) in enumerate(zip(xa, xb)):
                rel = abs(va - vb) / max(abs(va), abs(vb), 1e-30)
                if rel > worst:
                    worst, where = rel, (r, s)
                if first_bad is None and not close(va, vb, args.rtol, args.atol):
                    first_bad = (r, s, va, vb)
        if first_bad is None:
            report(True, f"ddp.losses_match (max rel diff {worst:.2e}"
                         + (f" at rank {where[0]} step {where[1]})" if where else ")"))
        else:
            r, s, va, vb = first_bad
            report(False, "ddp.losses_match", f"rank {r} step {s}: {va!r} vs {vb!r} "
                   f"(rtol {args.rtol}); max rel diff {worst:.2e}")
    sa, sb = a["param_sum"], b["param_sum"]
    ok = len(sa) == len(sb) and all(close(x, y, args.rtol, 1e-6) for x, y in zip(sa, sb))
    report(ok, "ddp.final_params_match", f"parameter sums {sa} vs {sb}")
    same_bits = a["param_hash"] == b["param_hash"]
    print(f"INFO final parameters bitwise {'identical' if same_bits else 'different'} "
          f"({a['param_hash'][0]} vs {b['param_hash'][0]})")
    print(f"INFO A: {a.get('libnccl', '?')}")
    print(f"INFO B: {b.get('libnccl', '?')}")
    passed = sum(results)
    print(f"SUMMARY passed={passed} failed={len(results) - passed} skipped=0", flush=True)
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
