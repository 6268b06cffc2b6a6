#!/usr/bin/env python3
"""Plots an oxccl-bench --json file.

usage: bench/tools/plot.py FILE.json OUT.png [--ops allreduce,allgather] [--title TEXT]

Two panels: bus bandwidth (GB/s) against message size, and time per iteration (us) against
message size, both with a logarithmic size axis; one line per library x operation (colour per
operation, line style per library). Rows with a non-zero #wrong are marked with a red x.
Needs matplotlib (pip install matplotlib); without it the script says so and exits with 2.
"""

import argparse
import json
import sys


def load_rows(path):
    with open(path) as f:
        rows = json.load(f)
    if not isinstance(rows, list):
        raise ValueError(f"{path}: expected a JSON array of rows (oxccl-bench --json)")
    return rows


def size_label(b):
    for unit, name in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if b >= unit:
            v = b / unit
            return f"{v:g}{name}"
    return f"{int(b)}"


def main(argv):
    ap = argparse.ArgumentParser(description="Plot an oxccl-bench --json file.")
    ap.add_argument("json_file")
    ap.add_argument("out_png")
    ap.add_argument("--ops", help="comma list of operations to plot (default: all in the file)")
    ap.add_argument("--title", help="figure title (default: built from the file)")
    args = ap.parse_args(argv)

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        print(
            "plot.py: matplotlib is not installed (pip install matplotlib); "
            f"the numbers are in {args.json_file}",
            file=sys.stderr,
        )
        return 2

    try:
        rows = load_rows(args.json_file)
    except (OSError, ValueError) as e:
        print(f"plot.py: {e}", file=sys.stderr)
        return 1
    wanted = set(args.ops.split(",")) if args.ops else None
    rows = [r for r in rows if r.get("bytes", 0) > 0 and (wanted is None or r["op"] in wanted)]
    if not rows:
        print("plot.py: no rows to plot", file=sys.stderr)
        return 1

    ops = list(dict.fromkeys(r["op"] for r in rows))
    libs = list(dict.fromkeys(r["lib"] for r in rows))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = ["-", "--", ":", "-."]
    markers = ["o", "s", "^", "D"]

    fig, (ax_bw, ax_t) = plt.subplots(1, 2, figsize=(14, 5.5))
    for oi, op in enumerate(ops):
        for li, lib in enumerate(libs):
            pts = sorted(
                (r for r in rows if r["op"] == op and r["lib"] == lib), key=lambda r: r["bytes"]
            )
            if not pts:
                continue
            x = [r["bytes"] for r in pts]
            kw = dict(
                color=colours[oi % len(colours)],
                linestyle=styles[li % len(styles)],
                marker=markers[li % len(markers)],
                markersize=3,
                label=f"{lib} {op}" if len(libs) > 1 else op,
            )
            ax_bw.plot(x, [r["busbw"] or 0 for r in pts], **kw)
            ax_t.plot(x, [r["time_us"] or 0 for r in pts], **kw)
            bad = [r for r in pts if r.get("wrong")]
            for ax, key in ((ax_bw, "busbw"), (ax_t, "time_us")):
                if bad:
                    ax.scatter(
                        [r["bytes"] for r in bad],
                        [r[key] or 0 for r in bad],
                        marker="x",
                        color="red",
                        zorder=5,
                    )

    fmt = FuncFormatter(lambda v, _: size_label(v))
    for ax in (ax_bw, ax_t):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(fmt)
        ax.set_xlabel("message size (bytes)")
        ax.grid(True, which="both", alpha=0.3)
    ax_bw.set_ylabel("bus bandwidth (GB/s)")
    ax_bw.set_title("busbw vs size")
    ax_t.set_yscale("log")
    ax_t.set_ylabel("time per iteration (us)")
    ax_t.set_title("time vs size")
    ax_t.legend(fontsize=7, ncol=2 if len(ops) * len(libs) > 8 else 1)

    r0 = rows[0]
    if args.title:
        title = args.title
    else:
        flags = [
            f"{r0.get('ranks')} ranks",
            r0.get("dtype", ""),
            f"mem {r0.get('mem')}",
            f"launch {r0.get('launch')}",
            f"reg {r0.get('reg')}",
        ]
        if r0.get("graph"):
            flags.append("graph")
        if any(r.get("inplace") for r in rows):
            flags.append("in place")
        paths = list(dict.fromkeys(f"{r['lib']}={r.get('path', '?')}" for r in rows))
        title = "oxccl-bench: " + ", ".join(flags) + "\n" + "  ".join(paths)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out_png, dpi=120)
    print(f"plot.py: wrote {args.out_png}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
