//! A connection reset in the middle of a transfer: a relay between two ranks' socket networks
//! forwards the first bytes, then resets every connection it carries (RST, not a clean close).
//! Both proxies must record an error naming the connection and abort, the threads playing the
//! kernels must be released, and nothing may be written outside the receive FIFO.

use super::HANDLE_BYTES;
use super::proxy::testkit::{Kernel, Mem, complete, socket_net};
use super::proxy::{FifoLayout, HostFifo, Proxy, ProxyConn, Side};
use super::socket::{SocketConfig, redirect_handle};
use oxccl_core::abort::AbortFlag;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Makes the next close of `s` send a reset (`SO_LINGER` on with a zero timeout).
fn reset_on_close(s: &TcpStream) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `s` is an open socket and `l` a valid option value of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_LINGER");
}

/// Moves what `from` has now to `to`; returns the bytes moved.
fn pump(from: &mut TcpStream, to: &mut TcpStream, buf: &mut [u8]) -> usize {
    match from.read(buf) {
        Ok(0) | Err(_) => 0,
        Ok(n) => {
            let mut at = 0;
            while at < n {
                match to.write(&buf[at..n]) {
                    Ok(k) => at += k,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => std::thread::yield_now(),
                    Err(_) => return at,
                }
            }
            n
        }
    }
}

/// A relay on its own port: every connection it accepts is joined to `upstream`. Once it has
/// carried `reset_after` bytes from the connecting side, it resets every connection on both
/// sides and stops.
fn relay(upstream: SocketAddr, reset_after: usize, stop: Arc<AtomicBool>) -> SocketAddr {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    l.set_nonblocking(true).unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut pairs: Vec<(TcpStream, TcpStream)> = Vec::new();
        let mut carried = 0;
        let mut buf = vec![0u8; 64 << 10];
        while !stop.load(Ordering::Acquire) {
            if let Ok((down, _)) = l.accept() {
                let up = TcpStream::connect(upstream).unwrap();
                for s in [&down, &up] {
                    s.set_nonblocking(true).unwrap();
                    s.set_nodelay(true).unwrap();
                }
                pairs.push((down, up));
            }
            for (down, up) in &mut pairs {
                carried += pump(down, up, &mut buf);
                pump(up, down, &mut buf);
            }
            if carried >= reset_after {
                for (down, up) in pairs.drain(..) {
                    reset_on_close(&down);
                    reset_on_close(&up);
                }
                return;
            }
            std::thread::yield_now();
        }
    });
    addr
}

#[test]
fn a_connection_reset_mid_transfer_fails_both_sides_without_stray_writes() {
    let layout = FifoLayout {
        nslots: 4,
        slot_bytes: 256 << 10,
    };
    let config = SocketConfig {
        nsocks: 2,
        inline_max: 4096,
        min_task: 16 << 10,
        ..SocketConfig::default()
    };
    let (n0, n1) = (socket_net(0, config), socket_net(1, config));
    let stop = Arc::new(AtomicBool::new(false));
    let mut h = [0u8; HANDLE_BYTES];
    let mut l = n1.listen(0, &mut h).unwrap();
    let mut via = h;
    let upstream = redirect_handle(&mut via, SocketAddr::from((Ipv4Addr::LOCALHOST, 1))).unwrap();
    let relay_addr = relay(upstream, 3 << 20, stop.clone());
    redirect_handle(&mut via, relay_addr).unwrap();
    let (s, r) = complete(&n0, &n1, &mut l, &mut via);

    // The receive FIFO sits between guard bytes that nothing may touch.
    const GUARD: usize = 64 << 10;
    let fifo_bytes = layout.bytes() as usize;
    let m1 = Mem::new(fifo_bytes + 2 * GUARD);
    // SAFETY: inside the allocation.
    unsafe { std::ptr::write_bytes(m1.ptr, 0xA5, fifo_bytes + 2 * GUARD) };
    // SAFETY: the FIFO starts GUARD bytes in; its counters must start at zero.
    let f1_base = unsafe { m1.ptr.add(GUARD) };
    // SAFETY: the FIFO's bytes, inside the allocation.
    unsafe { std::ptr::write_bytes(f1_base, 0, fifo_bytes) };
    let m0 = Mem::new(fifo_bytes);
    let f0 = HostFifo::in_host(m0.ptr, layout);
    let f1 = HostFifo::in_host(f1_base, layout);
    let (a0, a1) = (AbortFlag::new(), AbortFlag::new());
    let conn = |peer, fifo, side| ProxyConn {
        peer,
        channel: 2,
        fifo,
        side,
    };
    let p0 = Proxy::start(n0, 0, vec![conn(1, f0, Side::Send(s))], a0.clone()).unwrap();
    let p1 = Proxy::start(n1, 1, vec![conn(0, f1, Side::Recv(r))], a1.clone()).unwrap();

    // 200 whole slots (50 MiB) from rank 0 to rank 1; the relay resets after 3 MiB.
    let n = u64::from(layout.nslots);
    let slot = layout.slot_bytes as usize;
    let (k0, k1) = (Kernel(f0), Kernel(f1));
    let slot_at = move |f: &HostFifo, i: u64| {
        let at = layout.slots_offset() + (i % n) * layout.slot_bytes;
        // SAFETY: the slot lies inside the FIFO.
        unsafe { f.base.add(at as usize) }
    };
    let abort = a0.clone();
    let sender = std::thread::spawn(move || {
        for i in 0..200u64 {
            if i >= n && !k0.wait_geq(FifoLayout::HEAD, i + 1 - n, &abort) {
                return i;
            }
            // SAFETY: the slot is free (head) and inside the FIFO.
            unsafe { std::ptr::write_bytes(slot_at(&k0.0, i), i as u8, slot) };
            k0.ctr(FifoLayout::SIZES + (i % n) * 8)
                .store(slot as u64, Ordering::Release);
            k0.ctr(FifoLayout::TAIL).store(i + 1, Ordering::Release);
        }
        200
    });
    let abort = a1.clone();
    let receiver = std::thread::spawn(move || {
        for i in 0..200u64 {
            if !k1.wait_geq(FifoLayout::TAIL, i + 1, &abort) {
                return Ok(i);
            }
            // SAFETY: the proxy filled the slot (tail) and waits for head before reusing it.
            let got = unsafe { std::slice::from_raw_parts(slot_at(&k1.0, i), slot) };
            if got.iter().any(|&b| b != i as u8) {
                return Err(format!("message {i} arrived damaged"));
            }
            k1.ctr(FifoLayout::HEAD).store(i + 1, Ordering::Release);
        }
        Ok(200)
    });

    let t0 = Instant::now();
    while !(a0.is_aborted() && a1.is_aborted()) && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Release);
    let sent = sender.join().unwrap();
    let received = receiver.join().unwrap().unwrap();
    drop((p0, p1));
    let e0 = a0.error().map(|e| e.to_string());
    let e1 = a1.error().map(|e| e.to_string());
    assert!(
        e0.as_deref()
            .is_some_and(|e| e.contains("rank 0: network connection to rank 1 (channel 2)")),
        "sender: {e0:?}"
    );
    assert!(
        e1.as_deref()
            .is_some_and(|e| e.contains("rank 1: network connection from rank 0 (channel 2)")),
        "receiver: {e1:?}"
    );
    assert!(
        sent < 200 && received < 200,
        "sent {sent}, received {received}"
    );
    assert!(t0.elapsed() < Duration::from_secs(10), "no hang");
    // SAFETY: the guards lie inside the allocation; every thread that wrote is gone.
    let (before, after) = unsafe {
        (
            std::slice::from_raw_parts(m1.ptr, GUARD),
            std::slice::from_raw_parts(m1.ptr.add(GUARD + fifo_bytes), GUARD),
        )
    };
    assert!(
        before.iter().chain(after).all(|&b| b == 0xA5),
        "a write outside the FIFO"
    );
}
