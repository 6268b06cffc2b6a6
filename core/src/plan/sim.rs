//! Test-only simulator: runs the plans of all ranks over an ideal mailbox and checks them.
//!
//! It implements the executor contract literally: a step computes `v = recv(peer) ⊕ pre(src)`,
//! then `post(v)`, then stores `v` to `dst` and sends it to `send`; sends never block; a receive
//! waits for the matching message (same sender, receiver and tag, FIFO). Each rank's buffers live
//! in one byte arena, so in-place aliasing between Input and Output is real. The scheduler picks
//! runnable (rank, channel) lanes in a pseudo-random round-robin order, so plans that depend on
//! one interleaving of concurrent channels fail. Beyond running, it checks statically that no
//! step moves nothing, no src/dst overlap partially, and no two channels touch the same memory
//! of a rank while one of them writes it; and dynamically that matched messages agree on counts
//! and that every message sent is received.
//!
//! Zero-copy plans (`plan::zero_copy`) are modelled as follows:
//!
//! - A `publish` step sends this rank's buffer table ([`TABLE_BYTES`]: input address, output
//!   address, exposed flag, each a little-endian u64), truncated to the step's size (the end
//!   token sends its first [`TOKEN_BYTES`]). An address encodes the rank and the buffer's arena
//!   offset, so a peer access resolves through the table the accessing lane learned.
//! - A `learn` step receives a whole table from `recv` and keeps it for its (rank, channel)
//!   lane. A published message may only be learned or discarded by a receive with no other
//!   part (the token); a receive with no output that gets ordinary data is an error.
//! - The first step of a lane whose `path` is not `Always` decides the lane's branch: zero copy
//!   if and only if every rank's table (its own included) has the exposed flag. Reaching such a
//!   step before the lane has every rank's table is an error, and all lanes that decide must
//!   decide alike. Steps of the other branch are skipped.
//! - `peer_src`/`peer_dst` read/write the region of rank `recv`/`send` directly, at the moment
//!   the step runs (no message). The lane must hold that rank's table with the exposed flag set
//!   (its own rank excepted), the region must be the Input or Output buffer, and that rank's lane
//!   of the same channel must not have finished yet: a zero-copy channel synchronises with its
//!   peers' channel of the same index (table exchange at the start, token exchange at the end),
//!   so an access after the owner's channel has returned is a missing synchronisation.
//!   `pre_recv` pre-scales the operand read through `peer_src`. `fence` is a no-op.
//!
//! The static channel-overlap check counts direct accesses as accesses by the accessing lane's
//! channel index to the accessed rank's memory. Not checked: conflicts between lanes of the
//! *same* channel index on different ranks (e.g. two ranks' channel 0 writing one region of a
//! third rank): those are ordered, or not, by the messages between them, which would need a
//! happens-before analysis; the random interleaving and the result comparison of the tests
//! catch them in practice.

#![forbid(unsafe_code)]

use super::{BufId, ChannelWork, Path, Region, Step, TABLE_BYTES, WorkDesc};
use crate::datatype::{DataType, ReduceOp, Scalar, ScalarSource};
use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;

/// Where one buffer of a rank lives in its arena.
#[derive(Debug, Clone, Copy)]
pub struct Placement {
    /// Byte offset in the arena.
    pub byte_off: usize,
    /// Length in elements.
    pub elems: u64,
}

/// One rank's memory: an arena and the buffers placed in it.
#[derive(Debug, Clone, Default)]
pub struct RankMem {
    /// All of the rank's user buffers, aliasing as the launch would.
    pub arena: Vec<u8>,
    /// Buffer id to placement; the simulator adds Scratch itself.
    pub bufs: HashMap<BufId, Placement>,
}

/// What a simulation did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    /// Steps executed over all ranks.
    pub steps: usize,
    /// Messages delivered.
    pub messages: usize,
    /// Steps skipped because they belong to the branch of a zero-copy plan not taken.
    pub skipped: usize,
    /// Direct reads and writes of a rank's buffers (`peer_src`, `peer_dst`).
    pub direct: usize,
    /// Lanes that took the zero-copy branch.
    pub zero_copy_lanes: usize,
    /// Lanes that took the fallback branch.
    pub fallback_lanes: usize,
}

fn byte_range(
    mem: &RankMem,
    r: Region,
    count: u64,
    esize: usize,
) -> Result<std::ops::Range<usize>, String> {
    let p = mem
        .bufs
        .get(&r.buf)
        .ok_or_else(|| format!("buffer {:?} is not bound", r.buf))?;
    let end = r.offset.checked_add(count).ok_or("offset overflow")?;
    if end > p.elems {
        return Err(format!(
            "region {:?}+{} .. {} is outside buffer {:?} of {} elements",
            r.buf, r.offset, end, r.buf, p.elems
        ));
    }
    let start = p.byte_off + r.offset as usize * esize;
    Ok(start..start + count as usize * esize)
}

fn overlap(a: &std::ops::Range<usize>, b: &std::ops::Range<usize>) -> bool {
    a.start < b.end && b.start < a.end
}

/// Merges ranges into sorted disjoint ones.
fn merged(mut v: Vec<std::ops::Range<usize>>) -> Vec<std::ops::Range<usize>> {
    v.sort_by_key(|r| r.start);
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    for r in v {
        match out.last_mut() {
            Some(l) if r.start <= l.end => l.end = l.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

fn intersects(a: &[std::ops::Range<usize>], b: &[std::ops::Range<usize>]) -> Option<usize> {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if overlap(&a[i], &b[j]) {
            return Some(a[i].start.max(b[j].start));
        }
        if a[i].end <= b[j].end {
            i += 1;
        } else {
            j += 1;
        }
    }
    None
}

/// Checks every step on its own, then that no two channels use a rank's memory while one of
/// them writes it, counting direct accesses (`peer_src`, `peer_dst`) to other ranks' memory as
/// accesses by the accessing lane's channel index. The halves of a split channel (one FIFO
/// index) count as one channel: whether one may overtake the other is for the run to show.
fn check_static(descs: &[WorkDesc], mems: &[RankMem]) -> Result<(), String> {
    let nranks = descs.len();
    // Channel ids: a FIFO index where the plan names one, else past every FIFO index.
    let fifos = descs
        .iter()
        .flat_map(|d| d.channels.iter().filter_map(|c| c.fifo))
        .max()
        .map_or(0, |f| f as usize + 1);
    let id = |ch: &ChannelWork, c: usize| ch.fifo.map_or(fifos + c, |f| f as usize);
    let nch = fifos + descs.iter().map(|d| d.channels.len()).max().unwrap_or(0);
    // Per accessed rank, per channel index: byte ranges written, and ranges used at all.
    let mut writes = vec![vec![Vec::new(); nch]; nranks];
    let mut touches = vec![vec![Vec::new(); nch]; nranks];
    for (rank, d) in descs.iter().enumerate() {
        let es = d.dtype.size();
        for (c, ch) in d.channels.iter().enumerate() {
            for (i, s) in ch.steps.iter().enumerate() {
                let at = || format!("rank {rank} channel {c} step {i} {s:?}");
                let fail = |what: &str| Err(format!("{}: {what}", at()));
                if s.count == 0 {
                    return fail("moves nothing");
                }
                for p in s.recv.iter().chain(s.send.iter()) {
                    if *p as usize >= nranks {
                        return fail("peer out of range");
                    }
                }
                if s.recv.is_none() && s.src.is_none() && !s.publish {
                    return fail("has no input");
                }
                // A receive with no other part discards the message (the token of a
                // zero-copy plan); `exec` checks that it is a published table.
                let discards = s.recv.is_some() && s.src.is_none() && s.peer_src.is_none();
                if s.dst.is_none() && s.send.is_none() && !s.learn && !discards {
                    return fail("has no output");
                }
                if s.pre_op && s.src.is_none() {
                    return fail("pre_op without src");
                }
                if s.pre_recv && s.peer_src.is_none() {
                    return fail("pre_recv without peer_src");
                }
                if s.peer_src.is_some() && s.recv.is_none() {
                    return fail("peer_src without recv");
                }
                if s.peer_dst.is_some() && s.send.is_none() {
                    return fail("peer_dst without send");
                }
                if s.swap
                    && (s.peer_src.is_none()
                        || s.peer_dst.is_none()
                        || s.src.is_none()
                        || s.dst.is_none()
                        || s.pre_op
                        || s.pre_recv
                        || s.post_op)
                {
                    return fail("a swap must read and write both sides and nothing else");
                }
                if s.pair_in_place.is_some() && s.peer_dst.is_none() {
                    return fail("pair_in_place on a step that writes no peer's buffer");
                }
                let bytes = s.count.saturating_mul(es as u64);
                if s.publish {
                    if s.send.is_none()
                        || s.recv.is_some()
                        || s.src.is_some()
                        || s.pre_op
                        || s.dst.is_some()
                        || s.peer_dst.is_some()
                        || s.learn
                    {
                        return fail("a publish step must only send the buffer table");
                    }
                    if bytes > TABLE_BYTES {
                        return fail("publishes more than the buffer table");
                    }
                }
                if s.learn {
                    if s.recv.is_none()
                        || s.peer_src.is_some()
                        || s.src.is_some()
                        || s.dst.is_some()
                        || s.send.is_some()
                    {
                        return fail("a learn step must only receive a buffer table");
                    }
                    if bytes != TABLE_BYTES {
                        return fail("learns a table of the wrong size");
                    }
                }
                for r in s.peer_src.iter().chain(s.peer_dst.iter()) {
                    if r.buf != BufId::INPUT && r.buf != BufId::OUTPUT {
                        return fail("direct access to a buffer that is not in the buffer table");
                    }
                }
                let range = |k: usize, r: Region| {
                    byte_range(&mems[k], r, s.count, es).map_err(|e| format!("{}: {e}", at()))
                };
                // (rank, bytes) read and written by the step.
                let mut ins = Vec::new();
                let mut outs = Vec::new();
                if let Some(r) = s.src {
                    ins.push((rank, range(rank, r)?));
                }
                if let (Some(r), Some(k)) = (s.peer_src, s.recv) {
                    ins.push((k as usize, range(k as usize, r)?));
                }
                if let Some(r) = s.dst {
                    outs.push((rank, range(rank, r)?));
                }
                if let (Some(r), Some(k)) = (s.peer_dst, s.send) {
                    outs.push((k as usize, range(k as usize, r)?));
                }
                for (ka, a) in &ins {
                    for (kb, b) in &outs {
                        if ka == kb && a != b && overlap(a, b) {
                            return fail("src and dst overlap partially");
                        }
                    }
                }
                for (k, b) in ins {
                    touches[k][id(ch, c)].push(b);
                }
                for (k, b) in outs {
                    touches[k][id(ch, c)].push(b.clone());
                    writes[k][id(ch, c)].push(b);
                }
            }
        }
    }
    for (k, (w, t)) in writes.into_iter().zip(touches).enumerate() {
        let w: Vec<_> = w.into_iter().map(merged).collect();
        let t: Vec<_> = t.into_iter().map(merged).collect();
        for (a, w) in w.iter().enumerate() {
            for (b, t) in t.iter().enumerate() {
                if a != b
                    && let Some(x) = intersects(w, t)
                {
                    return Err(format!(
                        "rank {k}: channel {a} writes arena byte {x} that channel {b} also uses \
                         (direct accesses of other ranks included)"
                    ));
                }
            }
        }
    }
    Ok(())
}

fn get8(b: &[u8], i: usize) -> [u8; 8] {
    b[i * 8..i * 8 + 8].try_into().expect("8 bytes")
}

/// The 64-bit types the simulator computes itself; the others go through `crate::reduce` (the
/// host backend's arithmetic, tested on its own), so that plans can be run on narrow types.
fn own_arith(dtype: DataType) -> bool {
    matches!(
        dtype,
        DataType::Int64 | DataType::Uint64 | DataType::Float64
    )
}

/// `a[i] = a[i] ⊕ b[i]`.
fn combine(dtype: DataType, op: ReduceOp, a: &mut [u8], b: &[u8]) {
    if !own_arith(dtype) {
        crate::reduce::accumulate(dtype, op, a, b);
        return;
    }
    for i in 0..a.len() / 8 {
        let (x, y) = (get8(a, i), get8(b, i));
        let v: [u8; 8] = match dtype {
            DataType::Int64 => {
                let (x, y) = (i64::from_le_bytes(x), i64::from_le_bytes(y));
                match op {
                    ReduceOp::Sum => x.wrapping_add(y),
                    ReduceOp::Prod => x.wrapping_mul(y),
                    ReduceOp::Max => x.max(y),
                    ReduceOp::Min => x.min(y),
                }
                .to_le_bytes()
            }
            DataType::Uint64 => {
                let (x, y) = (u64::from_le_bytes(x), u64::from_le_bytes(y));
                match op {
                    ReduceOp::Sum => x.wrapping_add(y),
                    ReduceOp::Prod => x.wrapping_mul(y),
                    ReduceOp::Max => x.max(y),
                    ReduceOp::Min => x.min(y),
                }
                .to_le_bytes()
            }
            DataType::Float64 => {
                let (x, y) = (f64::from_le_bytes(x), f64::from_le_bytes(y));
                match op {
                    ReduceOp::Sum => x + y,
                    ReduceOp::Prod => x * y,
                    ReduceOp::Max => x.max(y),
                    ReduceOp::Min => x.min(y),
                }
                .to_le_bytes()
            }
            other => panic!("the simulator does not reduce {other:?}"),
        };
        a[i * 8..i * 8 + 8].copy_from_slice(&v);
    }
}

fn scale(dtype: DataType, a: &mut [u8], s: [u8; 8]) {
    if !own_arith(dtype) {
        crate::reduce::pre_scale(dtype, a, &Scalar { bytes: s });
        return;
    }
    for i in 0..a.len() / 8 {
        let x = get8(a, i);
        let v = match dtype {
            DataType::Int64 => i64::from_le_bytes(x)
                .wrapping_mul(i64::from_le_bytes(s))
                .to_le_bytes(),
            DataType::Uint64 => u64::from_le_bytes(x)
                .wrapping_mul(u64::from_le_bytes(s))
                .to_le_bytes(),
            DataType::Float64 => (f64::from_le_bytes(x) * f64::from_le_bytes(s)).to_le_bytes(),
            other => panic!("the simulator does not scale {other:?}"),
        };
        a[i * 8..i * 8 + 8].copy_from_slice(&v);
    }
}

fn divide(dtype: DataType, a: &mut [u8], n: u32) {
    if !own_arith(dtype) {
        crate::reduce::post_divide(dtype, a, n);
        return;
    }
    for i in 0..a.len() / 8 {
        let x = get8(a, i);
        let v = match dtype {
            DataType::Int64 => (i64::from_le_bytes(x) / i64::from(n)).to_le_bytes(),
            DataType::Uint64 => (u64::from_le_bytes(x) / u64::from(n)).to_le_bytes(),
            DataType::Float64 => (f64::from_le_bytes(x) / f64::from(n)).to_le_bytes(),
            other => panic!("the simulator does not divide {other:?}"),
        };
        a[i * 8..i * 8 + 8].copy_from_slice(&v);
    }
}

/// Messages a device FIFO is modelled to hold per (sender, receiver, FIFO channel).
const FIFO_MESSAGES: usize = 2;

/// One message in flight: the sender's FIFO channel index, the bytes, and whether they are (a
/// prefix of) the sender's buffer table rather than data.
struct Message {
    fifo: usize,
    bytes: Vec<u8>,
    published: bool,
}

/// Messages in flight per (sender, receiver, tag), and their number per (sender, receiver,
/// FIFO channel).
#[derive(Default)]
struct Mailbox {
    queues: HashMap<(u32, u32, u64), VecDeque<Message>>,
    in_flight: HashMap<(u32, u32, usize), usize>,
}

impl Mailbox {
    fn push(&mut self, from: u32, to: u32, tag: u64, m: Message) {
        *self.in_flight.entry((from, to, m.fifo)).or_default() += 1;
        self.queues.entry((from, to, tag)).or_default().push_back(m);
    }
    fn pop(&mut self, from: u32, to: u32, tag: u64) -> Option<Message> {
        let m = self.queues.get_mut(&(from, to, tag))?.pop_front()?;
        *self
            .in_flight
            .get_mut(&(from, to, m.fifo))
            .expect("counted when sent") -= 1;
        Some(m)
    }
    fn has(&self, from: u32, to: u32, tag: u64) -> bool {
        self.queues
            .get(&(from, to, tag))
            .is_some_and(|q| !q.is_empty())
    }
    fn in_flight(&self, from: u32, to: u32, fifo: usize) -> usize {
        self.in_flight.get(&(from, to, fifo)).copied().unwrap_or(0)
    }
}

/// A buffer table as `publish` sends it.
type Table = [u8; TABLE_BYTES as usize];

/// Bits of an address that hold the arena offset; the rank sits above them.
const ADDR_RANK_SHIFT: u32 = 48;

/// The simulated address of buffer `b` of `rank` (0 when the buffer is not bound).
fn address(rank: usize, mem: &RankMem, b: BufId) -> u64 {
    mem.bufs.get(&b).map_or(0, |p| {
        ((rank as u64) << ADDR_RANK_SHIFT) | (p.byte_off as u64 + 1)
    })
}

/// The buffer table of `rank`: input address, output address, exposed flag.
fn own_table(rank: usize, d: &WorkDesc, mem: &RankMem) -> Table {
    let mut t = [0u8; TABLE_BYTES as usize];
    t[0..8].copy_from_slice(&address(rank, mem, BufId::INPUT).to_le_bytes());
    t[8..16].copy_from_slice(&address(rank, mem, BufId::OUTPUT).to_le_bytes());
    t[16..24].copy_from_slice(&u64::from(d.exposed).to_le_bytes());
    t
}

fn table_word(t: &Table, i: usize) -> u64 {
    u64::from_le_bytes(t[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
}

/// What one (rank, channel) lane knows about a zero-copy plan.
#[derive(Debug, Clone)]
struct Lane {
    /// Buffer tables by rank: this rank's own from the start, the others once learned.
    tables: Vec<Option<Table>>,
    /// The branch taken, once decided (true: zero copy).
    branch: Option<bool>,
}

/// Where `region` of rank `k` lies in `k`'s arena, as the lane of `rank` on `channel` reaches it
/// directly: through the table it learned from `k`, while `k`'s lane of the channel still runs.
#[allow(clippy::too_many_arguments)]
fn direct_range(
    rank: usize,
    channel: usize,
    lane: &Lane,
    mems: &[RankMem],
    done: &[Vec<bool>],
    k: usize,
    region: Region,
    count: u64,
    esize: usize,
) -> Result<std::ops::Range<usize>, String> {
    let t = lane.tables[k]
        .as_ref()
        .ok_or_else(|| format!("accesses rank {k}'s buffers without having learned its table"))?;
    if k != rank && table_word(t, 2) == 0 {
        return Err(format!(
            "accesses rank {k}'s buffers, but rank {k} did not expose them"
        ));
    }
    if done[k].get(channel).is_none_or(|&d| d) {
        return Err(format!(
            "accesses rank {k}'s buffers after rank {k}'s channel {channel} finished (the \
             owner may already reuse them: missing synchronisation)"
        ));
    }
    let addr = match region.buf {
        BufId::INPUT => table_word(t, 0),
        BufId::OUTPUT => table_word(t, 1),
        other => return Err(format!("buffer {other:?} is not in rank {k}'s table")),
    };
    if addr == 0 {
        return Err(format!(
            "rank {k} published no address for {:?}",
            region.buf
        ));
    }
    let range = byte_range(&mems[k], region, count, esize)?;
    let base = (addr & ((1 << ADDR_RANK_SHIFT) - 1)) as usize - 1;
    if (addr >> ADDR_RANK_SHIFT) as usize != k
        || range.start != base + region.offset as usize * esize
    {
        return Err(format!(
            "the table learned from rank {k} does not describe rank {k}'s buffers"
        ));
    }
    Ok(range)
}

/// Applies the reduction's pre-scale (PreMulSum) to an operand that is a rank's own input.
fn pre_scale(d: &WorkDesc, v: &mut [u8]) -> Result<(), String> {
    match d.reduction.pre_scale {
        None => Ok(()),
        Some(ScalarSource::Immediate(sc)) => {
            scale(d.dtype, v, sc.bytes);
            Ok(())
        }
        Some(ScalarSource::Device(_)) => Err("the simulator has no device scalars".into()),
    }
}

/// Runs step `s` of `rank`'s lane on `channel`. `done[r][c]`: rank `r`'s channel `c` finished.
#[allow(clippy::too_many_arguments)]
fn exec(
    rank: usize,
    channel: usize,
    d: &WorkDesc,
    mems: &mut [RankMem],
    lane: &mut Lane,
    done: &[Vec<bool>],
    s: &Step,
    mail: &mut Mailbox,
) -> Result<usize, String> {
    if let (Some(want), Some(k)) = (s.pair_in_place, s.send) {
        let in_place = |r: usize| {
            let t = lane.tables[r].ok_or("a pair's step before its peer's table")?;
            Ok::<bool, String>(table_word(&t, 0) == table_word(&t, 1))
        };
        if (in_place(rank)? || in_place(k as usize)?) != want {
            return Ok(0);
        }
    }
    let es = d.dtype.size();
    let nbytes = s.count as usize * es;
    let me = rank as u32;
    let fifo = d.channels[channel].fifo_index(channel);
    let mut direct = 0;
    let received = match (s.recv, s.peer_src) {
        (Some(k), Some(region)) => {
            let range = direct_range(
                rank, channel, lane, mems, done, k as usize, region, s.count, es,
            )?;
            direct += 1;
            let mut v = mems[k as usize].arena[range].to_vec();
            if s.pre_recv {
                pre_scale(d, &mut v)?;
            }
            Some(v)
        }
        (Some(p), None) => {
            let m = mail
                .pop(p, me, s.tag)
                .ok_or("receive scheduled without a message")?;
            // Device transports have one FIFO per (peer, FIFO channel): a message between two
            // ranks must travel on the same FIFO index at both ends (self-messages use loopback).
            if p != me && m.fifo != fifo {
                return Err(format!(
                    "rank {rank} receives on FIFO channel {fifo} a message rank {p} sent on \
                     FIFO channel {} (tag {:#x}): device FIFOs are per channel",
                    m.fifo, s.tag
                ));
            }
            if m.bytes.len() != nbytes {
                return Err(format!(
                    "rank {rank} receives {} elements from {p} with tag {:#x}, but the matching \
                     send carried {}",
                    s.count,
                    s.tag,
                    m.bytes.len() / es
                ));
            }
            let discards = s.src.is_none() && s.dst.is_none() && s.send.is_none();
            if s.learn {
                if !m.published {
                    return Err(format!("learns a buffer table, but rank {p} sent data"));
                }
                let t: Table = m.bytes[..]
                    .try_into()
                    .map_err(|_| format!("rank {p}'s table is truncated"))?;
                let slot = &mut lane.tables[p as usize];
                if slot.is_some() {
                    return Err(format!("learns rank {p}'s table twice"));
                }
                *slot = Some(t);
                return Ok(direct);
            }
            match (m.published, discards) {
                (true, true) => return Ok(direct),
                (true, false) => {
                    return Err(format!(
                        "uses rank {p}'s buffer table as data (only learn steps and bare \
                         receives may take it)"
                    ));
                }
                (false, true) => {
                    return Err(format!("receives data from rank {p} and drops it"));
                }
                (false, false) => Some(m.bytes),
            }
        }
        (None, _) => None,
    };
    let local = if s.publish {
        let t = lane.tables[rank].expect("a lane knows its own table");
        Some(t[..nbytes].to_vec())
    } else {
        match s.src {
            Some(r) => {
                let range = byte_range(&mems[rank], r, s.count, es)?;
                let mut v = mems[rank].arena[range].to_vec();
                if s.pre_op {
                    pre_scale(d, &mut v)?;
                }
                Some(v)
            }
            None => None,
        }
    };
    // `v` goes to `dst` and the peers; a swap sends `ours` to the peer instead (both operands
    // were read above, before either write).
    let (v, ours) = if s.swap {
        let (theirs, ours) = received.zip(local).ok_or("swap without both operands")?;
        (theirs, Some(ours))
    } else {
        let mut v = match (received, local) {
            (Some(mut a), Some(b)) => {
                combine(d.dtype, d.reduction.op, &mut a, &b);
                a
            }
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => return Err("step without input".into()),
        };
        if s.post_op
            && let Some(n) = d.reduction.post_div
        {
            divide(d.dtype, &mut v, n);
        }
        (v, None)
    };
    if let Some(r) = s.dst {
        let range = byte_range(&mems[rank], r, s.count, es)?;
        mems[rank].arena[range].copy_from_slice(&v);
    }
    match (s.send, s.peer_dst) {
        (Some(k), Some(region)) => {
            let range = direct_range(
                rank, channel, lane, mems, done, k as usize, region, s.count, es,
            )?;
            direct += 1;
            mems[k as usize].arena[range].copy_from_slice(ours.as_ref().unwrap_or(&v));
        }
        (Some(p), None) => {
            mail.push(
                me,
                p,
                s.tag,
                Message {
                    fifo,
                    bytes: v,
                    published: s.publish,
                },
            );
        }
        (None, _) => {}
    }
    Ok(direct)
}

/// Moves `next` past the steps of rank `r`'s lane on channel `c` that belong to the branch the
/// lane does not take (they cost nothing), choosing the branch at the lane's first step that is
/// not on `Path::Always`. Returns how many steps it skipped.
fn skip(
    n: usize,
    r: usize,
    c: usize,
    steps: &[Step],
    next: &mut usize,
    lane: &mut Lane,
) -> Result<usize, String> {
    let mut skipped = 0;
    while let Some(s) = steps.get(*next)
        && s.path != Path::Always
    {
        let zero_copy = match lane.branch {
            Some(b) => b,
            None => {
                let missing: Vec<usize> = (0..n).filter(|&k| lane.tables[k].is_none()).collect();
                if !missing.is_empty() {
                    return Err(format!(
                        "rank {r} channel {c} step {next} {s:?}: chooses a branch before \
                         learning the buffer tables of ranks {missing:?}"
                    ));
                }
                let b = lane.tables.iter().flatten().all(|t| table_word(t, 2) != 0);
                lane.branch = Some(b);
                b
            }
        };
        if zero_copy == (s.path == Path::ZeroCopy) {
            break;
        }
        *next += 1;
        skipped += 1;
    }
    Ok(skipped)
}

/// Runs the plans of all ranks (`descs[r]` on `mems[r]`) to completion or to a reported failure.
pub fn run(descs: &[WorkDesc], mems: &mut [RankMem], seed: u64) -> Result<Stats, String> {
    let n = descs.len();
    assert_eq!(n, mems.len());
    for (d, m) in descs.iter().zip(mems.iter_mut()) {
        if d.scratch_elems > 0 {
            let off = m.arena.len();
            m.arena
                .resize(off + d.scratch_elems as usize * d.dtype.size(), 0xEE);
            m.bufs.insert(
                BufId::SCRATCH,
                Placement {
                    byte_off: off,
                    elems: d.scratch_elems,
                },
            );
        }
    }
    check_static(descs, mems)?;
    // Next step of each (rank, channel), whether it finished, and what it knows.
    let mut next: Vec<Vec<usize>> = descs.iter().map(|d| vec![0; d.channels.len()]).collect();
    let mut done: Vec<Vec<bool>> = descs
        .iter()
        .map(|d| d.channels.iter().map(|c| c.steps.is_empty()).collect())
        .collect();
    let mut lanes: Vec<Vec<Lane>> = descs
        .iter()
        .enumerate()
        .map(|(r, d)| {
            let mut tables = vec![None; n];
            tables[r] = Some(own_table(r, d, &mems[r]));
            vec![
                Lane {
                    tables,
                    branch: None
                };
                d.channels.len()
            ]
        })
        .collect();
    // Lanes with steps left, as (rank, channel).
    let mut active: Vec<(usize, usize)> = descs
        .iter()
        .enumerate()
        .flat_map(|(r, d)| (0..d.channels.len()).map(move |c| (r, c)))
        .filter(|&(r, c)| !done[r][c])
        .collect();
    let mut mail = Mailbox::default();
    let mut stats = Stats::default();
    let mut rng = seed | 1;
    let mut next_rand = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    while !active.is_empty() {
        let mut progress = false;
        let start = (next_rand() % active.len() as u64) as usize;
        for k in 0..active.len() {
            let (r, c) = active[(start + k) % active.len()];
            let budget = 1 + next_rand() % 4;
            for _ in 0..budget {
                let steps = &descs[r].channels[c].steps;
                stats.skipped += skip(n, r, c, steps, &mut next[r][c], &mut lanes[r][c])?;
                let i = next[r][c];
                if i >= steps.len() {
                    done[r][c] = true;
                    break;
                }
                let s = &steps[i];
                let at = || format!("rank {r} channel {c} step {i} {s:?}");
                if s.peer_src.is_none()
                    && let Some(p) = s.recv
                    && !mail.has(p, r as u32, s.tag)
                {
                    break;
                }
                // Bounded FIFOs, as on devices: at most FIFO_MESSAGES messages in flight per
                // (sender, receiver, FIFO channel). Device FIFOs hold one chunk with a slot to spare
                // and stream slot by slot, which this atomic model approximates with two
                // messages; a plan that queues more (many sends before a receive) hangs a GPU.
                if s.peer_dst.is_none()
                    && let Some(p) = s.send
                    && p != r as u32
                    && mail.in_flight(r as u32, p, descs[r].channels[c].fifo_index(c))
                        >= FIFO_MESSAGES
                {
                    break;
                }
                stats.direct += exec(r, c, &descs[r], mems, &mut lanes[r][c], &done, s, &mut mail)
                    .map_err(|e| format!("{}: {e}", at()))?;
                stats.steps += 1;
                stats.messages += usize::from(s.send.is_some() && s.peer_dst.is_none());
                next[r][c] += 1;
                // A lane is done as soon as only steps of the other branch are left.
                stats.skipped += skip(n, r, c, steps, &mut next[r][c], &mut lanes[r][c])?;
                done[r][c] = next[r][c] == steps.len();
                progress = true;
            }
        }
        if !progress {
            let mut msg = String::from("deadlock; stuck steps:\n");
            for &(r, c) in &active {
                let steps = &descs[r].channels[c].steps;
                let i = next[r][c];
                let _ = writeln!(
                    msg,
                    "  rank {r} channel {c} step {i}/{}: {:?}",
                    steps.len(),
                    steps[i]
                );
            }
            for ((f, t, tag), q) in &mail.queues {
                if !q.is_empty() {
                    let _ = writeln!(
                        msg,
                        "  pending {} message(s) {f}->{t} tag {tag:#x}",
                        q.len()
                    );
                }
            }
            return Err(msg);
        }
        active.retain(|&(r, c)| !done[r][c]);
    }
    for ((f, t, tag), q) in &mail.queues {
        if !q.is_empty() {
            return Err(format!(
                "{} message(s) {f}->{t} with tag {tag:#x} were never received",
                q.len()
            ));
        }
    }
    let decided: Vec<(usize, usize, bool)> = lanes
        .iter()
        .enumerate()
        .flat_map(|(r, l)| {
            l.iter()
                .enumerate()
                .filter_map(move |(c, l)| l.branch.map(|b| (r, c, b)))
        })
        .collect();
    if let (Some(a), Some(b)) = (decided.iter().find(|x| x.2), decided.iter().find(|x| !x.2)) {
        return Err(format!(
            "lanes took different branches: rank {} channel {} zero copy, rank {} channel {} \
             fallback",
            a.0, a.1, b.0, b.1
        ));
    }
    stats.zero_copy_lanes = decided.iter().filter(|x| x.2).count();
    stats.fallback_lanes = decided.len() - stats.zero_copy_lanes;
    Ok(stats)
}

#[cfg(test)]
mod tests;
