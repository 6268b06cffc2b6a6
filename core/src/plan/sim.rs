//! Test-only simulator: runs the plans of all ranks over an ideal mailbox and checks them.
//!
//! It implements the executor contract literally: a step computes `v = recv(peer) ⊕ pre(src)`,
//! then `post(v)`, then stores `v` to `dst` and sends it to `send`; sends never block; a receive
//! waits for the matching message (same sender, receiver and tag, FIFO). Each rank's buffers live
//! in one byte arena, so in-place aliasing between Input and Output is real. The scheduler picks
//! runnable (rank, channel) lanes in a pseudo-random round-robin order, so plans that depend on
//! one interleaving of concurrent channels fail. Beyond running, it checks statically that no
//! step moves nothing, no src/dst overlap partially, and no two channels of a rank touch the same
//! memory while one of them writes it; and dynamically that matched messages agree on counts and
//! that every message sent is received.

#![forbid(unsafe_code)]

use super::{BufId, Region, Step, WorkDesc};
use crate::datatype::{DataType, ReduceOp, ScalarSource};
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

fn check_static(rank: usize, nranks: usize, d: &WorkDesc, mem: &RankMem) -> Result<(), String> {
    let es = d.dtype.size();
    let mut writes = Vec::new();
    let mut touches = Vec::new();
    for (c, ch) in d.channels.iter().enumerate() {
        let (mut w, mut t) = (Vec::new(), Vec::new());
        for (i, s) in ch.steps.iter().enumerate() {
            let at = || format!("rank {rank} channel {c} step {i} {s:?}");
            if s.count == 0 {
                return Err(format!("{}: moves nothing", at()));
            }
            if s.recv.is_none() && s.src.is_none() {
                return Err(format!("{}: has no input", at()));
            }
            if s.dst.is_none() && s.send.is_none() {
                return Err(format!("{}: has no output", at()));
            }
            if s.pre_op && s.src.is_none() {
                return Err(format!("{}: pre_op without src", at()));
            }
            for p in s.recv.iter().chain(s.send.iter()) {
                if *p as usize >= nranks {
                    return Err(format!("{}: peer out of range", at()));
                }
            }
            let src = s
                .src
                .map(|r| byte_range(mem, r, s.count, es))
                .transpose()
                .map_err(|e| format!("{}: {e}", at()))?;
            let dst = s
                .dst
                .map(|r| byte_range(mem, r, s.count, es))
                .transpose()
                .map_err(|e| format!("{}: {e}", at()))?;
            if let (Some(a), Some(b)) = (&src, &dst)
                && a != b
                && overlap(a, b)
            {
                return Err(format!("{}: src and dst overlap partially", at()));
            }
            t.extend(src);
            if let Some(b) = dst {
                t.push(b.clone());
                w.push(b);
            }
        }
        writes.push(merged(w));
        touches.push(merged(t));
    }
    for (a, w) in writes.iter().enumerate() {
        for (b, t) in touches.iter().enumerate() {
            if a != b
                && let Some(x) = intersects(w, t)
            {
                return Err(format!(
                    "rank {rank}: channel {a} writes arena byte {x} that channel {b} also uses"
                ));
            }
        }
    }
    Ok(())
}

fn get8(b: &[u8], i: usize) -> [u8; 8] {
    b[i * 8..i * 8 + 8].try_into().expect("8 bytes")
}

/// `a[i] = a[i] ⊕ b[i]` for the few types the tests use.
fn combine(dtype: DataType, op: ReduceOp, a: &mut [u8], b: &[u8]) {
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

/// Messages a device FIFO is modelled to hold per (sender, receiver, channel).
const FIFO_MESSAGES: usize = 2;

/// Messages in flight per (sender, receiver, tag), each with the sender's channel index.
type Mailbox = HashMap<(u32, u32, u64), VecDeque<(usize, Vec<u8>)>>;

fn exec(
    rank: u32,
    channel: usize,
    d: &WorkDesc,
    mem: &mut RankMem,
    s: &Step,
    mail: &mut Mailbox,
) -> Result<(), String> {
    let es = d.dtype.size();
    let nbytes = s.count as usize * es;
    let received = match s.recv {
        Some(p) => {
            let (sent_on, m) = mail
                .get_mut(&(p, rank, s.tag))
                .and_then(VecDeque::pop_front)
                .ok_or("receive scheduled without a message")?;
            // Device transports have one FIFO per (peer, channel): a message between two ranks
            // must travel on the same channel index at both ends (self-messages use loopback).
            if p != rank && sent_on != channel {
                return Err(format!(
                    "rank {rank} receives on channel {channel} a message rank {p} sent on channel \
                     {sent_on} (tag {:#x}): device FIFOs are per channel",
                    s.tag
                ));
            }
            if m.len() != nbytes {
                return Err(format!(
                    "rank {rank} receives {} elements from {p} with tag {:#x}, but the matching \
                     send carried {}",
                    s.count,
                    s.tag,
                    m.len() / es
                ));
            }
            Some(m)
        }
        None => None,
    };
    let local = match s.src {
        Some(r) => {
            let range = byte_range(mem, r, s.count, es)?;
            let mut v = mem.arena[range].to_vec();
            if s.pre_op {
                match d.reduction.pre_scale {
                    None => {}
                    Some(ScalarSource::Immediate(sc)) => scale(d.dtype, &mut v, sc.bytes),
                    Some(ScalarSource::Device(_)) => {
                        return Err("the simulator has no device scalars".into());
                    }
                }
            }
            Some(v)
        }
        None => None,
    };
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
    if let Some(r) = s.dst {
        let range = byte_range(mem, r, s.count, es)?;
        mem.arena[range].copy_from_slice(&v);
    }
    if let Some(p) = s.send {
        mail.entry((rank, p, s.tag))
            .or_default()
            .push_back((channel, v));
    }
    Ok(())
}

/// Runs the plans of all ranks (`descs[r]` on `mems[r]`) to completion or to a reported failure.
pub fn run(descs: &[WorkDesc], mems: &mut [RankMem], seed: u64) -> Result<Stats, String> {
    let n = descs.len();
    assert_eq!(n, mems.len());
    for (r, (d, m)) in descs.iter().zip(mems.iter_mut()).enumerate() {
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
        check_static(r, n, d, m)?;
    }
    // (rank, channel, next step)
    let mut lanes: Vec<(usize, usize, usize)> = descs
        .iter()
        .enumerate()
        .flat_map(|(r, d)| (0..d.channels.len()).map(move |c| (r, c, 0)))
        .filter(|&(r, c, _)| !descs[r].channels[c].steps.is_empty())
        .collect();
    let mut mail = Mailbox::new();
    let mut stats = Stats::default();
    let mut rng = seed | 1;
    let mut next_rand = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    while !lanes.is_empty() {
        let mut progress = false;
        let start = (next_rand() % lanes.len() as u64) as usize;
        for k in 0..lanes.len() {
            let li = (start + k) % lanes.len();
            let budget = 1 + next_rand() % 4;
            for _ in 0..budget {
                let (r, c, i) = lanes[li];
                let steps = &descs[r].channels[c].steps;
                if i >= steps.len() {
                    break;
                }
                let s = &steps[i];
                if let Some(p) = s.recv
                    && mail
                        .get(&(p, r as u32, s.tag))
                        .is_none_or(VecDeque::is_empty)
                {
                    break;
                }
                // Bounded FIFOs, as on devices: at most FIFO_MESSAGES messages in flight per
                // (sender, receiver, channel). Device FIFOs hold one chunk with a slot to spare
                // and stream slot by slot, which this atomic model approximates with two
                // messages; a plan that queues more (many sends before a receive) hangs a GPU.
                if let Some(p) = s.send
                    && p != r as u32
                    && mail
                        .iter()
                        .filter(|&(&(f, t, _), _)| f == r as u32 && t == p)
                        .map(|(_, q)| q.iter().filter(|(ch, _)| *ch == c).count())
                        .sum::<usize>()
                        >= FIFO_MESSAGES
                {
                    break;
                }
                exec(r as u32, c, &descs[r], &mut mems[r], s, &mut mail)
                    .map_err(|e| format!("rank {r} channel {c} step {i} {s:?}: {e}"))?;
                stats.steps += 1;
                stats.messages += usize::from(s.send.is_some());
                lanes[li].2 += 1;
                progress = true;
            }
        }
        if !progress {
            let mut msg = String::from("deadlock; stuck steps:\n");
            for &(r, c, i) in &lanes {
                let steps = &descs[r].channels[c].steps;
                let _ = writeln!(
                    msg,
                    "  rank {r} channel {c} step {i}/{}: {:?}",
                    steps.len(),
                    steps[i]
                );
            }
            for ((f, t, tag), q) in &mail {
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
        lanes.retain(|&(r, c, i)| i < descs[r].channels[c].steps.len());
    }
    for ((f, t, tag), q) in &mail {
        if !q.is_empty() {
            return Err(format!(
                "{} message(s) {f}->{t} with tag {tag:#x} were never received",
                q.len()
            ));
        }
    }
    Ok(stats)
}

#[cfg(test)]
mod tests;
