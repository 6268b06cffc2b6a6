#!/usr/bin/env python3
"""Compare nccl-tests logs of NVIDIA's NCCL ("nv") with ours, side by side.

Reads the logs that scripts/nccl-tests/run.sh writes into one folder:
    <op>-<mode>-nv.log, <op>-<mode>-ours.log                 (one run of each)
    <op>-<mode>-nv.<k>.log, <op>-<mode>-ours.<k>.log          (--repeat K)
and prints markdown: a summary table (per op and mode: worst and median ratio of our time to
NVIDIA's, how many exceed the threshold, #wrong, failed runs), then one table per op and mode
(size, both times out-of-place and in-place, the ratios, both bus bandwidths, #wrong).
Ratios above 1.00 (ours slower) are bold. With repeats, each number is the median over them.
--json prints the same data as JSON instead.

Usage: table.py OUTDIR [--json] [--threshold 1.05]
Python 3 standard library only.
"""

import argparse
import json
import os
import re
import statistics
import sys

LOG_RE = re.compile(r"^(?P<op>.+)-(?P<mode>[A-Za-z0-9]+)-(?P<side>nv|ours)(?:\.(?P<rep>\d+))?\.log$")
MODE_NAMES = {
    "g": "one thread, all GPUs (-g N)",
    "t": "one thread per GPU (-t N)",
    "G": "CUDA graphs (-G 20)",
    "R": "symmetric registration (-R 2)",
    "D1": "device-API kernel 1 on registered windows (-R 2 -D 1)",
    "D2": "device-API kernel 2 on registered windows (-R 2 -D 2)",
    "p": "a process per GPU (MPI build, -g 1)",
}
SIDES = ("nv", "ours")
# Tables follow this order (run.sh's defaults); anything else comes after, by name.
OPS = ["all_reduce", "all_gather", "broadcast", "reduce", "reduce_scatter", "alltoall", "scatter",
       "gather", "sendrecv", "hypercube", "alltoallv"]
MODES = ["g", "t", "G", "R", "p", "D1", "D2"]


def num(tok):
    """A number column of nccl-tests, or None for N/A (no check was made)."""
    if tok == "N/A":
        return None
    return float(tok)


def parse_half(toks):
    """time, algbw, busbw, #wrong of one placement (out-of-place or in-place)."""
    return {"time": num(toks[0]), "algbw": num(toks[1]), "busbw": num(toks[2]), "wrong": num(toks[3])}


def parse_row(line):
    """One result row, or None if the line is not one.

    A row is: size count type redop root, then out-of-place time algbw busbw #wrong, then in-place
    the same. With per-iteration timing (-I 1) each placement has 4 more columns (i_min i_max
    i_p99 i_cv%); with timestamps (-S 1) a date and a time close the line; a trace replay leaves
    the out-of-place columns blank. Anything else (warnings, errors) is not a row.
    """
    toks = line.split()
    if len(toks) < 9 or not (toks[0].isdigit() and toks[1].isdigit()):
        return None
    head, rest = toks[:5], toks[5:]
    # Drop a trailing timestamp (YYYY-MM-DD HH:MM:SS).
    if len(rest) >= 2 and re.fullmatch(r"\d{4}-\d\d-\d\d", rest[-2]) and re.fullmatch(r"[\d:]+", rest[-1]):
        rest = rest[:-2]
    try:
        if len(rest) == 8:
            oop, ip = parse_half(rest[0:4]), parse_half(rest[4:8])
        elif len(rest) == 16:
            oop, ip = parse_half(rest[0:4]), parse_half(rest[8:12])
        elif len(rest) == 4:
            oop, ip = None, parse_half(rest[0:4])
        else:
            return None
    except ValueError:
        return None
    return {
        "size": int(head[0]),
        "count": int(head[1]),
        "type": head[2],
        "redop": head[3],
        "root": head[4],
        "oop": oop,
        "ip": ip,
    }


def parse_log(path):
    """Rows and facts of one log: library version, run.sh's exit code, whether it finished."""
    info = {"path": os.path.basename(path), "rows": [], "rc": None, "wall": None,
            "nccl_library": None, "nccl_headers": None, "concluded": False, "avg_busbw": None,
            "wrong_total": 0, "errors": []}
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("#"):
                m = re.search(r"nccl-headers=(\d+) nccl-library=(\d+)", line)
                if m:
                    info["nccl_headers"], info["nccl_library"] = int(m.group(1)), int(m.group(2))
                m = re.match(r"# run\.sh: rc=(-?\d+) wall=([\d.]+)s", line)
                if m:
                    info["rc"], info["wall"] = int(m.group(1)), float(m.group(2))
                m = re.match(r"#\s*Avg bus bandwidth\s*:\s*([\d.eE+-]+)", line)
                if m:
                    info["avg_busbw"] = float(m.group(1))
                if line.startswith("# Collective test concluded"):
                    info["concluded"] = True
                continue
            row = parse_row(line)
            if row is not None:
                info["rows"].append(row)
            elif "failure" in line or "error" in line.lower():
                # nccl-tests' own failure lines ("Test NCCL failure ...") and loader errors.
                if len(info["errors"]) < 3:
                    info["errors"].append(line.strip()[:200])
    for r in info["rows"]:
        for half in (r["oop"], r["ip"]):
            if half and half["wrong"]:
                info["wrong_total"] += int(half["wrong"])
    return info


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def collect(folder):
    """{(op, mode): {side: [log info, ...]}} from every matching log in folder."""
    runs = {}
    for name in sorted(os.listdir(folder)):
        m = LOG_RE.match(name)
        if not m:
            continue
        key = (m.group("op"), m.group("mode"))
        runs.setdefault(key, {s: [] for s in SIDES})[m.group("side")].append(parse_log(os.path.join(folder, name)))
    return runs


def point_key(r):
    return (r["size"], r["type"], r["redop"], r["root"])


def merge(logs):
    """Per point, the median over repeats (and over -N cycles) of each number; #wrong: the max."""
    samples = {}
    for info in logs:
        for r in info["rows"]:
            samples.setdefault(point_key(r), []).append(r)
    out = {}
    for k, rows in samples.items():
        p = {"n": len(rows)}
        for place in ("oop", "ip"):
            halves = [r[place] for r in rows if r[place]]
            p[place] = None if not halves else {
                "time": median(h["time"] for h in halves),
                "busbw": median(h["busbw"] for h in halves),
                "algbw": median(h["algbw"] for h in halves),
                "wrong": max((h["wrong"] for h in halves if h["wrong"] is not None), default=None),
            }
        out[k] = p
    return out


def ratio(ours, nv, place):
    if not ours or not nv or not ours.get(place) or not nv.get(place):
        return None
    a, b = ours[place]["time"], nv[place]["time"]
    if a is None or not b:
        return None
    return a / b


def analyse(runs, threshold):
    result = []
    def order(key):
        op, mode = key
        return (OPS.index(op) if op in OPS else len(OPS), op,
                MODES.index(mode) if mode in MODES else len(MODES), mode)

    for (op, mode), sides in sorted(runs.items(), key=lambda kv: order(kv[0])):
        merged = {s: merge(sides[s]) for s in SIDES}
        keys = sorted(set(merged["nv"]) | set(merged["ours"]))
        points = []
        for k in keys:
            nv, ours = merged["nv"].get(k), merged["ours"].get(k)
            points.append({
                "size": k[0], "type": k[1], "redop": k[2], "root": k[3],
                "nv": nv, "ours": ours,
                "ratio_oop": ratio(ours, nv, "oop"),
                "ratio_ip": ratio(ours, nv, "ip"),
            })
        ratios = [x for p in points for x in (p["ratio_oop"], p["ratio_ip"]) if x is not None]

        def side_facts(s):
            logs = sides[s]
            return {
                "runs": len(logs),
                "failed": [{"log": i["path"], "rc": i["rc"], "errors": i["errors"]}
                           for i in logs if (i["rc"] not in (0, None)) or not i["concluded"]],
                "nccl_library": sorted({i["nccl_library"] for i in logs if i["nccl_library"]}),
                "wrong": sum(i["wrong_total"] for i in logs),
                "avg_busbw": median(i["avg_busbw"] for i in logs),
            }

        result.append({
            "op": op, "mode": mode, "points": points,
            "nv": side_facts("nv"), "ours": side_facts("ours"),
            "worst_ratio": max(ratios) if ratios else None,
            "median_ratio": statistics.median(ratios) if ratios else None,
            "n_ratios": len(ratios),
            "n_over": sum(1 for x in ratios if x > threshold),
            "missing": sum(1 for p in points if not p["nv"] or not p["ours"]),
        })
    return result


# ---- markdown ---------------------------------------------------------------------------------

def human_size(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def fnum(x, digits=2):
    return "–" if x is None else f"{x:.{digits}f}"


def fratio(x):
    if x is None:
        return "–"
    s = f"{x:.2f}"
    return f"**{s}**" if x > 1.0 and s != "1.00" else s


def fwrong(*xs):
    vals = [x for x in xs if x is not None]
    if not vals:
        return "N/A"
    return str(int(sum(vals)))


def half(p, side, place, field):
    s = p[side]
    if not s or not s.get(place):
        return None
    return s[place][field]


def status(facts):
    if facts["runs"] == 0:
        return "no log"
    bad = facts["failed"]
    if not bad:
        return "ok"
    rcs = sorted({"timeout" if f["rc"] in (124, 137) else
                  ("unfinished" if f["rc"] in (0, None) else f"rc={f['rc']}") for f in bad})
    return f"{len(bad)}/{facts['runs']} " + ",".join(rcs)


def markdown(result, threshold):
    out = []
    w = out.append
    w("# nccl-tests: ours vs NVIDIA NCCL")
    w("")
    w("Ratio = our time / NVIDIA's time for the same size (out-of-place and in-place each count "
      f"as one ratio); above 1.00 (bold) we are slower. '> {threshold:.2f}' counts the ratios over "
      "that. #wrong: elements nccl-tests found wrong (N/A: not checked).")
    w("")
    w(f"| op | mode | worst | median | > {threshold:.2f} | missing | #wrong nv | #wrong ours "
      "| avg busbw nv | avg busbw ours | nv runs | our runs |")
    w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for r in result:
        w(f"| {r['op']} | {r['mode']} | {fratio(r['worst_ratio'])} | {fratio(r['median_ratio'])} "
          f"| {r['n_over']}/{r['n_ratios']} | {r['missing']} | {r['nv']['wrong']} | {r['ours']['wrong']} "
          f"| {fnum(r['nv']['avg_busbw'])} | {fnum(r['ours']['avg_busbw'])} "
          f"| {status(r['nv'])} | {status(r['ours'])} |")
    w("")
    for r in result:
        mode = MODE_NAMES.get(r["mode"], r["mode"])
        libs = ", ".join(f"{s}: " + (",".join(str(v) for v in r[s]["nccl_library"]) or "?") for s in SIDES)
        w(f"## {r['op']}, mode {r['mode']}: {mode}")
        w("")
        w(f"Library versions reported ({libs}); runs nv {status(r['nv'])}, ours {status(r['ours'])}.")
        for s in SIDES:
            for f in r[s]["failed"]:
                if f["errors"]:
                    w(f"- {f['log']}: " + " / ".join(f"`{e}`" for e in f["errors"]))
        w("")
        multi = len({(p["type"], p["redop"], p["root"]) for p in r["points"]}) > 1
        extra_h = " type | redop | root |" if multi else ""
        extra_a = "---|---|---|" if multi else ""
        w(f"| size |{extra_h} nv out (us) | nv in (us) | ours out (us) | ours in (us) | ratio out | ratio in "
          "| busbw nv out | busbw ours out | busbw nv in | busbw ours in | #wrong nv | #wrong ours |")
        w(f"|---:|{extra_a}---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for p in r["points"]:
            extra_c = f" {p['type']} | {p['redop']} | {p['root']} |" if multi else ""
            w(f"| {human_size(p['size'])} |{extra_c} "
              f"{fnum(half(p, 'nv', 'oop', 'time'))} | {fnum(half(p, 'nv', 'ip', 'time'))} "
              f"| {fnum(half(p, 'ours', 'oop', 'time'))} | {fnum(half(p, 'ours', 'ip', 'time'))} "
              f"| {fratio(p['ratio_oop'])} | {fratio(p['ratio_ip'])} "
              f"| {fnum(half(p, 'nv', 'oop', 'busbw'))} | {fnum(half(p, 'ours', 'oop', 'busbw'))} "
              f"| {fnum(half(p, 'nv', 'ip', 'busbw'))} | {fnum(half(p, 'ours', 'ip', 'busbw'))} "
              f"| {fwrong(half(p, 'nv', 'oop', 'wrong'), half(p, 'nv', 'ip', 'wrong'))} "
              f"| {fwrong(half(p, 'ours', 'oop', 'wrong'), half(p, 'ours', 'ip', 'wrong'))} |")
        w("")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", help="folder of <op>-<mode>-{nv,ours}[.k].log files (run.sh's --out)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    ap.add_argument("--threshold", type=float, default=1.05,
                    help="count ratios above this in the summary (default 1.05)")
    args = ap.parse_args(argv)
    runs = collect(args.folder)
    if not runs:
        print(f"table.py: no <op>-<mode>-nv|ours.log files in {args.folder}", file=sys.stderr)
        return 1
    result = analyse(runs, args.threshold)
    if args.json:
        json.dump({"threshold": args.threshold, "results": result}, sys.stdout, indent=1)
        print()
    else:
        print(markdown(result, args.threshold))
    return 0


if __name__ == "__main__":
    sys.exit(main())
