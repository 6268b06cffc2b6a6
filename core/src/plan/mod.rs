//! Plans: every operation lowered to a [`WorkDesc`] of per-channel steps.
//!
//! Plans are pure functions of the request (rank, sizes, algorithm, protocol, channels). The same
//! description is interpreted by the host backend's threads and by the GPU kernels.

pub mod work;

pub mod bias;
mod direct;
mod heuristics;
pub mod hosts;
pub mod msccl;
pub mod net_link;
pub mod net_peers;
pub mod one_shot;
mod p2p;
mod ring;
#[cfg(test)]
mod sim;
mod split;
pub mod tags;
mod tree;
pub mod tuner;
pub mod zero_copy;

pub use direct::{local_copies_apart, split_directions};
pub use hosts::HostLayout;

/// A device (or host-backend) address, as plans and their backends pass it.
pub type DevicePtr = u64;
pub use net_link::NetLink;
pub use p2p::{
    P2pGroup, P2pLl, P2pPlanKey, P2pShape, Split, build_p2p, only_self_copies, p2p_plan_key,
};
pub use tags::{coll_tag, p2p_tag};
pub use tuner::{Choice, Topology, Tuner};
pub use work::{
    Algorithm, BufId, ChannelWork, CollKind, Path, Protocol, Region, Step, TABLE_BYTES,
    TOKEN_BYTES, WorkDesc,
};

use crate::datatype::{DataType, Reduction};
use crate::error::{Error, Result};
use std::sync::Arc;

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
    /// The host of each rank when the ranks span several hosts (`None`: one host): rings then
    /// visit the ranks host by host and trees join hosts through one rank each.
    pub hosts: Option<Arc<HostLayout>>,
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

/// The algorithms that have a plan for `kind`, best default first.
pub fn algorithms_for(kind: CollKind) -> &'static [Algorithm] {
    use Algorithm::*;
    match kind {
        CollKind::AllReduce => &[Ring, Tree, Direct],
        CollKind::Broadcast | CollKind::Reduce | CollKind::AllGather | CollKind::ReduceScatter => {
            &[Ring, Direct]
        }
        CollKind::AllToAll
        | CollKind::AllToAllv
        | CollKind::Gather
        | CollKind::Scatter
        | CollKind::SendRecv => &[Direct],
    }
}

/// Builds the plan of one collective on one rank.
pub fn build_coll(req: &CollRequest) -> Result<WorkDesc> {
    validate(req)?;
    let ctx = Ctx::new(req);
    let mut b = Builder::new(req.nchannels);
    use Algorithm::*;
    use CollKind::*;
    match (req.kind, req.algo) {
        (AllReduce, Ring) => ring::all_reduce(&ctx, &mut b),
        (AllReduce, Tree) => tree::all_reduce(&ctx, &mut b),
        (AllReduce, Direct) => direct::all_reduce(&ctx, &mut b),
        (Broadcast, Ring) => ring::broadcast(&ctx, &mut b),
        (Broadcast, Direct) => direct::broadcast(&ctx, &mut b),
        (Reduce, Ring) => ring::reduce(&ctx, &mut b),
        (Reduce, Direct) => direct::reduce(&ctx, &mut b),
        (AllGather, Ring) => ring::all_gather(&ctx, &mut b),
        (AllGather, Direct) => direct::all_gather(&ctx, &mut b),
        (ReduceScatter, Ring) => ring::reduce_scatter(&ctx, &mut b),
        (ReduceScatter, Direct) => direct::reduce_scatter(&ctx, &mut b),
        (AllToAll, Direct) => direct::all_to_all(&ctx, &mut b),
        (AllToAllv, Direct) => direct::all_to_allv(&ctx, &mut b),
        (Gather, Direct) => direct::gather(&ctx, &mut b),
        (Scatter, Direct) => direct::scatter(&ctx, &mut b),
        (kind, algo) => {
            return Err(Error::Internal(format!(
                "no {algo:?} plan for {kind:?} (validate let it through)"
            )));
        }
    }
    if req.proto == Protocol::Ll {
        for st in b.channels.iter_mut().flat_map(|c| c.steps.iter_mut()) {
            st.ll = true;
        }
    }
    Ok(WorkDesc {
        kind: req.kind,
        algo: req.algo,
        proto: req.proto,
        dtype: req.dtype,
        reduction: req.reduction,
        scratch_elems: 0,
        exposed: false,
        channels: b.channels,
    })
}

fn validate(req: &CollRequest) -> Result<()> {
    let n = req.nranks;
    if n == 0 {
        return Err(Error::arg("communicator has no ranks"));
    }
    if req.rank >= n {
        return Err(Error::arg(format!(
            "rank {} out of range for {n} ranks",
            req.rank
        )));
    }
    if matches!(
        req.kind,
        CollKind::Broadcast | CollKind::Reduce | CollKind::Gather | CollKind::Scatter
    ) && req.root >= n
    {
        return Err(Error::arg(format!(
            "root {} out of range for {n} ranks",
            req.root
        )));
    }
    if req.kind == CollKind::SendRecv {
        return Err(Error::arg("send/receive groups are planned by build_p2p"));
    }
    if let Some(h) = &req.hosts
        && h.nranks() != n
    {
        return Err(Error::Internal(format!(
            "host layout of {} ranks for a communicator of {n}",
            h.nranks()
        )));
    }
    if !algorithms_for(req.kind).contains(&req.algo) {
        return Err(Error::arg(format!(
            "algorithm {:?} does not implement {:?}",
            req.algo, req.kind
        )));
    }
    if req.nchannels == 0 || req.nchannels > tags::MAX_CHANNELS {
        return Err(Error::arg(format!(
            "{} channels requested; 1 to {} are supported",
            req.nchannels,
            tags::MAX_CHANNELS
        )));
    }
    if req.chunk_elems == 0 {
        return Err(Error::arg("chunk size of 0 elements"));
    }
    let blocks = u64::from(n);
    if matches!(
        req.kind,
        CollKind::AllGather
            | CollKind::ReduceScatter
            | CollKind::AllToAll
            | CollKind::Gather
            | CollKind::Scatter
    ) && req.count.checked_mul(blocks).is_none()
    {
        return Err(Error::arg(format!(
            "count {} times {n} ranks overflows",
            req.count
        )));
    }
    if req.kind == CollKind::AllToAllv {
        let l = req
            .layout
            .as_ref()
            .ok_or_else(|| Error::arg("AlltoAllv without counts and displacements"))?;
        let nn = n as usize;
        if l.send_counts.len() != nn
            || l.send_displs.len() != nn
            || l.recv_counts.len() != nn
            || l.recv_displs.len() != nn
        {
            return Err(Error::arg(format!(
                "AlltoAllv counts and displacements must have {n} entries each"
            )));
        }
        let r = req.rank as usize;
        if l.send_counts[r] != l.recv_counts[r] {
            return Err(Error::arg(format!(
                "AlltoAllv: rank {r} sends {} elements to itself but receives {}",
                l.send_counts[r], l.recv_counts[r]
            )));
        }
        for (c, d) in l
            .send_counts
            .iter()
            .zip(&l.send_displs)
            .chain(l.recv_counts.iter().zip(&l.recv_displs))
        {
            if c.checked_add(*d).is_none() {
                return Err(Error::arg("AlltoAllv count plus displacement overflows"));
            }
        }
    }
    Ok(())
}

/// Elements per alignment unit: channel parts, ring blocks and chunks start on multiples of
/// this so that device executors can use 16-byte vector loads when the buffers are aligned.
pub(crate) fn grain(dtype: DataType) -> u64 {
    (16 / dtype.size() as u64).max(1)
}

/// Part `i` of `parts` of `total` elements, as (offset, length): balanced in units of `grain`
/// elements; only the last non-empty part may end off the grain. Every rank computes the same
/// split from the same arguments, which is what keeps senders and receivers in step.
pub(crate) fn split(total: u64, parts: u64, i: u64, grain: u64) -> (u64, u64) {
    let units = total.div_ceil(grain);
    let base = units / parts;
    let rem = units % parts;
    let start_unit = i * base + i.min(rem);
    let n_units = base + u64::from(i < rem);
    let start = (start_unit * grain).min(total);
    let end = ((start_unit + n_units) * grain).min(total);
    (start, end - start)
}

/// Elements per chunk: a multiple of `grain`, and small enough that `chunk * nranks` cannot
/// overflow (no buffer is anywhere near 2^40 elements).
pub(crate) fn clamp_chunk(chunk_elems: u64, grain: u64) -> u64 {
    (chunk_elems.min(1 << 40) / grain * grain).max(grain)
}

/// Consecutive (offset, length) chunks of at most `chunk` elements covering `len` elements.
pub(crate) fn chunks(len: u64, chunk: u64) -> impl Iterator<Item = (u64, u64)> {
    (0..len.div_ceil(chunk)).map(move |j| {
        let off = j * chunk;
        (off, chunk.min(len - off))
    })
}

/// What every algorithm needs from the request, with derived geometry.
pub(crate) struct Ctx<'a> {
    pub req: &'a CollRequest,
    /// Ranks.
    pub n: u32,
    /// This rank.
    pub r: u32,
    /// Alignment unit in elements.
    pub grain: u64,
    /// Pipeline chunk in elements, a multiple of `grain`.
    pub chunk: u64,
    /// The ranks' hosts, when there are several.
    pub hosts: Option<&'a HostLayout>,
}

impl<'a> Ctx<'a> {
    fn new(req: &'a CollRequest) -> Ctx<'a> {
        let grain = grain(req.dtype);
        Ctx {
            req,
            n: req.nranks,
            r: req.rank,
            grain,
            chunk: clamp_chunk(req.chunk_elems, grain),
            hosts: req.hosts.as_deref(),
        }
    }
    /// Channels as a loop bound.
    pub fn nch(&self) -> u32 {
        self.req.nchannels
    }
    /// The tag of channel `c`.
    pub fn tag(&self, c: u32) -> u64 {
        coll_tag(self.req.seq, c)
    }
    /// Channel `c`'s contiguous part of `total` elements.
    pub fn part(&self, total: u64, c: u32) -> (u64, u64) {
        split(
            total,
            u64::from(self.req.nchannels),
            u64::from(c),
            self.grain,
        )
    }
    /// Rank `r + k` around the ring (host by host when the ranks span several hosts).
    pub fn add(&self, r: u32, k: u32) -> u32 {
        if let Some(h) = self.hosts {
            return h.ring_add(r, k);
        }
        ((u64::from(r) + u64::from(k)) % u64::from(self.n)) as u32
    }
    /// Rank `r - k` around the ring.
    pub fn sub(&self, r: u32, k: u32) -> u32 {
        if let Some(h) = self.hosts {
            return h.ring_sub(r, k);
        }
        let n = u64::from(self.n);
        ((u64::from(r) + n - u64::from(k) % n) % n) as u32
    }
}

/// Collects the steps of each channel, dropping empty ones.
pub(crate) struct Builder {
    pub channels: Vec<ChannelWork>,
}

impl Builder {
    /// An empty plan of `nchannels` channels.
    pub fn new(nchannels: u32) -> Builder {
        Builder {
            channels: vec![ChannelWork::default(); nchannels as usize],
        }
    }
    /// Appends `step` to channel `c` unless it moves nothing: both ends of a message derive its
    /// count from the same geometry, so both drop it together.
    pub fn push(&mut self, c: u32, step: Step) {
        if step.count > 0 {
            self.channels[c as usize].steps.push(step);
        }
    }
}
