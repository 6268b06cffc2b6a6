//! The escape hatch for frameworks with their own allocators and streams: operations on raw
//! device addresses, `unsafe` because nothing here can check them.

use crate::Element;
use crate::comm::Communicator;
use crate::dispatch::CommOps;
use crate::error::{Error, Result};
use crate::op::ReduceOp;
use oxccl_core::CollArgs;
use oxccl_core::datatype::RedOp;
use oxccl_core::plan::{CollKind, P2pDir};

/// A collective for [`Communicator::collective_raw`], with its operator or root.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RawCollective<T: Element> {
    /// `ncclAllReduce`.
    AllReduce(ReduceOp<T>),
    /// `ncclBroadcast` from `root`.
    Broadcast {
        /// The rank whose data is sent.
        root: usize,
    },
    /// `ncclReduce` to `root`.
    Reduce {
        /// The operator.
        op: ReduceOp<T>,
        /// The rank that receives the result.
        root: usize,
    },
    /// `ncclAllGather`.
    AllGather,
    /// `ncclReduceScatter`.
    ReduceScatter(ReduceOp<T>),
    /// `ncclAlltoAll`.
    AllToAll,
    /// `ncclGather` to `root`.
    Gather {
        /// The rank that receives.
        root: usize,
    },
    /// `ncclScatter` from `root`.
    Scatter {
        /// The rank that sends.
        root: usize,
    },
}

impl Communicator {
    /// Queues a collective on raw addresses, exactly as the C function of the same name takes
    /// them: `count` is NCCL's count argument (per-rank block for AllGather, ReduceScatter,
    /// AlltoAll, Gather and Scatter), `stream` a raw `CUstream` / `hipStream_t` (0: the default
    /// stream; on the host backend any value).
    ///
    /// # Safety
    /// `send` and `recv` are memory of this communicator's device (allocated by this runtime
    /// or by the device runtime underneath it), valid for the sizes NCCL's documentation gives
    /// for the operation, until the operation has run on `stream` (inside a [`crate::Group`]:
    /// launched at its end); nothing else writes them meanwhile. `stream` is 0 or a live stream of the runtime on this device.
    pub unsafe fn collective_raw<T: Element>(
        &self,
        op: RawCollective<T>,
        send: u64,
        recv: u64,
        count: usize,
        stream: usize,
    ) -> Result<()> {
        let (kind, red, root) = match op {
            RawCollective::AllReduce(o) => (CollKind::AllReduce, o.lower(), 0),
            RawCollective::Broadcast { root } => (CollKind::Broadcast, RedOp::Sum, root),
            RawCollective::Reduce { op, root } => (CollKind::Reduce, op.lower(), root),
            RawCollective::AllGather => (CollKind::AllGather, RedOp::Sum, 0),
            RawCollective::ReduceScatter(o) => (CollKind::ReduceScatter, o.lower(), 0),
            RawCollective::AllToAll => (CollKind::AllToAll, RedOp::Sum, 0),
            RawCollective::Gather { root } => (CollKind::Gather, RedOp::Sum, root),
            RawCollective::Scatter { root } => (CollKind::Scatter, RedOp::Sum, root),
        };
        let root =
            u32::try_from(root).map_err(|_| Error::arg(format!("root {root} is out of range")))?;
        let args = CollArgs {
            kind,
            send,
            recv,
            count: count as u64,
            dtype: T::DTYPE,
            op: red,
            root,
            layout: None,
        };
        // SAFETY: forwarded from the caller.
        Ok(unsafe { self.comm.collective(args, stream) }?)
    }

    /// Queues `ncclSend` of `count` elements at `buf` to `peer` on raw `stream`.
    ///
    /// # Safety
    /// As for [`Communicator::collective_raw`], for `count` elements at `buf`.
    pub unsafe fn send_raw<T: Element>(
        &self,
        buf: u64,
        count: usize,
        peer: usize,
        stream: usize,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.p2p_raw::<T>(P2pDir::Send, buf, count, peer, stream) }
    }

    /// Queues `ncclRecv` of `count` elements into `buf` from `peer` on raw `stream`.
    ///
    /// # Safety
    /// As for [`Communicator::collective_raw`], for `count` elements at `buf`.
    pub unsafe fn recv_raw<T: Element>(
        &self,
        buf: u64,
        count: usize,
        peer: usize,
        stream: usize,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.p2p_raw::<T>(P2pDir::Recv, buf, count, peer, stream) }
    }

    /// # Safety
    /// As for [`Communicator::send_raw`].
    unsafe fn p2p_raw<T: Element>(
        &self,
        dir: P2pDir,
        buf: u64,
        count: usize,
        peer: usize,
        stream: usize,
    ) -> Result<()> {
        let peer =
            u32::try_from(peer).map_err(|_| Error::arg(format!("peer {peer} is out of range")))?;
        // SAFETY: forwarded from the caller.
        Ok(unsafe {
            self.comm
                .p2p(dir, buf, count as u64, T::DTYPE, peer, stream)
        }?)
    }
}
