#!/usr/bin/env python3
"""How two ranks' small NET messages line up, from an OXCCL_NET_TRACE directory.

    OXCCL_NET_TRACE=/tmp/tr OXCCL_NET_CHANNELS=1 OXCCL_TEST_HOSTS=2 \\
        oxccl-bench --launch procs -n 2 --op allreduce -b 8 -e 8 -i 20000 ...
    python3 bench/tools/net_trace.py /tmp/tr [more dirs]

Needs the two ranks' LL traces of channel 0 (the processes must share a clock: "hosts" on one
machine). For the middle of the run it prints quantiles (p10 p25 p50 p75 p90, us) of:

- cycle: time between rank 0's proxy seeing two successive slots complete;
- |delta|: how far apart the two ranks' proxies saw the same position complete (near 0: the
  ranks run in step; near half a cycle: they take turns);
- write: rank 0's isend (the socket write);
- land: from rank 0's write to rank 1's proxy having read the message;
- gpu leg: from a message landing at rank 0 to rank 0's proxy seeing its next slot complete;

and, per process, what its proxy passes did: each pass is classed by the trace events inside
it (S slot seen, I isend returned, D send done, L message landed, C slot consumed) with its count,
mean length and mean time in system calls.
"""
import bisect
import collections
import csv
import glob
import os
import sys


def rows(path):
    return {int(r["pos"]): (int(r["t1"]), int(r["t2"]), int(r["t3"])) for r in csv.DictReader(open(path))}


def quantiles(xs):
    xs = sorted(xs)
    n = len(xs)
    return " ".join(f"{xs[int(n * f)] / 1000:7.2f}" for f in (0.1, 0.25, 0.5, 0.75, 0.9))


def phases(d):
    # Rank 0's send file names peer 1: sort by the peer, highest first.
    sends = sorted(glob.glob(f"{d}/ll-send-*-c0.csv"), key=lambda f: f.split("-p")[-1], reverse=True)
    if len(sends) != 2:
        print(f"{d}: needs two ranks' ll-send-*-c0.csv, found {len(sends)}")
        return
    s = [rows(f) for f in sends]
    r = [rows(f.replace("ll-send", "ll-recv")) for f in sends]
    common = sorted(set.intersection(*(set(x) for x in s + r)))
    lo, hi = common[len(common) // 8], common[-len(common) // 8]
    ps = [p for p in range(lo, hi) if all(p in x and p + 1 in x for x in s + r)]
    print(f"{d}: {len(ps)} positions; quantiles p10 p25 p50 p75 p90 (us)")
    print("  cycle     ", quantiles([s[0][p + 1][0] - s[0][p][0] for p in ps]))
    print("  |delta|   ", quantiles([abs(s[1][p][0] - s[0][p][0]) for p in ps]))
    print("  write     ", quantiles([s[0][p][1] - s[0][p][0] for p in ps]))
    print("  land      ", quantiles([r[1][p][0] - s[0][p][1] for p in ps]))
    print("  gpu leg   ", quantiles([s[0][p + 1][0] - r[0][p][0] for p in ps]))


def passes(d):
    for f in sorted(glob.glob(f"{d}/passes-pid*.csv")):
        # passes-pid<P>-<thread>.csv: with LL sends on their own thread, each thread's passes
        # are classed by its own connections' events only.
        name = os.path.basename(f)[len("passes-"):-len(".csv")]
        pid = name.split("-")[0]
        apart = bool(glob.glob(f"{d}/passes-{pid}-oxccl-llsend-*.csv"))
        kinds = "ll-send" if "llsend" in name else "ll-recv" if apart else "ll"
        events = []
        for g in glob.glob(f"{d}/{kinds}-*{pid}-*.csv"):
            names = "SID" if "ll-send" in g else "LC"
            for t in rows(g).values():
                events += [(x, n) for x, n in zip(t, names) if x]
        events.sort()
        times = [t for t, _ in events]
        log = [tuple(int(v) for v in r.values()) for r in csv.DictReader(open(f))]
        log = log[len(log) // 4:]
        count, busy, sys_ns = collections.Counter(), collections.Counter(), collections.Counter()
        for begin, ns, _moved, *rest in log:
            i, j = bisect.bisect_left(times, begin), bisect.bisect_right(times, begin + ns)
            key = "".join(sorted(n for _, n in events[i:j])) or "-"
            count[key] += 1
            busy[key] += ns
            sys_ns[key] += rest[0] if rest else 0
        print(f"  {name}: pass kind, count, mean us, of which system calls")
        for k, n in sorted(count.items(), key=lambda kv: -busy[kv[0]])[:10]:
            print(f"    {k:10} {n:8} {busy[k] / n / 1000:7.2f} {sys_ns[k] / n / 1000:7.2f}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for d in sys.argv[1:]:
        phases(d)
        passes(d)
