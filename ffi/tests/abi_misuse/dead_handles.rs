//! T4: every call on a destroyed, aborted or finalized communicator.

use crate::helpers::{ALL_F, Bufs, FLOAT32, NO_STREAM, SUM, Table, one_rank, setup};
use oxccl_ffi::abi::ncclResult_t as R;
use oxccl_ffi::abi::{ncclComm_t, ncclRedOp_t, ncclScalarResidence_t};
use oxccl_ffi::api::*;
use std::ffi::{c_int, c_void};

/// Every call that needs a live communicator, on `c`, must return `want` naming `word`.
fn dead_handle_table(t: &mut Table, c: ncclComm_t, what: &str, want: R, word: &str) {
    let mut b = Bufs::new();
    let mut v: c_int = 0;
    for f in ALL_F {
        let (s, r) = (b.send(), b.recv());
        // SAFETY: 4096-byte buffers; the call must be refused without touching them.
        t.case(
            &format!("{} on a {what} comm", f.api()),
            f.api(),
            want,
            &[word],
            || unsafe { f.call(s, r, 4, FLOAT32, SUM, 0, c) },
        );
    }
    // SAFETY: (every call below) valid out-pointers; `c` is a handle this library issued.
    unsafe {
        t.case(
            &format!("ncclCommCount on a {what} comm"),
            "ncclCommCount",
            want,
            &[word],
            || ncclCommCount(c, &mut v),
        );
        t.case(
            &format!("ncclCommUserRank on a {what} comm"),
            "ncclCommUserRank",
            want,
            &[word],
            || ncclCommUserRank(c, &mut v),
        );
        t.case(
            &format!("ncclCommCuDevice on a {what} comm"),
            "ncclCommCuDevice",
            want,
            &[word],
            || ncclCommCuDevice(c, &mut v),
        );
        t.case(
            &format!("ncclCommGetAsyncError on a {what} comm"),
            "ncclCommGetAsyncError",
            want,
            &[word],
            || {
                let mut e = R::SUCCESS;
                ncclCommGetAsyncError(c, &mut e)
            },
        );
        t.case(
            &format!("ncclCommSplit on a {what} comm"),
            "ncclCommSplit",
            want,
            &[word],
            || {
                let mut n = ncclComm_t::NULL;
                ncclCommSplit(c, 0, 0, &mut n, std::ptr::null_mut())
            },
        );
        t.case(
            &format!("ncclCommFinalize on a {what} comm"),
            "ncclCommFinalize",
            want,
            &[word],
            || ncclCommFinalize(c),
        );
        t.case(
            &format!("ncclCommRevoke on a {what} comm"),
            "ncclCommRevoke",
            want,
            &[word],
            || ncclCommRevoke(c, 0),
        );
        t.case(
            &format!("ncclCommRegister on a {what} comm"),
            "ncclCommRegister",
            want,
            &[word],
            || {
                let mut h: *mut c_void = std::ptr::null_mut();
                ncclCommRegister(c, b.recv.as_mut_ptr().cast(), 64, &mut h)
            },
        );
        t.case(
            &format!("ncclRedOpCreatePreMulSum on a {what} comm"),
            "ncclRedOpCreatePreMulSum",
            want,
            &[word],
            || {
                let mut op = ncclRedOp_t(0);
                let mut x = 2.0f32;
                ncclRedOpCreatePreMulSum(
                    &mut op,
                    (&mut x as *mut f32).cast(),
                    FLOAT32,
                    ncclScalarResidence_t(1),
                    c,
                )
            },
        );
    }
    assert!(b.untouched(), "a refused call wrote into a buffer");
}

/// T4: destroy twice, use after destroy, abort after destroy; abort twice, use and destroy
/// after abort. (NCCL frees the object, so its answer to a dead handle is undefined; oxccl keeps
/// a tombstone per handle and answers `ncclInvalidUsage`, docs/abi.md.)
#[test]
fn destroyed_and_aborted_handles() {
    setup();
    let mut t = Table::new();
    let usage = R::INVALID_USAGE;
    // SAFETY: (every call) handles issued by this library, alive or dead.
    unsafe {
        let c = one_rank();
        t.case("destroy", "ncclCommDestroy", R::SUCCESS, &[], || {
            ncclCommDestroy(c)
        });
        t.case(
            "destroy twice",
            "ncclCommDestroy",
            usage,
            &["destroyed"],
            || ncclCommDestroy(c),
        );
        dead_handle_table(&mut t, c, "destroyed", usage, "destroyed");
        t.case(
            "abort after destroy",
            "ncclCommAbort",
            usage,
            &["destroyed"],
            || ncclCommAbort(c),
        );
        t.case(
            "destroy a third time",
            "ncclCommDestroy",
            usage,
            &["destroyed"],
            || ncclCommDestroy(c),
        );

        let c = one_rank();
        t.case("abort", "ncclCommAbort", R::SUCCESS, &[], || {
            ncclCommAbort(c)
        });
        t.case(
            "abort twice (idempotent)",
            "ncclCommAbort",
            R::SUCCESS,
            &[],
            || ncclCommAbort(c),
        );
        dead_handle_table(&mut t, c, "aborted", usage, "aborted");
        t.case(
            "destroy after abort",
            "ncclCommDestroy",
            usage,
            &["aborted"],
            || ncclCommDestroy(c),
        );

        // NULL: destroy, abort, finalize and revoke are no-ops (as in NCCL).
        t.case("destroy NULL", "ncclCommDestroy", R::SUCCESS, &[], || {
            ncclCommDestroy(ncclComm_t::NULL)
        });
        t.case("abort NULL", "ncclCommAbort", R::SUCCESS, &[], || {
            ncclCommAbort(ncclComm_t::NULL)
        });
        t.case("finalize NULL", "ncclCommFinalize", R::SUCCESS, &[], || {
            ncclCommFinalize(ncclComm_t::NULL)
        });
        t.case("revoke NULL", "ncclCommRevoke", R::SUCCESS, &[], || {
            ncclCommRevoke(ncclComm_t::NULL, 0)
        });

        // Finalize twice: ncclInvalidArgument the second time (NCCL); no operation after
        // finalize; destroy still works.
        let c = one_rank();
        let mut buf = [1.0f32; 8];
        let p: *mut c_void = buf.as_mut_ptr().cast();
        t.case("finalize", "ncclCommFinalize", R::SUCCESS, &[], || {
            ncclCommFinalize(c)
        });
        t.case(
            "finalize twice",
            "ncclCommFinalize",
            R::INVALID_ARGUMENT,
            &["already finalized"],
            || ncclCommFinalize(c),
        );
        t.case(
            "allreduce after finalize",
            "ncclAllReduce",
            usage,
            &["finalized"],
            || ncclAllReduce(p, p, 8, FLOAT32, SUM, c, NO_STREAM),
        );
        t.case(
            "count after finalize",
            "ncclCommCount",
            R::SUCCESS,
            &[],
            || {
                let mut v = 0;
                ncclCommCount(c, &mut v)
            },
        );
        t.case(
            "destroy after finalize",
            "ncclCommDestroy",
            R::SUCCESS,
            &[],
            || ncclCommDestroy(c),
        );
        t.case(
            "finalize after destroy",
            "ncclCommFinalize",
            usage,
            &["destroyed"],
            || ncclCommFinalize(c),
        );
    }
    t.finish("T4 dead handles");
}
