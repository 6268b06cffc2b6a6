//! How long a small message takes through two proxies and the socket network, with CPU threads
//! playing the kernels: the host's share of a NET operation's latency, and the floors under it
//! (the socket network without proxies, plain loopback TCP). Built with the `probes` feature;
//! `oxccl-bench net-latency` prints [`report`] on the machine in question.

use super::proxy::testkit::{Kernel, Mem, conn, link, socket_net};
use super::proxy::{FifoLayout, HostFifo, Proxy, Side};
use super::socket::SocketConfig;
use oxccl_core::abort::AbortFlag;
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Round times of two players that return theirs: both joined, the first player's rounds with
/// the first tenth (warm-up) dropped, sorted, in microseconds.
fn round_times_us(
    pinger: std::thread::JoinHandle<Vec<Duration>>,
    ponger: std::thread::JoinHandle<Vec<Duration>>,
) -> Vec<f64> {
    let mut t = pinger.join().unwrap();
    ponger.join().unwrap();
    t.drain(..t.len() / 10);
    let mut us: Vec<f64> = t.iter().map(|d| d.as_secs_f64() * 1e6).collect();
    us.sort_by(f64::total_cmp);
    us
}

/// One-way times of a ping-pong: its sorted round times, halved.
fn halved(rounds: &[f64]) -> Vec<f64> {
    rounds.iter().map(|t| t / 2.0).collect()
}

/// A connection over loopback: (connecting end, accepted end), both non-blocking and without
/// Nagle's delay, as the socket network's are.
fn loopback_connection(l: &std::net::TcpListener) -> (std::net::TcpStream, std::net::TcpStream) {
    let a = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    for s in [&a, &b] {
        s.set_nodelay(true).unwrap();
        s.set_nonblocking(true).unwrap();
    }
    (a, b)
}

/// Fills `buf` from the non-blocking socket `s`, polling without sleeping (a proxy's way).
fn read_spinning(s: &mut std::net::TcpStream, buf: &mut [u8]) {
    use std::io::{ErrorKind, Read};
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => panic!("{e}"),
        }
    }
}

/// The middle of sorted times `t`.
fn median(t: &[f64]) -> f64 {
    t[t.len() / 2]
}

/// "<what>: median, p10, p90, p99" of sorted times `t`.
fn times_line(what: &str, t: &[f64]) -> String {
    let at = |q: usize| t[t.len() * q / 100];
    format!(
        "{what}: median {:.2} us, p10 {:.2}, p90 {:.2}, p99 {:.2}",
        at(50),
        at(10),
        at(90),
        at(99)
    )
}

/// Two socket networks on loopback (ranks 0 and 1) joined both ways, each side's two
/// connections paired ([`Net::pair`](super::Net::pair); `duplex`: on one control socket).
struct Joined {
    n0: std::sync::Arc<dyn crate::Net>,
    n1: std::sync::Arc<dyn crate::Net>,
    s01: crate::SendComm,
    r01: crate::RecvComm,
    s10: crate::SendComm,
    r10: crate::RecvComm,
}

fn joined(duplex: bool) -> Joined {
    let config = SocketConfig {
        duplex,
        // The environment's other settings.
        ..SocketConfig::from_env()
    };
    let (n0, n1) = (socket_net(0, config), socket_net(1, config));
    let (mut s01, mut r01) = link(&n0, &n1);
    let (mut s10, mut r10) = link(&n1, &n0);
    n0.pair(1, &mut s01, &mut r10).unwrap();
    n1.pair(0, &mut s10, &mut r01).unwrap();
    Joined {
        n0,
        n1,
        s01,
        r01,
        s10,
        r10,
    }
}

/// Sorted times (us, first tenth dropped) of 8-byte messages through two proxies and the socket
/// network, with CPU threads playing the kernels: a ping-pong's round trips, or (`exchange`)
/// rounds in which both sides send and then wait for the other's message, as two ranks of a
/// direct AllReduce do. `duplex`: both directions share one control socket
/// ([`Net::pair`](super::Net::pair)).
fn through_proxies(duplex: bool, exchange: bool, iters: u64) -> Vec<f64> {
    let layout = FifoLayout {
        nslots: 8,
        slot_bytes: 256 << 10,
    };
    let Joined {
        n0,
        n1,
        s01,
        r01,
        s10,
        r10,
    } = joined(duplex);
    let mems: Vec<Mem> = (0..4).map(|_| Mem::new(layout.bytes() as usize)).collect();
    let fifo = |i: usize| HostFifo::in_host(mems[i].ptr, layout);
    let (a0, a1) = (AbortFlag::new(), AbortFlag::new());
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
    let n = u64::from(layout.nslots);
    // A side that sends first sends message i and waits for message i; the other (ping-pong
    // only) answers each message.
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
                // Spins as a kernel does (the testkit's wait yields, which adds a system call).
                while kr.ctr(FifoLayout::TAIL).load(Ordering::Acquire) < i + 1 {
                    assert!(!abort.is_aborted());
                    std::hint::spin_loop();
                }
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
    let ponger = play(fifo(2), fifo(3), exchange, a1.clone());
    let t = round_times_us(pinger, ponger);
    drop((p0, p1));
    t
}

/// Rounds of 16-byte messages over plain loopback TCP between two threads that poll
/// non-blocking sockets, nothing else: a ping-pong, or (`exchange`) rounds in which both sides
/// write and then read the other's message, as two ranks of a direct AllReduce do. Both
/// directions on one connection (`shared`) or each on its own, as network connections are
/// without [`Net::pair`](super::Net::pair); `quickack`: what the receiver asks for after each
/// read ([`set_quickack`](super::socket::set_quickack)), if anything. Returns the first
/// player's round times (us), sorted, the first tenth dropped.
fn plain_tcp_rounds(
    shared: bool,
    exchange: bool,
    quickack: Option<bool>,
    iters: usize,
) -> Vec<f64> {
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let (a_out, b_in) = loopback_connection(&l);
    let (b_out, a_in) = if shared {
        (b_in.try_clone().unwrap(), a_out.try_clone().unwrap())
    } else {
        loopback_connection(&l)
    };
    let play = |mut out: TcpStream, mut inp: TcpStream, first: bool| {
        std::thread::spawn(move || {
            let mut buf = [0u8; 16];
            let mut times = Vec::with_capacity(iters);
            for _ in 0..iters {
                let t = Instant::now();
                if first {
                    out.write_all(&buf).unwrap();
                }
                read_spinning(&mut inp, &mut buf);
                if let Some(q) = quickack {
                    super::socket::set_quickack(&inp, q);
                }
                if !first {
                    out.write_all(&buf).unwrap();
                }
                times.push(t.elapsed());
            }
            times
        })
    };
    let pinger = play(a_out, a_in, true);
    let ponger = play(b_out, b_in, exchange);
    round_times_us(pinger, ponger)
}

/// The socket network alone, without proxies: one thread per side posts a receive, sends 8
/// bytes and polls both requests with `test`, as a proxy would, in a ping-pong; its result line.
fn socket_net_one_way(duplex: bool, iters: usize) -> String {
    let Joined {
        n0,
        n1,
        s01,
        r01,
        s10,
        r10,
    } = joined(duplex);
    let play = |net: std::sync::Arc<dyn crate::Net>,
                mut s: crate::SendComm,
                mut r: crate::RecvComm,
                first: bool| {
        std::thread::spawn(move || {
            let mh_s = net
                .reg_mr(crate::CommRef::Send(&s), std::ptr::null_mut(), 0, 1)
                .unwrap();
            let mh_r = net
                .reg_mr(crate::CommRef::Recv(&r), std::ptr::null_mut(), 0, 1)
                .unwrap();
            let (mut sbuf, mut rbuf) = ([7u8; 8], [0u8; 8]);
            let mut times = Vec::with_capacity(iters);
            for _ in 0..iters {
                let t = Instant::now();
                // SAFETY: the buffers outlive the requests, which complete in this iteration.
                let mut rq = unsafe { net.irecv(&mut r, rbuf.as_mut_ptr(), 8, 0, &mh_r) }
                    .unwrap()
                    .unwrap();
                let send = |s: &mut crate::SendComm, buf: &mut [u8; 8]| {
                    // SAFETY: as above.
                    let mut sq = unsafe { net.isend(s, buf.as_mut_ptr(), 8, 0, &mh_s) }
                        .unwrap()
                        .unwrap();
                    while net.test(&mut sq).unwrap().is_none() {}
                };
                if first {
                    send(&mut s, &mut sbuf);
                }
                while net.test(&mut rq).unwrap().is_none() {}
                if !first {
                    send(&mut s, &mut sbuf);
                }
                times.push(t.elapsed());
            }
            times
        })
    };
    let pinger = play(n0.clone(), s01, r10, true);
    let ponger = play(n1.clone(), s10, r01, false);
    times_line(
        &format!("one-way 8-byte message through the socket network, no proxy, duplex {duplex}"),
        &halved(&round_times_us(pinger, ponger)),
    )
}

/// What one idle `test` of a posted receive costs the proxy (it runs one per receive
/// connection in every pass), over `n` calls.
fn idle_test_cost(n: u32) -> String {
    let config = SocketConfig::default();
    let (n0, n1) = (socket_net(0, config), socket_net(1, config));
    let (_s01, mut r01) = link(&n0, &n1);
    let mh = n1
        .reg_mr(crate::CommRef::Recv(&r01), std::ptr::null_mut(), 0, 1)
        .unwrap();
    let mut buf = [0u8; 64];
    // SAFETY: `buf` outlives the request, which never completes here.
    let mut rq = unsafe { n1.irecv(&mut r01, buf.as_mut_ptr(), 64, 0, &mh) }
        .unwrap()
        .unwrap();
    let t = Instant::now();
    for _ in 0..n {
        assert!(n1.test(&mut rq).unwrap().is_none());
    }
    format!(
        "one idle test of a posted receive: {:.0} ns",
        t.elapsed().as_secs_f64() * 1e9 / f64::from(n)
    )
}

/// Medians of a [`plain_tcp_rounds`] exchange on one connection with the `write` and the `read` that
/// took the message timed apart: (whole exchange, write, read), microseconds.
fn plain_tcp_exchange_parts(iters: usize) -> (f64, f64, f64) {
    use std::io::{ErrorKind, Read, Write};
    use std::net::{TcpListener, TcpStream};
    let (a, b) = loopback_connection(&TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap());
    let play = |mut s: TcpStream| {
        std::thread::spawn(move || {
            let mut buf = [0u8; 16];
            let mut v = Vec::with_capacity(iters);
            for _ in 0..iters {
                let t = Instant::now();
                s.write_all(&buf).unwrap();
                let w = t.elapsed();
                let (mut got, mut rd) = (0, Duration::ZERO);
                while got < buf.len() {
                    let t1 = Instant::now();
                    match s.read(&mut buf[got..]) {
                        Ok(n) => {
                            got += n;
                            rd = t1.elapsed();
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
                        Err(e) => panic!("{e}"),
                    }
                }
                v.push([t.elapsed(), w, rd]);
            }
            v
        })
    };
    let (ta, tb) = (play(a), play(b));
    let mut v = ta.join().unwrap();
    tb.join().unwrap();
    v.drain(..v.len() / 10);
    let part = |i: usize| {
        let mut x: Vec<f64> = v.iter().map(|e| e[i].as_secs_f64() * 1e6).collect();
        x.sort_by(f64::total_cmp);
        median(&x)
    };
    (part(0), part(1), part(2))
}

/// Every probe's result line, each probe `iters` rounds (the first tenth dropped as warm-up):
/// through two proxies and the socket network (one way, exchange; control sockets per direction
/// or shared), the socket network alone, plain loopback TCP (one way, exchange, write and read
/// apart, with and without quick acknowledgements), and an idle `test`'s cost.
pub fn report(iters: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for duplex in [false, true] {
        lines.push(times_line(
            &format!(
                "one-way 8-byte message through two proxies and the socket network, duplex {duplex}"
            ),
            &halved(&through_proxies(duplex, false, iters as u64)),
        ));
        lines.push(times_line(
            &format!("8-byte exchange through two proxies and the socket network, duplex {duplex}"),
            &through_proxies(duplex, true, iters as u64),
        ));
        lines.push(socket_net_one_way(duplex, iters));
    }
    lines.push(times_line(
        "one-way 16-byte message over plain loopback TCP",
        &halved(&plain_tcp_rounds(true, false, None, iters)),
    ));
    for q in [None, Some(false), Some(true)] {
        lines.push(format!(
            "one-way 16-byte message over plain loopback TCP, a connection per direction, quickack {q:?}: median {:.2} us",
            median(&halved(&plain_tcp_rounds(false, false, q, iters)))
        ));
    }
    for (shared, q) in [
        (true, None),
        (true, Some(false)),
        (false, None),
        (false, Some(false)),
    ] {
        lines.push(format!(
            "16-byte exchange over plain loopback TCP, {}, quickack {q:?}: median {:.2} us",
            if shared {
                "one connection"
            } else {
                "a connection per direction"
            },
            median(&plain_tcp_rounds(shared, true, q, iters))
        ));
    }
    let (t, w, r) = plain_tcp_exchange_parts(iters);
    lines.push(format!(
        "16-byte exchange over plain loopback TCP, one connection: {t:.2} us, of which write {w:.2}, read {r:.2} (medians)"
    ));
    lines.push(idle_test_cost(
        u32::try_from(iters.saturating_mul(50)).unwrap_or(u32::MAX),
    ));
    lines
}

#[cfg(test)]
mod tests {
    /// Every probe runs to its end (a few rounds each) and reports a time.
    #[test]
    fn every_probe_reports() {
        let lines = super::report(50);
        assert_eq!(lines.len(), 16, "{lines:#?}");
        for l in &lines {
            let us = l.split(": ").nth(1).and_then(|v| {
                v.split_whitespace()
                    .find_map(|w| w.trim_end_matches(',').parse::<f64>().ok())
            });
            assert!(us.is_some_and(|v| v.is_finite() && v >= 0.0), "{l}");
        }
    }
}
