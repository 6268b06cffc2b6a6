//! How long a small message takes through two proxies and the socket network, with CPU threads
//! playing the kernels: the host's share of a NET operation's latency. Ignored by default (it
//! measures, it does not check); run it on the machine in question with
//! `cargo test --release -p oxccl-core --lib latency_probe -- --ignored --nocapture`.

use super::proxy::testkit::{Kernel, Mem, link, socket_net};
use super::proxy::{FifoLayout, HostFifo, Proxy, ProxyConn, Side};
use super::socket::SocketConfig;
use crate::abort::AbortFlag;
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

#[test]
#[ignore = "a measurement: run with --ignored --nocapture"]
fn latency_probe_small_message_one_way() {
    let layout = FifoLayout {
        nslots: 8,
        slot_bytes: 256 << 10,
    };
    let config = SocketConfig::default();
    let (n0, n1) = (socket_net(0, config), socket_net(1, config));
    let (s01, r01) = link(&n0, &n1);
    let (s10, r10) = link(&n1, &n0);
    let mems: Vec<Mem> = (0..4).map(|_| Mem::new(layout.bytes() as usize)).collect();
    let fifo = |i: usize| HostFifo::in_host(mems[i].ptr, layout);
    let (a0, a1) = (AbortFlag::new(), AbortFlag::new());
    let conn = |peer, fifo, side| ProxyConn {
        peer,
        channel: 0,
        fifo,
        side,
    };
    let p0 = Proxy::start(
        n0,
        0,
        vec![
            conn(1, fifo(0), Side::Send(s01)),
            conn(1, fifo(1), Side::Recv(r10)),
        ],
        a0.clone(),
    )
    .unwrap();
    let p1 = Proxy::start(
        n1,
        1,
        vec![
            conn(0, fifo(2), Side::Send(s10)),
            conn(0, fifo(3), Side::Recv(r01)),
        ],
        a1.clone(),
    )
    .unwrap();
    let iters = 20_000u64;
    let n = u64::from(layout.nslots);
    // One side sends message i and waits for the answer i; the other answers each message.
    let play = |send: HostFifo, recv: HostFifo, first: bool, abort: AbortFlag| {
        let (ks, kr) = (Kernel(send), Kernel(recv));
        std::thread::spawn(move || {
            let mut times = Vec::with_capacity(iters as usize);
            for i in 0..iters {
                let t = Instant::now();
                let send_one = || {
                    if i >= n {
                        assert!(ks.wait_geq(FifoLayout::HEAD, i + 1 - n, &abort));
                    }
                    ks.ctr(FifoLayout::SIZES + (i % n) * 8)
                        .store(8, Ordering::Release);
                    ks.ctr(FifoLayout::TAIL).store(i + 1, Ordering::Release);
                };
                if first {
                    send_one();
                }
                assert!(kr.wait_geq(FifoLayout::TAIL, i + 1, &abort));
                kr.ctr(FifoLayout::HEAD).store(i + 1, Ordering::Release);
                if !first {
                    send_one();
                }
                times.push(t.elapsed());
            }
            times
        })
    };
    let pinger = play(fifo(0), fifo(1), true, a0.clone());
    let ponger = play(fifo(2), fifo(3), false, a1.clone());
    let mut t = pinger.join().unwrap();
    ponger.join().unwrap();
    drop((p0, p1));
    t.drain(..(iters / 10) as usize);
    t.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6 / 2.0;
    println!(
        "one-way 8-byte message through two proxies and the socket network: median {:.2} us, p10 {:.2}, p90 {:.2}, p99 {:.2}",
        us(t[t.len() / 2]),
        us(t[t.len() / 10]),
        us(t[t.len() * 9 / 10]),
        us(t[t.len() * 99 / 100])
    );
}

/// The floor under the proxies: one 16-byte message each way over a loopback TCP connection
/// between two threads that poll non-blocking sockets, nothing else.
#[test]
#[ignore = "a measurement: run with --ignored --nocapture"]
fn latency_probe_plain_tcp_one_way() {
    use std::io::{ErrorKind, Read, Write};
    use std::net::{TcpListener, TcpStream};
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    let iters = 20_000usize;
    let play = |mut s: TcpStream, first: bool| {
        s.set_nodelay(true).unwrap();
        s.set_nonblocking(true).unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 16];
            let mut times = Vec::with_capacity(iters);
            let recv = |s: &mut TcpStream, buf: &mut [u8; 16]| {
                let mut got = 0;
                while got < 16 {
                    match s.read(&mut buf[got..]) {
                        Ok(n) => got += n,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
                        Err(e) => panic!("{e}"),
                    }
                }
            };
            for _ in 0..iters {
                let t = Instant::now();
                if first {
                    s.write_all(&buf).unwrap();
                }
                recv(&mut s, &mut buf);
                if !first {
                    s.write_all(&buf).unwrap();
                }
                times.push(t.elapsed());
            }
            times
        })
    };
    let pinger = play(a, true);
    let ponger = play(b, false);
    let mut t = pinger.join().unwrap();
    ponger.join().unwrap();
    t.drain(..iters / 10);
    t.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6 / 2.0;
    println!(
        "one-way 16-byte message over plain loopback TCP: median {:.2} us, p10 {:.2}, p90 {:.2}",
        us(t[t.len() / 2]),
        us(t[t.len() / 10]),
        us(t[t.len() * 9 / 10])
    );
}
