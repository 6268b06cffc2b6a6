//! Lifecycle and bootstrap-security tests on the host backend (reliability suite T5 and T15): repeated
//! init/allreduce/destroy leaves file descriptors, threads and memory flat, and wrong unique ids
//! fail within the bootstrap deadline on every rank.
//!
//! `OXCCL_TEST_CYCLES` sets the number of cycles (default 30 for CI; the suite's figure is 1000).

use oxccl_core::bootstrap::{BootstrapOptions, UniqueId};
use oxccl_core::config::CommConfig;
use oxccl_core::host::HostStream;
use oxccl_core::testing::Rng;
use oxccl_core::{Communicator, ErrorKind, HostBackend};
use oxccl_tests::harness::{all_reduce, settle, usage};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Serialises this file's tests: the counts are process-wide.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// One cycle: 4 thread-ranks init, AllReduce (checked), destroy.
fn cycle(backend: &Arc<HostBackend>, streams: &[HostStream], opts: &BootstrapOptions) {
    let n = streams.len();
    let id = UniqueId::generate(opts).expect("unique id");
    std::thread::scope(|s| {
        for (rank, stream) in streams.iter().enumerate() {
            let backend = backend.clone();
            s.spawn(move || {
                let comm = Communicator::init_rank(backend, n, id, rank, 0, CommConfig::default())
                    .expect("init");
                let mut buf = vec![(rank + 1) as f32; 256];
                all_reduce(&comm, stream, &mut buf).expect("allreduce");
                assert!(buf.iter().all(|&x| x == (n * (n + 1) / 2) as f32));
                comm.destroy().expect("destroy");
            });
        }
    });
}

/// T5: after warm-up, N more cycles leave fds and threads at their baseline and RSS within
/// 10% (the roots of used unique ids are told to stop at once, see the test below for the
/// default).
#[test]
fn init_allreduce_destroy_cycles_leave_fds_threads_and_memory_flat() {
    let _one = serial();
    let cycles: usize = std::env::var("OXCCL_TEST_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let backend = Arc::new(HostBackend::new());
    let streams: Vec<HostStream> = (0..4).map(|_| backend.stream_create().unwrap()).collect();
    let mut opts = BootstrapOptions::from_env();
    opts.root_linger = Duration::ZERO;
    for _ in 0..5 {
        cycle(&backend, &streams, &opts);
    }
    let base = settle(usage());
    let t = Instant::now();
    let tenth = (cycles / 10).max(1);
    let (mut early, mut late) = (Duration::ZERO, Duration::ZERO);
    for i in 0..cycles {
        let c = Instant::now();
        cycle(&backend, &streams, &opts);
        if i < tenth {
            early += c.elapsed();
        } else if i >= cycles - tenth {
            late += c.elapsed();
        }
    }
    let per_cycle = t.elapsed() / cycles as u32;
    let after = settle(base);
    eprintln!(
        "{cycles} cycles: fds {} -> {}, threads {} -> {}, RSS {} -> {} KiB, {per_cycle:?} per \
         cycle (first tenth {:?}, last tenth {:?} per cycle)",
        base.0,
        after.0,
        base.1,
        after.1,
        base.2,
        after.2,
        early / tenth as u32,
        late / tenth as u32
    );
    assert!(after.0 <= base.0, "fds grew: {base:?} -> {after:?}");
    assert!(after.1 <= base.1, "threads grew: {base:?} -> {after:?}");
    assert!(
        after.2 <= base.2 + base.2 / 10 + 2048,
        "RSS grew: {base:?} -> {after:?}"
    );
}

/// A used unique id's root keeps answering late ranks with an explicit error for
/// `root_linger` (600 s by default), holding a listener and two threads meanwhile; only the
/// newest 16 roots of a process linger, so many cycles with the default stay bounded.
#[test]
fn lingering_roots_are_bounded() {
    let _one = serial();
    let backend = Arc::new(HostBackend::new());
    let streams: Vec<HostStream> = (0..4).map(|_| backend.stream_create().unwrap()).collect();
    let opts = BootstrapOptions::from_env();
    cycle(&backend, &streams, &opts);
    let base = settle(usage());
    for _ in 0..40 {
        cycle(&backend, &streams, &opts);
    }
    // Roots cut short end within their 200 ms look.
    std::thread::sleep(Duration::from_millis(500));
    let after = usage();
    eprintln!(
        "40 cycles with the default root linger: fds {} -> {}, threads {} -> {}",
        base.0, after.0, base.1, after.1
    );
    assert!(after.0 <= base.0 + 16 + 2, "{base:?} -> {after:?}");
    assert!(after.1 <= base.1 + 2 * 16 + 2, "{base:?} -> {after:?}");
}

fn init_err(id: UniqueId, nranks: usize, timeout_s: u64) -> (oxccl_core::Error, Duration) {
    let backend = Arc::new(HostBackend::new());
    let config = CommConfig {
        init_timeout: Duration::from_secs(timeout_s),
        ..CommConfig::default()
    };
    let t = Instant::now();
    let e = Communicator::init_rank(backend, nranks, id, 0, 0, config)
        .err()
        .expect("init must fail");
    (e, t.elapsed())
}

/// T15: zeroed and random ids are refused at once as invalid arguments.
#[test]
fn zeroed_and_random_unique_ids_are_refused_at_once() {
    let _one = serial();
    let (e, took) = init_err(UniqueId([0; 128]), 2, 5);
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    let mut rng = Rng::new(15);
    for _ in 0..200 {
        let mut b = [0u8; 128];
        rng.fill(&mut b);
        let (e, took) = init_err(UniqueId(b), 2, 5);
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        assert!(took < Duration::from_secs(1), "{took:?}");
    }
}

/// T15/T17: an id naming a live root of another job (right host:port, wrong secret) is refused
/// by that root, and the rank fails within the handshake deadline instead of joining or hanging.
#[test]
fn unique_id_of_another_job_fails_within_the_deadline() {
    let _one = serial();
    let opts = BootstrapOptions::from_env();
    let real = UniqueId::generate(&opts).expect("id");
    let mut foreign = real;
    // Bytes 32..48 hold the secret and nonce: another job's id for the same root address.
    for b in &mut foreign.0[32..48] {
        *b ^= 0x5a;
    }
    let (e, took) = init_err(foreign, 2, 30);
    assert!(
        matches!(e.kind(), ErrorKind::Remote | ErrorKind::Timeout),
        "{e}"
    );
    assert!(took < Duration::from_secs(15), "{took:?}: {e}");
    eprintln!("foreign id refused after {took:?}: {e}");
}
