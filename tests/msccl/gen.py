#!/usr/bin/env python3
"""Writes the MSCCL test algorithms of this directory (run from here; the XML is committed)."""

N = 4


def step(s, ty, src=("i", -1), dst=("o", -1), cnt=1, dep=(-1, -1)):
    return (f'      <step s="{s}" type="{ty}" srcbuf="{src[0]}" srcoff="{src[1]}" '
            f'dstbuf="{dst[0]}" dstoff="{dst[1]}" cnt="{cnt}" depid="{dep[0]}" deps="{dep[1]}" '
            f'hasdep="0"/>')


def tb(i, send, recv, chan, steps):
    body = "\n".join(step(k, *a, **kw) for k, (a, kw) in enumerate(steps))
    return f'    <tb id="{i}" send="{send}" recv="{recv}" chan="{chan}">\n{body}\n    </tb>'


def algo(name, coll, nch, nchunks, gpus, inplace=0):
    out = [f'<algo name="{name}" proto="Simple" nchannels="{nch}" nchunksperloop="{nchunks}" '
           f'ngpus="{N}" coll="{coll}" inplace="{inplace}" outofplace="1">']
    for r, (ic, oc, sc, tbs) in enumerate(gpus):
        out.append(f'  <gpu id="{r}" i_chunks="{ic}" o_chunks="{oc}" s_chunks="{sc}">')
        out.extend(tbs)
        out.append("  </gpu>")
    out.append("</algo>")
    return "\n".join(out) + "\n"


def S(*a, **kw):
    return (a, kw)


def ring_1ch():
    gpus = []
    for r in range(N):
        c = lambda k: (r - k) % N
        st = [S("s", src=("i", c(0)))]
        for k in range(1, N - 1):
            st.append(S("rrs", src=("i", c(k))))
        st.append(S("rrcs", src=("i", c(N - 1)), dst=("o", c(N - 1))))
        for j in range(1, N - 1):
            st.append(S("rcs", dst=("o", (r - j + 1) % N)))
        st.append(S("r", dst=("o", (r - (N - 1) + 1) % N)))
        gpus.append((N, N, 0, [tb(0, (r + 1) % N, (r - 1) % N, 0, st)]))
    return algo("ring_allreduce_1ch", "allreduce", 1, N, gpus)


def ring_2ch_deps():
    gpus = []
    for r in range(N):
        tbs = []
        # Channel 0: separate send and receive thread blocks, receive-reduce-copy into the output.
        b = 0
        rt = [S("rrc", src=("i", b + (r - 1) % N), dst=("o", b + (r - 1) % N)),
              S("rrc", src=("i", b + (r - 2) % N), dst=("o", b + (r - 2) % N)),
              S("rrc", src=("i", b + (r + 1) % N), dst=("o", b + (r + 1) % N)),
              S("r", dst=("o", b + r)),
              S("r", dst=("o", b + (r - 1) % N)),
              S("r", dst=("o", b + (r - 2) % N))]
        stt = [S("s", src=("i", b + r)),
               S("s", src=("o", b + (r - 1) % N), dep=(1, 0)),
               S("s", src=("o", b + (r - 2) % N), dep=(1, 1)),
               S("s", src=("o", b + (r + 1) % N), dep=(1, 2)),
               S("s", src=("o", b + r), dep=(1, 3)),
               S("s", src=("o", b + (r - 1) % N), dep=(1, 4))]
        tbs.append(tb(0, (r + 1) % N, -1, 0, stt))
        tbs.append(tb(1, -1, (r - 1) % N, 0, rt))
        # Channel 1: receive into scratch, local reduce (re), copy out.
        b = N
        rt = [S("r", dst=("s", 0)),
              S("re", src=("i", b + (r - 1) % N), dst=("s", 0)),
              S("r", dst=("s", 1)),
              S("re", src=("i", b + (r - 2) % N), dst=("s", 1)),
              S("r", dst=("s", 2)),
              S("re", src=("i", b + (r + 1) % N), dst=("s", 2)),
              S("cpy", src=("s", 2), dst=("o", b + (r + 1) % N)),
              S("r", dst=("o", b + r)),
              S("r", dst=("o", b + (r - 1) % N)),
              S("r", dst=("o", b + (r - 2) % N))]
        stt = [S("s", src=("i", b + r)),
               S("s", src=("s", 0), dep=(3, 1)),
               S("s", src=("s", 1), dep=(3, 3)),
               S("s", src=("o", b + (r + 1) % N), dep=(3, 6)),
               S("s", src=("o", b + r), dep=(3, 7)),
               S("s", src=("o", b + (r - 1) % N), dep=(3, 8)),
               S("nop", cnt=0, dep=(1, 5))]
        tbs.append(tb(2, (r + 1) % N, -1, 1, stt))
        tbs.append(tb(3, -1, (r - 1) % N, 1, rt))
        gpus.append((2 * N, 2 * N, 3, tbs))
    return algo("ring_allreduce_2ch_deps", "allreduce", 2, 2 * N, gpus)


def alltoall():
    gpus = []
    for r in range(N):
        tbs = [tb(0, -1, -1, 0, [S("cpy", src=("i", r), dst=("o", r))])]
        for p in range(N):
            if p != r:
                tbs.append(tb(len(tbs), p, p, 0,
                              [S("s", src=("i", p)), S("r", dst=("o", p))]))
        gpus.append((N, N, 0, tbs))
    return algo("direct_alltoall", "alltoall", 1, N, gpus)


for name, text in [("ring_allreduce_1ch.xml", ring_1ch()),
                   ("ring_allreduce_2ch_deps.xml", ring_2ch_deps()),
                   ("alltoall.xml", alltoall())]:
    with open(name, "w") as f:
        f.write(text)
