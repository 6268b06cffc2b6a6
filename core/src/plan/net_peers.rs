//! Which peers a rank's ring and tree plans reach, and how many channels the other NET peers
//! get.
//!
//! Every NET pair has a network connection (sockets, helper threads, pinned FIFOs) per channel
//! it may use. Ring and tree plans use every channel, but only between ring neighbours and tree
//! links; direct plans (AlltoAll, send/receive, gather, scatter, small collectives up to 16
//! ranks) reach every rank. So a pair that no ring or tree joins gets [`per_net_peer_channels`]
//! channels (NCCL's `NCCL_NCHANNELS_PER_NET_PEER`, 2 by default), and where such a pair exists
//! direct plans stay within that many channels; the transport connects it on first use. With the 8 channels of the built-in sockets, 64 ranks on 8
//! hosts would otherwise open about 60 x 8 connections per rank.

#![forbid(unsafe_code)]

use super::HostLayout;
use super::tree::tree_peers;
use crate::config::{Env, vars};

/// The ranks `rank`'s ring and tree plans exchange data with: its ring neighbours and its links
/// in the trees of every channel. Symmetric: `q` is among `p`'s exactly when `p` is among `q`'s.
pub fn plan_peers(h: &HostLayout, rank: u32) -> Vec<u32> {
    let mut v = vec![h.ring_add(rank, 1), h.ring_sub(rank, 1)];
    v.extend(tree_peers(h, rank));
    v.retain(|&p| p != rank);
    v.sort_unstable();
    v.dedup();
    v
}

/// Whether some pair of ranks on different hosts is joined by no ring or tree: then it gets
/// fewer channels, and direct plans must fit them. The same answer on every rank.
pub fn some_pair_unplanned(h: &HostLayout) -> bool {
    (0..h.nranks()).any(|r| {
        let planned = plan_peers(h, r);
        (0..h.nranks()).any(|p| h.host_of(p) != h.host_of(r) && planned.binary_search(&p).is_err())
    })
}

/// Channels of a NET pair that no ring or tree joins: `NCCL_NCHANNELS_PER_NET_PEER` (1 to
/// `channels`), 2 by default as in NCCL.
pub fn per_net_peer_channels(channels: u32) -> u32 {
    per_net_peer_channels_from(Env::PROCESS, channels)
}

/// [`per_net_peer_channels`] with the variable from `env`.
fn per_net_peer_channels_from(env: Env<'_>, channels: u32) -> u32 {
    env.get(&vars::NCCL_NCHANNELS_PER_NET_PEER)
        .clamp(1, channels.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datatype::{DataType, RedOp, Reduction};
    use crate::plan::{Algorithm, CollKind, CollRequest, Protocol, algorithms_for, build_coll};

    fn layout(hosts: &[u32]) -> std::sync::Arc<HostLayout> {
        HostLayout::from_keys(hosts).expect("several hosts")
    }

    const LAYOUTS: [&[u32]; 5] = [
        &[0, 1],
        &[0, 1, 2, 3],
        &[0, 1, 2, 3, 4, 5, 6, 7],
        &[0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5],
        &[0, 1, 0, 1, 2, 2, 3],
    ];

    #[test]
    fn plan_peers_are_symmetric() {
        for hosts in LAYOUTS {
            let h = layout(hosts);
            for r in 0..h.nranks() {
                for p in plan_peers(&h, r) {
                    assert!(plan_peers(&h, p).contains(&r), "{hosts:?}: {r} -> {p}");
                }
            }
        }
    }

    #[test]
    fn small_layouts_plan_every_pair_and_larger_ones_do_not() {
        assert!(!some_pair_unplanned(&layout(&[0, 1])));
        assert!(!some_pair_unplanned(&layout(&[0, 1, 2, 3])));
        assert!(some_pair_unplanned(&layout(&[0, 1, 2, 3, 4, 5, 6, 7])));
        let hosts: Vec<u32> = (0..64).map(|r| r / 8).collect();
        let h = layout(&hosts);
        assert!(some_pair_unplanned(&h));
        let across = |r: u32| {
            plan_peers(&h, r)
                .into_iter()
                .filter(|&p| h.host_of(p) != h.host_of(r))
                .count()
        };
        assert!(
            (0..64).all(|r| across(r) <= 5),
            "a few peers across hosts each"
        );
    }

    /// Ring and tree plans send to and receive from plan peers and ranks of their own host only.
    #[test]
    fn ring_and_tree_plans_stay_on_plan_peers() {
        for hosts in LAYOUTS {
            let h = layout(hosts);
            let n = h.nranks();
            for kind in [
                CollKind::AllReduce,
                CollKind::Broadcast,
                CollKind::Reduce,
                CollKind::AllGather,
                CollKind::ReduceScatter,
            ] {
                for &algo in algorithms_for(kind) {
                    if algo == Algorithm::Direct {
                        continue;
                    }
                    for rank in 0..n {
                        let peers = plan_peers(&h, rank);
                        for root in [0, n - 1] {
                            let w = build_coll(&CollRequest {
                                kind,
                                rank,
                                nranks: n,
                                count: 4096,
                                root,
                                layout: None,
                                dtype: DataType::Float32,
                                reduction: Reduction::lower(RedOp::Sum, 8),
                                seq: 1,
                                algo,
                                proto: Protocol::Simple,
                                nchannels: 4,
                                chunk_elems: 256,
                                hosts: Some(h.clone()),
                            })
                            .unwrap();
                            let touched = w.channels.iter().flat_map(|c| &c.steps);
                            for p in touched.flat_map(|s| s.recv.into_iter().chain(s.send)) {
                                assert!(
                                    h.host_of(p) == h.host_of(rank) || peers.contains(&p),
                                    "{hosts:?} {kind:?} {algo:?} rank {rank} root {root}: {p}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn per_peer_channels_default_to_two_within_the_channels() {
        let per_net_peer_channels_from = |v: Option<&str>, channels| {
            let f = |k: &str| (k == "NCCL_NCHANNELS_PER_NET_PEER").then(|| v.map(String::from))?;
            super::per_net_peer_channels_from(Env::from_fn(&f), channels)
        };
        assert_eq!(per_net_peer_channels_from(None, 8), 2);
        assert_eq!(per_net_peer_channels_from(Some(" 4"), 8), 4);
        assert_eq!(per_net_peer_channels_from(Some("64"), 8), 8);
        assert_eq!(per_net_peer_channels_from(Some("0"), 8), 1);
        assert_eq!(per_net_peer_channels_from(Some("x"), 8), 2);
        assert_eq!(per_net_peer_channels_from(None, 1), 1);
    }
}
