//! Tree AllReduce: reduce up a binary tree to its root, broadcast the result back down.
//!
//! Latency grows with log2(n) instead of n, which wins over the ring for mid-sized messages at
//! higher rank counts. Odd channels use the mirrored tree (rank n-1-v at position v) so that the
//! ranks that are leaves in one tree carry interior traffic in the other, roughly balancing links
//! as NCCL's double binary tree does.

#![forbid(unsafe_code)]

use super::{Builder, Ctx, Region, Step, chunks};

/// Parent and children of `rank` in the heap-shaped tree of channel `c`.
struct Links {
    parent: Option<u32>,
    kids: Vec<u32>,
}

fn links(n: u32, rank: u32, c: u32) -> Links {
    let mirror = c % 2 == 1;
    let to_pos = |x: u32| if mirror { n - 1 - x } else { x };
    // The map is its own inverse.
    let to_rank = to_pos;
    let v = to_pos(rank);
    let parent = (v > 0).then(|| to_rank((v - 1) / 2));
    let kids = [2 * v + 1, 2 * v + 2]
        .into_iter()
        .filter(|&k| k < n)
        .map(to_rank)
        .collect();
    Links { parent, kids }
}

/// How many chunks the reduction runs ahead of the broadcast, so that up and down traffic of
/// different chunks overlap instead of each chunk paying a full round trip. One: device FIFOs
/// hold about a chunk per link and channel, and a deeper lead fills them before the broadcast
/// drains them (the simulator's bounded FIFOs check this).
const LAG: usize = 1;

pub(crate) fn all_reduce(ctx: &Ctx, b: &mut Builder) {
    let n = ctx.n;
    for c in 0..ctx.nch() {
        let tag = ctx.tag(c);
        let l = links(n, ctx.r, c);
        let (ps, pl) = ctx.part(ctx.req.count, c);
        let parts: Vec<(u64, u64)> = chunks(pl, ctx.chunk).collect();
        let lag = LAG;
        for i in 0..parts.len() + lag {
            if let Some(&(o, s)) = parts.get(i) {
                up(b, c, tag, &l, ps + o, s);
            }
            if i >= lag {
                let (o, s) = parts[i - lag];
                down(b, c, tag, &l, ps + o, s);
            }
        }
    }
}

/// Reduction of one chunk at `at`; the root also starts the broadcast.
fn up(b: &mut Builder, c: u32, tag: u64, l: &Links, at: u64, s: u64) {
    let inp = Region::input(at);
    let out = Region::output(at);
    let step = || Step::new(s, tag);
    // Interior nodes keep the partial sum in their own output: it is overwritten by the final
    // value on the way down, and no other step reads it.
    let partial = match l.kids.as_slice() {
        [] => step().own(inp),
        [k] => step().recv(*k).own(inp),
        [k0, k1] => {
            b.push(c, step().recv(*k0).own(inp).dst(out));
            step().recv(*k1).src(out)
        }
        _ => unreachable!("binary tree"),
    };
    match l.parent {
        Some(p) => b.push(c, partial.send(p)),
        None => {
            let mut fin = partial.last().dst(out);
            if let Some(&k0) = l.kids.first() {
                fin = fin.send(k0);
            }
            b.push(c, fin);
            if let Some(&k1) = l.kids.get(1) {
                b.push(c, step().src(out).send(k1));
            }
        }
    }
}

/// Broadcast of one finished chunk from the parent to the children.
fn down(b: &mut Builder, c: u32, tag: u64, l: &Links, at: u64, s: u64) {
    let Some(p) = l.parent else {
        return;
    };
    let out = Region::output(at);
    let mut st = Step::new(s, tag).recv(p).dst(out);
    if let Some(&k0) = l.kids.first() {
        st = st.send(k0);
    }
    b.push(c, st);
    if let Some(&k1) = l.kids.get(1) {
        b.push(c, Step::new(s, tag).src(out).send(k1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trees_are_consistent() {
        for n in 1..40 {
            for c in 0..2 {
                let mut roots = 0;
                for r in 0..n {
                    let l = links(n, r, c);
                    match l.parent {
                        None => roots += 1,
                        Some(p) => assert!(links(n, p, c).kids.contains(&r)),
                    }
                    for k in l.kids {
                        assert_eq!(links(n, k, c).parent, Some(r));
                    }
                }
                assert_eq!(roots, 1);
            }
        }
    }
}
