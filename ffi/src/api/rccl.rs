//! RCCL-only exports: old spellings, AllReduce with bias, MSCCL entry points, one-sided stubs.

use super::{dtype, out};
use crate::abi::{
    Stream, mscclAlgoHandle_t, ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclWaitSignalDesc_t,
    ncclWindow_t,
};
use crate::boundary::nccl_api;
use crate::handles::{self, Need};
use oxccl::dispatch::CommOps;
use oxccl_core::datatype::{RedOp, ReduceOp};
use oxccl_core::plan::{CollKind, WorkDesc, bias};
use oxccl_core::{Error, Result};
use std::ffi::{c_char, c_int, c_uint, c_void};

unsafe fn all_to_all(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    comm: ncclComm_t,
    stream: Stream,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    unsafe { super::coll::all_to_all(sendbuff, recvbuff, count, datatype, comm, stream) }
}

#[allow(clippy::too_many_arguments)]
unsafe fn all_to_allv(
    sendbuff: *const c_void,
    sendcounts: *const usize,
    sdispls: *const usize,
    recvbuff: *mut c_void,
    recvcounts: *const usize,
    rdispls: *const usize,
    datatype: ncclDataType_t,
    comm: ncclComm_t,
    stream: Stream,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    unsafe {
        super::coll::all_to_allv(
            sendbuff, sendcounts, sdispls, recvbuff, recvcounts, rdispls, datatype, comm, stream,
        )
    }
}

/// `ncclAllReduceWithBias`: the AllReduce, then, on the same stream, a plan that combines `acc`
/// into each element (Sum, Avg and PreMulSum add it once; Prod, Max and Min combine with it).
#[allow(clippy::too_many_arguments)]
unsafe fn all_reduce_with_bias(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    comm: ncclComm_t,
    stream: Stream,
    acc: *const c_void,
) -> Result<()> {
    let call = super::coll::Call {
        kind: CollKind::AllReduce,
        send: sendbuff,
        recv: recvbuff,
        count,
        dtype: datatype,
        op: Some(op),
        root: None,
        layout: None,
    };
    // SAFETY: forwarded from the caller.
    unsafe { super::coll::collective(comm, call, stream) }?;
    if acc.is_null() || count == 0 {
        return Ok(());
    }
    let live = handles::lookup(comm, Need::Ops)?;
    let dt = dtype(datatype)?;
    let combine = match live.comm.resolve_op(op.0, dt)? {
        RedOp::Prod => ReduceOp::Prod,
        RedOp::Max => ReduceOp::Max,
        RedOp::Min => ReduceOp::Min,
        _ => ReduceOp::Sum,
    };
    let rank = live.comm.rank() as u32;
    let count = count as u64;
    let build: Box<dyn FnOnce(u64) -> Result<WorkDesc> + Send> =
        Box::new(move |seq| Ok(bias::combine_into_output(rank, count, dt, combine, seq)));
    // SAFETY: the caller keeps `acc` and `recvbuff` valid for `count` elements until the
    // operation has run; the plan reads `acc` as its send buffer and updates `recvbuff`.
    unsafe {
        live.comm
            .run_plan(build, acc as u64, recvbuff as u64, stream.0 as usize)
    }
}

unsafe fn msccl_load_algo(
    path: *const c_char,
    handle: *mut mscclAlgoHandle_t,
    _rank: c_int,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    let slot = unsafe { out(handle, "mscclAlgoHandle") }?;
    // SAFETY: forwarded from the caller.
    *slot = unsafe { crate::msccl::capi::load(path) }?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
unsafe fn msccl_run_algo(
    send_buff: *const c_void,
    _send_counts: *const usize,
    _s_dis_pls: *const usize,
    recv_buff: *mut c_void,
    _recv_counts: *const usize,
    _r_dis_pls: *const usize,
    count: usize,
    data_type: ncclDataType_t,
    _root: c_int,
    _peer: c_int,
    op: ncclRedOp_t,
    handle: mscclAlgoHandle_t,
    comm: ncclComm_t,
    stream: Stream,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    unsafe {
        crate::msccl::capi::run_c(
            send_buff, recv_buff, count, data_type, op, handle, comm, stream,
        )
    }
}

unsafe fn msccl_unload_algo(handle: mscclAlgoHandle_t) -> Result<()> {
    crate::msccl::capi::unload(handle)
}

fn one_sided(what: &str) -> Error {
    Error::usage(format!(
        "{what} is not supported by oxccl yet: one-sided window operations need device communicators"
    ))
}

#[allow(clippy::too_many_arguments)]
unsafe fn put_signal(
    _localbuff: *const c_void,
    _count: usize,
    _datatype: ncclDataType_t,
    _peer: c_int,
    _peer_win: ncclWindow_t,
    _peer_win_offset: usize,
    _sig_idx: c_int,
    _ctx: c_int,
    _flags: c_uint,
    comm: ncclComm_t,
    _stream: Stream,
) -> Result<()> {
    handles::lookup(comm, Need::Ops)?;
    Err(one_sided("ncclPutSignal"))
}

unsafe fn signal(
    _peer: c_int,
    _sig_idx: c_int,
    _ctx: c_int,
    _flags: c_uint,
    comm: ncclComm_t,
    _stream: Stream,
) -> Result<()> {
    handles::lookup(comm, Need::Ops)?;
    Err(one_sided("ncclSignal"))
}

unsafe fn wait_signal(
    _n_desc: c_int,
    _signal_descs: *mut ncclWaitSignalDesc_t,
    comm: ncclComm_t,
    _stream: Stream,
) -> Result<()> {
    handles::lookup(comm, Need::Ops)?;
    Err(one_sided("ncclWaitSignal"))
}

nccl_api! {
    /// `ncclAllToAll`: RCCL's old spelling of `ncclAlltoAll`.
    fn ncclAllToAll, pncclAllToAll(
        sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t,
        comm: ncclComm_t, stream: Stream
    ) => all_to_all;
}
nccl_api! {
    /// `ncclAllToAllv`: RCCL's old spelling of `ncclAlltoAllv`.
    fn ncclAllToAllv, pncclAllToAllv(
        sendbuff: *const c_void, sendcounts: *const usize, sdispls: *const usize,
        recvbuff: *mut c_void, recvcounts: *const usize, rdispls: *const usize,
        datatype: ncclDataType_t, comm: ncclComm_t, stream: Stream
    ) => all_to_allv;
}
nccl_api! {
    /// `ncclAllReduceWithBias`: AllReduce, then each element combined with `acc`'s.
    fn ncclAllReduceWithBias, pncclAllReduceWithBias(
        sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t,
        op: ncclRedOp_t, comm: ncclComm_t, stream: Stream, acc: *const c_void
    ) => all_reduce_with_bias;
}
nccl_api! {
    /// `mscclLoadAlgo`: parses and checks an MSCCL algorithm file and returns a handle.
    fn mscclLoadAlgo, pmscclLoadAlgo(
        msccl_algo_file_path: *const c_char, msccl_algo_handle: *mut mscclAlgoHandle_t, rank: c_int
    ) => msccl_load_algo;
}
nccl_api! {
    /// `mscclRunAlgo`: runs a loaded algorithm through our plan format (docs/msccl.md).
    fn mscclRunAlgo, pmscclRunAlgo(
        send_buff: *const c_void, send_counts: *const usize, s_dis_pls: *const usize,
        recv_buff: *mut c_void, recv_counts: *const usize, r_dis_pls: *const usize,
        count: usize, data_type: ncclDataType_t, root: c_int, peer: c_int, op: ncclRedOp_t,
        msccl_algo_handle: mscclAlgoHandle_t, comm: ncclComm_t, stream: Stream
    ) => msccl_run_algo;
}
nccl_api! {
    /// `mscclUnloadAlgo`.
    fn mscclUnloadAlgo, pmscclUnloadAlgo(msccl_algo_handle: mscclAlgoHandle_t) => msccl_unload_algo;
}
nccl_api! {
    /// `ncclPutSignal`: refused with `ncclInvalidUsage`.
    fn ncclPutSignal, pncclPutSignal(
        localbuff: *const c_void, count: usize, datatype: ncclDataType_t, peer: c_int,
        peer_win: ncclWindow_t, peer_win_offset: usize, sig_idx: c_int, ctx: c_int,
        flags: c_uint, comm: ncclComm_t, stream: Stream
    ) => put_signal;
}
nccl_api! {
    /// `ncclSignal`: refused with `ncclInvalidUsage`.
    fn ncclSignal, pncclSignal(
        peer: c_int, sig_idx: c_int, ctx: c_int, flags: c_uint, comm: ncclComm_t, stream: Stream
    ) => signal;
}
nccl_api! {
    /// `ncclWaitSignal`: refused with `ncclInvalidUsage`.
    fn ncclWaitSignal, pncclWaitSignal(
        n_desc: c_int, signal_descs: *mut ncclWaitSignalDesc_t, comm: ncclComm_t, stream: Stream
    ) => wait_signal;
}
