//! Tree AllReduce: reduce up a binary tree to its root, broadcast the result back down.
//!
//! Latency grows with log2(n) instead of n, which wins over the ring for mid-sized messages at
//! higher rank counts. Odd channels use the mirrored tree (rank n-1-v at position v) so that the
//! ranks that are leaves in one tree carry interior traffic in the other, roughly balancing links
//! as NCCL's double binary tree does.
//!
//! Across hosts the tree has NCCL's shape: the ranks of each host form a chain below the host's
//! first rank, and those leaders form the binary tree (mirrored on odd channels), so each tree
//! edge between hosts is one network connection and the rest stays inside the hosts.

#![forbid(unsafe_code)]

use super::{Builder, Ctx, HostLayout, Region, Step, chunks};

/// Parent and children of `rank` in the tree of channel `c`.
struct Links {
    parent: Option<u32>,
    /// At most two in the heap-shaped tree; a host leader has up to two leaders of other hosts
    /// and the next rank of its own host's chain.
    kids: Vec<u32>,
}

/// The links of `rank`: host-aware when the ranks span several hosts.
fn links_of(ctx: &Ctx, rank: u32, c: u32) -> Links {
    match ctx.hosts {
        Some(h) => host_links(h, rank, c),
        None => links(ctx.n, rank, c),
    }
}

/// Chains inside each host, hanging below the host's first rank; the hosts' first ranks form
/// the heap-shaped tree of channel `c` over the host indices.
fn host_links(h: &HostLayout, rank: u32, c: u32) -> Links {
    let members = h.members(h.host_of(rank));
    let i = h.index_in_host(rank) as usize;
    let mut l = if i == 0 {
        let leader = |host: u32| h.members(host)[0];
        let across = links(h.hosts(), h.host_of(rank), c);
        Links {
            parent: across.parent.map(leader),
            kids: across.kids.into_iter().map(leader).collect(),
        }
    } else {
        Links {
            parent: Some(members[i - 1]),
            kids: Vec::new(),
        }
    };
    if let Some(&next) = members.get(i + 1) {
        l.kids.push(next);
    }
    l
}

/// Every rank `rank` is linked to in the host-aware trees (even and odd channels alike).
pub(crate) fn tree_peers(h: &HostLayout, rank: u32) -> Vec<u32> {
    (0..2)
        .flat_map(|c| {
            let l = host_links(h, rank, c);
            l.parent.into_iter().chain(l.kids)
        })
        .collect()
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
    for c in 0..ctx.nch() {
        let tag = ctx.tag(c);
        let l = links_of(ctx, ctx.r, c);
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
        [k0, rest @ .., last] => {
            b.push(c, step().recv(*k0).own(inp).dst(out));
            for &k in rest {
                b.push(c, step().recv(k).src(out).dst(out));
            }
            step().recv(*last).src(out)
        }
    };
    match l.parent {
        Some(p) => b.push(c, partial.send(p)),
        None => {
            let mut fin = partial.last().dst(out);
            if let Some(&k0) = l.kids.first() {
                fin = fin.send(k0);
            }
            b.push(c, fin);
            for &k in l.kids.iter().skip(1) {
                b.push(c, step().src(out).send(k));
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
    for &k in l.kids.iter().skip(1) {
        b.push(c, Step::new(s, tag).src(out).send(k));
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

    #[test]
    fn host_trees_are_consistent_and_cross_hosts_only_between_leaders() {
        let layouts: Vec<Vec<u32>> = vec![
            vec![0, 0, 1, 1],
            vec![0, 1, 0, 1, 0, 1, 0, 1],
            vec![0, 0, 0, 1, 2, 2, 1, 3, 3, 3, 3],
            (0..9).collect(),
            (0..16).map(|r| r / 8).collect(),
        ];
        for keys in layouts {
            let h = HostLayout::from_keys(&keys).expect("several hosts");
            let n = h.nranks();
            for c in 0..2 {
                let mut roots = 0;
                for r in 0..n {
                    let l = host_links(&h, r, c);
                    assert!(l.kids.len() <= 3, "{keys:?}: rank {r} has {:?}", l.kids);
                    match l.parent {
                        None => roots += 1,
                        Some(p) => assert!(host_links(&h, p, c).kids.contains(&r)),
                    }
                    for k in l.kids {
                        assert_eq!(host_links(&h, k, c).parent, Some(r));
                        if h.host_of(k) != h.host_of(r) {
                            assert_eq!(h.members(h.host_of(k))[0], k, "{keys:?}");
                            assert_eq!(h.members(h.host_of(r))[0], r, "{keys:?}");
                        }
                    }
                }
                assert_eq!(roots, 1, "{keys:?}");
            }
        }
    }
}
