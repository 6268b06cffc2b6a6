//! The C side of `mscclLoadAlgo` / `mscclRunAlgo` / `mscclUnloadAlgo` (exported by `api::rccl`).

use super::{handle_algo, load_handle, plan, unload_handle};
use crate::abi::{Stream, ncclComm_t, ncclDataType_t, ncclRedOp_t};
use crate::group;
use crate::handles::{self, Need};
use oxccl::dispatch::CommOps;
use oxccl_core::datatype::{DataType, RedOp};
use oxccl_core::{Error, Result};
use std::ffi::{CStr, c_char, c_void};

/// Parses the file at `path` and returns its handle.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
pub(crate) unsafe fn load(path: *const c_char) -> Result<i32> {
    if path.is_null() {
        return Err(Error::arg("mscclAlgoFilePath argument is NULL"));
    }
    // SAFETY: non-NULL and NUL-terminated per the caller.
    let path = unsafe { CStr::from_ptr(path) }.to_string_lossy();
    load_handle(&path)
}

/// Forgets a handle.
pub(crate) fn unload(handle: i32) -> Result<()> {
    unload_handle(handle)
}

/// `mscclRunAlgo` for the collectives MSCCL files describe (`sendCounts`/`rDisPls`, `root` and
/// `peer` are not used by them).
///
/// # Safety
/// The buffers are valid for the sizes `MscclAlgo::sizes` gives until the operation has run;
/// `stream` is NULL or a live stream.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn run_c(
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    handle: i32,
    comm: ncclComm_t,
    stream: Stream,
) -> Result<()> {
    let live = handles::lookup(comm, Need::Ops)?;
    let dt = DataType::try_from(datatype.0)?;
    let algo = handle_algo(handle)?;
    if group::depth() > 0 {
        return Err(Error::usage(
            "mscclRunAlgo inside ncclGroupStart/ncclGroupEnd is not supported by oxccl: call it \
             outside a group",
        ));
    }
    let op = if algo.reduces() {
        live.comm.resolve_op(op.0, dt)?
    } else {
        RedOp::Sum
    };
    if count > 0 && send.is_null() {
        return Err(Error::arg("send buffer is NULL"));
    }
    if count > 0 && recv.is_null() {
        return Err(Error::arg("receive buffer is NULL"));
    }
    let at = (live.comm.rank() as u32, live.comm.nranks());
    let (send, recv) = (send as u64, recv as u64);
    match plan(&algo, at, send, recv, count as u64, dt, op)? {
        // SAFETY: forwarded from the caller.
        Some(build) => unsafe { live.comm.run_plan(build, send, recv, stream.0 as usize) },
        None => Ok(()),
    }
}
