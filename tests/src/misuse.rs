//! Misuse of the safe API that compiles, on the host backend: groups forgotten, nested,
//! dropped early; views of one buffer in one group; ranks that disagree. None may touch freed
//! memory or lose an operation silently. Each scenario panics when it sees a wrong result or
//! error; `tests/tests/safe_misuse.rs` runs them as tests, and under valgrind through the
//! `safe-misuse` program, where an invalid read or write fails the run too.

use crate::safe::on_ranks_of;
use std::sync::OnceLock;

static RUNTIME: OnceLock<Runtime> = OnceLock::new();

/// Runs the scenarios on `rt` instead of the host backend (safe-check on a GPU); call before
/// the first scenario.
pub fn use_runtime(rt: Runtime) {
    let _ = RUNTIME.set(rt);
}

fn runtime() -> Runtime {
    RUNTIME.get_or_init(Runtime::host).clone()
}

fn on_ranks<R: Send>(n: usize, f: impl Fn(&Communicator) -> R + Sync) -> Vec<R> {
    on_ranks_of(&runtime(), n, f)
}
use oxccl::{Collectives, Communicator, Error, Group, ReduceOp, Runtime};

fn usage_containing(r: oxccl::Result<()>, needle: &str) {
    match r {
        Err(Error::InvalidUsage(m)) => assert!(m.contains(needle), "{m:?} lacks {needle:?}"),
        other => panic!("expected InvalidUsage containing {needle:?}, got {other:?}"),
    }
}

/// A one-rank communicator on a thread of its own (a forgotten group poisons its thread).
fn alone<R: Send>(f: impl Fn(&Communicator) -> R + Sync) -> R {
    on_ranks(1, f).pop().expect("one rank")
}

pub fn a_forgotten_group_never_runs_and_later_calls_say_why() {
    alone(|comm| {
        let mut freed = comm.device().buffer_from(&[1.0f32; 64]).unwrap();
        let group = Group::start().unwrap();
        group
            .on(comm)
            .all_reduce_in_place(&mut freed, ReduceOp::Sum)
            .unwrap();
        std::mem::forget(group);
        // Compiles: the forgotten group no longer holds the borrow. Its operation must never
        // run on this freed memory.
        drop(freed);
        let mut later = comm.device().buffer_from(&[2.0f32; 4]).unwrap();
        usage_containing(
            Group::start().map(drop),
            "a group is already open on this thread",
        );
        usage_containing(
            comm.all_reduce_in_place(&mut later, ReduceOp::Sum),
            "group is open",
        );
        assert_eq!(later.to_vec().unwrap(), [2.0; 4]);
    });
}

pub fn a_second_start_on_the_thread_is_refused_and_the_first_group_still_runs() {
    on_ranks(2, |comm| {
        let mut a = comm.device().buffer_from(&[1i32; 5]).unwrap();
        let first = Group::start().unwrap();
        first
            .on(comm)
            .all_reduce_in_place(&mut a, ReduceOp::Sum)
            .unwrap();
        usage_containing(Group::start().map(drop), "Group::nested");
        first.end().unwrap();
        assert_eq!(a.to_vec().unwrap(), [2; 5]);
    });
}

pub fn nested_groups_launch_at_the_outer_end_in_any_state() {
    on_ranks(2, |comm| {
        let rank = comm.rank() as i64;
        let mut ended = comm.device().buffer_from(&[rank + 1; 3]).unwrap();
        let mut forgotten = comm.device().buffer_from(&[10 * (rank + 1); 3]).unwrap();
        let mut dropped = comm.device().buffer_from(&[100 * (rank + 1); 3]).unwrap();
        let mut outer_op = comm.device().buffer_from(&[rank; 3]).unwrap();
        let outer = Group::start().unwrap();
        let inner = outer.nested().unwrap();
        inner
            .on(comm)
            .all_reduce_in_place(&mut ended, ReduceOp::Sum)
            .unwrap();
        inner.end().unwrap();
        let inner = outer.nested().unwrap();
        inner
            .on(comm)
            .all_reduce_in_place(&mut forgotten, ReduceOp::Sum)
            .unwrap();
        std::mem::forget(inner);
        {
            let inner = outer.nested().unwrap();
            let deeper = inner.nested().unwrap();
            deeper
                .on(comm)
                .all_reduce_in_place(&mut dropped, ReduceOp::Max)
                .unwrap();
        }
        outer
            .on(comm)
            .all_reduce_in_place(&mut outer_op, ReduceOp::Sum)
            .unwrap();
        outer.end().unwrap();
        assert_eq!(ended.to_vec().unwrap(), [3; 3]);
        assert_eq!(forgotten.to_vec().unwrap(), [30; 3]);
        assert_eq!(dropped.to_vec().unwrap(), [200; 3]);
        assert_eq!(outer_op.to_vec().unwrap(), [1; 3]);
        // The thread is out of every group again.
        let mut after = comm.device().buffer_from(&[1i64]).unwrap();
        comm.all_reduce_in_place(&mut after, ReduceOp::Sum).unwrap();
        assert_eq!(after.to_vec().unwrap(), [2]);
    });
}

pub fn a_group_dropped_by_an_early_return_runs_its_operations() {
    fn record(comm: &Communicator, buf: &mut oxccl::DeviceBuffer<f32>) -> oxccl::Result<()> {
        let group = Group::start()?;
        group.on(comm).all_reduce_in_place(buf, ReduceOp::Sum)?;
        Err(Error::InvalidArgument("early return".into()))
    }
    on_ranks(3, |comm| {
        let mut buf = comm.device().buffer_from(&[1.0f32; 9]).unwrap();
        assert!(record(comm, &mut buf).is_err());
        assert_eq!(buf.to_vec().unwrap(), [3.0; 9]);
    });
}

pub fn buckets_of_one_flat_buffer_reduce_in_one_group() {
    let lens = [0usize, 1, 7, 1000, 4099];
    on_ranks(3, |comm| {
        let r = comm.rank() as f32;
        for &n in &lens {
            let host: Vec<f32> = (0..n).map(|i| i as f32 + r).collect();
            let mut flat = comm.device().buffer_from(&host).unwrap();
            let group = Group::start().unwrap();
            for bucket in flat.chunks_mut(333).unwrap() {
                group
                    .on(comm)
                    .all_reduce_in_place(bucket, ReduceOp::Sum)
                    .unwrap();
            }
            group.end().unwrap();
            let want: Vec<f32> = (0..n).map(|i| 3.0 * i as f32 + 3.0).collect();
            assert_eq!(flat.to_vec().unwrap(), want, "{n} elements");
        }
    });
}

pub fn views_work_in_every_kind_of_operation() {
    on_ranks(2, |comm| {
        let rank = comm.rank();
        let dev = comm.device();
        // One buffer: [input 4 | output 8 | spare 3], poisoned outside the input.
        let mut host = vec![-1i32; 15];
        for (i, v) in host[..4].iter_mut().enumerate() {
            *v = (10 * rank + i) as i32;
        }
        let mut buf = dev.buffer_from(&host).unwrap();
        {
            let (input, rest) = buf.split_at_mut(4).unwrap();
            let (mut output, spare) = rest.split_at_mut(8).unwrap();
            comm.all_gather(&input, &mut output).unwrap();
            assert_eq!(output.to_vec().unwrap(), [0, 1, 2, 3, 10, 11, 12, 13]);
            // Out of place from a view, into a part of another view.
            let mut half = output.reborrow().into_slice_mut(4..).unwrap();
            comm.all_reduce(&input, &mut half, ReduceOp::Max).unwrap();
            assert_eq!(half.to_vec().unwrap(), [10, 11, 12, 13]);
            // Rooted operations with views on the root's optional side.
            let out = (rank == 1).then(|| output.reborrow().into_slice_mut(..4).unwrap());
            comm.reduce(input.as_slice(), out, ReduceOp::Sum, 1)
                .unwrap();
            let mut small = spare.into_slice_mut(..2).unwrap();
            let src = (rank == 0).then(|| input.as_slice().slice(2..).unwrap());
            comm.broadcast(src, &mut small, 0).unwrap();
            assert_eq!(small.to_vec().unwrap(), [2, 3]);
            if rank == 1 {
                assert_eq!(output.to_vec().unwrap()[..4], [10, 12, 14, 16]);
            }
        }
        // The spare element past the views is untouched.
        assert_eq!(buf.to_vec().unwrap()[14], -1);
        // Send and receive between views of one buffer, in one group.
        let peer = 1 - rank;
        let (send, mut recv) = buf.split_at_mut(4).unwrap();
        let mut recv = recv.reborrow().into_slice_mut(..4).unwrap();
        let group = Group::start().unwrap();
        group.on(comm).send(&send, peer).unwrap();
        group.on(comm).recv(&mut recv, peer).unwrap();
        group.end().unwrap();
        let want: Vec<i32> = (0..4).map(|i| (10 * peer + i) as i32).collect();
        assert_eq!(recv.to_vec().unwrap(), want);
    });
}

pub fn ranks_that_disagree_on_counts_get_a_sentence_naming_both() {
    let errors = on_ranks(2, |comm| {
        let mut buf = comm.device().alloc::<f32>(100 + comm.rank()).unwrap();
        comm.all_reduce_in_place(&mut buf, ReduceOp::Sum)
    });
    for e in &errors {
        match e {
            Err(Error::InvalidUsage(m)) => {
                assert!(m.contains("AllReduce"), "{m}");
                assert!(m.contains("100") && m.contains("101"), "{m}");
                assert!(!m.contains("invalid usage"), "doubled prefix: {m}");
            }
            other => panic!("expected InvalidUsage, got {other:?}"),
        }
    }
}

pub fn one_rank_is_one_rank() {
    alone(|comm| {
        let mut buf = comm.device().alloc::<f32>(3).unwrap();
        match comm.all_gather_in_place(&mut buf) {
            Ok(()) => {}
            Err(e) => panic!("{e}"),
        }
        let mut two = comm.device().alloc::<f32>(2).unwrap();
        match comm.all_gather(&buf, &mut two) {
            Err(Error::InvalidArgument(m)) => assert!(m.ends_with("1 rank x 3"), "{m}"),
            other => panic!("{other:?}"),
        }
    });
}

/// Reads memory that was freed, so that a memory checker has something to report: proves the
/// checker's run can fail.
pub fn canary_reads_freed_memory() {
    let b = Box::new(7u64);
    let p: *const u64 = &*b;
    drop(b);
    // SAFETY: deliberately not: the memory checker must flag this read.
    let v = unsafe { std::ptr::read_volatile(p) };
    std::hint::black_box(v);
}

/// Every scenario by name (the canary excluded); the host backend runs them all, device
/// backends all but `ranks_that_disagree_on_counts_get_a_sentence_naming_both` (only the host
/// transport sees message lengths; NCCL does not check either).
pub const SCENARIOS: &[(&str, fn())] = &[
    (
        "a_forgotten_group_never_runs_and_later_calls_say_why",
        a_forgotten_group_never_runs_and_later_calls_say_why,
    ),
    (
        "a_second_start_on_the_thread_is_refused_and_the_first_group_still_runs",
        a_second_start_on_the_thread_is_refused_and_the_first_group_still_runs,
    ),
    (
        "nested_groups_launch_at_the_outer_end_in_any_state",
        nested_groups_launch_at_the_outer_end_in_any_state,
    ),
    (
        "a_group_dropped_by_an_early_return_runs_its_operations",
        a_group_dropped_by_an_early_return_runs_its_operations,
    ),
    (
        "buckets_of_one_flat_buffer_reduce_in_one_group",
        buckets_of_one_flat_buffer_reduce_in_one_group,
    ),
    (
        "views_work_in_every_kind_of_operation",
        views_work_in_every_kind_of_operation,
    ),
    (
        "ranks_that_disagree_on_counts_get_a_sentence_naming_both",
        ranks_that_disagree_on_counts_get_a_sentence_naming_both,
    ),
    ("one_rank_is_one_rank", one_rank_is_one_rank),
];
