//! Plans: every operation lowered to a [`WorkDesc`] of per-channel steps.
//!
//! Plans are pure functions of the request (rank, sizes, algorithm, protocol, channels). The same
//! description is interpreted by the host backend's threads and by the GPU kernels.

pub mod work;

pub use work::{Algorithm, BufId, ChannelWork, CollKind, Protocol, Region, Step, WorkDesc};

use crate::datatype::{DataType, Reduction};

/// Per-peer counts and displacements of an AlltoAllv, in elements.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AllToAllvLayout {
    /// Elements sent to each peer.
    pub send_counts: Vec<u64>,
    /// Offset in the send buffer of each peer's block.
    pub send_displs: Vec<u64>,
    /// Elements received from each peer.
    pub recv_counts: Vec<u64>,
    /// Offset in the receive buffer of each peer's block.
    pub recv_displs: Vec<u64>,
}

/// Everything a plan needs to know about one collective on one rank.
#[derive(Debug, Clone, PartialEq)]
pub struct CollRequest {
    /// The operation (never `SendRecv`; see [`P2pOp`]).
    pub kind: CollKind,
    /// This rank.
    pub rank: u32,
    /// Ranks in the communicator.
    pub nranks: u32,
    /// The `count` argument exactly as NCCL's API takes it for this operation (AllGather: send
    /// count; ReduceScatter: receive count; AlltoAll/Gather/Scatter: per-rank block).
    pub count: u64,
    /// Root rank of Broadcast, Reduce, Gather, Scatter (0 otherwise).
    pub root: u32,
    /// Counts of an AlltoAllv.
    pub layout: Option<AllToAllvLayout>,
    /// Element type.
    pub dtype: DataType,
    /// Reduction (ignored by non-reducing operations).
    pub reduction: Reduction,
    /// Tag base: the communicator's collective sequence number (same on every rank).
    pub seq: u64,
    /// Algorithm chosen by the tuner.
    pub algo: Algorithm,
    /// Protocol chosen by the tuner.
    pub proto: Protocol,
    /// Channels to spread the work over (at least 1).
    pub nchannels: u32,
    /// Elements per pipeline chunk (at least 1).
    pub chunk_elems: u64,
}

/// Direction of one operation of a send/recv group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum P2pDir {
    /// `ncclSend`.
    Send,
    /// `ncclRecv`.
    Recv,
}

/// One `ncclSend` or `ncclRecv` of a group, with its sequence number towards its peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct P2pOp {
    /// Send or receive.
    pub dir: P2pDir,
    /// The other rank (may be this rank: self-send).
    pub peer: u32,
    /// Elements.
    pub count: u64,
    /// How many operations of the same direction this rank already issued towards `peer`: the
    /// n-th send from A to B matches the n-th receive on B from A.
    pub peer_seq: u64,
}

pub mod tuner;

/// STUB until the plans land.
pub fn build_coll(_req: &CollRequest) -> crate::Result<WorkDesc> {
    Err(crate::Error::Internal("plans not implemented".into()))
}

/// STUB until the plans land.
pub fn build_p2p(
    _rank: u32,
    _nranks: u32,
    _ops: &[P2pOp],
    dtype: DataType,
    _nchannels: u32,
    _chunk_elems: u64,
) -> WorkDesc {
    WorkDesc {
        kind: CollKind::SendRecv,
        algo: Algorithm::Direct,
        proto: Protocol::Simple,
        dtype,
        reduction: Reduction::none(),
        scratch_elems: 0,
        channels: Vec::new(),
    }
}
