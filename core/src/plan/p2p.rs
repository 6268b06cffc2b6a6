//! Plans of grouped `ncclSend` / `ncclRecv`.
//!
//! A message is cut into chunks that are spread round-robin over the channels. Sender and
//! receiver know only the count and the pair's sequence number (`peer_seq`), so everything about
//! the split is derived from those plus the group-wide channel count and chunk size, which both
//! ends must therefore pass identically. Each channel's chunks of a message carry their own tag
//! because channels run concurrently and would otherwise race for the receiver's FIFO.

#![forbid(unsafe_code)]

use super::split::split_steps;
use super::tags::{MAX_CHANNELS, p2p_chunk_tag};
use super::{
    Algorithm, BufId, ChannelWork, CollKind, P2pDir, P2pOp, Protocol, Region, Step, WorkDesc,
    chunks, clamp_chunk, grain,
};
use crate::datatype::{DataType, Reduction};
use std::collections::HashMap;

/// How a group lays out its sends and receives ([`build_p2p`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Split {
    /// One channel per FIFO index, sends and receives in turns.
    No,
    /// Sends and receives in channels of their own.
    Unordered,
    /// In channels of their own, each receive behind the sends before it (buffers overlap).
    Ordered,
}

/// Which send/receive messages move as LL packets, and in chunks of what size; the same on
/// both ends of every message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct P2pLl {
    /// Messages to other ranks of at most this many bytes use LL (0: none).
    pub max_bytes: u64,
    /// Largest LL chunk in bytes: what one LL FIFO holds.
    pub chunk_bytes: u64,
    /// Smallest piece an LL message is cut into to spread it over channels.
    pub bytes_per_channel: u64,
}

/// How a message to self is planned when both its ends are in one group.
enum SelfPair {
    /// This send becomes a copy into operation `.0`'s buffer.
    CopyTo(usize),
    /// This receive is done by its send's copy.
    Copied,
}

/// Pairs sends to self with receives from self of the same sequence number and count.
fn pair_self_messages(rank: u32, ops: &[P2pOp]) -> HashMap<usize, SelfPair> {
    if !ops.iter().any(|o| o.peer == rank) {
        return HashMap::new();
    }
    let mut recvs: HashMap<u64, usize> = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        if op.peer == rank && op.dir == P2pDir::Recv {
            recvs.insert(op.peer_seq, i);
        }
    }
    let mut pairs = HashMap::new();
    for (i, op) in ops.iter().enumerate() {
        if op.peer != rank || op.dir != P2pDir::Send {
            continue;
        }
        if let Some(&j) = recvs
            .get(&op.peer_seq)
            .filter(|&&j| ops[j].count == op.count)
        {
            pairs.insert(i, SelfPair::CopyTo(j));
            pairs.insert(j, SelfPair::Copied);
        }
    }
    pairs
}

/// When every operation of a group is a message to self whose other end is in the group too
/// (a one-rank communicator's alltoall or sendrecv), the (send, receive) index pairs: the group
/// is then nothing but copies, which a runtime may make without a kernel.
pub fn only_self_copies(rank: u32, ops: &[P2pOp]) -> Option<Vec<(usize, usize)>> {
    if ops.is_empty() || ops.iter().any(|o| o.peer != rank) {
        return None;
    }
    let pairs = pair_self_messages(rank, ops);
    if pairs.len() != ops.len() {
        return None;
    }
    let mut copies: Vec<(usize, usize)> = pairs
        .iter()
        .filter_map(|(&i, p)| match p {
            SelfPair::CopyTo(j) => Some((i, *j)),
            SelfPair::Copied => None,
        })
        .collect();
    copies.sort_unstable();
    Some(copies)
}

/// How a group's messages are cut into chunks and spread over channels: it must be the same on
/// both ends of every message (both know only the message itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct P2pShape {
    /// Channels of the group (`nchannels / (nranks - 1)` per rank distance, at least one).
    pub nchannels: u32,
    /// Largest Simple chunk in elements.
    pub chunk_elems: u64,
    /// Smallest piece a Simple message is cut into to spread it over channels.
    pub bytes_per_channel: u64,
    /// Which messages move as LL packets.
    pub ll: P2pLl,
    /// Messages below `wide_min_bytes` spread over at most this many channels (the first
    /// ones), so that small groups keep small plans; larger ones over all of them.
    pub narrow_channels: u32,
    /// See `narrow_channels` (`u64::MAX`: every message is narrow).
    pub wide_min_bytes: u64,
}

/// FIFO channels per rank distance of a send/receive plan (`nchannels / (nranks - 1)`, at
/// least one).
fn fifo_channels_per_distance(nranks: u32, shape: P2pShape) -> u32 {
    let dists = nranks.max(1) - 1;
    (shape.nchannels / dists.max(1)).clamp(1, MAX_CHANNELS)
}

/// How one message is cut into chunks and spread over channels, computed alike at its two
/// ends from what both know: the message's size, the pair and `peer_seq`.
struct MessageCut {
    /// (sender, receiver).
    ends: (u32, u32),
    /// Elements per chunk.
    chunk: u64,
    /// The channels (0..reach) its chunks take turns on.
    reach: u32,
    /// Whether it moves as LL packets.
    packets: bool,
    /// The channel (0..nch) of its first chunk.
    first: u32,
}

impl MessageCut {
    fn of(rank: u32, op: &P2pOp, nch: u32, shape: P2pShape, dtype: DataType) -> MessageCut {
        let ends = match op.dir {
            P2pDir::Send => (rank, op.peer),
            P2pDir::Recv => (op.peer, rank),
        };
        let dsize = dtype.size() as u64;
        let ll = shape.ll;
        // One channel moves a fraction of the link's bandwidth: cut a message so that it spreads
        // over every channel, down to a floor where per-chunk costs dominate. Both ends know the
        // message's size, so they cut it alike, and agree on LL from its size alone (messages
        // to self need no protocol).
        let ll_chunk = ll.chunk_bytes / dsize;
        let bytes = op.count.saturating_mul(dsize);
        let packets = ends.0 != ends.1 && ll_chunk > 0 && bytes <= ll.max_bytes;
        let reach = if bytes >= shape.wide_min_bytes {
            nch
        } else {
            nch.min(shape.narrow_channels.max(1))
        };
        let floor = if packets {
            ll.bytes_per_channel
        } else {
            shape.bytes_per_channel
        };
        let spread = op.count.div_ceil(u64::from(reach)).max(floor / dsize);
        let chunk = if packets {
            spread.min(ll_chunk)
        } else {
            let largest = clamp_chunk(shape.chunk_elems, grain(dtype));
            clamp_chunk(largest.min(spread), grain(dtype))
        };
        // A pair's consecutive messages that fill fewer chunks than there are channels start
        // where the one before ended, so a group of many small messages to one peer still
        // spreads over every channel. A message that fills every channel starts at the pair's
        // own channel: its plan is then the same at every `peer_seq`, which lets a repeated
        // operation reuse it ([`p2p_plan_key`]).
        let nchunks = op.count.div_ceil(chunk);
        let pair = u64::from(ends.0) + u64::from(ends.1);
        let turn = if nchunks >= u64::from(reach) {
            0
        } else {
            op.peer_seq.wrapping_mul(nchunks)
        };
        let first = (pair.wrapping_add(turn) % u64::from(reach)) as u32;
        MessageCut {
            ends,
            chunk,
            reach,
            packets,
            first,
        }
    }
}

/// What a send/receive group's plan on `rank` depends on besides the tags of its steps (which
/// device executors do not read): two groups with equal keys have the same plan but for those
/// tags, so a runtime whose executor matches messages by order may reuse it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct P2pPlanKey {
    shape: P2pShape,
    split: Split,
    dtype: DataType,
    /// Per operation in the group's order: direction, peer, count, first channel, and for a
    /// message to self its `peer_seq` less the group's lowest (self messages pair up by equal
    /// sequence numbers).
    ops: Vec<(P2pDir, u32, u64, u32, u64)>,
}

/// A group of sends and receives as one rank plans it.
#[derive(Debug, Clone, Copy)]
pub struct P2pGroup<'a> {
    /// The planning rank.
    pub rank: u32,
    /// Ranks of the communicator.
    pub nranks: u32,
    /// The group's operations; operation i uses buffer `BufId(BufId::FIRST_P2P.0 + i)`.
    pub ops: &'a [P2pOp],
    /// Element type of the counts.
    pub dtype: DataType,
    /// How messages are cut; the same on both ends of every message.
    pub shape: P2pShape,
    /// How sends and receives share channels.
    pub split: Split,
}

/// The key of [`build_p2p`]'s plan of `group` (see [`P2pPlanKey`]).
pub fn p2p_plan_key(group: P2pGroup<'_>) -> P2pPlanKey {
    let rank = group.rank;
    let nch = fifo_channels_per_distance(group.nranks, group.shape);
    let self_base = group
        .ops
        .iter()
        .filter(|o| o.peer == rank)
        .map(|o| o.peer_seq)
        .min()
        .unwrap_or(0);
    P2pPlanKey {
        shape: group.shape,
        split: group.split,
        dtype: group.dtype,
        ops: group
            .ops
            .iter()
            .map(|op| {
                let first = MessageCut::of(rank, op, nch, group.shape, group.dtype).first;
                let own = if op.peer == rank {
                    op.peer_seq - self_base
                } else {
                    0
                };
                (op.dir, op.peer, op.count, first, own)
            })
            .collect(),
    }
}

/// Builds the plan of `group` on its rank; operation i uses buffer
/// `BufId(BufId::FIRST_P2P.0 + i)` at offset 0.
///
/// A message uses the same FIFO channel index at both ends, one per rank distance: FIFO
/// channel (ch, d) of rank x only sends to x+d and only receives from x-d, with
/// `nch = max(1, nchannels / (nranks - 1))` values of ch. Messages up to `shape.ll.max_bytes`
/// move as LL packets (latency), larger ones with the Simple protocol. `shape` must be the
/// same on both ends of every message.
///
/// With `split`, a FIFO channel's sends and its receives run in channels of their own (sends
/// first, then receives, then messages to self), so a rank sends and receives at once, as
/// NCCL's send and receive warps do. Without it, each FIFO channel is one channel that
/// alternates its sends and receives (see the body). `Split::Ordered` keeps each receive behind
/// the sends that precede it in that alternation (`plan::split`), for a group whose receive
/// buffers overlap its send buffers. Either way no group can deadlock, even with bounded device
/// buffers and whatever each rank chose. Panics if the group has more operations than buffer
/// ids exist (65532).
pub fn build_p2p(group: P2pGroup<'_>) -> WorkDesc {
    let P2pGroup {
        rank,
        nranks,
        ops,
        dtype,
        shape,
        split,
    } = group;
    let n = nranks.max(1);
    // FIFO channels: `nch` logical channels times one per rank distance d = (to - from) mod n.
    // Both ends of a message compute the same index (device FIFOs are per channel). Messages
    // to self (d = 0) use no FIFO, so their channels come after every FIFO channel: the channel
    // budget goes to the n-1 distances that move data between ranks.
    let dists = n - 1;
    let nch = fifo_channels_per_distance(nranks, shape);
    let fifos = (nch * dists) as usize;
    let dsize = dtype.size() as u64;
    let index = |sender: u32, receiver: u32, ch: u32| {
        let d = (receiver + n - sender) % n;
        if d == 0 {
            fifos + ch as usize
        } else {
            (ch * dists + d - 1) as usize
        }
    };
    // Every chunk as (channel, is a receive, step), in the order the loop below makes them.
    let mut items: Vec<(usize, bool, Step)> = Vec::new();
    // Device FIFOs carry no tags: both ends must queue a pair's messages in the same order,
    // which `peer_seq` gives whatever order the group listed them in.
    let mut order: Vec<usize> = (0..ops.len()).collect();
    order.sort_by_key(|&i| (ops[i].peer, ops[i].peer_seq));
    let buf_of = |i: usize| {
        BufId(
            u16::try_from(usize::from(BufId::FIRST_P2P.0) + i)
                .expect("too many operations in one send/receive group"),
        )
    };
    // A message to self whose receive is in the same group (alltoall's own block, as
    // nccl-tests and PyTorch issue it) becomes a local copy: no loopback staging, flag or fence.
    let self_pairs = pair_self_messages(rank, ops);
    for i in order {
        let op = &ops[i];
        debug_assert!(op.peer < nranks, "peer {} of {nranks} ranks", op.peer);
        let buf = buf_of(i);
        let copy_to = match self_pairs.get(&i) {
            Some(SelfPair::CopyTo(j)) => Some(buf_of(*j)),
            Some(SelfPair::Copied) => continue,
            None => None,
        };
        let cut = MessageCut::of(rank, op, nch, shape, dtype);
        let (sender, receiver) = cut.ends;
        for (j, (o, s)) in chunks(op.count, cut.chunk).enumerate() {
            let ch = ((u64::from(cut.first) + j as u64) % u64::from(cut.reach)) as u32;
            let at = Region { buf, offset: o };
            let mut step = Step::new(s, p2p_chunk_tag(op.peer_seq, ch));
            if cut.packets {
                step = step.ll();
            }
            let c = index(sender, receiver, ch);
            items.push(match (op.dir, copy_to) {
                (_, Some(to)) => (c, false, step.src(at).dst(Region { buf: to, offset: o })),
                (P2pDir::Send, None) => (c, false, step.src(at).send(op.peer)),
                (P2pDir::Recv, None) => (c, true, step.recv(op.peer).dst(at)),
            });
        }
    }
    let items = by_channel(&items);
    let channels = match split {
        Split::No => alternating_channels(&items),
        Split::Unordered => split_channels(&items, fifos, None, dsize),
        Split::Ordered => split_channels(&items, fifos, Some(rank), dsize),
    };
    WorkDesc {
        kind: CollKind::SendRecv,
        algo: Algorithm::Direct,
        proto: Protocol::Simple,
        dtype,
        reduction: Reduction::none(),
        scratch_elems: 0,
        exposed: false,
        channels,
    }
}

/// `items` ordered by channel index, keeping each channel's items in their order (a counting
/// sort: each item is copied once, where a comparison sort moves these large items many times).
fn by_channel(items: &[(usize, bool, Step)]) -> Vec<(usize, bool, Step)> {
    let channels = items.iter().map(|it| it.0 + 1).max().unwrap_or(0);
    let mut start = vec![0usize; channels + 1];
    for it in items {
        start[it.0 + 1] += 1;
    }
    for c in 0..channels {
        start[c + 1] += start[c];
    }
    let mut order = vec![0usize; items.len()];
    for (i, it) in items.iter().enumerate() {
        order[start[it.0]] = i;
        start[it.0] += 1;
    }
    order.into_iter().map(|i| items[i]).collect()
}

/// One channel per index of `items` (sorted by index): sends and receives alternate within
/// it. With every rank doing so, a blocked send waits on a peer that is blocked at an earlier
/// position, so no wait cycle can form even when FIFOs hold a single chunk (a self-send
/// precedes its receive, as loopback needs). Indices are the FIFO indices, so empty channels
/// are kept, except a trailing run. (One flat list sorted by channel: a Vec per channel and side
/// cost microseconds a launch.)
fn alternating_channels(items: &[(usize, bool, Step)]) -> Vec<ChannelWork> {
    let used = items.last().map_or(0, |it| it.0 + 1);
    let mut channels = vec![ChannelWork::default(); used];
    for group in items.chunk_by(|a, b| a.0 == b.0) {
        channels[group[0].0].steps = alternate(group);
    }
    channels
}

/// One channel's items (same index) as its steps: a send, a receive, a send, ...
fn alternate(group: &[(usize, bool, Step)]) -> Vec<Step> {
    let mut s = group.iter().filter(|it| !it.1).map(|it| it.2);
    let mut r = group.iter().filter(|it| it.1).map(|it| it.2);
    let mut steps = Vec::with_capacity(group.len());
    loop {
        match (s.next(), r.next()) {
            (None, None) => break,
            (a, b) => steps.extend(a.into_iter().chain(b)),
        }
    }
    steps
}

/// The channels of `items` (sorted by index) whose index is below `fifos` split in two, each
/// naming its FIFO index: every FIFO channel's sends, then every FIFO channel's receives, then
/// the messages to self (indices from `fifos`, one channel each, send before receive). A send
/// channel waits only for its receiver's receive channel, which waits for nothing but data, so
/// no wait cycle can form. With `order` = `Some(rank)` a receive channel also waits for its own
/// rank's send channel (order tokens); a send channel blocked on a full FIFO then waits for a
/// receiver that is further back in the same alternation, so the waits still end (the
/// simulation runs every pattern with bounded FIFOs). Channels with nothing to do are left out.
fn split_channels(
    items: &[(usize, bool, Step)],
    fifos: usize,
    order: Option<u32>,
    esize: u64,
) -> Vec<ChannelWork> {
    let (peers, selves) = items.split_at(items.partition_point(|it| it.0 < fifos));
    let mut halves = [Vec::new(), Vec::new()];
    for group in peers.chunk_by(|a, b| a.0 == b.0) {
        let f = group[0].0 as u32;
        let (sends, recvs) = split_steps(alternate(group), order.map(|rank| (rank, f)), esize);
        for (half, steps) in halves.iter_mut().zip([sends, recvs]) {
            if !steps.is_empty() {
                half.push(ChannelWork {
                    steps,
                    fifo: Some(f),
                });
            }
        }
    }
    let [mut channels, recv_channels] = halves;
    channels.extend(recv_channels);
    for group in selves.chunk_by(|a, b| a.0 == b.0) {
        let mut steps: Vec<Step> = group.iter().filter(|it| !it.1).map(|it| it.2).collect();
        steps.extend(group.iter().filter(|it| it.1).map(|it| it.2));
        channels.push(ChannelWork::new(steps));
    }
    channels
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(dir: P2pDir, peer: u32, count: u64, peer_seq: u64) -> P2pOp {
        P2pOp {
            dir,
            peer,
            count,
            peer_seq,
        }
    }

    /// `plan`'s channels with every step's tag cleared: what a device executor reads.
    fn untagged(plan: &WorkDesc) -> Vec<ChannelWork> {
        let mut channels = plan.channels.clone();
        for st in channels.iter_mut().flat_map(|c| c.steps.iter_mut()) {
            st.tag = 0;
        }
        channels
    }

    /// Rank 0's group of `ops` over 2 ranks, in bytes, sends and receives alternating.
    fn group(ops: &[P2pOp], shape: P2pShape) -> P2pGroup<'_> {
        P2pGroup {
            rank: 0,
            nranks: 2,
            ops,
            dtype: DataType::Uint8,
            shape,
            split: Split::No,
        }
    }

    fn nvlink_shape(nchannels: u32) -> P2pShape {
        P2pShape {
            nchannels,
            chunk_elems: 1 << 19,
            bytes_per_channel: 64 << 10,
            ll: P2pLl {
                max_bytes: 512 << 10,
                chunk_bytes: 4 << 10,
                bytes_per_channel: 4 << 10,
            },
            narrow_channels: 32,
            wide_min_bytes: u64::MAX,
        }
    }

    /// Random groups, issued again and again with each pair's sequence numbers moving on as a
    /// communicator's do: whenever two issues have equal keys, their plans differ in tags
    /// only, so reusing one for the other is sound.
    #[test]
    fn equal_plan_keys_mean_equal_plans_but_for_tags() {
        use crate::testing::Rng;
        let mut rng = Rng::new(7);
        let sizes = [0u64, 1, 7, 4096, 60_000, 128 << 10, (1 << 20) + 3, 4 << 20];
        for _ in 0..200 {
            let nranks = 2 + rng.below(5) as u32;
            let rank = rng.below(u64::from(nranks)) as u32;
            let dtype = [DataType::Uint8, DataType::Float32][rng.below(2) as usize];
            let shape = P2pShape {
                narrow_channels: [2, 32][rng.below(2) as usize],
                wide_min_bytes: [u64::MAX, 1 << 20][rng.below(2) as usize],
                ..nvlink_shape([2, 8, 32][rng.below(3) as usize])
            };
            let split = [Split::No, Split::Unordered, Split::Ordered][rng.below(3) as usize];
            let group: Vec<(P2pDir, u32, u64)> = (0..1 + rng.below(6))
                .map(|_| {
                    let dir = [P2pDir::Send, P2pDir::Recv][rng.below(2) as usize];
                    let peer = rng.below(u64::from(nranks)) as u32;
                    (dir, peer, sizes[rng.below(sizes.len() as u64) as usize])
                })
                .collect();
            let mut seqs: HashMap<(P2pDir, u32), u64> = HashMap::new();
            let mut seen: HashMap<P2pPlanKey, Vec<ChannelWork>> = HashMap::new();
            for _ in 0..40 {
                let ops: Vec<P2pOp> = group
                    .iter()
                    .map(|&(dir, peer, count)| {
                        let s = seqs.entry((dir, peer)).or_default();
                        *s += 1;
                        op(dir, peer, count, *s - 1)
                    })
                    .collect();
                let group = P2pGroup {
                    rank,
                    nranks,
                    ops: &ops,
                    dtype,
                    shape,
                    split,
                };
                let key = p2p_plan_key(group);
                let plan = untagged(&build_p2p(group));
                let first = seen.entry(key).or_insert_with(|| plan.clone());
                assert_eq!(*first, plan, "rank {rank} of {nranks}: {ops:?}");
            }
        }
    }

    /// A message that fills every channel has one key whatever its sequence number (a loop
    /// reuses its plan from the second call); smaller ones start where the pair's previous
    /// message ended, so a few keys come round again.
    #[test]
    fn messages_that_fill_every_channel_keep_their_key() {
        let shape = nvlink_shape(32);
        let keys = |count: u64| {
            (0..64u64)
                .map(|s| {
                    let ops = [op(P2pDir::Send, 1, count, s), op(P2pDir::Recv, 1, count, s)];
                    p2p_plan_key(group(&ops, shape))
                })
                .collect::<std::collections::HashSet<_>>()
                .len()
        };
        // 128 KiB of LL: 32 chunks of 4 KiB; 4 MiB: 64 Simple chunks.
        assert_eq!(keys(128 << 10), 1);
        assert_eq!(keys(4 << 20), 1);
        // 64 KiB: 16 chunks, two starts; 8 bytes: one chunk, a start per channel.
        assert_eq!(keys(64 << 10), 2);
        assert_eq!(keys(8), 32);
    }

    /// Messages below the wide size stay on the narrow channels, however many the group has;
    /// larger ones spread over all of them.
    #[test]
    fn only_wide_messages_reach_past_the_narrow_channels() {
        let shape = P2pShape {
            narrow_channels: 32,
            wide_min_bytes: 8 << 20,
            ..nvlink_shape(64)
        };
        let highest = |count: u64, seq: u64| {
            let ops = [
                op(P2pDir::Send, 1, count, seq),
                op(P2pDir::Recv, 1, count, seq),
            ];
            let plan = build_p2p(group(&ops, shape));
            plan.channels.iter().rposition(|c| !c.steps.is_empty())
        };
        for seq in 0..70 {
            assert!(
                highest(1 << 20, seq).is_some_and(|c| c < 32),
                "1 MiB, seq {seq}"
            );
            assert!(
                highest(100 << 10, seq).is_some_and(|c| c < 32),
                "100 KiB, seq {seq}"
            );
        }
        assert_eq!(highest(16 << 20, 0), Some(63));
    }

    /// A pair's small messages of one group fill the channels one after another.
    #[test]
    fn a_pairs_small_messages_take_consecutive_channels() {
        let shape = nvlink_shape(32);
        let ops: Vec<P2pOp> = (0..4).map(|s| op(P2pDir::Send, 1, 8 << 10, s)).collect();
        let plan = build_p2p(group(&ops, shape));
        let busy: Vec<usize> = (0..plan.channels.len())
            .filter(|&c| !plan.channels[c].steps.is_empty())
            .collect();
        // Two 4 KiB chunks a message, from channel 1 (ranks 0 + 1) on.
        assert_eq!(busy, (1..9).collect::<Vec<_>>());
    }

    #[test]
    fn only_self_copies_pairs_every_message_or_none() {
        use P2pDir::{Recv, Send};
        // Two self messages listed receive first: paired by sequence number, not position.
        let ops = [
            op(Recv, 0, 8, 0),
            op(Recv, 0, 4, 1),
            op(Send, 0, 4, 1),
            op(Send, 0, 8, 0),
        ];
        assert_eq!(only_self_copies(0, &ops), Some(vec![(2, 1), (3, 0)]));
        // A send whose receive is not in the group, a count mismatch, a message to another
        // rank, an empty group: the kernel plan handles them.
        assert_eq!(only_self_copies(0, &[op(Send, 0, 8, 0)]), None);
        assert_eq!(
            only_self_copies(0, &[op(Send, 0, 8, 0), op(Recv, 0, 4, 0)]),
            None
        );
        assert_eq!(
            only_self_copies(
                1,
                &[op(Send, 1, 8, 0), op(Recv, 1, 8, 0), op(Send, 0, 8, 0)]
            ),
            None
        );
        assert_eq!(only_self_copies(0, &[]), None);
    }
}
