//! Plans of grouped `ncclSend` / `ncclRecv`.
//!
//! A message is cut into chunks that are spread round-robin over the channels. Sender and
//! receiver know only the count and the pair's sequence number (`peer_seq`), so everything about
//! the split is derived from those plus the group-wide channel count and chunk size, which both
//! ends must therefore pass identically. Each channel's chunks of a message carry their own tag
//! because channels run concurrently and would otherwise race for the receiver's FIFO.

#![forbid(unsafe_code)]

use super::tags::{MAX_CHANNELS, p2p_chunk_tag};
use super::{
    Algorithm, BufId, ChannelWork, CollKind, P2pDir, P2pOp, Protocol, Region, Step, WorkDesc,
    chunks, clamp_chunk, grain,
};
use crate::datatype::{DataType, Reduction};

/// Builds the plan of a group of sends/receives on `rank`; operation i uses buffer
/// `BufId(BufId::FIRST_P2P.0 + i)` at offset 0.
///
/// Sends and receives go to separate channels, which run concurrently, so a group in which every
/// rank sends and receives (including to itself) cannot deadlock even with bounded buffers. `nchannels` and
/// `chunk_elems` must be the same on both ends of every message. Panics if the group has more
/// operations than buffer ids exist (65532).
pub fn build_p2p(
    rank: u32,
    nranks: u32,
    ops: &[P2pOp],
    dtype: DataType,
    nchannels: u32,
    chunk_elems: u64,
) -> WorkDesc {
    let nch = nchannels.clamp(1, MAX_CHANNELS);
    let chunk = clamp_chunk(chunk_elems, grain(dtype));
    let mut sends: Vec<Vec<Step>> = vec![Vec::new(); nch as usize];
    let mut recvs: Vec<Vec<Step>> = vec![Vec::new(); nch as usize];
    for (i, op) in ops.iter().enumerate() {
        debug_assert!(op.peer < nranks, "peer {} of {nranks} ranks", op.peer);
        let id = u16::try_from(usize::from(BufId::FIRST_P2P.0) + i)
            .expect("too many operations in one send/receive group");
        let buf = BufId(id);
        let (sender, receiver) = match op.dir {
            P2pDir::Send => (rank, op.peer),
            P2pDir::Recv => (op.peer, rank),
        };
        // Start different streams on different channels so that many small messages still
        // spread over all channels; both ends compute the same start.
        let first = (u64::from(sender) + u64::from(receiver) + op.peer_seq) % u64::from(nch);
        for (j, (o, s)) in chunks(op.count, chunk).enumerate() {
            let ch = ((first + j as u64) % u64::from(nch)) as u32;
            let at = Region { buf, offset: o };
            let step = Step::new(s, p2p_chunk_tag(op.peer_seq, ch));
            match op.dir {
                P2pDir::Send => sends[ch as usize].push(step.src(at).send(op.peer)),
                P2pDir::Recv => recvs[ch as usize].push(step.recv(op.peer).dst(at)),
            }
        }
    }
    // Sends and receives run on separate channels (concurrent blocks on a GPU): device FIFOs
    // are bounded, so a channel that sent a large message before receiving would wait forever
    // for a peer doing the same.
    let channels = sends
        .into_iter()
        .chain(recvs)
        .filter(|steps| !steps.is_empty())
        .map(|steps| ChannelWork { steps })
        .collect();
    WorkDesc {
        kind: CollKind::SendRecv,
        algo: Algorithm::Direct,
        proto: Protocol::Simple,
        dtype,
        reduction: Reduction::none(),
        scratch_elems: 0,
        channels,
    }
}
