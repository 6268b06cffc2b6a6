//! oxccl's reliability extensions: the watchdog's hang report.

use crate::abi::{ncclComm_t, ncclResult_t};
use crate::handles::{self, Need};
use oxccl::dispatch::CommOps;
use oxccl_core::comm::oplog::hang_report_of;
use oxccl_core::{Error, Result};
use std::ffi::c_char;

/// Copies the latest hang report of `comm` into `buf` (NUL-terminated, truncated to `len`).
///
/// # Safety
/// `buf` is NULL or valid for writes of `len` bytes.
unsafe fn comm_hang_report(comm: ncclComm_t, buf: *mut c_char, len: usize) -> Result<()> {
    if buf.is_null() {
        return Err(Error::arg("buf argument is NULL"));
    }
    if len == 0 {
        return Err(Error::arg(
            "len is 0: the buffer must hold at least the terminating NUL",
        ));
    }
    let live = handles::lookup(comm, Need::Query)?;
    let report =
        hang_report_of(&live.comm.unique_id(), live.comm.rank() as u32).unwrap_or_default();
    let n = report.len().min(len - 1);
    // SAFETY: `buf` is valid for `len` bytes (the caller's contract) and `n < len`.
    unsafe {
        std::ptr::copy_nonoverlapping(report.as_ptr(), buf.cast::<u8>(), n);
        *buf.add(n) = 0;
    }
    Ok(())
}

/// `oxcclCommHangReport`: the watchdog's latest report on `comm` ("AllReduce #12 (count 1024 f32
/// sum) waiting 120 s: ranks 0-2 entered it; rank 3 is at #11 (AllReduce, done)"), or an empty
/// string when no operation has hung. Truncated to `len - 1` bytes plus the NUL.
///
/// # Safety
/// `buf` is NULL or valid for writes of `len` bytes; `comm` is any value (checked).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn oxcclCommHangReport(
    comm: ncclComm_t,
    buf: *mut c_char,
    len: usize,
) -> ncclResult_t {
    // SAFETY: the caller's guarantees are forwarded unchanged to the implementation.
    crate::boundary::call("oxcclCommHangReport", || unsafe {
        comm_hang_report(comm, buf, len)
    })
}
