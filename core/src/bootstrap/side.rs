//! A side channel over the bootstrap connections for the watchdog and check mode: messages that
//! never go through the data path (which may be the thing that is stuck), with short deadlines,
//! and a non-blocking receive so one background thread can serve every peer.

use super::peers::PeerNet;
use super::wire::Watch;
use super::{Bootstrap, RESERVED_TAG_BIT};
use crate::abort::{AbortFlag, Deadline};
use crate::error::{Error, Result};
use std::sync::Arc;
use std::time::Duration;

use super::mailbox::WaitSpec;

/// Tag of watchdog status requests.
pub(crate) const TAG_STATUS_REQ: u64 = RESERVED_TAG_BIT | 0x5744_0001;
/// Tag of watchdog status answers.
pub(crate) const TAG_STATUS_RESP: u64 = RESERVED_TAG_BIT | 0x5744_0002;
/// Tag of check-mode signatures.
const TAG_CHECK: u64 = RESERVED_TAG_BIT | 0x4348_0001;

/// A handle on a bootstrap's connections usable from another thread, and after the bootstrap
/// is gone (sends then fail, receives find nothing).
#[derive(Clone)]
pub(crate) struct SideChannel {
    net: Arc<PeerNet>,
    rank: u32,
    nranks: u32,
}

impl SideChannel {
    /// This rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks.
    pub fn nranks(&self) -> u32 {
        self.nranks
    }

    /// Sends `data` to `peer` under the reserved `tag`, giving up after `within` (a peer that
    /// stopped cannot hold the caller longer) or once `stop` is raised.
    pub fn send(
        &self,
        peer: u32,
        tag: u64,
        data: &[u8],
        within: Duration,
        stop: &AbortFlag,
    ) -> Result<()> {
        if peer >= self.nranks {
            return Err(Error::arg(format!("side-channel peer {peer} out of range")));
        }
        let watch = Watch::new(Deadline::after(within), Some(stop));
        self.net.send(peer, tag, data, &watch)
    }

    /// Takes one queued message under `tag` from any peer, without waiting.
    pub fn try_recv(&self, tag: u64) -> Option<(u32, Vec<u8>)> {
        let stop = AbortFlag::new();
        for peer in 0..self.nranks {
            if self.net.mailbox.has(peer, tag) {
                let spec = WaitSpec {
                    watch: Watch::new(Deadline::after(Duration::from_nanos(1)), Some(&stop)),
                    timeout: Duration::ZERO,
                    timeout_source: "side channel",
                };
                if let Ok(m) = self.net.mailbox.take(peer, tag, &spec) {
                    return Some((peer, m));
                }
            }
        }
        None
    }

    /// True once `peer` closed its bootstrap connections on purpose (its communicator was
    /// destroyed or aborted).
    pub fn peer_left(&self, peer: u32) -> bool {
        self.net.mailbox.is_closed(peer)
    }

    /// The first peer known dead, as an error (see [`super::PeerLiveness::failure`]).
    pub fn dead_peer(&self) -> Option<Error> {
        self.net.mailbox.probe()
    }
}

impl Bootstrap {
    /// A side channel on this bootstrap's connections.
    pub(crate) fn side_channel(&self) -> SideChannel {
        SideChannel {
            net: self.net.clone(),
            rank: self.rank,
            nranks: self.nranks,
        }
    }

    /// Every rank's check-mode signature, indexed by rank (a ring all-gather on its own tag, so
    /// it never mixes with the bootstrap's other collectives).
    pub(crate) fn exchange_signatures(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.ring_all_gather(TAG_CHECK, mine)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::run_ranks;
    use super::*;
    use std::time::Instant;

    #[test]
    fn side_channel_sends_and_polls_without_waiting() {
        let got = run_ranks(3, |b| {
            let ch = b.side_channel();
            let stop = AbortFlag::new();
            assert!(ch.try_recv(TAG_STATUS_REQ).is_none());
            // Nobody sends before every rank has looked at an empty channel (a predecessor
            // that got here first made the check above fail once in CI).
            b.barrier().unwrap();
            let next = (ch.rank() + 1) % ch.nranks();
            ch.send(
                next,
                TAG_STATUS_REQ,
                &[ch.rank() as u8],
                Duration::from_secs(5),
                &stop,
            )
            .unwrap();
            let t = Instant::now();
            let msg = loop {
                if let Some(m) = ch.try_recv(TAG_STATUS_REQ) {
                    break m;
                }
                assert!(t.elapsed() < Duration::from_secs(5), "no message");
                std::thread::sleep(Duration::from_millis(2));
            };
            let sigs = b.exchange_signatures(&[b.rank() as u8 + 10]).unwrap();
            b.barrier().unwrap();
            (b.rank(), msg, sigs)
        });
        for (r, (from, data), sigs) in got {
            let prev = (r + 2) % 3;
            assert_eq!((from, data), (prev, vec![prev as u8]));
            assert_eq!(sigs, vec![vec![10], vec![11], vec![12]]);
        }
    }
}
