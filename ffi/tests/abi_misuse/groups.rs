//! T4 for groups: unbalanced, nested and failed ones, and communicators that die inside one.

use crate::helpers::{FLOAT32, NO_STREAM, SUM, Table, one_rank, setup};
use oxccl_ffi::abi::ncclDataType_t;
use oxccl_ffi::abi::ncclResult_t as R;
use oxccl_ffi::api::*;
use std::ffi::c_void;

/// T4: group misuse on one thread: `ncclGroupEnd` without start, unbalanced nesting (two starts,
/// one end: the operations wait for the second end), a group whose call failed (the end fails
/// with that error and nothing of the group runs), destroy and abort inside an open group.
#[test]
fn unbalanced_and_failed_groups() {
    setup();
    let mut t = Table::new();
    let c = one_rank();
    let n = 64;
    let send: Vec<f32> = (0..n).map(|i| i as f32 + 0.25).collect();
    let mut recv = vec![-7.0f32; n];
    let sp: *const c_void = send.as_ptr().cast();
    let rp: *mut c_void = recv.as_mut_ptr().cast();
    let untouched = |r: &[f32]| r.iter().all(|&x| x == -7.0);
    // SAFETY: (every call) `c` is live until destroyed below; buffers of `n` floats that outlive
    // every group end.
    unsafe {
        t.case(
            "GroupEnd without GroupStart",
            "ncclGroupEnd",
            R::INVALID_USAGE,
            &["ncclGroupStart"],
            || ncclGroupEnd(),
        );
        t.case(
            "GroupEnd without GroupStart again",
            "ncclGroupEnd",
            R::INVALID_USAGE,
            &["ncclGroupStart"],
            || ncclGroupEnd(),
        );

        // Two starts, one end: still inside the group, nothing launched.
        t.case("GroupStart 1", "ncclGroupStart", R::SUCCESS, &[], || {
            ncclGroupStart()
        });
        t.case("GroupStart 2", "ncclGroupStart", R::SUCCESS, &[], || {
            ncclGroupStart()
        });
        t.case(
            "AllReduce in a nested group",
            "ncclAllReduce",
            R::SUCCESS,
            &[],
            || ncclAllReduce(sp, rp, n, FLOAT32, SUM, c, NO_STREAM),
        );
        t.case("inner GroupEnd", "ncclGroupEnd", R::SUCCESS, &[], || {
            ncclGroupEnd()
        });
        if !untouched(&recv) {
            t.failures
                .push("the inner GroupEnd of a nested group launched its operation".into());
        }
        t.case("outer GroupEnd", "ncclGroupEnd", R::SUCCESS, &[], || {
            ncclGroupEnd()
        });
        let wrong = recv.iter().zip(&send).filter(|(r, s)| r != s).count();
        if wrong != 0 {
            t.failures.push(format!(
                "nested group: {wrong} wrong elements after the outer end"
            ));
        }
        t.case(
            "GroupEnd after balance",
            "ncclGroupEnd",
            R::INVALID_USAGE,
            &["ncclGroupStart"],
            || ncclGroupEnd(),
        );

        // A failed call inside a (nested) group: it fails at once, the inner end succeeds, the
        // outer end returns its error and runs nothing of the group.
        recv.fill(-7.0);
        t.case("GroupStart a", "ncclGroupStart", R::SUCCESS, &[], || {
            ncclGroupStart()
        });
        t.case("GroupStart b", "ncclGroupStart", R::SUCCESS, &[], || {
            ncclGroupStart()
        });
        t.case(
            "good AllReduce before the bad one",
            "ncclAllReduce",
            R::SUCCESS,
            &[],
            || ncclAllReduce(sp, rp, n, FLOAT32, SUM, c, NO_STREAM),
        );
        t.case(
            "bad datatype in a group",
            "ncclAllReduce",
            R::INVALID_ARGUMENT,
            &["data type"],
            || ncclAllReduce(sp, rp, n, ncclDataType_t(99), SUM, c, NO_STREAM),
        );
        t.case(
            "bad root in a group",
            "ncclBroadcast",
            R::INVALID_ARGUMENT,
            &["root"],
            || ncclBroadcast(sp, rp, n, FLOAT32, 3, c, NO_STREAM),
        );
        t.case(
            "inner end of a failed group",
            "ncclGroupEnd",
            R::SUCCESS,
            &[],
            || ncclGroupEnd(),
        );
        t.case(
            "outer end of a failed group",
            "ncclGroupEnd",
            R::INVALID_ARGUMENT,
            &["data type"],
            || ncclGroupEnd(),
        );
        if !untouched(&recv) {
            t.failures
                .push("a failed group ran its good operation".into());
        }
        t.case(
            "GroupEnd after a failed group",
            "ncclGroupEnd",
            R::INVALID_USAGE,
            &["ncclGroupStart"],
            || ncclGroupEnd(),
        );
        // The next group and the next plain call are not affected by the failed one.
        t.case(
            "GroupStart after a failed group",
            "ncclGroupStart",
            R::SUCCESS,
            &[],
            || ncclGroupStart(),
        );
        t.case(
            "AllReduce in the next group",
            "ncclAllReduce",
            R::SUCCESS,
            &[],
            || ncclAllReduce(sp, rp, n, FLOAT32, SUM, c, NO_STREAM),
        );
        t.case(
            "GroupEnd of the next group",
            "ncclGroupEnd",
            R::SUCCESS,
            &[],
            || ncclGroupEnd(),
        );
        let wrong = recv.iter().zip(&send).filter(|(r, s)| r != s).count();
        if wrong != 0 {
            t.failures
                .push(format!("group after a failed one: {wrong} wrong elements"));
        }

        // Destroy, and abort, of a communicator with an operation recorded in an open group:
        // the end fails naming it, nothing runs, nothing hangs.
        for (what, word) in [("destroy", "destroyed"), ("abort", "aborted")] {
            let d = one_rank();
            recv.fill(-7.0);
            t.case(
                &format!("GroupStart before {what}"),
                "ncclGroupStart",
                R::SUCCESS,
                &[],
                || ncclGroupStart(),
            );
            t.case(
                &format!("AllReduce before {what}"),
                "ncclAllReduce",
                R::SUCCESS,
                &[],
                || ncclAllReduce(sp, rp, n, FLOAT32, SUM, d, NO_STREAM),
            );
            if what == "destroy" {
                t.case(
                    "destroy inside a group",
                    "ncclCommDestroy",
                    R::SUCCESS,
                    &[],
                    || ncclCommDestroy(d),
                );
            } else {
                t.case(
                    "abort inside a group",
                    "ncclCommAbort",
                    R::SUCCESS,
                    &[],
                    || ncclCommAbort(d),
                );
            }
            t.case(
                &format!("GroupEnd after {what}"),
                "ncclGroupEnd",
                R::INVALID_USAGE,
                &[word],
                || ncclGroupEnd(),
            );
            if !untouched(&recv) {
                t.failures.push(format!(
                    "an operation of a communicator {word} inside the group ran"
                ));
            }
            t.case(
                &format!("GroupEnd after {what} again"),
                "ncclGroupEnd",
                R::INVALID_USAGE,
                &["ncclGroupStart"],
                || ncclGroupEnd(),
            );
        }
        t.case("destroy", "ncclCommDestroy", R::SUCCESS, &[], || {
            ncclCommDestroy(c)
        });
    }
    t.finish("T4 groups");
}
