//! Ring plans: every rank sends to `rank + 1` and receives from `rank - 1`.
//!
//! Bandwidth-optimal for large messages: each link carries `(n-1)/n` of the data per phase.
//! Each channel owns one contiguous part of the data and processes it in chunks, so chunk `k+1`
//! travels while chunk `k` is reduced further down the ring.

#![forbid(unsafe_code)]

use super::{Builder, Ctx, Region, Step, chunks, split};

/// Reduce-scatter then all-gather, one loop of `n` blocks of at most one chunk at a time.
pub(crate) fn all_reduce(ctx: &Ctx, b: &mut Builder) {
    let (n, r) = (ctx.n, ctx.r);
    let count = ctx.req.count;
    let next = ctx.add(r, 1);
    for c in 0..ctx.nch() {
        let tag = ctx.tag(c);
        let (ps, pl) = ctx.part(count, c);
        if n == 1 {
            for (o, s) in chunks(pl, ctx.chunk) {
                let at = ps + o;
                b.push(
                    c,
                    Step::new(s, tag)
                        .own(Region::input(at))
                        .last()
                        .dst(Region::output(at)),
                );
            }
            continue;
        }
        let loop_len = ctx.chunk * u64::from(n);
        for (lo, ll) in chunks(pl, loop_len) {
            // Block `k` of this loop, as (offset in the buffers, length).
            let block = |k: u32| {
                let (bo, bl) = split(ll, u64::from(n), u64::from(k), ctx.grain);
                (ps + lo + bo, bl)
            };
            // Reduce-scatter: at step k this rank adds its share to block r-k and passes it on.
            let (at, len) = block(r);
            b.push(c, Step::new(len, tag).own(Region::input(at)).send(next));
            for k in 1..n - 1 {
                let (at, len) = block(ctx.sub(r, k));
                b.push(
                    c,
                    Step::new(len, tag)
                        .recv(ctx.sub(r, 1))
                        .own(Region::input(at))
                        .send(next),
                );
            }
            // Block r+1 is complete here: finish it and start the all-gather with it.
            let (at, len) = block(ctx.add(r, 1));
            b.push(
                c,
                Step::new(len, tag)
                    .recv(ctx.sub(r, 1))
                    .own(Region::input(at))
                    .last()
                    .dst(Region::output(at))
                    .send(next),
            );
            // All-gather: forward every finished block except the one that stops here.
            for k in 0..n - 1 {
                let (at, len) = block(ctx.sub(r, k));
                let mut s = Step::new(len, tag)
                    .recv(ctx.sub(r, 1))
                    .dst(Region::output(at));
                if k < n - 2 {
                    s = s.send(next);
                }
                b.push(c, s);
            }
        }
    }
}

/// A chain root, root+1, ..., root-1; each rank stores and forwards every chunk.
pub(crate) fn broadcast(ctx: &Ctx, b: &mut Builder) {
    let (n, r) = (ctx.n, ctx.r);
    let root = ctx.req.root;
    let last = ctx.sub(root, 1);
    for c in 0..ctx.nch() {
        let tag = ctx.tag(c);
        let (ps, pl) = ctx.part(ctx.req.count, c);
        for (o, s) in chunks(pl, ctx.chunk) {
            let at = ps + o;
            let mut step = Step::new(s, tag).dst(Region::output(at));
            step = if r == root {
                step.src(Region::input(at))
            } else {
                step.recv(ctx.sub(r, 1))
            };
            if n > 1 && r != last {
                step = step.send(ctx.add(r, 1));
            }
            b.push(c, step);
        }
    }
}

/// A chain root+1, root+2, ..., root that accumulates on the way; only the root stores.
pub(crate) fn reduce(ctx: &Ctx, b: &mut Builder) {
    let (n, r) = (ctx.n, ctx.r);
    let root = ctx.req.root;
    let first = ctx.add(root, 1);
    for c in 0..ctx.nch() {
        let tag = ctx.tag(c);
        let (ps, pl) = ctx.part(ctx.req.count, c);
        for (o, s) in chunks(pl, ctx.chunk) {
            let at = ps + o;
            let mut step = Step::new(s, tag).own(Region::input(at));
            if n > 1 && r != first {
                step = step.recv(ctx.sub(r, 1));
            }
            step = if r == root {
                step.last().dst(Region::output(at))
            } else {
                step.send(ctx.add(r, 1))
            };
            b.push(c, step);
        }
    }
}

/// Every rank's block travels n-1 hops; channel c carries part c of every block.
pub(crate) fn all_gather(ctx: &Ctx, b: &mut Builder) {
    let (n, r) = (ctx.n, ctx.r);
    let count = ctx.req.count;
    let next = ctx.add(r, 1);
    for c in 0..ctx.nch() {
        let tag = ctx.tag(c);
        let (ps, pl) = ctx.part(count, c);
        for (o, s) in chunks(pl, ctx.chunk) {
            let at = ps + o;
            let out = |owner: u32| Region::output(u64::from(owner) * count + at);
            let mut own = Step::new(s, tag).src(Region::input(at)).dst(out(r));
            if n > 1 {
                own = own.send(next);
            }
            b.push(c, own);
            for k in 1..n {
                let mut step = Step::new(s, tag)
                    .recv(ctx.sub(r, 1))
                    .dst(out(ctx.sub(r, k)));
                if k < n - 1 {
                    step = step.send(next);
                }
                b.push(c, step);
            }
        }
    }
}

/// Block b is accumulated along b+1, b+2, ..., b and stored by rank b only.
pub(crate) fn reduce_scatter(ctx: &Ctx, b: &mut Builder) {
    let (n, r) = (ctx.n, ctx.r);
    let count = ctx.req.count;
    let next = ctx.add(r, 1);
    for c in 0..ctx.nch() {
        let tag = ctx.tag(c);
        let (ps, pl) = ctx.part(count, c);
        for (o, s) in chunks(pl, ctx.chunk) {
            let at = ps + o;
            let inp = |owner: u32| Region::input(u64::from(owner) * count + at);
            // Step k handles block r-1-k; the last step (k = n-1) handles block r.
            for k in 0..n {
                let blk = ctx.sub(r, k + 1);
                let mut step = Step::new(s, tag).own(inp(blk));
                if k > 0 {
                    step = step.recv(ctx.sub(r, 1));
                }
                step = if k == n - 1 {
                    step.last().dst(Region::output(at))
                } else {
                    step.send(next)
                };
                b.push(c, step);
            }
        }
    }
}
