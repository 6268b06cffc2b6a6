#!/usr/bin/env python3
"""Markdown tables from oxccl-bench --json files: ours vs theirs per op and size.

    python3 bench/tools/table.py A.json [B.json ...] > table.md

Each row: size, our time, their time, ours/theirs (time ratio, < 1 is faster), our and their
busbw. Rows with wrong elements are marked with "!".
"""
import json
import sys
from collections import defaultdict


def size(b):
    for unit, n in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= n and b % n == 0:
            return f"{b // n}{unit}"
    return str(b)


def main(paths):
    for path in paths:
        rows = json.load(open(path))
        if not rows:
            continue
        r0 = rows[0]
        mode = f"{r0['launch']}, {'graph' if r0['graph'] else 'eager'}, reg {r0['reg']}, " \
               f"{'in place' if r0['inplace'] else 'out of place'}, {r0['dtype']}, {r0['ranks']} ranks"
        print(f"### {path.split('/')[-1]}: {mode}\n")
        by = defaultdict(dict)
        for r in rows:
            by[(r["op"], r["bytes"])][r["lib"]] = r
        ops = []
        for r in rows:
            if r["op"] not in ops:
                ops.append(r["op"])
        for op in ops:
            print(f"**{op}**\n")
            print("| size | ours (us) | NCCL (us) | ours/NCCL | ours busbw | NCCL busbw |")
            print("|---:|---:|---:|---:|---:|---:|")
            for (o, b), libs in sorted(by.items(), key=lambda kv: kv[0][1]):
                if o != op or "ours" not in libs:
                    continue
                a, t = libs["ours"], libs.get("theirs")
                bad = "!" if a["wrong"] or (t and t["wrong"]) else ""
                if t:
                    print(f"| {size(b)}{bad} | {a['time_us']:.2f} | {t['time_us']:.2f} | "
                          f"{a['time_us'] / t['time_us']:.2f} | {a['busbw']:.1f} | {t['busbw']:.1f} |")
                else:
                    print(f"| {size(b)}{bad} | {a['time_us']:.2f} | | | {a['busbw']:.1f} | |")
            print()


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
