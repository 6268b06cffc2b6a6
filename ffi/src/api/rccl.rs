//! RCCL-only exports: old spellings, AllReduce with bias, MSCCL entry points, one-sided stubs.

use super::{dtype, out};
use crate::abi::{
    Stream, mscclAlgoHandle_t, ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclWaitSignalDesc_t,
    ncclWindow_t,
};
use crate::boundary::nccl_api;
use crate::group;
use crate::handles::{self, Need};
use oxccl::dispatch::CommOps;
use oxccl_core::datatype::{DataType, RedOp};
use oxccl_core::plan::CollKind;
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

/// `dst[i] = op(dst[i], acc[i])` for `count` elements of `T`.
///
/// # Safety
/// `dst` and `acc` are valid for `count` elements of `T`, possibly unaligned.
unsafe fn combine<T: Copy>(dst: *mut T, acc: *const T, count: usize, f: impl Fn(T, T) -> T) {
    for i in 0..count {
        // SAFETY: both ranges hold `count` elements per the caller.
        unsafe {
            let v = f(dst.add(i).read_unaligned(), acc.add(i).read_unaligned());
            dst.add(i).write_unaligned(v);
        }
    }
}

/// Applies the bias on host memory: Sum, Avg and PreMulSum add it; the others combine with it.
///
/// # Safety
/// `recv` and `acc` are host memory valid for `count` elements of `dt`.
unsafe fn apply_bias(recv: usize, acc: usize, count: usize, dt: DataType, op: RedOp) -> Result<()> {
    macro_rules! num {
        ($t:ty) => {{
            let f = |a: $t, b: $t| -> $t {
                match op {
                    RedOp::Prod => a * b,
                    RedOp::Max => {
                        if b > a {
                            b
                        } else {
                            a
                        }
                    }
                    RedOp::Min => {
                        if b < a {
                            b
                        } else {
                            a
                        }
                    }
                    _ => a + b,
                }
            };
            // SAFETY: forwarded from the caller.
            unsafe { combine(recv as *mut $t, acc as *const $t, count, f) }
        }};
    }
    macro_rules! int {
        ($t:ty) => {{
            let f = |a: $t, b: $t| -> $t {
                match op {
                    RedOp::Prod => a.wrapping_mul(b),
                    RedOp::Max => a.max(b),
                    RedOp::Min => a.min(b),
                    _ => a.wrapping_add(b),
                }
            };
            // SAFETY: forwarded from the caller.
            unsafe { combine(recv as *mut $t, acc as *const $t, count, f) }
        }};
    }
    match dt {
        DataType::Int8 => int!(i8),
        DataType::Uint8 => int!(u8),
        DataType::Int32 => int!(i32),
        DataType::Uint32 => int!(u32),
        DataType::Int64 => int!(i64),
        DataType::Uint64 => int!(u64),
        DataType::Float16 => num!(half::f16),
        DataType::Bfloat16 => num!(half::bf16),
        DataType::Float32 => num!(f32),
        DataType::Float64 => num!(f64),
        DataType::Float8E4M3 | DataType::Float8E5M2 => {
            return Err(Error::usage(format!(
                "ncclAllReduceWithBias does not support {} yet",
                dt.name()
            )));
        }
    }
    Ok(())
}

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
    let (dt, red, synchronous) = {
        let live = handles::lookup(comm, Need::Ops)?;
        let dt = dtype(datatype)?;
        (dt, live.comm.resolve_op(op.0, dt)?, live.comm.synchronous())
    };
    if !acc.is_null() && !synchronous {
        // DEVICE BACKENDS: fuse the bias into the reduction's last step.
        return Err(Error::usage(
            "ncclAllReduceWithBias with a bias needs the host backend in this build",
        ));
    }
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
    let (recv, acc) = (recvbuff as usize, acc as usize);
    // SAFETY: the host backend has completed the AllReduce when this runs (after the call, or
    // after the group's end), and the caller keeps `recvbuff`/`acc` valid until then.
    group::after(Box::new(move || unsafe {
        apply_bias(recv, acc, count, dt, red)
    }))
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
