//! Zero-copy plans: ranks that share one address space read and write each other's buffers.
//!
//! A FIFO plan copies every byte twice (into the peer's FIFO, out of it) and synchronises per
//! slot. Here the ranks first exchange their buffer tables (input and output addresses) as small
//! LL messages, then read the peers' inputs and write the peers' outputs directly, and finally
//! exchange a token so that nobody leaves while a peer still touches its buffers:
//!
//! 1. every channel sends its table to every peer and learns theirs (this also proves that every
//!    peer has reached the operation, so its input is ready and its output free);
//! 2. if every rank published usable buffers, the zero-copy steps run, then a fence and the
//!    token exchange; otherwise every rank runs the plan the tuner would have run anyway.
//!
//! Every rank decides from the same tables, so all take the same branch. Channel `c` of every rank
//! touches only the channel-`c` part of any buffer, so channels synchronise independently.
//! Reductions are two-shot: rank `r` owns the `r`-th piece of each channel's part, reduces it
//! from every input (its own first, so that in-place operation is safe) and writes the result to
//! every rank, so all ranks hold bitwise the same values.

#![forbid(unsafe_code)]

use super::direct::copies_locally;
use super::{
    Builder, ChannelWork, CollKind, CollRequest, Ctx, Path, Region, Step, TABLE_BYTES, TOKEN_BYTES,
    WorkDesc, split,
};

/// Most ranks a zero-copy plan may span (the kernels keep every peer's table in shared memory).
pub const MAX_RANKS: u32 = 64;

/// Whether `kind` has a zero-copy plan.
pub fn supports(kind: CollKind) -> bool {
    matches!(
        kind,
        CollKind::AllReduce
            | CollKind::AllToAll
            | CollKind::ReduceScatter
            | CollKind::Reduce
            | CollKind::AllGather
            | CollKind::Broadcast
            | CollKind::Gather
            | CollKind::Scatter
    )
}

/// Whether `req` may run as a zero-copy plan: a supported kind, and no PreMulSum. Each rank
/// of a PreMulSum may hold its own scalar, and the rank that reduces a piece reads the other
/// ranks' raw inputs, which it can only scale with its own scalar.
pub fn handles(req: &CollRequest) -> bool {
    supports(req.kind) && req.reduction.pre_scale.is_none()
}

/// Wraps `fallback` (the tuner's plan for `req`) into a zero-copy plan with the same channels.
/// `req.kind` must be [`supports`]ed and there must be at least two ranks; with PreMulSum, every
/// rank must use the same scalar (see [`handles`]). A rank whose AlltoAll buffers overlap other
/// than in place must not expose them. An AlltoAll whose own block the fallback copies in
/// channels of their own (`local_copies_apart`) keeps those channels as they are, on both
/// branches, so the copy runs beside the exchanges with the peers.
pub fn wrap(req: &CollRequest, fallback: WorkDesc) -> WorkDesc {
    debug_assert!(
        fallback.channels.iter().all(|ch| ch.fifo.is_none()),
        "the table exchange uses each channel's own FIFO"
    );
    let ctx = Ctx::new(req);
    let (main, copies): (Vec<ChannelWork>, Vec<ChannelWork>) =
        fallback.channels.into_iter().partition(|ch| {
            req.kind != CollKind::AllToAll
                || ch.steps.is_empty()
                || !ch.steps.iter().all(copies_locally)
        });
    let own_apart = !copies.is_empty();
    let nch = main.len() as u32;
    let mut zc = Builder::new(nch);
    for c in 0..nch {
        match req.kind {
            CollKind::AllToAll => all_to_all(&ctx, &mut zc, c, nch, own_apart),
            CollKind::AllReduce => all_reduce(&ctx, &mut zc, c, nch),
            CollKind::ReduceScatter => reduce_scatter(&ctx, &mut zc, c, nch),
            CollKind::Reduce => reduce(&ctx, &mut zc, c, nch),
            CollKind::AllGather => all_gather(&ctx, &mut zc, c, nch),
            CollKind::Broadcast => broadcast(&ctx, &mut zc, c, nch),
            CollKind::Gather => gather(&ctx, &mut zc, c, nch),
            CollKind::Scatter => scatter(&ctx, &mut zc, c, nch),
            _ => {}
        }
    }
    let esize = req.dtype.size() as u64;
    let channels = main
        .into_iter()
        .zip(zc.channels)
        .enumerate()
        .map(|(c, (fb, zc))| {
            let tag = ctx.tag(c as u32);
            let others = || (1..ctx.n).map(|k| (ctx.add(ctx.r, k), ctx.sub(ctx.r, k)));
            let mut steps = Vec::new();
            for (to, _) in others() {
                let mut st = Step::new(TABLE_BYTES / esize, tag).send(to).ll();
                st.publish = true;
                steps.push(st);
            }
            for (_, from) in others() {
                let mut st = Step::new(TABLE_BYTES / esize, tag).recv(from).ll();
                st.learn = true;
                steps.push(st);
            }
            steps.extend(zc.steps.into_iter().map(|s| s.on(Path::ZeroCopy)));
            for (i, (to, _)) in others().enumerate() {
                let mut st = Step::new(TOKEN_BYTES / esize, tag)
                    .send(to)
                    .ll()
                    .on(Path::ZeroCopy);
                st.publish = true;
                st.fence = i == 0;
                steps.push(st);
            }
            for (_, from) in others() {
                steps.push(
                    Step::new(TOKEN_BYTES / esize, tag)
                        .recv(from)
                        .ll()
                        .on(Path::ZeroCopy),
                );
            }
            steps.extend(fb.steps.into_iter().map(|s| s.on(Path::Fallback)));
            ChannelWork::new(steps)
        })
        .chain(copies)
        .collect();
    WorkDesc {
        channels,
        ..fallback
    }
}

/// This rank's piece of channel `c`'s part of `total` elements, as (offset, length).
fn own_piece(ctx: &Ctx, total: u64, c: u32, nch: u32) -> (u64, u64) {
    let (ps, pl) = split(total, u64::from(nch), u64::from(c), ctx.grain);
    let (o, l) = split(pl, u64::from(ctx.n), u64::from(ctx.r), ctx.grain);
    (ps + o, l)
}

/// Channel `c`'s part of `total` elements.
fn part(ctx: &Ctx, total: u64, c: u32, nch: u32) -> (u64, u64) {
    split(total, u64::from(nch), u64::from(c), ctx.grain)
}

/// `acc = x_r ⊕ x_{r+1} ⊕ ...` over every rank's `input` region, into `acc`; this rank's own
/// input is read first, so an `acc` that aliases it (in place) is never read after being
/// written. The last step also writes the result to `first_push`'s `acc` region, if given.
fn reduce_all(
    ctx: &Ctx,
    b: &mut Builder,
    c: u32,
    len: u64,
    input: Region,
    acc: Region,
    first_push: Option<u32>,
) {
    let tag = ctx.tag(c);
    for k in 1..ctx.n {
        let peer = ctx.add(ctx.r, k);
        let mut st = Step::new(len, tag).read_peer(peer, input).dst(acc);
        st = if k == 1 { st.own(input) } else { st.src(acc) };
        if k == ctx.n - 1 {
            st = st.last();
            if let Some(to) = first_push {
                st = st.write_peer(to, acc);
            }
        }
        b.push(c, st);
    }
}

/// Writes `src` to region `dst` of every other rank; the first write is fused into `first`.
fn push_all(ctx: &Ctx, b: &mut Builder, c: u32, len: u64, first: Step, src: Region, dst: Region) {
    b.push(c, first.write_peer(ctx.add(ctx.r, 1), dst));
    push_rest(ctx, b, c, len, src, dst);
}

/// Writes `src` to region `dst` of ranks r+2, r+3, ...: every other rank but r+1, whose write
/// the caller fused into an earlier step.
fn push_rest(ctx: &Ctx, b: &mut Builder, c: u32, len: u64, src: Region, dst: Region) {
    let tag = ctx.tag(c);
    for k in 2..ctx.n {
        b.push(
            c,
            Step::new(len, tag)
                .src(src)
                .write_peer(ctx.add(ctx.r, k), dst),
        );
    }
}

fn all_reduce(ctx: &Ctx, b: &mut Builder, c: u32, nch: u32) {
    let (at, len) = own_piece(ctx, ctx.req.count, c, nch);
    let (input, output) = (Region::input(at), Region::output(at));
    reduce_all(ctx, b, c, len, input, output, Some(ctx.add(ctx.r, 1)));
    push_rest(ctx, b, c, len, output, output);
}

fn reduce_scatter(ctx: &Ctx, b: &mut Builder, c: u32, nch: u32) {
    let count = ctx.req.count;
    let (at, len) = part(ctx, count, c, nch);
    let input = Region::input(u64::from(ctx.r) * count + at);
    reduce_all(ctx, b, c, len, input, Region::output(at), None);
}

fn reduce(ctx: &Ctx, b: &mut Builder, c: u32, nch: u32) {
    if ctx.r != ctx.req.root {
        return;
    }
    let (at, len) = part(ctx, ctx.req.count, c, nch);
    reduce_all(ctx, b, c, len, Region::input(at), Region::output(at), None);
}

fn all_gather(ctx: &Ctx, b: &mut Builder, c: u32, nch: u32) {
    let count = ctx.req.count;
    let (at, len) = part(ctx, count, c, nch);
    let (src, dst) = (
        Region::input(at),
        Region::output(u64::from(ctx.r) * count + at),
    );
    let own = Step::new(len, ctx.tag(c)).src(src).dst(dst);
    push_all(ctx, b, c, len, own, src, dst);
}

/// Copies `len` elements from region `src` of the root's input to `dst` of this rank's output:
/// the root copies locally, every other rank reads across the link (a rank's SMs load across it
/// faster than they store across it, and the root's own copy runs beside the reads).
fn read_from_root(ctx: &Ctx, b: &mut Builder, c: u32, len: u64, src: Region, dst: Region) {
    let st = Step::new(len, ctx.tag(c)).dst(dst);
    let root = ctx.req.root;
    b.push(
        c,
        if ctx.r == root {
            st.src(src)
        } else {
            st.read_peer(root, src)
        },
    );
}

fn broadcast(ctx: &Ctx, b: &mut Builder, c: u32, nch: u32) {
    let (at, len) = part(ctx, ctx.req.count, c, nch);
    read_from_root(ctx, b, c, len, Region::input(at), Region::output(at));
}

/// Every rank writes its input to the root: the root's own copy runs beside the peers'
/// stores, where reading them would follow it.
fn gather(ctx: &Ctx, b: &mut Builder, c: u32, nch: u32) {
    let count = ctx.req.count;
    let (at, len) = part(ctx, count, c, nch);
    let (src, dst) = (
        Region::input(at),
        Region::output(u64::from(ctx.r) * count + at),
    );
    let st = Step::new(len, ctx.tag(c)).src(src);
    b.push(
        c,
        if ctx.r == ctx.req.root {
            st.dst(dst)
        } else {
            st.write_peer(ctx.req.root, dst)
        },
    );
}

/// Every rank writes its block for each peer into that peer's output (on NVLink that beat
/// reading the peers' inputs: docs/perf/defaults.md). Where the rank or the peer is in place
/// that would overwrite a block before its owner sent it, so such a pair swaps its two blocks
/// instead, the lower rank the first half of each channel's part and the higher the second:
/// one thread reads both elements before it writes either. The own block is copied here or,
/// when `own_apart`, in the fallback's copy channels.
fn all_to_all(ctx: &Ctx, b: &mut Builder, c: u32, nch: u32, own_apart: bool) {
    let count = ctx.req.count;
    let (at, len) = part(ctx, count, c, nch);
    let tag = ctx.tag(c);
    let blk = |p: u32| u64::from(p) * count + at;
    for k in 1..ctx.n {
        let peer = ctx.add(ctx.r, k);
        b.push(
            c,
            Step::new(len, tag)
                .src(Region::input(blk(peer)))
                .write_peer(peer, Region::output(blk(ctx.r)))
                .if_pair_in_place(false),
        );
        let (h, hl) = split(len, 2, u64::from(ctx.r > peer), ctx.grain);
        b.push(
            c,
            Step::new(hl, tag)
                .src(Region::input(blk(peer) + h))
                .dst(Region::output(blk(peer) + h))
                .swap_with(
                    peer,
                    Region::input(blk(ctx.r) + h),
                    Region::output(blk(ctx.r) + h),
                )
                .if_pair_in_place(true),
        );
    }
    if !own_apart {
        b.push(
            c,
            Step::new(len, tag)
                .src(Region::input(blk(ctx.r)))
                .dst(Region::output(blk(ctx.r))),
        );
    }
}

/// Every rank reads its own block of the root's input.
fn scatter(ctx: &Ctx, b: &mut Builder, c: u32, nch: u32) {
    let count = ctx.req.count;
    let (at, len) = part(ctx, count, c, nch);
    let src = Region::input(u64::from(ctx.r) * count + at);
    read_from_root(ctx, b, c, len, src, Region::output(at));
}
