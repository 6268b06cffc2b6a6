//! reliability suite T9, T10, T11 and part of T17 on the host backend, ranks as threads: abort releases
//! a call hung on an extra collective, abort racing from several threads while another polls
//! the async error, a non-blocking init whose peer never starts, and a missing interface.
//!
//! `OXCCL_TEST_RACES` sets T10's iterations (default 300 for CI; the suite's figure is 10^4).

use oxccl_core::bootstrap::{BootstrapOptions, UniqueId};
use oxccl_core::config::CommConfig;
use oxccl_core::{Communicator, ErrorKind, HostBackend};
use oxccl_tests::harness::{all_reduce, proc_status};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Serialises this file's tests: T11 counts the process's threads.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

fn init_all(n: usize, config: CommConfig) -> (Arc<HostBackend>, Vec<Communicator<HostBackend>>) {
    let backend = Arc::new(HostBackend::new());
    let id = UniqueId::generate(&BootstrapOptions::from_env()).expect("id");
    let comms = std::thread::scope(|s| {
        let hs: Vec<_> = (0..n)
            .map(|r| {
                let (b, c) = (backend.clone(), config.clone());
                s.spawn(move || Communicator::init_rank(b, n, id, r, 0, c).expect("init"))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    (backend, comms)
}

/// T9: rank 0 issues one extra AllReduce; an abort from another thread releases it in < 2 s,
/// once on one rank only and once on every rank.
#[test]
fn abort_releases_a_call_hung_on_an_extra_collective() {
    let _one = serial();
    for everywhere in [false, true] {
        let (backend, comms) = init_all(3, CommConfig::default());
        let stream = backend.stream_create().unwrap();
        let mut buf = vec![1f32; 256];
        let t = std::thread::scope(|s| {
            let aborter = s.spawn(|| {
                std::thread::sleep(Duration::from_millis(300));
                let t = Instant::now();
                let targets = if everywhere { &comms[..] } else { &comms[..1] };
                for c in targets {
                    c.abort();
                }
                t
            });
            let r = all_reduce(&comms[0], &stream, &mut buf);
            let released = Instant::now();
            let aborted_at = aborter.join().unwrap();
            // Aborted here (InvalidUsage), or a peer that aborted first closed (Remote).
            let e = r.expect_err("the extra collective cannot complete");
            assert!(
                matches!(e.kind(), ErrorKind::InvalidUsage | ErrorKind::Remote),
                "{e}"
            );
            released.duration_since(aborted_at)
        });
        assert!(t < Duration::from_secs(2), "released {t:?} after the abort");
        eprintln!("T9 (abort on every rank: {everywhere}): released {t:?} after the abort");
        for c in &comms {
            let _ = c.destroy();
        }
    }
}

/// T10: one thread polls the async error at ~1 kHz, two threads race abort, the main thread
/// enqueues work; no deadlock, no panic, every call returns.
#[test]
fn abort_races_with_polling_and_enqueueing() {
    let _one = serial();
    let races: usize = std::env::var("OXCCL_TEST_RACES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let t = Instant::now();
    for i in 0..races {
        // One rank: each round is cheap, and the races are inside this process.
        let (backend, comms) = init_all(1, CommConfig::default());
        let comm = &comms[0];
        let stream = backend.stream_create().unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Acquire) {
                    let _ = comm.status();
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
            let aborters: Vec<_> = (0..2)
                .map(|k| {
                    s.spawn(move || {
                        std::thread::sleep(Duration::from_micros(((i * 7 + k * 13) % 200) as u64));
                        comm.abort();
                    })
                })
                .collect();
            let mut buf = vec![1f32; 64];
            for _ in 0..20 {
                if all_reduce(comm, &stream, &mut buf).is_err() {
                    break;
                }
            }
            for a in aborters {
                a.join().unwrap();
            }
            stop.store(true, Ordering::Release);
        });
        assert!(comm.status().is_ok() || comm.status().is_err());
        let _ = comm.destroy();
    }
    eprintln!("T10: {races} abort races in {:?}", t.elapsed());
}

/// T11: a non-blocking init whose peer never starts returns at once with InProgress; abort
/// then ends it, leaving no thread of it behind.
#[test]
fn non_blocking_init_with_a_missing_peer_returns_at_once_and_aborts_cleanly() {
    let _one = serial();
    let threads = || proc_status("Threads:");
    let backend = Arc::new(HostBackend::new());
    let id = UniqueId::generate(&BootstrapOptions::from_env()).expect("id");
    let config = CommConfig {
        blocking: false,
        ..CommConfig::default()
    };
    let t = Instant::now();
    let comm = Communicator::init_rank(backend, 2, id, 0, 0, config).expect("returns at once");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert!(matches!(comm.status(), Err(e) if e.kind() == ErrorKind::InProgress));
    let during = threads();
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    comm.abort();
    let _ = comm.wait_ready();
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    drop(comm);
    let t = Instant::now();
    while threads() >= during && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(threads() < during, "the init thread is still running");
}

/// T17: a nonexistent NCCL_SOCKET_IFNAME fails at once, naming the interface.
#[test]
fn missing_socket_interface_fails_at_once_naming_it() {
    let _one = serial();
    let opts = BootstrapOptions {
        socket_ifname: Some("=oxccl_nonexistent0".into()),
        ..BootstrapOptions::default()
    };
    let t = Instant::now();
    let e = UniqueId::generate(&opts).expect_err("no such interface");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    assert!(e.to_string().contains("oxccl_nonexistent0"), "{e}");
    eprintln!("T17: {e}");
}
