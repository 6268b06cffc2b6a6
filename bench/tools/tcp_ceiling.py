#!/usr/bin/env python3
"""The machine's own TCP ceiling: N parallel streams from one process to another over one
address, each moving SIZE bytes one way; prints GB/s for each N.

    tcp_ceiling.py [ADDR] [SIZE_MB] [STREAMS...]   (default: the address of eth0 or lo, 1024, 1 2 4 8)
"""
import multiprocessing as mp
import socket
import sys
import time


def default_addr():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("10.255.255.255", 1))
        return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"
    finally:
        s.close()


def sink(addr, port_q, n, done_q):
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((addr, 0))
    srv.listen(n)
    port_q.put(srv.getsockname()[1])
    conns = [srv.accept()[0] for _ in range(n)]
    import threading

    total = [0] * n

    def drain(i, c):
        buf = bytearray(4 << 20)
        view = memoryview(buf)
        while True:
            k = c.recv_into(view)
            if k == 0:
                break
            total[i] += k

    ts = [threading.Thread(target=drain, args=(i, c)) for i, c in enumerate(conns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    done_q.put(sum(total))


def source(addr, port, size):
    c = socket.create_connection((addr, port))
    chunk = b"x" * (4 << 20)
    left = size
    while left > 0:
        k = c.send(chunk[: min(left, len(chunk))])
        left -= k
    c.close()


def run(addr, size, n):
    port_q, done_q = mp.Queue(), mp.Queue()
    p = mp.Process(target=sink, args=(addr, port_q, n, done_q))
    p.start()
    port = port_q.get()
    t0 = time.time()
    srcs = [mp.Process(target=source, args=(addr, port, size)) for _ in range(n)]
    for s in srcs:
        s.start()
    for s in srcs:
        s.join()
    got = done_q.get()
    dt = time.time() - t0
    p.join()
    return got / dt / 1e9


if __name__ == "__main__":
    addr = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] else default_addr()
    size = (int(sys.argv[2]) if len(sys.argv) > 2 else 1024) << 20
    streams = [int(x) for x in sys.argv[3:]] or [1, 2, 4, 8]
    for n in streams:
        print(f"tcp ceiling {addr}: {n} streams x {size >> 20} MiB: {run(addr, size, n):.1f} GB/s")
