//! Direct plans: every rank exchanges with every other rank itself, in one hop.
//!
//! Lowest latency for small messages (one hop instead of n-1), and the only shape for
//! AlltoAll(v), Gather and Scatter. Within a chunk every rank issues all its sends before its
//! receives, so the exchange never waits on itself and in-place buffers are read before they are
//! overwritten.

#![forbid(unsafe_code)]

use super::split::split_steps;
use super::{Builder, ChannelWork, Ctx, Path, Region, Step, WorkDesc, chunks, split};

/// Adds the n contributions of one chunk into `acc` strictly in rank order, `x0 ⊕ x1 ⊕ ...`, so
/// that every rank that computes the same sum gets bitwise the same floating-point result.
///
/// A step has only one local operand, so this rank's own contribution cannot be added to a
/// partial sum that is already local. Ranks 0 and 1 fold their own input into the very first
/// step (`x0 ⊕ x1` is one receive plus one local read); any other rank sends its contribution
/// to itself and receives it at its place in the order.
fn reduce_in_rank_order(ctx: &Ctx, b: &mut Builder, c: u32, s: u64, own: Region, acc: Region) {
    let (n, r) = (ctx.n, ctx.r);
    let tag = ctx.tag(c);
    let step = || Step::new(s, tag);
    if n == 1 {
        b.push(c, step().own(own).last().dst(acc));
        return;
    }
    let first_recv = if r <= 1 {
        let mut st = step().recv(1 - r).own(own).dst(acc);
        if n == 2 {
            st = st.last();
        }
        b.push(c, st);
        2
    } else {
        b.push(c, step().own(own).send(r));
        b.push(c, step().recv(0).dst(acc));
        1
    };
    for k in first_recv..n {
        let mut st = step().recv(k).src(acc).dst(acc);
        if k == n - 1 {
            st = st.last();
        }
        b.push(c, st);
    }
}

/// `own` (a local copy of this rank's block) followed by sends of the same source to every
/// other rank, the first send fused into the copy: one step fewer, and the block is read once.
fn copy_then_send(ctx: &Ctx, b: &mut Builder, c: u32, own: Step) {
    if ctx.n == 1 {
        b.push(c, own);
        return;
    }
    b.push(c, own.send(ctx.add(ctx.r, 1)));
    let only_src = Step { dst: None, ..own };
    for k in 2..ctx.n {
        b.push(c, only_src.send(ctx.add(ctx.r, k)));
    }
}

/// One-shot: everyone sends its input to everyone and reduces all n inputs in rank order.
pub(crate) fn all_reduce(ctx: &Ctx, b: &mut Builder) {
    for c in 0..ctx.nch() {
        let tag = ctx.tag(c);
        let (ps, pl) = ctx.part(ctx.req.count, c);
        for (o, s) in chunks(pl, ctx.chunk) {
            let at = ps + o;
            for k in 1..ctx.n {
                let peer = ctx.add(ctx.r, k);
                b.push(c, Step::new(s, tag).own(Region::input(at)).send(peer));
            }
            reduce_in_rank_order(ctx, b, c, s, Region::input(at), Region::output(at));
        }
    }
}

/// The root sends every chunk to every peer.
pub(crate) fn broadcast(ctx: &Ctx, b: &mut Builder) {
    let root = ctx.req.root;
    for c in 0..ctx.nch() {
        let tag = ctx.tag(c);
        let (ps, pl) = ctx.part(ctx.req.count, c);
        for (o, s) in chunks(pl, ctx.chunk) {
            let at = ps + o;
            if ctx.r == root {
                let own = Step::new(s, tag)
                    .src(Region::input(at))
                    .dst(Region::output(at));
                copy_then_send(ctx, b, c, own);
            } else {
                b.push(c, Step::new(s, tag).recv(root).dst(Region::output(at)));
            }
        }
    }
}

/// Everyone sends to the root, which reduces in rank order.
pub(crate) fn reduce(ctx: &Ctx, b: &mut Builder) {
    let root = ctx.req.root;
    for c in 0..ctx.nch() {
        let tag = ctx.tag(c);
        let (ps, pl) = ctx.part(ctx.req.count, c);
        for (o, s) in chunks(pl, ctx.chunk) {
            let at = ps + o;
            if ctx.r == root {
                reduce_in_rank_order(ctx, b, c, s, Region::input(at), Region::output(at));
            } else {
                b.push(c, Step::new(s, tag).own(Region::input(at)).send(root));
            }
        }
    }
}

/// Everyone sends its block to everyone.
pub(crate) fn all_gather(ctx: &Ctx, b: &mut Builder) {
    let count = ctx.req.count;
    for c in 0..ctx.nch() {
        let tag = ctx.tag(c);
        let (ps, pl) = ctx.part(count, c);
        for (o, s) in chunks(pl, ctx.chunk) {
            let at = ps + o;
            let out = |owner: u32| Region::output(u64::from(owner) * count + at);
            copy_then_send(
                ctx,
                b,
                c,
                Step::new(s, tag).src(Region::input(at)).dst(out(ctx.r)),
            );
            for k in 1..ctx.n {
                let peer = ctx.sub(ctx.r, k);
                b.push(c, Step::new(s, tag).recv(peer).dst(out(peer)));
            }
        }
    }
}

/// Everyone sends block p to rank p, which reduces the n blocks in rank order.
pub(crate) fn reduce_scatter(ctx: &Ctx, b: &mut Builder) {
    let count = ctx.req.count;
    for c in 0..ctx.nch() {
        let tag = ctx.tag(c);
        let (ps, pl) = ctx.part(count, c);
        for (o, s) in chunks(pl, ctx.chunk) {
            let at = ps + o;
            let inp = |owner: u32| Region::input(u64::from(owner) * count + at);
            for k in 1..ctx.n {
                let peer = ctx.add(ctx.r, k);
                b.push(c, Step::new(s, tag).own(inp(peer)).send(peer));
            }
            reduce_in_rank_order(ctx, b, c, s, inp(ctx.r), Region::output(at));
        }
    }
}

/// Block p of the input goes to rank p; block p of the output comes from rank p.
pub(crate) fn all_to_all(ctx: &Ctx, b: &mut Builder) {
    let count = ctx.req.count;
    for c in 0..ctx.nch() {
        let tag = ctx.tag(c);
        let (ps, pl) = ctx.part(count, c);
        for (o, s) in chunks(pl, ctx.chunk) {
            let at = ps + o;
            let blk = |p: u32| u64::from(p) * count + at;
            for k in 1..ctx.n {
                let peer = ctx.add(ctx.r, k);
                b.push(
                    c,
                    Step::new(s, tag).src(Region::input(blk(peer))).send(peer),
                );
            }
            b.push(
                c,
                Step::new(s, tag)
                    .src(Region::input(blk(ctx.r)))
                    .dst(Region::output(blk(ctx.r))),
            );
            for k in 1..ctx.n {
                let peer = ctx.sub(ctx.r, k);
                b.push(
                    c,
                    Step::new(s, tag).recv(peer).dst(Region::output(blk(peer))),
                );
            }
        }
    }
}

/// Runs each channel's sends and its receives in two channels on the channel's FIFO index
/// (sends and local copies in one, receives in the other; every channel's send half first),
/// so that a rank sends and receives at once instead of in turns (`plan::split`). Only for
/// plans whose every step sends, receives into a region no later step reads, or copies locally,
/// as AlltoAll's. `order`: this rank, when a receive may overwrite what an earlier send still
/// reads (an in-place AlltoAll, which the caller knows from the buffers); its receives then
/// stay behind the sends before them. Changes nothing and returns false when some step does
/// more.
pub fn split_directions(work: &mut WorkDesc, order: Option<u32>) -> bool {
    let simple = |s: &Step| {
        s.peer_src.is_none()
            && s.peer_dst.is_none()
            && !s.publish
            && !s.learn
            && s.path == Path::Always
            && !(s.recv.is_some() && (s.send.is_some() || s.src.is_some()))
    };
    if work.channels.iter().any(|c| c.fifo.is_some())
        || !work.channels.iter().flat_map(|c| &c.steps).all(simple)
    {
        return false;
    }
    let esize = work.dtype.size() as u64;
    let (send_halves, recv_halves): (Vec<_>, Vec<_>) = std::mem::take(&mut work.channels)
        .into_iter()
        .enumerate()
        .map(|(c, ch)| {
            let c = c as u32;
            let (sends, recvs) = split_steps(ch.steps, order.map(|rank| (rank, c)), esize);
            ((c, sends), (c, recvs))
        })
        .unzip();
    work.channels = send_halves
        .into_iter()
        .chain(recv_halves)
        .filter(|(_, steps)| !steps.is_empty())
        .map(|(c, steps)| ChannelWork {
            steps,
            fifo: Some(c),
        })
        .collect();
    true
}

/// Moves every step that only copies locally (no send, no receive, nothing of a peer's) into
/// channels of their own after all others, one per channel that had some, so the copies run
/// beside the channels' sends and receives instead of between them. Only for plans whose local
/// copies touch regions no other step of the rank reads or writes, as this rank's own block in
/// Scatter, Gather and AlltoAll (in place too: that copy's source is its destination). Peers see
/// the same messages on the same FIFO indices, so each rank may choose alone. Returns whether
/// a copy moved; changes nothing when some channel already names its FIFO index.
pub fn local_copies_apart(work: &mut WorkDesc) -> bool {
    if work.channels.iter().any(|c| c.fifo.is_some()) {
        return false;
    }
    let mut copies = Vec::new();
    for ch in &mut work.channels {
        if ch.steps.iter().any(copies_locally) {
            let (moved, kept): (Vec<Step>, Vec<Step>) = std::mem::take(&mut ch.steps)
                .into_iter()
                .partition(copies_locally);
            ch.steps = kept;
            copies.push(ChannelWork::new(moved));
        }
    }
    let moved = !copies.is_empty();
    work.channels.extend(copies);
    moved
}

/// Whether `s` only copies within this rank, on every branch of the plan.
pub(crate) fn copies_locally(s: &Step) -> bool {
    s.send.is_none()
        && s.recv.is_none()
        && s.peer_src.is_none()
        && s.peer_dst.is_none()
        && !s.publish
        && !s.learn
        && s.path == Path::Always
}

/// AlltoAll with per-peer counts and displacements. The receiver splits its block from a peer
/// exactly as that peer splits the block it sends (same count, same channels, same chunk), so
/// the j-th chunk of a pair's stream on a channel has the same length at both ends.
pub(crate) fn all_to_allv(ctx: &Ctx, b: &mut Builder) {
    let l = ctx
        .req
        .layout
        .as_ref()
        .expect("validate checked the layout");
    let nch = u64::from(ctx.nch());
    let r = ctx.r as usize;
    for c in 0..ctx.nch() {
        let tag = ctx.tag(c);
        let piece = |count: u64, displ: u64, j: u64| {
            let (ps, pl) = split(count, nch, u64::from(c), ctx.grain);
            let (o, s) = (
                j * ctx.chunk,
                pl.saturating_sub(j * ctx.chunk).min(ctx.chunk),
            );
            (displ + ps + o, s)
        };
        let most = (0..ctx.n as usize)
            .map(|p| {
                let sp = split(l.send_counts[p], nch, u64::from(c), ctx.grain).1;
                let rp = split(l.recv_counts[p], nch, u64::from(c), ctx.grain).1;
                sp.max(rp).div_ceil(ctx.chunk)
            })
            .max()
            .unwrap_or(0);
        for j in 0..most {
            for k in 1..ctx.n {
                let peer = ctx.add(ctx.r, k);
                let p = peer as usize;
                let (at, s) = piece(l.send_counts[p], l.send_displs[p], j);
                b.push(c, Step::new(s, tag).src(Region::input(at)).send(peer));
            }
            let (from, s) = piece(l.send_counts[r], l.send_displs[r], j);
            let (to, _) = piece(l.recv_counts[r], l.recv_displs[r], j);
            b.push(
                c,
                Step::new(s, tag)
                    .src(Region::input(from))
                    .dst(Region::output(to)),
            );
            for k in 1..ctx.n {
                let peer = ctx.sub(ctx.r, k);
                let p = peer as usize;
                let (at, s) = piece(l.recv_counts[p], l.recv_displs[p], j);
                b.push(c, Step::new(s, tag).recv(peer).dst(Region::output(at)));
            }
        }
    }
}

/// Everyone sends its block to the root.
pub(crate) fn gather(ctx: &Ctx, b: &mut Builder) {
    let (count, root) = (ctx.req.count, ctx.req.root);
    for c in 0..ctx.nch() {
        let tag = ctx.tag(c);
        let (ps, pl) = ctx.part(count, c);
        for (o, s) in chunks(pl, ctx.chunk) {
            let at = ps + o;
            if ctx.r != root {
                b.push(c, Step::new(s, tag).src(Region::input(at)).send(root));
                continue;
            }
            let out = |p: u32| Region::output(u64::from(p) * count + at);
            b.push(c, Step::new(s, tag).src(Region::input(at)).dst(out(root)));
            for k in 1..ctx.n {
                let peer = ctx.add(root, k);
                b.push(c, Step::new(s, tag).recv(peer).dst(out(peer)));
            }
        }
    }
}

/// The root sends block p to rank p.
pub(crate) fn scatter(ctx: &Ctx, b: &mut Builder) {
    let (count, root) = (ctx.req.count, ctx.req.root);
    for c in 0..ctx.nch() {
        let tag = ctx.tag(c);
        let (ps, pl) = ctx.part(count, c);
        for (o, s) in chunks(pl, ctx.chunk) {
            let at = ps + o;
            if ctx.r != root {
                b.push(c, Step::new(s, tag).recv(root).dst(Region::output(at)));
                continue;
            }
            let inp = |p: u32| Region::input(u64::from(p) * count + at);
            for k in 1..ctx.n {
                let peer = ctx.add(root, k);
                b.push(c, Step::new(s, tag).src(inp(peer)).send(peer));
            }
            b.push(c, Step::new(s, tag).src(inp(root)).dst(Region::output(at)));
        }
    }
}
