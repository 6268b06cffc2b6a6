//! Collectives, send/receive, groups and reduction operators.

use super::{dtype, out, rank_arg};
use crate::abi::{
    NCCL_SIM_INFO_MAGIC, Stream, ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclScalarResidence_t,
    ncclSimInfo_t,
};
use crate::boundary::nccl_api;
use crate::group::{self, Op};
use crate::handles::{self, Live, Need};
use oxccl::dispatch::CommOps;
use oxccl_core::datatype::{DataType, RedOp, Scalar, ScalarSource};
use oxccl_core::plan::{AllToAllvLayout, CollKind, P2pDir};
use oxccl_core::{CollArgs, Error, Result};
use std::ffi::{c_int, c_void};

/// One collective call as the C API passed it.
pub(crate) struct Call {
    /// The operation.
    pub kind: CollKind,
    /// Send buffer.
    pub send: *const c_void,
    /// Receive buffer.
    pub recv: *mut c_void,
    /// The API's count argument.
    pub count: usize,
    /// Element type.
    pub dtype: ncclDataType_t,
    /// Reduction operator, for reducing operations.
    pub op: Option<ncclRedOp_t>,
    /// Root, for rooted operations.
    pub root: Option<c_int>,
    /// AlltoAllv counts and displacements.
    pub layout: Option<AllToAllvLayout>,
}

impl Call {
    /// A call without operator, root or AlltoAllv layout.
    pub(crate) fn new(
        kind: CollKind,
        send: *const c_void,
        recv: *mut c_void,
        count: usize,
        dtype: ncclDataType_t,
    ) -> Call {
        Call {
            kind,
            send,
            recv,
            count,
            dtype,
            op: None,
            root: None,
            layout: None,
        }
    }
    /// With a reduction operator.
    pub(crate) fn with_op(mut self, op: ncclRedOp_t) -> Call {
        self.op = Some(op);
        self
    }
    /// With a root rank.
    pub(crate) fn with_root(mut self, root: c_int) -> Call {
        self.root = Some(root);
        self
    }
}

/// Whether this rank reads the send buffer and writes the receive buffer (when count > 0).
fn buffers_used(kind: CollKind, me: u32, root: u32) -> (bool, bool) {
    let is_root = me == root;
    match kind {
        CollKind::Broadcast | CollKind::Scatter => (is_root, true),
        CollKind::Reduce | CollKind::Gather => (true, is_root),
        _ => (true, true),
    }
}

/// Checks a collective at the call (as NCCL does) and runs or records it.
///
/// # Safety
/// The buffers are valid for the operation until it has run (inside a group: until
/// `ncclGroupEnd` returned); `stream` is NULL or a live stream.
pub(crate) unsafe fn collective(comm: ncclComm_t, call: Call, stream: Stream) -> Result<()> {
    let r = (|| {
        let live = handles::lookup(comm, Need::Ops)?;
        let dt = dtype(call.dtype)?;
        let op = match call.op {
            Some(o) => live.comm.resolve_op(o.0, dt)?,
            None => RedOp::Sum,
        };
        let root = match call.root {
            Some(r) => rank_arg(r, "root", live.nranks())?,
            None => 0,
        };
        let (send, recv) = match &call.layout {
            Some(l) => (
                l.send_counts.iter().any(|&c| c > 0),
                l.recv_counts.iter().any(|&c| c > 0),
            ),
            None if call.count == 0 => (false, false),
            None => buffers_used(call.kind, live.comm.rank() as u32, root),
        };
        if send && call.send.is_null() {
            return Err(Error::arg("send buffer is NULL"));
        }
        if recv && call.recv.is_null() {
            return Err(Error::arg("receive buffer is NULL"));
        }
        if call.layout.is_none() && call.count == 0 {
            // As NCCL: checked, then nothing to queue (every rank passes the same count, so
            // every rank skips it alike).
            return Ok(());
        }
        let args = CollArgs {
            kind: call.kind,
            send: call.send as u64,
            recv: call.recv as u64,
            count: call.count as u64,
            dtype: dt,
            op,
            root,
            layout: call.layout,
        };
        // SAFETY: forwarded from the caller.
        unsafe { group::enqueue(&live.comm, Op::Coll(args), stream.0 as usize) }
    })();
    if let Err(e) = &r {
        group::record_error(e);
    }
    r
}

unsafe fn all_reduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    comm: ncclComm_t,
    stream: Stream,
) -> Result<()> {
    let call = Call::new(CollKind::AllReduce, sendbuff, recvbuff, count, datatype).with_op(op);
    // SAFETY: forwarded from the caller.
    unsafe { collective(comm, call, stream) }
}

unsafe fn broadcast(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: Stream,
) -> Result<()> {
    let call = Call::new(CollKind::Broadcast, sendbuff, recvbuff, count, datatype).with_root(root);
    // SAFETY: forwarded from the caller.
    unsafe { collective(comm, call, stream) }
}

unsafe fn bcast(
    buff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: Stream,
) -> Result<()> {
    // SAFETY: forwarded from the caller; in place.
    unsafe { broadcast(buff, buff, count, datatype, root, comm, stream) }
}

#[allow(
    clippy::too_many_arguments,
    reason = "mirrors ncclReduce's C signature"
)]
unsafe fn reduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    root: c_int,
    comm: ncclComm_t,
    stream: Stream,
) -> Result<()> {
    let call = Call::new(CollKind::Reduce, sendbuff, recvbuff, count, datatype)
        .with_op(op)
        .with_root(root);
    // SAFETY: forwarded from the caller.
    unsafe { collective(comm, call, stream) }
}

unsafe fn all_gather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: ncclDataType_t,
    comm: ncclComm_t,
    stream: Stream,
) -> Result<()> {
    let call = Call::new(CollKind::AllGather, sendbuff, recvbuff, sendcount, datatype);
    // SAFETY: forwarded from the caller.
    unsafe { collective(comm, call, stream) }
}

unsafe fn reduce_scatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    recvcount: usize,
    datatype: ncclDataType_t,
    op: ncclRedOp_t,
    comm: ncclComm_t,
    stream: Stream,
) -> Result<()> {
    let call = Call::new(
        CollKind::ReduceScatter,
        sendbuff,
        recvbuff,
        recvcount,
        datatype,
    )
    .with_op(op);
    // SAFETY: forwarded from the caller.
    unsafe { collective(comm, call, stream) }
}

/// `ncclAlltoAll` (and RCCL's `ncclAllToAll`).
pub(crate) unsafe fn all_to_all(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    comm: ncclComm_t,
    stream: Stream,
) -> Result<()> {
    let call = Call::new(CollKind::AllToAll, sendbuff, recvbuff, count, datatype);
    // SAFETY: forwarded from the caller.
    unsafe { collective(comm, call, stream) }
}

unsafe fn gather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: Stream,
) -> Result<()> {
    let call = Call::new(CollKind::Gather, sendbuff, recvbuff, count, datatype).with_root(root);
    // SAFETY: forwarded from the caller.
    unsafe { collective(comm, call, stream) }
}

unsafe fn scatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    root: c_int,
    comm: ncclComm_t,
    stream: Stream,
) -> Result<()> {
    let call = Call::new(CollKind::Scatter, sendbuff, recvbuff, count, datatype).with_root(root);
    // SAFETY: forwarded from the caller.
    unsafe { collective(comm, call, stream) }
}

/// `ncclAlltoAllv` (NCCL-build extension; RCCL's `ncclAlltoAllv`/`ncclAllToAllv`).
#[allow(
    clippy::too_many_arguments,
    reason = "mirrors ncclAlltoAllv's C signature"
)]
pub(crate) unsafe fn all_to_allv(
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
    let r = (|| {
        let n = handles::lookup(comm, Need::Ops)?.nranks();
        let read = |p: *const usize, what: &str| -> Result<Vec<u64>> {
            if p.is_null() {
                return Err(Error::arg(format!("{what} argument is NULL")));
            }
            // SAFETY: the caller provides `nranks` entries in each array.
            let s = unsafe { std::slice::from_raw_parts(p, n) };
            Ok(s.iter().map(|&v| v as u64).collect())
        };
        Ok(AllToAllvLayout {
            send_counts: read(sendcounts, "sendcounts")?,
            send_displs: read(sdispls, "sdispls")?,
            recv_counts: read(recvcounts, "recvcounts")?,
            recv_displs: read(rdispls, "rdispls")?,
        })
    })();
    let layout = r.inspect_err(group::record_error)?;
    let call = Call {
        kind: CollKind::AllToAllv,
        send: sendbuff,
        recv: recvbuff,
        count: 0,
        dtype: datatype,
        op: None,
        root: None,
        layout: Some(layout),
    };
    // SAFETY: forwarded from the caller.
    unsafe { collective(comm, call, stream) }
}

/// Checks and runs or records one send or receive.
///
/// # Safety
/// `buf` is valid for `count` elements until the operation has run; `stream` as for collectives.
unsafe fn p2p(
    dir: P2pDir,
    buf: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    comm: ncclComm_t,
    stream: Stream,
) -> Result<()> {
    let r = (|| {
        let live: Live = handles::lookup(comm, Need::Ops)?;
        let dt = dtype(datatype)?;
        let peer = rank_arg(peer, "peer", live.nranks())?;
        if count > 0 && buf.is_null() {
            return Err(Error::arg(match dir {
                P2pDir::Send => "send buffer is NULL",
                P2pDir::Recv => "receive buffer is NULL",
            }));
        }
        let op = Op::P2p {
            dir,
            buf: buf as u64,
            count: count as u64,
            dtype: dt,
            peer,
        };
        // SAFETY: forwarded from the caller.
        unsafe { group::enqueue(&live.comm, op, stream.0 as usize) }
    })();
    if let Err(e) = &r {
        group::record_error(e);
    }
    r
}

unsafe fn send(
    sendbuff: *const c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    comm: ncclComm_t,
    stream: Stream,
) -> Result<()> {
    // SAFETY: forwarded from the caller; a send only reads its buffer.
    unsafe {
        p2p(
            P2pDir::Send,
            sendbuff as *mut c_void,
            count,
            datatype,
            peer,
            comm,
            stream,
        )
    }
}

unsafe fn recv(
    recvbuff: *mut c_void,
    count: usize,
    datatype: ncclDataType_t,
    peer: c_int,
    comm: ncclComm_t,
    stream: Stream,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    unsafe { p2p(P2pDir::Recv, recvbuff, count, datatype, peer, comm, stream) }
}

unsafe fn group_start() -> Result<()> {
    group::start()
}

unsafe fn group_end() -> Result<()> {
    group::end()
}

unsafe fn group_simulate_end(sim_info: *mut ncclSimInfo_t) -> Result<()> {
    // SAFETY: forwarded from the caller.
    let info = unsafe { out(sim_info, "simInfo") }?;
    if info.magic != NCCL_SIM_INFO_MAGIC {
        return Err(Error::arg(format!(
            "simInfo magic {:#x} is not {NCCL_SIM_INFO_MAGIC:#x}: initialize it with NCCL_SIM_INFO_INITIALIZER",
            info.magic
        )));
    }
    if info.size < size_of::<ncclSimInfo_t>() {
        return Err(Error::arg(format!(
            "simInfo size {} is too small",
            info.size
        )));
    }
    let estimate = group::simulate_end()?;
    info.estimatedTime = estimate;
    Ok(())
}

unsafe fn red_op_create_pre_mul_sum(
    op: *mut ncclRedOp_t,
    scalar: *mut c_void,
    datatype: ncclDataType_t,
    residence: ncclScalarResidence_t,
    comm: ncclComm_t,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    let slot = unsafe { out(op, "op") }?;
    let live = handles::lookup(comm, Need::Ops)?;
    let dt: DataType = dtype(datatype)?;
    if scalar.is_null() {
        return Err(Error::arg("scalar argument is NULL"));
    }
    let source = match residence.0 {
        0 => ScalarSource::Device(scalar as u64),
        1 => {
            // SAFETY: a host-immediate scalar is one readable element of `datatype`.
            let bytes = unsafe { std::slice::from_raw_parts(scalar as *const u8, dt.size()) };
            ScalarSource::Immediate(Scalar::from_bytes(bytes))
        }
        r => {
            return Err(Error::arg(format!(
                "invalid scalar residence {r}: must be ncclScalarDevice or ncclScalarHostImmediate"
            )));
        }
    };
    *slot = ncclRedOp_t(live.comm.create_premul_sum(dt, source)?);
    Ok(())
}

unsafe fn red_op_destroy(op: ncclRedOp_t, comm: ncclComm_t) -> Result<()> {
    handles::lookup(comm, Need::Query)?
        .comm
        .destroy_red_op(op.0)
}

nccl_api! {
    /// `ncclAllReduce`.
    fn ncclAllReduce, pncclAllReduce(
        sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t,
        op: ncclRedOp_t, comm: ncclComm_t, stream: Stream
    ) => all_reduce;
}
nccl_api! {
    /// `ncclBroadcast`.
    fn ncclBroadcast, pncclBroadcast(
        sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t,
        root: c_int, comm: ncclComm_t, stream: Stream
    ) => broadcast;
}
nccl_api! {
    /// `ncclBcast` (in-place broadcast).
    fn ncclBcast, pncclBcast(
        buff: *mut c_void, count: usize, datatype: ncclDataType_t, root: c_int,
        comm: ncclComm_t, stream: Stream
    ) => bcast;
}
nccl_api! {
    /// `ncclReduce`.
    fn ncclReduce, pncclReduce(
        sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t,
        op: ncclRedOp_t, root: c_int, comm: ncclComm_t, stream: Stream
    ) => reduce;
}
nccl_api! {
    /// `ncclAllGather`.
    fn ncclAllGather, pncclAllGather(
        sendbuff: *const c_void, recvbuff: *mut c_void, sendcount: usize,
        datatype: ncclDataType_t, comm: ncclComm_t, stream: Stream
    ) => all_gather;
}
nccl_api! {
    /// `ncclReduceScatter`.
    fn ncclReduceScatter, pncclReduceScatter(
        sendbuff: *const c_void, recvbuff: *mut c_void, recvcount: usize,
        datatype: ncclDataType_t, op: ncclRedOp_t, comm: ncclComm_t, stream: Stream
    ) => reduce_scatter;
}
nccl_api! {
    /// `ncclAlltoAll`.
    fn ncclAlltoAll, pncclAlltoAll(
        sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t,
        comm: ncclComm_t, stream: Stream
    ) => all_to_all;
}
nccl_api! {
    /// `ncclGather`.
    fn ncclGather, pncclGather(
        sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t,
        root: c_int, comm: ncclComm_t, stream: Stream
    ) => gather;
}
nccl_api! {
    /// `ncclScatter`.
    fn ncclScatter, pncclScatter(
        sendbuff: *const c_void, recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t,
        root: c_int, comm: ncclComm_t, stream: Stream
    ) => scatter;
}
nccl_api! {
    /// `ncclAlltoAllv`: per-peer counts and displacements in elements (RCCL's signature).
    fn ncclAlltoAllv, pncclAlltoAllv(
        sendbuff: *const c_void, sendcounts: *const usize, sdispls: *const usize,
        recvbuff: *mut c_void, recvcounts: *const usize, rdispls: *const usize,
        datatype: ncclDataType_t, comm: ncclComm_t, stream: Stream
    ) => all_to_allv;
}
nccl_api! {
    /// `ncclSend`.
    fn ncclSend, pncclSend(
        sendbuff: *const c_void, count: usize, datatype: ncclDataType_t, peer: c_int,
        comm: ncclComm_t, stream: Stream
    ) => send;
}
nccl_api! {
    /// `ncclRecv`.
    fn ncclRecv, pncclRecv(
        recvbuff: *mut c_void, count: usize, datatype: ncclDataType_t, peer: c_int,
        comm: ncclComm_t, stream: Stream
    ) => recv;
}
nccl_api! {
    /// `ncclGroupStart`.
    fn ncclGroupStart, pncclGroupStart() => group_start;
}
nccl_api! {
    /// `ncclGroupEnd`: launches the group (the host backend also waits for it).
    fn ncclGroupEnd, pncclGroupEnd() => group_end;
}
nccl_api! {
    /// `ncclGroupSimulateEnd`: ends the group without launching; estimates its time.
    fn ncclGroupSimulateEnd, pncclGroupSimulateEnd(sim_info: *mut ncclSimInfo_t) => group_simulate_end;
}
nccl_api! {
    /// `ncclRedOpCreatePreMulSum`.
    fn ncclRedOpCreatePreMulSum, pncclRedOpCreatePreMulSum(
        op: *mut ncclRedOp_t, scalar: *mut c_void, datatype: ncclDataType_t,
        residence: ncclScalarResidence_t, comm: ncclComm_t
    ) => red_op_create_pre_mul_sum;
}
nccl_api! {
    /// `ncclRedOpDestroy`.
    fn ncclRedOpDestroy, pncclRedOpDestroy(op: ncclRedOp_t, comm: ncclComm_t) => red_op_destroy;
}
