//! Send/receive patterns, groups (fused p2p, several communicators driven by one thread, init
//! inside a group) and split communicators on the host backend.

use oxccl_core::backend::Backend;
use oxccl_core::bootstrap::{BootstrapOptions, UniqueId};
use oxccl_core::comm::group::{group_end, group_start};
use oxccl_core::comm::{CollArgs, SPLIT_NOCOLOR};
use oxccl_core::config::CommConfig;
use oxccl_core::datatype::{DataType, RedOp};
use oxccl_core::host::HostStream;
use oxccl_core::plan::{CollKind, P2pDir};
use oxccl_core::{Communicator, HostBackend};
use std::sync::Arc;

fn value(from: usize, to: usize, i: usize) -> i64 {
    (from * 1_000_000 + to * 10_000 + i) as i64
}

/// Runs `body(rank, comm, stream)` on `n` thread-ranks.
fn with_ranks(n: usize, body: impl Fn(usize, &Communicator<HostBackend>, &HostStream) + Sync) {
    oxccl_tests::harness::on_host_ranks(n, |_| {}, body);
}

fn send(comm: &Communicator<HostBackend>, s: &HostStream, buf: &[i64], peer: usize) {
    // SAFETY: `buf` outlives the call (synchronous on the host backend, or until group end).
    unsafe {
        comm.p2p(
            P2pDir::Send,
            buf.as_ptr() as u64,
            buf.len() as u64,
            DataType::Int64,
            peer as u32,
            s,
        )
    }
    .unwrap();
}

fn recv(comm: &Communicator<HostBackend>, s: &HostStream, buf: &mut [i64], peer: usize) {
    // SAFETY: as in `send`.
    unsafe {
        comm.p2p(
            P2pDir::Recv,
            buf.as_mut_ptr() as u64,
            buf.len() as u64,
            DataType::Int64,
            peer as u32,
            s,
        )
    }
    .unwrap();
}

#[test]
fn ring_exchange_in_a_group() {
    for n in [1, 2, 3, 5, 8] {
        with_ranks(n, |rank, comm, s| {
            for count in [0usize, 1, 7, 100_003] {
                let next = (rank + 1) % n;
                let prev = (rank + n - 1) % n;
                let out: Vec<i64> = (0..count).map(|i| value(rank, next, i)).collect();
                let mut inb = vec![-1i64; count];
                group_start().unwrap();
                send(comm, s, &out, next);
                recv(comm, s, &mut inb, prev);
                group_end().unwrap();
                assert!(
                    inb.iter()
                        .enumerate()
                        .all(|(i, &v)| v == value(prev, rank, i)),
                    "n={n} count={count}"
                );
            }
        });
    }
}

#[test]
fn all_pairs_with_self_send_and_repeated_messages() {
    let n = 4;
    with_ranks(n, |rank, comm, s| {
        let count = 1001;
        // Two messages to each peer (incl. self) in one group: they must match in order.
        let outs: Vec<Vec<i64>> = (0..2 * n)
            .map(|k| {
                (0..count)
                    .map(|i| value(rank, k % n, i) + (k / n) as i64)
                    .collect()
            })
            .collect();
        let mut ins = vec![vec![-1i64; count]; 2 * n];
        group_start().unwrap();
        for (k, o) in outs.iter().enumerate() {
            send(comm, s, o, k % n);
        }
        for (k, b) in ins.iter_mut().enumerate() {
            recv(comm, s, b, k % n);
        }
        group_end().unwrap();
        for (k, b) in ins.iter().enumerate() {
            let from = k % n;
            assert!(
                b.iter()
                    .enumerate()
                    .all(|(i, &v)| v == value(from, rank, i) + (k / n) as i64),
                "from {from} msg {}",
                k / n
            );
        }
    });
}

#[test]
fn ungrouped_send_then_recv_pairs() {
    with_ranks(2, |rank, comm, s| {
        let peer = 1 - rank;
        let out: Vec<i64> = (0..5000).map(|i| value(rank, peer, i)).collect();
        let mut inb = vec![0i64; 5000];
        if rank == 0 {
            send(comm, s, &out, peer);
            recv(comm, s, &mut inb, peer);
        } else {
            recv(comm, s, &mut inb, peer);
            send(comm, s, &out, peer);
        }
        assert!(
            inb.iter()
                .enumerate()
                .all(|(i, &v)| v == value(peer, rank, i))
        );
    });
}

fn all_reduce(comm: &Communicator<HostBackend>, s: &HostStream, buf: &mut [i64]) {
    let p = buf.as_mut_ptr() as u64;
    let args = CollArgs {
        kind: CollKind::AllReduce,
        send: p,
        recv: p,
        count: buf.len() as u64,
        dtype: DataType::Int64,
        op: RedOp::Sum,
        root: 0,
        layout: None,
    };
    // SAFETY: `buf` outlives the call (completed at return or at group end).
    unsafe { comm.collective(args, s) }.unwrap();
}

#[test]
fn one_thread_drives_every_rank_through_groups() {
    let backend = Arc::new(HostBackend::new());
    let n = 4;
    let comms = Communicator::init_all(backend.clone(), &[0, 1, 2, 3]).unwrap();
    let streams: Vec<HostStream> = (0..n).map(|_| backend.stream_create().unwrap()).collect();
    let mut bufs: Vec<Vec<i64>> = (0..n).map(|r| vec![r as i64 + 1; 777]).collect();
    group_start().unwrap();
    for ((c, s), b) in comms.iter().zip(&streams).zip(bufs.iter_mut()) {
        all_reduce(c, s, b);
    }
    group_end().unwrap();
    assert!(bufs.iter().all(|b| b.iter().all(|&v| v == 10)));
    // Nested groups launch at the outermost end only.
    group_start().unwrap();
    group_start().unwrap();
    for ((c, s), b) in comms.iter().zip(&streams).zip(bufs.iter_mut()) {
        all_reduce(c, s, b);
    }
    group_end().unwrap();
    assert!(
        bufs.iter().all(|b| b.iter().all(|&v| v == 10)),
        "launched before the outer end"
    );
    group_end().unwrap();
    assert!(bufs.iter().all(|b| b.iter().all(|&v| v == 40)));
    for c in &comms {
        c.destroy().unwrap();
    }
}

#[test]
fn init_inside_a_group_from_one_thread() {
    let backend = Arc::new(HostBackend::new());
    let id = UniqueId::generate(&BootstrapOptions::from_env()).unwrap();
    group_start().unwrap();
    let comms: Vec<_> = (0..3)
        .map(|r| {
            Communicator::init_rank(backend.clone(), 3, id, r, r as i32, CommConfig::default())
                .unwrap()
        })
        .collect();
    group_end().unwrap();
    assert!(comms.iter().all(|c| c.status().is_ok()));
    let s = backend.stream_create().unwrap();
    let mut bufs: Vec<Vec<i64>> = (0..3).map(|_| vec![2; 10]).collect();
    group_start().unwrap();
    for (c, b) in comms.iter().zip(bufs.iter_mut()) {
        all_reduce(c, &s, b);
    }
    group_end().unwrap();
    assert!(bufs.iter().all(|b| b.iter().all(|&v| v == 6)));
}

#[test]
fn group_end_without_start_is_invalid_usage() {
    let e = group_end().unwrap_err();
    assert_eq!(e.kind(), oxccl_core::ErrorKind::InvalidUsage);
}

#[test]
fn split_by_parity_with_reversed_keys_and_nocolor() {
    let n = 6;
    with_ranks(n, |rank, comm, s| {
        // Rank 5 opts out; the others split by parity, ordered by descending old rank.
        let color = if rank == 5 {
            SPLIT_NOCOLOR
        } else {
            (rank % 2) as i32
        };
        let sub = comm.split(color, -(rank as i32), None).unwrap();
        // The parent still works after the split, for every rank.
        let mut all = vec![1i64; 5];
        all_reduce(comm, s, &mut all);
        assert!(all.iter().all(|&v| v == n as i64), "parent allreduce");
        if rank == 5 {
            assert!(sub.is_none());
            return;
        }
        let sub = sub.unwrap();
        let members: Vec<usize> = (0..5).filter(|r| r % 2 == rank % 2).rev().collect();
        assert_eq!(sub.nranks(), members.len());
        assert_eq!(sub.rank(), members.iter().position(|&r| r == rank).unwrap());
        let mut buf = vec![rank as i64; 33];
        let sub_stream = s.clone();
        all_reduce(&sub, &sub_stream, &mut buf);
        let want: i64 = members.iter().map(|&r| r as i64).sum();
        assert!(buf.iter().all(|&v| v == want));
        sub.destroy().unwrap();
    });
}

#[test]
fn events_order_streams() {
    let b = HostBackend::new();
    let (s1, s2) = (b.stream_create().unwrap(), b.stream_create().unwrap());
    let src = vec![7u8; 1 << 20];
    let mid = vec![0u8; 1 << 20];
    let dst = vec![0u8; 1 << 20];
    let ev = b.event_create(&s1).unwrap();
    // SAFETY: all buffers outlive both synchronisations below.
    unsafe {
        b.memcpy_async(0, mid.as_ptr() as u64, src.as_ptr() as u64, src.len(), &s1)
            .unwrap();
        b.event_record(&ev, &s1).unwrap();
        b.stream_wait_event(&s2, &ev).unwrap();
        b.memcpy_async(0, dst.as_ptr() as u64, mid.as_ptr() as u64, src.len(), &s2)
            .unwrap();
    }
    b.stream_synchronize(&s2).unwrap();
    assert!(dst.iter().all(|&v| v == 7));
}
