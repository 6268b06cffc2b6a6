//! Per-(peer, tag) FIFO queues filled by reader threads, with waits that end on data, a dead or
//! departed peer, an abort, or a deadline.
//!
//! Reader threads drain every connection into this mailbox as soon as bytes arrive, so a sender
//! never waits for its peer to call `recv`; that is what lets executors send before they receive
//! without deadlocking. Shared by the bootstrap messages and the socket transport.

use super::info::PeerInfo;
use super::process;
use super::wire::{Watch, secs};
use crate::abort::POLL_INTERVAL;
use crate::error::{Error, Result};
use crate::lock::lock;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How often waits look at `/proc` for same-host peers that died without closing their sockets.
const LIVENESS_PERIOD: Duration = Duration::from_millis(100);
/// How long a peer found exited may take to have its goodbye read before it counts as dead,
/// and a peer that closed, to deliver what its newest connection still carries.
const GOODBYE_DRAIN: Duration = Duration::from_millis(200);

/// Which service owns a mailbox (log target and error wording).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Service {
    Bootstrap,
    Net,
}

#[derive(Default)]
struct State {
    queues: HashMap<(u32, u64), VecDeque<Vec<u8>>>,
    /// Peers that closed every connection after a goodbye.
    closed: HashSet<u32>,
    /// Peers known dead, and the first one with its cause (reported by every wait).
    dead: HashSet<u32>,
    first_dead: Option<(u32, String)>,
    local_closed: bool,
}

/// The mailbox of one rank.
pub(crate) struct Mailbox {
    me: u32,
    service: Service,
    state: Mutex<State>,
    cv: Condvar,
    peers: OnceLock<Arc<[PeerInfo]>>,
    next_liveness: Mutex<Instant>,
}

/// What a wait is for, beyond the (peer, tag) it takes from.
pub(crate) struct WaitSpec<'a> {
    pub watch: Watch<'a>,
    /// The timeout behind `watch.deadline`, for the error text.
    pub timeout: Duration,
    /// Where the timeout comes from (e.g. "OXCCL_OP_TIMEOUT"), for the error text.
    pub timeout_source: &'static str,
}

impl Mailbox {
    /// An empty mailbox for rank `me`.
    pub fn new(me: u32, service: Service) -> Mailbox {
        Mailbox {
            me,
            service,
            state: Mutex::new(State::default()),
            cv: Condvar::new(),
            peers: OnceLock::new(),
            next_liveness: Mutex::new(Instant::now()),
        }
    }

    /// Sets the rendezvous table (enables `/proc` liveness checks and named errors).
    pub fn set_peers(&self, peers: Arc<[PeerInfo]>) {
        let _ = self.peers.set(peers);
    }

    /// The rendezvous table, once known.
    pub fn peers(&self) -> Option<&Arc<[PeerInfo]>> {
        self.peers.get()
    }

    /// "rank 3 (pid 1234 on host X)", or "rank 3" before the table is known.
    pub fn describe(&self, rank: u32) -> String {
        match self.peers.get().and_then(|p| p.get(rank as usize)) {
            Some(p) => p.describe(),
            None => format!("rank {rank}"),
        }
    }

    /// Queues a message from `peer`.
    pub fn push(&self, peer: u32, tag: u64, data: Vec<u8>) {
        lock(&self.state)
            .queues
            .entry((peer, tag))
            .or_default()
            .push_back(data);
        self.cv.notify_all();
    }

    /// True when a message from `peer` under `tag` is queued.
    pub fn has(&self, peer: u32, tag: u64) -> bool {
        lock(&self.state)
            .queues
            .get(&(peer, tag))
            .is_some_and(|q| !q.is_empty())
    }

    /// `peer` closed on purpose: waits on it fail once its queue is empty, others are unaffected.
    pub fn mark_closed(&self, peer: u32) {
        let mut st = lock(&self.state);
        if st.local_closed {
            return;
        }
        st.closed.insert(peer);
        drop(st);
        let who = self.describe(peer);
        match self.service {
            Service::Bootstrap => {
                tracing::debug!(target: "oxccl::bootstrap", "rank {}: {who} closed its connections", self.me)
            }
            Service::Net => {
                tracing::debug!(target: "oxccl::net", "rank {}: {who} closed its connections", self.me)
            }
        }
        self.cv.notify_all();
    }

    /// True once `peer` closed every connection after a goodbye (destroyed or aborted).
    pub fn is_closed(&self, peer: u32) -> bool {
        lock(&self.state).closed.contains(&peer)
    }

    /// `peer` died: every wait of this rank fails from now on, whichever peer it waits on,
    /// because ranks waiting on healthy peers may be stuck behind the dead one.
    pub fn mark_dead(&self, peer: u32, why: &str) {
        let mut st = lock(&self.state);
        if st.local_closed || !st.dead.insert(peer) {
            return;
        }
        if st.first_dead.is_none() {
            st.first_dead = Some((peer, why.to_string()));
        }
        drop(st);
        let who = self.describe(peer);
        match self.service {
            Service::Bootstrap => {
                tracing::warn!(target: "oxccl::bootstrap", "rank {}: {who} died: {why}", self.me)
            }
            Service::Net => {
                tracing::warn!(target: "oxccl::net", "rank {}: {who} died: {why}", self.me)
            }
        }
        self.cv.notify_all();
    }

    /// This rank closed: waits fail as "closed", reader threads stop reporting peers.
    pub fn close_local(&self) {
        lock(&self.state).local_closed = true;
        self.cv.notify_all();
    }

    /// The first dead rank after a look at `/proc` (rate-limited), for watchers outside waits
    /// (after set-up, so without the service's "during bootstrap").
    pub fn probe(&self) -> Option<Error> {
        self.check_liveness();
        let st = lock(&self.state);
        st.first_dead
            .as_ref()
            .map(|(r, why)| self.died(*r, why, ""))
    }

    /// The first dead rank, as the error every wait reports.
    pub fn dead_error(&self) -> Option<Error> {
        let st = lock(&self.state);
        st.first_dead
            .as_ref()
            .map(|(r, why)| self.death_error(*r, why))
    }

    fn death_error(&self, rank: u32, why: &str) -> Error {
        let during = match self.service {
            Service::Bootstrap => " during bootstrap",
            Service::Net => "",
        };
        self.died(rank, why, during)
    }

    /// "rank 3 (pid 1234 on host X) died{during}: {why}".
    fn died(&self, rank: u32, why: &str, during: &str) -> Error {
        Error::Remote(format!("{} died{during}: {why}", self.describe(rank)))
    }

    /// Looks at `/proc` for same-host peers (at most every [`LIVENESS_PERIOD`] per mailbox).
    fn check_liveness(&self) {
        {
            let mut next = lock(&self.next_liveness);
            let now = Instant::now();
            if now < *next {
                return;
            }
            *next = now + LIVENESS_PERIOD;
        }
        let Some(peers) = self.peers.get() else {
            return;
        };
        let me = process::current().pid;
        let closed = lock(&self.state).closed.clone();
        for p in peers.iter() {
            // A peer that said goodbye may exit; that is no death.
            if p.rank == self.me
                || p.pid == me
                || !p.shares_proc_with_caller()
                || closed.contains(&p.rank)
            {
                continue;
            }
            if let Err(why) = process::check_alive(p.pid, p.start_time) {
                // A peer that said goodbye and exited at once can be seen gone before its
                // reader took the goodbye; a dead process's socket reads to the end at once.
                std::thread::sleep(GOODBYE_DRAIN);
                if !lock(&self.state).closed.contains(&p.rank) {
                    self.mark_dead(p.rank, &why);
                }
            }
        }
    }

    /// Takes the next message from `peer` under `tag`, waiting as `spec` allows.
    ///
    /// Data that already arrived is delivered even after a death, so ranks that got everything
    /// they need from a peer that then exited still complete.
    pub fn take(&self, peer: u32, tag: u64, spec: &WaitSpec<'_>) -> Result<Vec<u8>> {
        let mut st = lock(&self.state);
        // Until when a peer found closed may still deliver (see below).
        let mut drain_until: Option<Instant> = None;
        loop {
            if let Some(q) = st.queues.get_mut(&(peer, tag))
                && let Some(m) = q.pop_front()
            {
                if q.is_empty() {
                    st.queues.remove(&(peer, tag));
                }
                return Ok(m);
            }
            if let Some((r, why)) = &st.first_dead {
                return Err(self.death_error(*r, why));
            }
            if st.closed.contains(&peer) {
                // Its goodbyes came on every connection registered here, but a connection it
                // opened last may not be registered yet (accepted, its reader not started) and
                // may still hold the message: it gets a short while to deliver.
                let until = *drain_until.get_or_insert_with(|| Instant::now() + GOODBYE_DRAIN);
                let now = Instant::now();
                if now < until {
                    st = self
                        .cv
                        .wait_timeout(st, until - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                    continue;
                }
                return Err(Error::Remote(format!(
                    "{} closed its connection (communicator destroyed or init failed) while \
                     rank {} waited for its message with tag {tag:#x}",
                    self.describe(peer),
                    self.me
                )));
            }
            if st.local_closed {
                return Err(Error::usage(match self.service {
                    Service::Bootstrap => "the bootstrap network was closed",
                    Service::Net => "the socket transport was closed",
                }));
            }
            if spec.watch.aborted() {
                return Err(Error::Aborted);
            }
            if spec.watch.deadline.expired() {
                return Err(Error::Timeout(format!(
                    "rank {}: no message from {} with tag {tag:#x} after {} ({})",
                    self.me,
                    self.describe(peer),
                    secs(spec.timeout),
                    spec.timeout_source
                )));
            }
            if self.peers.get().is_some() && Instant::now() >= *lock(&self.next_liveness) {
                drop(st);
                self.check_liveness();
                st = lock(&self.state);
                continue;
            }
            let slice = spec.watch.deadline.slice(POLL_INTERVAL);
            st = self
                .cv
                .wait_timeout(st, slice)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abort::Deadline;

    fn spec() -> WaitSpec<'static> {
        WaitSpec {
            watch: Watch::new(Deadline::after(Duration::from_secs(5)), None),
            timeout: Duration::from_secs(5),
            timeout_source: "test",
        }
    }

    /// A peer's goodbye on the connections registered here can come before the message on a
    /// connection it opened last, still being accepted: that message is delivered, and only a
    /// queue that stays empty fails.
    #[test]
    fn a_closed_peer_still_delivers_what_its_newest_connection_carries() {
        let mb = Arc::new(Mailbox::new(1, Service::Bootstrap));
        mb.mark_closed(0);
        let late = mb.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            late.push(0, 7, vec![42]);
        });
        assert_eq!(mb.take(0, 7, &spec()).unwrap(), [42]);
        t.join().unwrap();
        let t0 = Instant::now();
        let e = mb.take(0, 7, &spec()).unwrap_err();
        assert!(e.to_string().contains("closed its connection"), "{e}");
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "fails once the drain is over"
        );
    }
}
