//! reliability suite T6 and T18 on the host backend, with the measuring helpers of T5
//! (`host_lifecycle.rs`).
//!
//! T6: cycles of init (4 thread-ranks) -> split in two -> AllReduce on the children and the parent
//! (checked element by element) -> destroy the children -> abort (odd cycles) or destroy (even
//! cycles) the parent, with file descriptors, threads and RSS flat. `OXCCL_TEST_SPLIT_CYCLES`
//! sets the count (default 30 for CI; the suite's figure is 1000).
//!
//! T18: 1, 2, 4, ... 64 communicators of 2 ranks alive at once in one process, each computing a
//! checked AllReduce, then all destroyed, back to the baseline; and the cost of a one-rank
//! communicator (RSS, fds, threads per communicator) as a figure.

use oxccl_core::bootstrap::{BootstrapOptions, UniqueId};
use oxccl_core::config::CommConfig;
use oxccl_core::host::HostStream;
use oxccl_core::{Communicator, HostBackend};
use oxccl_tests::harness::{all_reduce, settle, usage};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// Serialises this file's tests: the counts are process-wide.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// Rank `r`'s input at `i`: distinct per rank, exact in f32 sums.
fn value(r: usize, i: usize) -> f32 {
    ((r + 1) * 1000 + i) as f32
}

/// A checked AllReduce over `count` elements; `members` are the ranks of the parent whose inputs
/// are summed, `me` this rank's parent rank. Returns the number of wrong elements.
fn checked(
    comm: &Communicator<HostBackend>,
    stream: &HostStream,
    me: usize,
    members: &[usize],
) -> usize {
    let count = 300;
    let mut buf: Vec<f32> = (0..count).map(|i| value(me, i)).collect();
    all_reduce(comm, stream, &mut buf).expect("allreduce");
    buf.iter()
        .enumerate()
        .filter(|&(i, &x)| x != members.iter().map(|&r| value(r, i)).sum::<f32>())
        .count()
}

/// One T6 cycle; returns the wrong elements seen by every rank together.
fn split_cycle(
    backend: &Arc<HostBackend>,
    streams: &[HostStream],
    opts: &BootstrapOptions,
    abort_parent: bool,
) -> usize {
    let n = streams.len();
    let id = UniqueId::generate(opts).expect("unique id");
    std::thread::scope(|s| {
        let handles: Vec<_> = streams
            .iter()
            .enumerate()
            .map(|(rank, stream)| {
                let backend = backend.clone();
                s.spawn(move || {
                    let parent =
                        Communicator::init_rank(backend, n, id, rank, 0, CommConfig::default())
                            .expect("init");
                    // Colour by parity, key reversed: the child's rank order is the reverse of
                    // the parent's.
                    let color = (rank % 2) as i32;
                    let child = parent
                        .split(color, (n - rank) as i32, None)
                        .expect("split")
                        .expect("a colour was given");
                    let members: Vec<usize> = (0..n).filter(|r| r % 2 == rank % 2).collect();
                    let mut wrong = 0;
                    assert_eq!(child.nranks(), members.len());
                    let expect_rank = members.iter().rev().position(|&r| r == rank).unwrap();
                    assert_eq!(
                        child.rank(),
                        expect_rank,
                        "child rank order follows the key"
                    );
                    wrong += checked(&child, stream, rank, &members);
                    child.destroy().expect("destroy child");
                    drop(child);
                    let all: Vec<usize> = (0..n).collect();
                    wrong += checked(&parent, stream, rank, &all);
                    if abort_parent {
                        parent.abort();
                    } else {
                        parent.destroy().expect("destroy parent");
                    }
                    wrong
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum()
    })
}

/// T6: N cycles of init -> split -> collectives -> destroy child -> abort/destroy parent leave
/// fds and threads at their baseline and RSS within 10% (after a warm-up that fills the bounded
/// set of lingering split roots, see `lingering_roots_are_bounded` in host_lifecycle.rs).
#[test]
fn split_abort_destroy_cycles_leave_fds_threads_and_memory_flat() {
    let _one = serial();
    let cycles: usize = std::env::var("OXCCL_TEST_SPLIT_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let backend = Arc::new(HostBackend::new());
    let streams: Vec<HostStream> = (0..4).map(|_| backend.stream_create().unwrap()).collect();
    let mut opts = BootstrapOptions::from_env();
    opts.root_linger = Duration::ZERO;
    let mut wrong = 0;
    for i in 0..12 {
        wrong += split_cycle(&backend, &streams, &opts, i % 2 == 1);
    }
    let base = settle(usage());
    let t = Instant::now();
    let mut times = Vec::with_capacity(cycles);
    for i in 0..cycles {
        let c = Instant::now();
        wrong += split_cycle(&backend, &streams, &opts, i % 2 == 1);
        times.push(c.elapsed());
    }
    let per_cycle = t.elapsed() / cycles as u32;
    let after = settle(base);
    // Medians, not means: the 2-core CI machine is shared, and a busy second skews a mean.
    let tenth = (cycles / 10).max(1);
    let median = |d: &[Duration]| {
        let mut d = d.to_vec();
        d.sort();
        d[d.len() / 2]
    };
    eprintln!(
        "T6 {cycles} split cycles: fds {} -> {}, threads {} -> {}, RSS {} -> {} KiB, \
         {per_cycle:?} per cycle (median of the first tenth {:?}, of the last tenth {:?}), \
         {wrong} wrong elements",
        base.0,
        after.0,
        base.1,
        after.1,
        base.2,
        after.2,
        median(&times[..tenth]),
        median(&times[cycles - tenth..])
    );
    assert_eq!(wrong, 0, "wrong elements");
    assert!(after.0 <= base.0, "fds grew: {base:?} -> {after:?}");
    assert!(after.1 <= base.1, "threads grew: {base:?} -> {after:?}");
    assert!(
        after.2 <= base.2 + base.2 / 10 + 2048,
        "RSS grew: {base:?} -> {after:?}"
    );
}

/// `k` communicators of 2 ranks alive at once (2k threads), each doing a checked AllReduce
/// while all are alive; returns the usage seen while alive and the wrong elements.
fn many_alive(
    backend: &Arc<HostBackend>,
    opts: &BootstrapOptions,
    k: usize,
) -> ((usize, usize, usize), usize) {
    let ids: Vec<UniqueId> = (0..k)
        .map(|_| UniqueId::generate(opts).expect("id"))
        .collect();
    let all_up = Barrier::new(2 * k + 1);
    let measured = Barrier::new(2 * k + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..2 * k)
            .map(|t| {
                let backend = backend.clone();
                let (id, rank) = (ids[t / 2], t % 2);
                let (all_up, measured) = (&all_up, &measured);
                s.spawn(move || {
                    let stream = backend.stream_create().unwrap();
                    let comm =
                        Communicator::init_rank(backend, 2, id, rank, 0, CommConfig::default())
                            .expect("init");
                    all_up.wait();
                    // Every communicator is alive: compute, then wait for the measurement.
                    // Inputs differ per communicator too.
                    let count = 500;
                    let mut buf: Vec<f32> = (0..count).map(|i| value(t, i)).collect();
                    all_reduce(&comm, &stream, &mut buf).expect("allreduce");
                    let pair = [t - rank, t - rank + 1];
                    let wrong = buf
                        .iter()
                        .enumerate()
                        .filter(|&(i, &x)| x != value(pair[0], i) + value(pair[1], i))
                        .count();
                    measured.wait();
                    comm.destroy().expect("destroy");
                    wrong
                })
            })
            .collect();
        all_up.wait();
        let alive = usage();
        measured.wait();
        let wrong = handles.into_iter().map(|h| h.join().unwrap()).sum();
        (alive, wrong)
    })
}

/// T18: 1..64 communicators of 2 ranks alive at once, then all destroyed: every result right,
/// and fds and threads back at the baseline each time.
#[test]
fn up_to_64_communicators_alive_at_once() {
    let _one = serial();
    let backend = Arc::new(HostBackend::new());
    let mut opts = BootstrapOptions::from_env();
    opts.root_linger = Duration::ZERO;
    let _ = many_alive(&backend, &opts, 2);
    let base = settle(usage());
    for k in [1, 2, 4, 8, 16, 32, 64] {
        let t = Instant::now();
        let (alive, wrong) = many_alive(&backend, &opts, k);
        let took = t.elapsed();
        let after = settle(base);
        eprintln!(
            "T18 {k} communicators of 2 ranks: {took:?}; while alive fds +{}, threads +{} \
             (incl. {} rank threads), RSS +{} KiB; after destroy fds {} -> {}, threads {} -> {}; \
             {wrong} wrong elements",
            alive.0.saturating_sub(base.0),
            alive.1.saturating_sub(base.1),
            2 * k,
            alive.2.saturating_sub(base.2),
            base.0,
            after.0,
            base.1,
            after.1
        );
        assert_eq!(wrong, 0, "{k} communicators: wrong elements");
        assert!(after.0 <= base.0, "{k}: fds grew: {base:?} -> {after:?}");
        assert!(
            after.1 <= base.1,
            "{k}: threads grew: {base:?} -> {after:?}"
        );
    }
}

/// This process's threads counted by name ("oxccl-watchdog x3, ...").
fn thread_names() -> String {
    let mut names: std::collections::BTreeMap<String, usize> = Default::default();
    for t in std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
    {
        let name = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        *names.entry(name.trim().to_string()).or_default() += 1;
    }
    names
        .iter()
        .map(|(n, c)| format!("{n} x{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// T18: what one one-rank communicator costs (RSS, fds, threads), from 200 alive at once.
#[test]
fn one_rank_communicator_cost() {
    let _one = serial();
    let backend = Arc::new(HostBackend::new());
    let stream = backend.stream_create().unwrap();
    let mut opts = BootstrapOptions::from_env();
    opts.root_linger = Duration::ZERO;
    let make = |count: usize| -> Vec<Communicator<HostBackend>> {
        (0..count)
            .map(|_| {
                let id = UniqueId::generate(&opts).expect("id");
                Communicator::init_rank(backend.clone(), 1, id, 0, 0, CommConfig::default())
                    .expect("init")
            })
            .collect()
    };
    // Warm-up: allocator arenas, thread-locals, the first root.
    for c in make(20) {
        c.destroy().unwrap();
    }
    let base = settle(usage());
    let n = 200;
    let t = Instant::now();
    let comms = make(n);
    let init = t.elapsed() / n as u32;
    let mut wrong = 0;
    for c in &comms {
        let mut buf: Vec<f32> = (0..64).map(|i| value(0, i)).collect();
        all_reduce(c, &stream, &mut buf).expect("allreduce");
        wrong += buf
            .iter()
            .enumerate()
            .filter(|&(i, &x)| x != value(0, i))
            .count();
    }
    // Roots of used ids end within their 200 ms look.
    std::thread::sleep(Duration::from_millis(500));
    let alive = usage();
    let names = thread_names();
    for c in comms {
        c.destroy().unwrap();
    }
    let after = settle(base);
    let per = |a: usize, b: usize| (a as f64 - b as f64) / n as f64;
    eprintln!(
        "T18 one-rank communicator: RSS {:.1} KiB, fds {:.2}, threads {:.2} per communicator \
         ({n} alive: RSS {} -> {} KiB, fds {} -> {}, threads {} -> {}); init {init:?} each; \
         after destroy fds {}, threads {}, RSS {} KiB; threads by name while alive: {names}",
        per(alive.2, base.2),
        per(alive.0, base.0),
        per(alive.1, base.1),
        base.2,
        alive.2,
        base.0,
        alive.0,
        base.1,
        alive.1,
        after.0,
        after.1,
        after.2
    );
    assert_eq!(wrong, 0);
    assert!(
        per(alive.2, base.2) < 1024.0,
        "more than 1 MiB per one-rank communicator"
    );
    assert!(after.0 <= base.0, "fds grew: {base:?} -> {after:?}");
    assert!(after.1 <= base.1, "threads grew: {base:?} -> {after:?}");
}
