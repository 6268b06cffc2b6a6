//! T2 for the collectives and send/receive: every out-of-range argument, then right results.

use crate::helpers::{
    ALL_F, Bufs, F, FLOAT32, NO_STREAM, SUM, Table, last_error, setup, with_ranks,
};
use crate::non_collective_args::other_functions_table;
use oxccl_ffi::abi::ncclResult_t as R;
use oxccl_ffi::abi::{ncclComm, ncclComm_t, ncclDataType_t, ncclRedOp_t};
use oxccl_ffi::api::*;
use std::ffi::{c_int, c_void};

/// Sizes in bytes of the 12 data types, in `ncclDataType_t` order.
const TYPE_SIZES: [usize; 12] = [1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1];

/// The per-argument table of every collective and send/receive on `comm` (rank `me` of `n`).
/// `solo` also runs the calls that succeed (count 0 with NULL buffers), which on more than one
/// rank would need the others.
fn argument_table(t: &mut Table, comm: ncclComm_t, me: usize, n: usize, solo: bool) {
    let mut b = Bufs::new();
    let ni = n as c_int;
    let bad_types: [c_int; 6] = [-1, 12, 13, 255, c_int::MAX, c_int::MIN];
    // 5 is the first user-operator handle: never created on this communicator.
    let bad_ops: [c_int; 6] = [-1, 5, 6, 1000, c_int::MAX, c_int::MIN];
    let bad_ranks: [c_int; 5] = [-1, ni, ni + 1, c_int::MAX, c_int::MIN];
    let foreign = ncclComm_t(&b as *const Bufs as *mut ncclComm);
    #[allow(clippy::too_many_arguments)]
    fn call(
        f: F,
        s: *const c_void,
        r: *mut c_void,
        count: usize,
        dt: ncclDataType_t,
        op: ncclRedOp_t,
        rank: c_int,
        comm: ncclComm_t,
    ) -> R {
        // SAFETY: the buffers passed below are NULL (the case) or hold 4096 bytes, more than any
        // call that is accepted reads or writes; refused calls must not touch them (checked at
        // the end of the table).
        unsafe { f.call(s, r, count, dt, op, rank, comm) }
    }
    for f in ALL_F {
        let api = f.api();
        for &dt in &bad_types {
            let (s, r) = (b.send(), b.recv());
            t.case(
                &format!("{api} datatype {dt}"),
                api,
                R::INVALID_ARGUMENT,
                &["data type"],
                || call(f, s, r, 4, ncclDataType_t(dt), SUM, 0, comm),
            );
        }
        if f.has_op() {
            for &op in &bad_ops {
                let (s, r) = (b.send(), b.recv());
                t.case(
                    &format!("{api} op {op}"),
                    api,
                    R::INVALID_ARGUMENT,
                    &["reduction operator"],
                    || call(f, s, r, 4, FLOAT32, ncclRedOp_t(op), 0, comm),
                );
            }
        }
        if f.has_rank() {
            for &rk in &bad_ranks {
                let (s, r) = (b.send(), b.recv());
                let w = f.rank_word();
                t.case(
                    &format!("{api} {w} {rk} of {n}"),
                    api,
                    R::INVALID_ARGUMENT,
                    &[w],
                    || call(f, s, r, 4, FLOAT32, SUM, rk, comm),
                );
            }
        }
        for (what, c) in [("NULL", ncclComm_t::NULL), ("foreign", foreign)] {
            let (s, r) = (b.send(), b.recv());
            t.case(
                &format!("{api} {what} comm"),
                api,
                R::INVALID_ARGUMENT,
                &["comm"],
                || call(f, s, r, 4, FLOAT32, SUM, 0, c),
            );
        }
        // NULL buffers with a nonzero count; this rank is the root (or the peer), so it uses
        // both buffers.
        let me = me as c_int;
        let null_send = !matches!(f, F::Bcast | F::Recv);
        let null_recv = !matches!(f, F::Send);
        if null_send {
            let r = b.recv();
            t.case(
                &format!("{api} NULL send buffer"),
                api,
                R::INVALID_ARGUMENT,
                &["send buffer is NULL"],
                || call(f, std::ptr::null(), r, 4, FLOAT32, SUM, me, comm),
            );
        }
        if null_recv {
            let s = b.send();
            let word = if matches!(f, F::Bcast) {
                "NULL"
            } else {
                "receive buffer is NULL"
            };
            t.case(
                &format!("{api} NULL receive buffer"),
                api,
                R::INVALID_ARGUMENT,
                &[word],
                || call(f, s, std::ptr::null_mut(), 4, FLOAT32, SUM, me, comm),
            );
        }
        t.case(
            &format!("{api} both buffers NULL, count 7"),
            api,
            R::INVALID_ARGUMENT,
            &["NULL"],
            || {
                call(
                    f,
                    std::ptr::null(),
                    std::ptr::null_mut(),
                    7,
                    FLOAT32,
                    SUM,
                    me,
                    comm,
                )
            },
        );
        // (A send or receive of 0 elements outside a group would wait for its match.)
        if solo && !f.is_p2p() {
            t.case(
                &format!("{api} NULL buffers, count 0"),
                api,
                R::SUCCESS,
                &[],
                || {
                    call(
                        f,
                        std::ptr::null(),
                        std::ptr::null_mut(),
                        0,
                        FLOAT32,
                        SUM,
                        0,
                        comm,
                    )
                },
            );
        }
        // Counts whose byte size overflows size_t (or the address space) for every type, with
        // real (small) buffers: refused before anything is read or written. This rank is the
        // root, so Gather and Scatter span count * nranks elements here.
        for (ty, &esize) in TYPE_SIZES.iter().enumerate() {
            let per = esize * if f.span(1, n) > 1 { n } else { 1 };
            // size_t overflow of count * size (and of count * nranks * size), then a byte size
            // past isize::MAX, the most any buffer can hold.
            let mut counts = vec![usize::MAX];
            counts.extend((usize::MAX / per).checked_add(1));
            counts.push((isize::MAX as usize) / per + 1);
            counts.dedup();
            for count in counts {
                let (s, r) = (b.send(), b.recv());
                t.case(
                    &format!("{api} count {count:#x} of type {ty}"),
                    api,
                    R::INVALID_ARGUMENT,
                    &["count", "overflows"],
                    || call(f, s, r, count, ncclDataType_t(ty as c_int), SUM, me, comm),
                );
            }
        }
    }
    assert!(b.untouched(), "a refused call wrote into a buffer");
}

/// A one-rank AllReduce (sum) of `count` floats, checked element by element.
fn checked_all_reduce(comm: ncclComm_t, n: usize, rank: usize, count: usize) -> usize {
    let send: Vec<f32> = (0..count).map(|i| (rank * 1000 + i) as f32).collect();
    let mut recv = vec![f32::NAN; count];
    // SAFETY: buffers of `count` floats; the host backend completes the call before returning.
    let r = unsafe {
        ncclAllReduce(
            send.as_ptr().cast(),
            recv.as_mut_ptr().cast(),
            count,
            FLOAT32,
            SUM,
            comm,
            NO_STREAM,
        )
    };
    assert_eq!(r, R::SUCCESS, "{}", last_error());
    recv.iter()
        .enumerate()
        .filter(|&(i, &x)| x != (0..n).map(|q| (q * 1000 + i) as f32).sum::<f32>())
        .count()
}

/// T2 on a one-rank communicator: every argument table, then a correct AllReduce.
#[test]
fn out_of_range_arguments_one_rank() {
    setup();
    let t = with_ranks(1, |_, comm| {
        let mut t = Table::new();
        argument_table(&mut t, comm, 0, 1, true);
        other_functions_table(&mut t, comm);
        assert_eq!(
            checked_all_reduce(comm, 1, 0, 1000),
            0,
            "wrong elements after the table"
        );
        t
    });
    t.into_iter().next().unwrap().finish("T2 one rank");
}

/// T2 on 3 thread-ranks: every rank runs the argument table at once (refusals are local and
/// leave nothing half-done), then the ranks compute a correct AllReduce and Broadcast.
#[test]
fn out_of_range_arguments_three_ranks() {
    setup();
    let n = 3;
    let results = with_ranks(n, |rank, comm| {
        let mut t = Table::new();
        argument_table(&mut t, comm, rank, n, false);
        let wrong = checked_all_reduce(comm, n, rank, 4099);
        let mut data: Vec<f32> = if rank == 1 {
            (0..777).map(|i| i as f32 * 0.5).collect()
        } else {
            vec![-1.0; 777]
        };
        // SAFETY: 777 floats, in place; completes before returning.
        let r = unsafe { ncclBcast(data.as_mut_ptr().cast(), 777, FLOAT32, 1, comm, NO_STREAM) };
        assert_eq!(r, R::SUCCESS, "{}", last_error());
        let bwrong = data
            .iter()
            .enumerate()
            .filter(|&(i, &x)| x != i as f32 * 0.5)
            .count();
        (t, wrong + bwrong)
    });
    for (rank, (t, wrong)) in results.into_iter().enumerate() {
        assert_eq!(wrong, 0, "rank {rank}: wrong elements after the table");
        t.finish(&format!("T2 rank {rank} of 3"));
    }
}
