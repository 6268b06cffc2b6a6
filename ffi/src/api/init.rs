//! Version, unique ids, communicator creation and teardown, queries, errors.

use super::out;
use crate::abi::{
    NCCL_REVOKE_DEFAULT, NCCL_SHRINK_ABORT, NCCL_SHRINK_DEFAULT, NCCL_SPLIT_NOCOLOR, VERSION_CODE,
    ncclComm_t, ncclConfig_t, ncclResult_t, ncclUniqueId,
};
use crate::boundary::nccl_api;
use crate::handles::{self, Life, Need};
use crate::{config, last_error, result};
use oxccl::dispatch::{self as runtime, AnyComm, CommOps, RuntimeBackend};
use oxccl_core::bootstrap::{BootstrapOptions, UNIQUE_ID_BYTES, UniqueId};
use oxccl_core::{Error, Result};
use std::ffi::{c_char, c_int};

/// Bytes of an `ncclUniqueId` as core's id.
fn to_core_id(id: &ncclUniqueId) -> UniqueId {
    let mut bytes = [0u8; UNIQUE_ID_BYTES];
    for (b, c) in bytes.iter_mut().zip(id.internal.iter()) {
        *b = *c as u8;
    }
    UniqueId(bytes)
}

/// Core's id as an `ncclUniqueId`.
fn from_core_id(id: &UniqueId) -> ncclUniqueId {
    let mut out = ncclUniqueId {
        internal: [0; UNIQUE_ID_BYTES],
    };
    for (c, b) in out.internal.iter_mut().zip(id.0.iter()) {
        *c = *b as c_char;
    }
    out
}

/// Non-blocking communicators report `ncclInProgress` while their init runs.
fn init_status(comm: &AnyComm) -> Result<()> {
    if comm.config().blocking {
        return Ok(());
    }
    comm.status()
}

unsafe fn get_version(version: *mut c_int) -> Result<()> {
    // SAFETY: forwarded from the caller.
    *unsafe { out(version, "version") }? = VERSION_CODE as c_int;
    Ok(())
}

unsafe fn get_unique_id(unique_id: *mut ncclUniqueId) -> Result<()> {
    // SAFETY: forwarded from the caller.
    let slot = unsafe { out(unique_id, "uniqueId") }?;
    let id = UniqueId::generate(&BootstrapOptions::from_env())?;
    *slot = from_core_id(&id);
    Ok(())
}

/// Shared by every single-rank init: checks, creates, issues the handle.
///
/// # Safety
/// `comm` is NULL or writable; `cfg` is NULL or a readable config.
unsafe fn init_rank_common(
    comm: *mut ncclComm_t,
    nranks: c_int,
    id: UniqueId,
    rank: c_int,
    cfg: *const ncclConfig_t,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    let slot = unsafe { out(comm, "comm") }?;
    *slot = ncclComm_t::NULL;
    // SAFETY: forwarded from the caller.
    let config = unsafe { config::from_ptr(cfg) }?;
    if nranks < 1 {
        return Err(Error::arg(format!("invalid number of ranks {nranks}")));
    }
    if rank < 0 || rank >= nranks {
        return Err(Error::arg(format!(
            "invalid rank {rank}: must be in 0..{nranks}"
        )));
    }
    let backend = runtime::backend()?;
    let device = backend.current_device()?;
    let c = backend.init_rank(nranks as usize, id, rank as usize, device, config)?;
    *slot = handles::register(c.clone());
    init_status(&c)
}

unsafe fn comm_init_rank(
    comm: *mut ncclComm_t,
    nranks: c_int,
    comm_id: ncclUniqueId,
    rank: c_int,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    unsafe { init_rank_common(comm, nranks, to_core_id(&comm_id), rank, std::ptr::null()) }
}

unsafe fn comm_init_rank_config(
    comm: *mut ncclComm_t,
    nranks: c_int,
    comm_id: ncclUniqueId,
    rank: c_int,
    config: *mut ncclConfig_t,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    unsafe { init_rank_common(comm, nranks, to_core_id(&comm_id), rank, config) }
}

unsafe fn comm_init_rank_scalable(
    newcomm: *mut ncclComm_t,
    nranks: c_int,
    myrank: c_int,
    n_id: c_int,
    comm_ids: *mut ncclUniqueId,
    config: *mut ncclConfig_t,
) -> Result<()> {
    if n_id < 1 {
        return Err(Error::arg(format!(
            "invalid nId {n_id}: at least one unique id is needed"
        )));
    }
    // Every rank holds the same ids, and the first one's root lives in a participating process,
    // so a single rendezvous through it reaches everyone; the others only spread the load of
    // NCCL's multi-root bootstrap.
    // SAFETY: non-NULL `comm_ids` points at `n_id >= 1` ids per the caller.
    let first =
        unsafe { comm_ids.as_ref() }.ok_or_else(|| Error::arg("commIds argument is NULL"))?;
    // SAFETY: forwarded from the caller.
    unsafe { init_rank_common(newcomm, nranks, to_core_id(first), myrank, config) }
}

unsafe fn comm_init_all(comm: *mut ncclComm_t, ndev: c_int, devlist: *const c_int) -> Result<()> {
    if comm.is_null() {
        return Err(Error::arg("comm argument is NULL"));
    }
    if ndev < 1 {
        return Err(Error::arg(format!("invalid number of devices {ndev}")));
    }
    let n = ndev as usize;
    // SAFETY: the caller provides room for `ndev` handles.
    let slots = unsafe { std::slice::from_raw_parts_mut(comm, n) };
    slots.fill(ncclComm_t::NULL);
    let devices: Vec<i32> = if devlist.is_null() {
        (0..ndev).collect()
    } else {
        // SAFETY: non-NULL `devlist` holds `ndev` ints per the caller.
        unsafe { std::slice::from_raw_parts(devlist, n) }.to_vec()
    };
    let backend = runtime::backend()?;
    let count = backend.device_count()?;
    for (i, &d) in devices.iter().enumerate() {
        if d < 0 || d as usize >= count {
            return Err(Error::arg(format!(
                "invalid device {d} in devlist: {} backend has {count} devices",
                backend.name()
            )));
        }
        if devices[..i].contains(&d) {
            return Err(Error::usage(format!(
                "duplicate device {d} in devlist: one rank per device"
            )));
        }
    }
    let comms = backend.init_all(&devices)?;
    for (slot, c) in slots.iter_mut().zip(comms) {
        *slot = handles::register(c);
    }
    Ok(())
}

unsafe fn comm_finalize(comm: ncclComm_t) -> Result<()> {
    // NULL is a no-op, as in NCCL.
    if comm.0.is_null() {
        return Ok(());
    }
    handles::lookup(comm, Need::Query)?.comm.finalize()
}

unsafe fn comm_destroy(comm: ncclComm_t) -> Result<()> {
    if comm.0.is_null() {
        return Ok(());
    }
    let h = handles::handle(comm)?;
    if h.forked() {
        h.forget_after_fork(Life::Destroyed);
        return Ok(());
    }
    let mut st = h.lock();
    if st.life != Life::Live {
        return Err(handles::dead_error(st.life));
    }
    let r = match &st.comm {
        Some(c) => c.destroy(),
        None => Ok(()),
    };
    h.bury(&mut st, Life::Destroyed);
    r
}

unsafe fn comm_abort(comm: ncclComm_t) -> Result<()> {
    if comm.0.is_null() {
        return Ok(());
    }
    let h = handles::handle(comm)?;
    if h.forked() {
        h.forget_after_fork(Life::Aborted);
        return Ok(());
    }
    let mut st = h.lock();
    match st.life {
        // Abort is idempotent: watchdogs and error handlers race to call it.
        Life::Aborted => return Ok(()),
        Life::Destroyed => return Err(handles::dead_error(Life::Destroyed)),
        Life::Live => {}
    }
    if let Some(c) = &st.comm {
        c.abort();
    }
    h.bury(&mut st, Life::Aborted);
    Ok(())
}

unsafe fn comm_revoke(comm: ncclComm_t, revoke_flags: c_int) -> Result<()> {
    if revoke_flags != NCCL_REVOKE_DEFAULT {
        return Err(Error::arg(format!(
            "invalid revokeFlags {revoke_flags}: must be NCCL_REVOKE_DEFAULT"
        )));
    }
    // NULL is a no-op, as in NCCL.
    if comm.0.is_null() {
        return Ok(());
    }
    let live = handles::lookup(comm, Need::Query)?;
    // Host-backend operations have completed when their call returned, so nothing is in flight
    // to cancel; revoking only stops new operations.
    live.handle.lock().revoked = true;
    Ok(())
}

unsafe fn comm_split(
    comm: ncclComm_t,
    color: c_int,
    key: c_int,
    newcomm: *mut ncclComm_t,
    config: *mut ncclConfig_t,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    let slot = unsafe { out(newcomm, "newcomm") }?;
    *slot = ncclComm_t::NULL;
    let live = handles::lookup(comm, Need::Ops)?;
    if color < NCCL_SPLIT_NOCOLOR {
        return Err(Error::arg(format!(
            "invalid color {color}: must be >= 0 or NCCL_SPLIT_NOCOLOR"
        )));
    }
    // SAFETY: forwarded from the caller.
    let config = unsafe { config::from_ptr_inherit(config) }?;
    if crate::group::depth() == 0 {
        return match live.comm.split(color, key, config)? {
            Some(c) => {
                *slot = handles::register(c.clone());
                init_status(&c)
            }
            None => Ok(()),
        };
    }
    // Inside a group (one thread splitting the communicators of several devices) the split
    // cannot block: it waits for the other ranks' splits, issued later in the same group. It
    // runs on its own thread, and the outermost ncclGroupEnd waits for it and fills `newcomm`.
    let comm = live.comm.clone();
    let split = std::thread::Builder::new()
        .name("oxccl-split".into())
        .spawn(move || comm.split(color, key, config))
        .map_err(|e| Error::io("spawning the split thread", e))?;
    let slot_addr = newcomm as usize;
    crate::group::after(Box::new(move || {
        let made = split
            .join()
            .map_err(|_| Error::Internal("the split thread panicked".into()))??;
        if let Some(c) = made {
            // SAFETY: NCCL's contract for grouped calls: `newcomm` stays valid until the
            // group ends, and this runs inside that ncclGroupEnd on the calling thread.
            unsafe { *(slot_addr as *mut ncclComm_t) = handles::register(c.clone()) };
            init_status(&c)?;
        }
        Ok(())
    }))
}

unsafe fn comm_shrink(
    comm: ncclComm_t,
    exclude_ranks_list: *mut c_int,
    exclude_ranks_count: c_int,
    newcomm: *mut ncclComm_t,
    config: *mut ncclConfig_t,
    shrink_flags: c_int,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    let slot = unsafe { out(newcomm, "newcomm") }?;
    *slot = ncclComm_t::NULL;
    if shrink_flags != NCCL_SHRINK_DEFAULT && shrink_flags != NCCL_SHRINK_ABORT {
        return Err(Error::arg(format!(
            "invalid shrinkFlags {shrink_flags}: must be NCCL_SHRINK_DEFAULT or NCCL_SHRINK_ABORT"
        )));
    }
    if exclude_ranks_count < 0 {
        return Err(Error::arg(format!(
            "invalid excludeRanksCount {exclude_ranks_count}"
        )));
    }
    let exclude: Vec<u32> = if exclude_ranks_count == 0 {
        Vec::new()
    } else if exclude_ranks_list.is_null() {
        return Err(Error::arg("excludeRanksList argument is NULL"));
    } else {
        // SAFETY: non-NULL list of `exclude_ranks_count` ints per the caller.
        let list =
            unsafe { std::slice::from_raw_parts(exclude_ranks_list, exclude_ranks_count as usize) };
        list.iter()
            .map(|&r| {
                u32::try_from(r)
                    .map_err(|_| Error::arg(format!("excluded rank {r} is out of range")))
            })
            .collect::<Result<_>>()?
    };
    // Shrink is how callers recover from a failed peer: allowed on revoked communicators, and
    // NCCL_SHRINK_ABORT has nothing to cancel when operations complete within their call.
    let live = handles::lookup(comm, Need::Query)?;
    // SAFETY: forwarded from the caller.
    let config = unsafe { config::from_ptr_inherit(config) }?;
    let c = live.comm.shrink(&exclude, config)?;
    *slot = handles::register(c.clone());
    init_status(&c)
}

unsafe fn comm_get_async_error(comm: ncclComm_t, async_error: *mut ncclResult_t) -> Result<()> {
    // SAFETY: forwarded from the caller.
    let slot = unsafe { out(async_error, "asyncError") }?;
    let live = handles::lookup(comm, Need::Query)?;
    if let Some(why) = live.handle.lock().poisoned.clone() {
        *slot = ncclResult_t::INTERNAL_ERROR;
        last_error::set(&format!("communicator is unusable after {why}"));
        return Ok(());
    }
    *slot = match live.comm.status() {
        Ok(()) => ncclResult_t::SUCCESS,
        Err(Error::InProgress) => ncclResult_t::IN_PROGRESS,
        // An asynchronous failure: keep its sentence for ncclGetLastError, as NCCL does.
        Err(e) => crate::boundary::report("ncclCommGetAsyncError", &e),
    };
    Ok(())
}

/// NCCL answers queries on a communicator whose non-blocking init has not completed with
/// `ncclInvalidArgument`.
fn ready(comm: &AnyComm) -> Result<&AnyComm> {
    match comm.status() {
        Err(Error::InProgress) => Err(Error::arg(
            "communicator is still initializing; poll ncclCommGetAsyncError until it returns ncclSuccess",
        )),
        _ => Ok(comm),
    }
}

unsafe fn comm_count(comm: ncclComm_t, count: *mut c_int) -> Result<()> {
    // SAFETY: forwarded from the caller.
    let slot = unsafe { out(count, "count") }?;
    *slot = handles::query(comm, |c| Ok(ready(c)?.nranks() as c_int))?;
    Ok(())
}

unsafe fn comm_cu_device(comm: ncclComm_t, device: *mut c_int) -> Result<()> {
    // SAFETY: forwarded from the caller.
    let slot = unsafe { out(device, "device") }?;
    *slot = handles::query(comm, |c| Ok(ready(c)?.device()))?;
    Ok(())
}

unsafe fn comm_user_rank(comm: ncclComm_t, rank: *mut c_int) -> Result<()> {
    // SAFETY: forwarded from the caller.
    let slot = unsafe { out(rank, "rank") }?;
    *slot = handles::query(comm, |c| Ok(ready(c)?.rank() as c_int))?;
    Ok(())
}

unsafe fn get_error_string(result: ncclResult_t) -> Result<*const c_char> {
    Ok(result::error_string(result).as_ptr())
}

unsafe fn get_last_error(_comm: ncclComm_t) -> Result<*const c_char> {
    Ok(last_error::get())
}

unsafe fn reset_debug_init() -> Result<()> {
    // The log subscriber is installed once per process from NCCL_DEBUG; there is nothing to reset.
    Ok(())
}

nccl_api! {
    /// `ncclGetVersion`: the NCCL (or RCCL) API level, 22809 / 23004.
    fn ncclGetVersion, pncclGetVersion(version: *mut c_int) => get_version;
}
nccl_api! {
    /// `ncclGetUniqueId`: a fresh 128-byte rendezvous id (its root listens in this process).
    fn ncclGetUniqueId, pncclGetUniqueId(unique_id: *mut ncclUniqueId) => get_unique_id;
}
nccl_api! {
    /// `ncclCommInitRank`.
    fn ncclCommInitRank, pncclCommInitRank(
        comm: *mut ncclComm_t, nranks: c_int, comm_id: ncclUniqueId, rank: c_int
    ) => comm_init_rank;
}
nccl_api! {
    /// `ncclCommInitRankConfig`.
    fn ncclCommInitRankConfig, pncclCommInitRankConfig(
        comm: *mut ncclComm_t, nranks: c_int, comm_id: ncclUniqueId, rank: c_int,
        config: *mut ncclConfig_t
    ) => comm_init_rank_config;
}
nccl_api! {
    /// `ncclCommInitRankScalable`.
    fn ncclCommInitRankScalable, pncclCommInitRankScalable(
        newcomm: *mut ncclComm_t, nranks: c_int, myrank: c_int, n_id: c_int,
        comm_ids: *mut ncclUniqueId, config: *mut ncclConfig_t
    ) => comm_init_rank_scalable;
}
nccl_api! {
    /// `ncclCommInitAll`.
    fn ncclCommInitAll, pncclCommInitAll(
        comm: *mut ncclComm_t, ndev: c_int, devlist: *const c_int
    ) => comm_init_all;
}
nccl_api! {
    /// `ncclCommFinalize`.
    fn ncclCommFinalize, pncclCommFinalize(comm: ncclComm_t) => comm_finalize;
}
nccl_api! {
    /// `ncclCommDestroy` (NULL is a no-op).
    fn ncclCommDestroy, pncclCommDestroy(comm: ncclComm_t) => comm_destroy;
}
nccl_api! {
    /// `ncclCommAbort` (NULL is a no-op; idempotent; allowed inside a group).
    fn ncclCommAbort, pncclCommAbort(comm: ncclComm_t) => comm_abort;
}
nccl_api! {
    /// `ncclCommRevoke`.
    fn ncclCommRevoke, pncclCommRevoke(comm: ncclComm_t, revoke_flags: c_int) => comm_revoke;
}
nccl_api! {
    /// `ncclCommSplit`.
    fn ncclCommSplit, pncclCommSplit(
        comm: ncclComm_t, color: c_int, key: c_int, newcomm: *mut ncclComm_t,
        config: *mut ncclConfig_t
    ) => comm_split;
}
nccl_api! {
    /// `ncclCommShrink`.
    fn ncclCommShrink, pncclCommShrink(
        comm: ncclComm_t, exclude_ranks_list: *mut c_int, exclude_ranks_count: c_int,
        newcomm: *mut ncclComm_t, config: *mut ncclConfig_t, shrink_flags: c_int
    ) => comm_shrink;
}
nccl_api! {
    /// `ncclCommGetAsyncError`.
    fn ncclCommGetAsyncError, pncclCommGetAsyncError(
        comm: ncclComm_t, async_error: *mut ncclResult_t
    ) => comm_get_async_error;
}
nccl_api! {
    /// `ncclCommCount`.
    fn ncclCommCount, pncclCommCount(comm: ncclComm_t, count: *mut c_int) => comm_count;
}
nccl_api! {
    /// `ncclCommCuDevice`.
    fn ncclCommCuDevice, pncclCommCuDevice(comm: ncclComm_t, device: *mut c_int) => comm_cu_device;
}
nccl_api! {
    /// `ncclCommUserRank`.
    fn ncclCommUserRank, pncclCommUserRank(comm: ncclComm_t, rank: *mut c_int) => comm_user_rank;
}
nccl_api! {
    /// `ncclGetErrorString`: NCCL's text for a result code.
    fn ncclGetErrorString, pncclGetErrorString(result: ncclResult_t) -> *const c_char
        [c"unknown result code".as_ptr()] => get_error_string;
}
nccl_api! {
    /// `ncclGetLastError`: the last error's sentence (`comm` is unused and may be NULL).
    fn ncclGetLastError, pncclGetLastError(comm: ncclComm_t) -> *const c_char
        [last_error::get()] => get_last_error;
}
nccl_api! {
    /// `ncclResetDebugInit` (deprecated; a no-op).
    fn ncclResetDebugInit, pncclResetDebugInit() -> () [()] => reset_debug_init;
}

/// `ncclResetDebugInitInternal`: exported by NCCL without a profiling twin; a no-op here.
#[unsafe(no_mangle)]
pub extern "C" fn ncclResetDebugInitInternal() {}
