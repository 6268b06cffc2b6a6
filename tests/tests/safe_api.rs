//! The correctness matrix through the safe `oxccl` API on the host backend: every operation x
//! type x operator, in and out of place, counts 0, 1, 7 and 4099 (and 2^18+3 for f32, past the
//! host's zero-copy threshold), at 1, 2 and 3 ranks in threads; send/receive in a group; and bad
//! input answered with the right error.

use oxccl::{Collectives, Communicator, Error, ReduceOp, Runtime, UniqueId};
use oxccl_core::datatype::DataType;
use oxccl_tests::safe::{on_ranks, ring_exchange, run_safe_cases};
use oxccl_tests::suite::full_matrix;

fn matrix(n: usize) {
    let mut cases = full_matrix(n, &[0, 1, 7, 4099], &DataType::ALL);
    cases.extend(full_matrix(n, &[(1 << 18) + 3], &[DataType::Float32]));
    let total = cases.len();
    let failed: Vec<String> = on_ranks(n, |comm| run_safe_cases(comm, &cases))
        .into_iter()
        .flatten()
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {total} cases failed on {n} ranks:\n{}",
        failed.len(),
        failed[..failed.len().min(20)].join("\n")
    );
    eprintln!("safe API matrix: {total} cases x {n} ranks passed");
}

#[test]
fn matrix_one_rank() {
    matrix(1);
}

#[test]
fn matrix_two_ranks() {
    matrix(2);
}

#[test]
fn matrix_three_ranks() {
    matrix(3);
}

#[test]
fn send_recv_ring_in_a_group() {
    for n in [1, 2, 3] {
        let wrong = on_ranks(n, |comm| ring_exchange(comm, 1000).unwrap());
        assert!(wrong.iter().all(|&w| w == 0), "{n} ranks: {wrong:?}");
    }
}

fn is_arg(r: oxccl::Result<()>, needle: &str) {
    match r {
        Err(Error::InvalidArgument(m)) => assert!(m.contains(needle), "{m:?} lacks {needle:?}"),
        other => panic!("expected InvalidArgument containing {needle:?}, got {other:?}"),
    }
}

#[test]
fn bad_input_is_an_error_and_queues_nothing() {
    on_ranks(2, |comm| {
        let dev = comm.device();
        let a = dev.alloc::<f32>(4).unwrap();
        let mut b = dev.alloc::<f32>(5).unwrap();
        let mut odd = dev.alloc::<f32>(3).unwrap();
        is_arg(comm.all_reduce(&a, &mut b, ReduceOp::Sum), "must be equal");
        is_arg(comm.all_gather(&a, &mut b), "2 ranks x 4");
        is_arg(
            comm.reduce_scatter(&b, &mut odd, ReduceOp::Sum),
            "2 ranks x 3",
        );
        let mut odd2 = dev.alloc::<f32>(3).unwrap();
        is_arg(comm.all_to_all(&odd, &mut odd2), "not a multiple");
        is_arg(
            comm.all_gather_in_place(&mut odd),
            "not a multiple of the 2 ranks",
        );
        is_arg(comm.broadcast_in_place(&mut b, 2), "root 2 is out of range");
        is_arg(comm.send(&a, 7), "peer 7 is out of range");
        if comm.rank() == 0 {
            is_arg(comm.broadcast(None, &mut b, 0), "root needs a send buffer");
            is_arg(
                comm.reduce(&a, Some(b.as_mut_slice()), ReduceOp::Sum, 0),
                "must have 4",
            );
        }
        // A buffer of another device of the same runtime.
        let other = comm.runtime().device(comm.device().ordinal() + 10).unwrap();
        let mut elsewhere = other.alloc::<f32>(4).unwrap();
        is_arg(
            comm.all_reduce_in_place(&mut elsewhere, ReduceOp::Sum),
            "device",
        );
        // Every `Runtime::host()` is the same runtime: its buffers work with the communicator.
        assert!(Runtime::host().same(comm.runtime()));
        let mut same = Runtime::host()
            .device(comm.device().ordinal())
            .unwrap()
            .alloc::<f32>(4)
            .unwrap();
        comm.all_reduce_in_place(&mut same, ReduceOp::Sum).unwrap();
        // Host slices of the wrong length.
        is_arg(b.copy_from_host(&[1.0; 4]), "host slice has 4");
        // Operations outside the open group are refused.
        let group = oxccl::Group::start().unwrap();
        let mut c = dev.alloc::<f32>(2).unwrap();
        match comm.all_reduce_in_place(&mut c, ReduceOp::Sum) {
            Err(Error::InvalidUsage(m)) => assert!(m.contains("group is open"), "{m}"),
            other => panic!("{other:?}"),
        }
        drop(group);
        // Everything agreed above queued nothing: the ranks are still in step.
        let mut ok = dev.buffer_from(&[comm.rank() as f32 + 1.0]).unwrap();
        comm.all_reduce_in_place(&mut ok, ReduceOp::Sum).unwrap();
        assert_eq!(ok.to_vec().unwrap(), [3.0]);
    });
}

#[test]
fn init_checks_and_nonblocking_init_and_split() {
    let rt = Runtime::host();
    let id = UniqueId::new().unwrap();
    let dev = rt.device(0).unwrap();
    assert!(matches!(
        Communicator::init(&id, 2, 2, &dev),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(rt.device(4096), Err(Error::InvalidArgument(_))));
    // Two ranks started without blocking, polled, then split into singletons.
    let id = UniqueId::new().unwrap();
    let out = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|r| {
                let rt = rt.clone();
                s.spawn(move || {
                    let pending =
                        Communicator::init_nonblocking(&id, r, 2, &rt.device(r).unwrap()).unwrap();
                    while !pending.poll().unwrap() {
                        std::thread::yield_now();
                    }
                    let comm = pending.wait().unwrap();
                    let sub = comm.split(Some(r as u32), 0).unwrap().unwrap();
                    let none = comm.split(None, 0).unwrap();
                    (comm.size(), sub.size(), sub.rank(), none.is_none())
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    assert_eq!(out, vec![(2, 1, 0, true), (2, 1, 0, true)]);
}

#[test]
fn init_all_groups_and_premulsum() {
    let rt = Runtime::host();
    let devs = rt.devices().unwrap()[..3].to_vec();
    let comms = Communicator::init_all(&devs).unwrap();
    assert!(matches!(
        Communicator::init_all(&[devs[0].clone(), devs[0].clone()]),
        Err(Error::InvalidArgument(_))
    ));
    // One thread drives every rank through one group, as with ncclCommInitAll.
    let mut bufs: Vec<_> = comms
        .iter()
        .map(|c| c.device().buffer_from(&[1.5f64, -2.0]).unwrap())
        .collect();
    let group = oxccl::Group::start().unwrap();
    for (c, b) in comms.iter().zip(bufs.iter_mut()) {
        group
            .on(c)
            .all_reduce_in_place(b, ReduceOp::PreMulSum(2.0))
            .unwrap();
    }
    group.end().unwrap();
    for b in &bufs {
        assert_eq!(b.to_vec().unwrap(), [9.0, -12.0]);
    }
    for c in comms {
        c.finalize().unwrap();
    }
}
