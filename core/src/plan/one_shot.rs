//! One-shot small collectives: AllReduce, AllGather, ReduceScatter and AlltoAll run by a
//! dedicated device kernel instead of a plan (see `kernels/common/one_shot.cuh`).
//!
//! Every rank stores its data as flagged packets straight into each peer's inbox, mapped at
//! connect, and combines what arrives; there are no steps to interpret and no FIFO positions.
//! Three variants ([`Variant`]): LL (flagged 8-byte packets) for the smallest messages, Simple
//! (a copy and one flag per block) for larger ones, and a two-shot AllReduce that sends each
//! rank's share of the vector once instead of the whole vector to every peer. A backend that has
//! such kernels says how large a message each takes (the backend's `one_shot_bytes`); the tuner
//! decides when they win. The host backend has none and runs the plan.

use super::CollKind;
use super::DevicePtr;
use crate::datatype::{DataType, Reduction};

/// Most ranks a one-shot communicator may have (the kernels keep one inbox address per rank in
/// their parameters).
pub const MAX_RANKS: u32 = 8;

/// One collective for the one-shot kernels, bound to its buffers.
#[derive(Debug, Clone, PartialEq)]
pub struct OneShot {
    /// AllReduce, AllGather, ReduceScatter or AlltoAll.
    pub kind: CollKind,
    /// Element type.
    pub dtype: DataType,
    /// The reduction (AllGather: ignored).
    pub reduction: Reduction,
    /// Elements of one per-peer message: the vector (AllReduce), the send count (AllGather),
    /// the receive count (ReduceScatter), the per-rank block (AlltoAll); NCCL's `count`
    /// argument in each case.
    pub count: u64,
    /// Send buffer.
    pub send: DevicePtr,
    /// Receive buffer.
    pub recv: DevicePtr,
    /// Which kernel runs it.
    pub variant: Variant,
}

/// Which one-shot kernel runs a collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// Flagged 8-byte packets, for the smallest messages.
    Ll,
    /// Each block copies its slice of a message to every peer and raises one flag per peer.
    Simple,
    /// AllReduce only: rank `r` gathers the `r`-th of `n` parts of every rank's vector, reduces
    /// it and sends the result to every peer, so each rank's links carry `2 (n - 1) / n`
    /// vectors instead of the Simple variant's `n - 1`; two rounds of flags instead of one.
    TwoShot,
}

impl OneShot {
    /// Bytes of one per-peer message, which the backend's limit and the tuner compare.
    pub fn message_bytes(&self) -> u64 {
        self.count * self.dtype.size() as u64
    }
}

/// Whether the one-shot kernels implement `kind`.
///
/// Broadcast, Reduce, Gather and Scatter are left out on purpose: a one-shot inbox half may be
/// rewritten once the writer has heard from its reader since the reader's previous use, and in
/// a rooted operation the root hears from nobody (or nobody hears from it).
pub fn supports(kind: CollKind) -> bool {
    matches!(
        kind,
        CollKind::AllReduce | CollKind::AllGather | CollKind::ReduceScatter | CollKind::AllToAll
    )
}
