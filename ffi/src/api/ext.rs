//! NCCL 2.29 additions exported by both builds, and oxccl's own symbols.

use super::out;
use crate::abi::{NCCL_SUSPEND_MEM, ncclComm_t, ncclCommMemStat_t, ncclConfig_t, ncclUniqueId};
use crate::boundary::nccl_api;
use crate::handles::{self, Need};
use oxccl::dispatch::CommOps;
use oxccl_core::bootstrap::UNIQUE_ID_BYTES;
use oxccl_core::{Error, Result};
use std::ffi::{c_char, c_int};

unsafe fn comm_get_unique_id(comm: ncclComm_t, unique_id: *mut ncclUniqueId) -> Result<()> {
    // SAFETY: forwarded from the caller.
    let slot = unsafe { out(unique_id, "uniqueId") }?;
    let id = handles::lookup(comm, Need::Query)?.comm.unique_id();
    let mut internal = [0 as c_char; UNIQUE_ID_BYTES];
    for (c, b) in internal.iter_mut().zip(id.0.iter()) {
        *c = *b as c_char;
    }
    *slot = ncclUniqueId { internal };
    Ok(())
}

unsafe fn comm_grow(
    comm: ncclComm_t,
    _n_ranks: c_int,
    _unique_id: *const ncclUniqueId,
    _rank: c_int,
    newcomm: *mut ncclComm_t,
    _config: *mut ncclConfig_t,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    if let Ok(slot) = unsafe { out(newcomm, "newcomm") } {
        *slot = ncclComm_t::NULL;
    }
    handles::lookup(comm, Need::Query)?;
    Err(Error::usage(
        "ncclCommGrow is not supported by oxccl yet: create a new communicator with ncclCommInitRank (or ncclCommSplit) instead",
    ))
}

unsafe fn comm_suspend(comm: ncclComm_t, flags: c_int) -> Result<()> {
    if flags & !NCCL_SUSPEND_MEM != 0 {
        return Err(Error::arg(format!(
            "invalid flags {flags:#x}: only NCCL_SUSPEND_MEM is defined"
        )));
    }
    let live = handles::lookup(comm, Need::Query)?;
    // The host backend holds no device memory to release; suspension only blocks new operations.
    live.handle.lock().suspended = true;
    Ok(())
}

unsafe fn comm_resume(comm: ncclComm_t) -> Result<()> {
    let live = handles::lookup(comm, Need::Query)?;
    live.handle.lock().suspended = false;
    Ok(())
}

unsafe fn comm_mem_stats(comm: ncclComm_t, stat: ncclCommMemStat_t, value: *mut u64) -> Result<()> {
    // SAFETY: forwarded from the caller.
    let slot = unsafe { out(value, "value") }?;
    handles::lookup(comm, Need::Query)?;
    if !(0..=3).contains(&stat.0) {
        return Err(Error::arg(format!("invalid memory statistic {}", stat.0)));
    }
    // Device memory owned by the communicator: none on the host backend.
    *slot = 0;
    Ok(())
}

nccl_api! {
    /// `ncclCommGetUniqueId` (2.29): the id the communicator was created from.
    fn ncclCommGetUniqueId, pncclCommGetUniqueId(
        comm: ncclComm_t, unique_id: *mut ncclUniqueId
    ) => comm_get_unique_id;
}
nccl_api! {
    /// `ncclCommGrow` (2.29): refused with `ncclInvalidUsage`.
    fn ncclCommGrow, pncclCommGrow(
        comm: ncclComm_t, n_ranks: c_int, unique_id: *const ncclUniqueId, rank: c_int,
        newcomm: *mut ncclComm_t, config: *mut ncclConfig_t
    ) => comm_grow;
}
nccl_api! {
    /// `ncclCommSuspend` (2.29).
    fn ncclCommSuspend, pncclCommSuspend(comm: ncclComm_t, flags: c_int) => comm_suspend;
}
nccl_api! {
    /// `ncclCommResume` (2.29).
    fn ncclCommResume, pncclCommResume(comm: ncclComm_t) => comm_resume;
}
nccl_api! {
    /// `ncclCommMemStats` (2.29).
    fn ncclCommMemStats, pncclCommMemStats(
        comm: ncclComm_t, stat: ncclCommMemStat_t, value: *mut u64
    ) => comm_mem_stats;
}

/// oxccl's own version and the API level it implements, e.g. `oxccl 0.1.0 (NCCL 2.28.9 API)`.
#[cfg(not(feature = "rccl"))]
const VERSION_STRING: &str = concat!("oxccl ", env!("CARGO_PKG_VERSION"), " (NCCL 2.28.9 API)\0");
/// oxccl's own version and the API level it implements, e.g. `oxccl 0.1.0 (RCCL 2.30.4 API)`.
#[cfg(feature = "rccl")]
const VERSION_STRING: &str = concat!("oxccl ", env!("CARGO_PKG_VERSION"), " (RCCL 2.30.4 API)\0");

/// `oxcclGetVersionString`: oxccl's version (`ncclGetVersion` reports the API level instead).
#[unsafe(no_mangle)]
pub extern "C" fn oxcclGetVersionString() -> *const c_char {
    VERSION_STRING.as_ptr().cast()
}
