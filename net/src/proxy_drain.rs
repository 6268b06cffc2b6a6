//! The last passes of a stopping proxy thread: it keeps sending what the kernels published
//! before the communicator went, so that closing its connections loses nothing a peer waits for.
//!
//! A kernel is done once its last slots are in the send FIFO; the network may take them much
//! later (a peer that has not freed the slots to receive them, a full socket). NCCL's proxy
//! likewise finishes its active operations before it stops. Without this, ranks that finished
//! first and destroyed their communicator left peers waiting for data that never came until
//! they saw the process exit, and results were wrong (CHANGELOG.md, the stopping proxy).

use std::time::{Duration, Instant};

/// How often a drain that waits says so.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// The drain of one proxy thread: until nothing is left to send, or `limit` has passed.
pub(super) struct Drain {
    rank: u32,
    since: Instant,
    limit: Duration,
    next_warning: Duration,
}

impl Drain {
    /// A drain of rank `rank`'s thread starting now.
    pub(super) fn new(rank: u32, limit: Duration) -> Drain {
        Drain {
            rank,
            since: Instant::now(),
            limit,
            next_warning: WARN_EVERY,
        }
    }

    /// Whether to keep going: `any` says some connection still has data to send, `unsent`
    /// names those connections (asked only for the log).
    pub(super) fn goes_on(&mut self, any: bool, unsent: impl FnOnce() -> Vec<String>) -> bool {
        if !any {
            return false;
        }
        let waited = self.since.elapsed();
        if waited >= self.limit {
            tracing::error!(target: "oxccl::net",
                "rank {}: the communicator went with data still unsent after {:?}; closing \
                 anyway: {}", self.rank, self.limit, unsent().join("; "));
            return false;
        }
        if waited >= self.next_warning {
            self.next_warning += WARN_EVERY;
            tracing::warn!(target: "oxccl::net",
                "rank {}: destroying the communicator waits {:.0?} for peers to take what it \
                 sent: {}", self.rank, waited, unsent().join("; "));
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drain_ends_when_nothing_is_left_or_at_its_limit() {
        let mut d = Drain::new(0, Duration::from_secs(60));
        assert!(d.goes_on(true, Vec::new));
        assert!(!d.goes_on(false, || unreachable!("named only for the log")));
        let mut d = Drain::new(0, Duration::ZERO);
        assert!(!d.goes_on(true, || vec!["rank 0: to rank 1".into()]));
    }
}
