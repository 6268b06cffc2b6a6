//! Which host each rank is on, and the orders across hosts that plans follow.
//!
//! A ring in rank order crosses a host boundary at every rank when the ranks of a host are not
//! numbered together (rank r on host r % 2, say), and each crossing is a trip over the network.
//! Rings therefore visit the ranks host by host ([`HostLayout::ring`]), crossing each boundary
//! once, as NCCL orders its rings by topology; trees chain the ranks of a host and join the hosts
//! in a binary tree (`tree.rs`). With the ranks of each host numbered together the ring order is
//! the rank order, so single-host communicators and torchrun's layout run exactly as before.

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

/// The host of every rank of a communicator that spans several hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLayout {
    /// Host index of each rank, numbered by first appearance in rank order.
    host: Vec<u32>,
    /// The ranks of each host, in rank order.
    members: Vec<Vec<u32>>,
    /// Ranks in ring order: host by host, each host's ranks in rank order.
    ring: Vec<u32>,
    /// Position of each rank in `ring`.
    pos: Vec<u32>,
}

impl HostLayout {
    /// The layout of ranks whose host identities are `keys` (one per rank); `None` when they
    /// all share one host, where plans need no layout.
    pub fn from_keys<K: Eq + Hash>(keys: &[K]) -> Option<Arc<HostLayout>> {
        let mut index: HashMap<&K, u32> = HashMap::new();
        let mut members: Vec<Vec<u32>> = Vec::new();
        let host: Vec<u32> = keys
            .iter()
            .enumerate()
            .map(|(r, k)| {
                let next = members.len() as u32;
                let h = *index.entry(k).or_insert(next);
                if h == next {
                    members.push(Vec::new());
                }
                members[h as usize].push(r as u32);
                h
            })
            .collect();
        if members.len() < 2 {
            return None;
        }
        let ring: Vec<u32> = members.iter().flatten().copied().collect();
        let mut pos = vec![0; ring.len()];
        for (p, &r) in ring.iter().enumerate() {
            pos[r as usize] = p as u32;
        }
        Some(Arc::new(HostLayout {
            host,
            members,
            ring,
            pos,
        }))
    }

    /// Ranks.
    pub fn nranks(&self) -> u32 {
        self.host.len() as u32
    }

    /// Hosts (at least 2).
    pub fn hosts(&self) -> u32 {
        self.members.len() as u32
    }

    /// The fewest and the most ranks one host has.
    pub fn ranks_per_host(&self) -> (u32, u32) {
        let sizes = self.members.iter().map(|m| m.len() as u32);
        (sizes.clone().min().unwrap_or(0), sizes.max().unwrap_or(0))
    }

    /// The host of `rank`.
    pub fn host_of(&self, rank: u32) -> u32 {
        self.host[rank as usize]
    }

    /// The ranks of host `h`, in rank order (the first is the host's leader in trees).
    pub fn members(&self, h: u32) -> &[u32] {
        &self.members[h as usize]
    }

    /// The position of `rank` among the ranks of its host (0 for the host's first rank).
    pub fn index_in_host(&self, rank: u32) -> u32 {
        let members = self.members(self.host_of(rank));
        members
            .iter()
            .position(|&m| m == rank)
            .expect("a rank is a member of its host") as u32
    }

    /// The rank `k` places after `rank` in ring order (`k` may exceed the rank count).
    pub fn ring_add(&self, rank: u32, k: u32) -> u32 {
        let n = u64::from(self.nranks());
        let p = (u64::from(self.pos[rank as usize]) + u64::from(k) % n) % n;
        self.ring[p as usize]
    }

    /// The rank `k` places before `rank` in ring order.
    pub fn ring_sub(&self, rank: u32, k: u32) -> u32 {
        let n = u64::from(self.nranks());
        let p = (u64::from(self.pos[rank as usize]) + n - u64::from(k) % n) % n;
        self.ring[p as usize]
    }

    /// Ranks per load/store-accessible (LSA) team of the device API, NCCL's rule: the teams
    /// are runs of consecutive ranks on one host, all of one size, so the size is the greatest
    /// common divisor of the lengths of the runs of equal hosts in rank order (1 when the
    /// ranks of a host are not numbered together).
    pub fn lsa_size(&self) -> u32 {
        let mut size = 0u32;
        let mut run = 1u32;
        for w in self.host.windows(2) {
            if w[0] == w[1] {
                run += 1;
            } else {
                size = gcd(size, run);
                run = 1;
            }
        }
        gcd(size, run)
    }

    /// The ranks in ring order.
    pub fn ring(&self) -> &[u32] {
        &self.ring
    }

    /// How many times the ring crosses from one host to another.
    pub fn ring_crossings(&self) -> u32 {
        (0..self.nranks())
            .filter(|&r| self.host_of(r) != self.host_of(self.ring_add(r, 1)))
            .count() as u32
    }
}

/// Greatest common divisor (`gcd(0, b) == b`).
fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 { a } else { gcd(b, a % b) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_host_needs_no_layout() {
        assert!(HostLayout::from_keys(&[7, 7, 7]).is_none());
        assert!(HostLayout::from_keys::<u64>(&[]).is_none());
        assert!(HostLayout::from_keys(&["a"]).is_none());
    }

    #[test]
    fn lsa_teams_are_equal_runs_of_one_host() {
        let size = |keys: &[u32]| HostLayout::from_keys(keys).unwrap().lsa_size();
        assert_eq!(size(&[0, 0, 1, 1]), 2);
        assert_eq!(size(&[0, 0, 0, 0, 1, 1, 1, 1]), 4);
        // Hosts of 4 and 2 ranks: teams of 2, the first host holds two of them.
        assert_eq!(size(&[0, 0, 0, 0, 1, 1]), 2);
        assert_eq!(size(&[0, 0, 0, 1, 1]), 1);
        assert_eq!(size(&[0, 1, 0, 1]), 1);
    }

    #[test]
    fn contiguous_hosts_keep_the_rank_order() {
        let l = HostLayout::from_keys(&[5, 5, 9, 9, 9, 1]).unwrap();
        assert_eq!(l.hosts(), 3);
        assert_eq!(l.members(1), &[2, 3, 4]);
        for r in 0..6 {
            assert_eq!(l.ring_add(r, 1), (r + 1) % 6);
            assert_eq!(l.ring_sub(r, 1), (r + 5) % 6);
        }
        assert_eq!(l.ring_crossings(), 3);
    }

    #[test]
    fn interleaved_hosts_are_visited_host_by_host() {
        // Rank r on host r % 2: rank order would cross hosts 6 times, the ring crosses twice.
        let l = HostLayout::from_keys(&[0, 1, 0, 1, 0, 1]).unwrap();
        assert_eq!(l.ring, vec![0, 2, 4, 1, 3, 5]);
        assert_eq!(l.ring_crossings(), 2);
        assert_eq!(l.ring_add(4, 1), 1);
        assert_eq!(l.ring_add(5, 1), 0);
        assert_eq!(l.ring_sub(1, 1), 4);
        assert_eq!(l.ring_add(2, 6 * 5 + 2), 1, "k wraps around");
        for r in 0..6 {
            for k in 0..13 {
                assert_eq!(l.ring_sub(l.ring_add(r, k), k), r);
            }
        }
    }
}
