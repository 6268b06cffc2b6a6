//! Init misuse: out-of-range arguments, the largest nranks, calls while init is in progress.

use crate::helpers::{ALL_F, FLOAT32, NO_STREAM, SUM, Table, last_error, setup, unique_id};
use oxccl_ffi::abi::ncclResult_t as R;
use oxccl_ffi::abi::{ncclComm, ncclComm_t, ncclConfig_t};
use oxccl_ffi::api::*;
use std::ffi::{c_int, c_void};
use std::time::{Duration, Instant};

/// T2 for init: nranks 0, negative and huge; rank negative and >= nranks. Each fails at once
/// with `ncclInvalidArgument` and leaves the out-pointer NULL.
#[test]
fn out_of_range_init_arguments() {
    setup();
    let mut t = Table::new();
    let id = unique_id();
    let cases: [(c_int, c_int, &str); 13] = [
        (0, 0, "number of ranks"),
        (-1, 0, "number of ranks"),
        (c_int::MIN, 0, "number of ranks"),
        (2, -1, "rank -1"),
        (2, 2, "rank 2"),
        (2, 3, "rank 3"),
        (2, c_int::MAX, "invalid rank"),
        (2, c_int::MIN, "invalid rank"),
        (c_int::MAX, -1, "invalid rank"),
        (1, 1, "rank 1"),
        ((1 << 24) + 1, 0, "number of ranks"),
        (c_int::MAX, 0, "number of ranks"),
        (c_int::MAX, c_int::MAX - 1, "number of ranks"),
    ];
    for (nranks, rank, word) in cases {
        for api in ["ncclCommInitRank", "ncclCommInitRankConfig"] {
            let poisoned = ncclComm_t(0x1234 as *mut ncclComm);
            let mut c = poisoned;
            t.case(
                &format!("{api} nranks {nranks} rank {rank}"),
                api,
                R::INVALID_ARGUMENT,
                &[word],
                || {
                    // SAFETY: valid out-pointer; NULL or an initialised config.
                    unsafe {
                        if api == "ncclCommInitRank" {
                            ncclCommInitRank(&mut c, nranks, id, rank)
                        } else {
                            let mut cfg = ncclConfig_t::initializer();
                            ncclCommInitRankConfig(&mut c, nranks, id, rank, &mut cfg)
                        }
                    }
                },
            );
            if c != ncclComm_t::NULL {
                t.failures.push(format!(
                    "{api} nranks {nranks} rank {rank}: out-pointer left {c:?}, want NULL"
                ));
            }
        }
    }
    t.finish("T2 init arguments");
}

/// Resident memory of this process in KiB.
fn rss_kib() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// T2: the largest nranks accepted (2^24), as rank 0 (whose process hosts the unique id's root)
/// and as the last rank, non-blocking: init returns at once, waits for the missing ranks with
/// bounded memory, and abort ends it at once. (Above 2^24 init is refused: the table
/// above; before, `nranks = INT_MAX` aborted the process on a 16 GiB allocation.)
#[test]
fn largest_nranks_waits_without_memory_and_aborts() {
    setup();
    let n = 1 << 24;
    for rank in [0, n - 1] {
        let before = rss_kib();
        let id = unique_id();
        let mut cfg = ncclConfig_t::initializer();
        cfg.blocking = 0;
        let mut c = ncclComm_t::NULL;
        let t = Instant::now();
        // SAFETY: valid out-pointer and config.
        let r = unsafe { ncclCommInitRankConfig(&mut c, n, id, rank, &mut cfg) };
        let took = t.elapsed();
        assert_eq!(r, R::IN_PROGRESS, "rank {rank} of {n}: {}", last_error());
        assert!(took < Duration::from_secs(1), "{took:?}");
        std::thread::sleep(Duration::from_millis(300));
        let mut e = R::SUCCESS;
        // SAFETY: a live handle and a valid out-pointer.
        assert_eq!(unsafe { ncclCommGetAsyncError(c, &mut e) }, R::SUCCESS);
        assert_eq!(e, R::IN_PROGRESS, "rank {rank}: {}", last_error());
        let grew = rss_kib().saturating_sub(before);
        let t = Instant::now();
        // SAFETY: a live handle, not used afterwards.
        assert_eq!(unsafe { ncclCommAbort(c) }, R::SUCCESS);
        let abort_took = t.elapsed();
        eprintln!(
            "nranks {n} rank {rank}: init returned in {took:?}, RSS +{grew} KiB while waiting, \
             abort {abort_took:?}"
        );
        // The rank's bootstrap connection tables take 16 bytes per rank before the root's
        // table arrives (256 MiB at 2^24); nothing else may grow with nranks.
        let bound = 20 * n as usize / 1024 + 16 * 1024;
        assert!(grew < bound, "RSS grew by {grew} KiB waiting for {n} ranks");
        assert!(abort_took < Duration::from_secs(2), "{abort_took:?}");
    }
}

/// T4: calls on a communicator whose non-blocking init is in progress (its second rank never
/// comes): NCCL's `ncclInvalidArgument` for operations and queries, `ncclInProgress` from
/// `ncclCommGetAsyncError`, and abort ends it at once.
#[test]
fn calls_during_in_progress_init() {
    setup();
    let mut t = Table::new();
    let mut cfg = ncclConfig_t::initializer();
    cfg.blocking = 0;
    let mut c = ncclComm_t::NULL;
    // SAFETY: valid out-pointer and config.
    let r = unsafe { ncclCommInitRankConfig(&mut c, 2, unique_id(), 0, &mut cfg) };
    assert_eq!(r, R::IN_PROGRESS, "{}", last_error());
    let mut buf = [1.0f32; 8];
    let p: *mut c_void = buf.as_mut_ptr().cast();
    let ia = R::INVALID_ARGUMENT;
    // SAFETY: (every call) `c` is a live handle until aborted; valid out-pointers.
    unsafe {
        t.case(
            "GetAsyncError while in progress",
            "ncclCommGetAsyncError",
            R::SUCCESS,
            &[],
            || {
                let mut e = R::SUCCESS;
                let r = ncclCommGetAsyncError(c, &mut e);
                if e != R::IN_PROGRESS {
                    return R::INTERNAL_ERROR;
                }
                r
            },
        );
        for f in ALL_F {
            t.case(
                &format!("{} while in progress", f.api()),
                f.api(),
                ia,
                &["still initializing"],
                || f.call(p, p, 8, FLOAT32, SUM, 1, c),
            );
        }
        let mut v = 0;
        t.case(
            "Count while in progress",
            "ncclCommCount",
            ia,
            &["initializing"],
            || ncclCommCount(c, &mut v),
        );
        t.case(
            "UserRank while in progress",
            "ncclCommUserRank",
            ia,
            &["initializing"],
            || ncclCommUserRank(c, &mut v),
        );
        t.case(
            "CuDevice while in progress",
            "ncclCommCuDevice",
            ia,
            &["initializing"],
            || ncclCommCuDevice(c, &mut v),
        );
        t.case(
            "Finalize while in progress",
            "ncclCommFinalize",
            ia,
            &["initializing"],
            || ncclCommFinalize(c),
        );
        t.case(
            "Split while in progress",
            "ncclCommSplit",
            ia,
            &["initializing"],
            || {
                let mut n = ncclComm_t::NULL;
                ncclCommSplit(c, 0, 0, &mut n, std::ptr::null_mut())
            },
        );
        t.case(
            "Abort while in progress",
            "ncclCommAbort",
            R::SUCCESS,
            &[],
            || ncclCommAbort(c),
        );
        t.case(
            "AllReduce after that abort",
            "ncclAllReduce",
            R::INVALID_USAGE,
            &["aborted"],
            || ncclAllReduce(p, p, 8, FLOAT32, SUM, c, NO_STREAM),
        );
    }
    assert!(
        buf.iter().all(|&x| x == 1.0),
        "a refused call wrote into the buffer"
    );
    t.finish("T4 in progress");
}
