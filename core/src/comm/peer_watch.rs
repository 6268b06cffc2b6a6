//! Watches the peers of a device communicator, whose kernels wait in device memory where no
//! host-side wait sees a peer die: without it, a rank whose peer process died would spin in its
//! kernel forever and `ncclCommGetAsyncError` would keep answering success.
//!
//! On a death the watch records `ncclRemoteError` at once (new operations fail, the async error
//! names the rank), then, after a grace period, aborts the communicator, which stops its
//! kernels. The grace lets an operation whose data all arrived before the peer exited finish.

use crate::abort::{AbortFlag, PollThread};
use crate::error::Error;
use std::time::{Duration, Instant};

/// How often the watch looks at the peers.
const PERIOD: Duration = Duration::from_millis(100);

/// A thread that turns a peer's death into the communicator's error and abort; stopped and
/// joined on drop.
pub(crate) struct PeerWatch {
    _thread: PollThread,
}

impl PeerWatch {
    /// Starts watching: `probe` reports the first dead peer, `abort` is the communicator's.
    pub(crate) fn start(
        name: String,
        probe: impl Fn() -> Option<Error> + Send + 'static,
        abort: AbortFlag,
    ) -> Result<PeerWatch, Error> {
        let grace = crate::config::get(&crate::config::vars::OXCCL_PEER_DEATH_GRACE);
        Self::start_with(name, probe, abort, grace, PERIOD)
    }

    fn start_with(
        name: String,
        probe: impl Fn() -> Option<Error> + Send + 'static,
        abort: AbortFlag,
        grace: Duration,
        period: Duration,
    ) -> Result<PeerWatch, Error> {
        let mut died: Option<Instant> = None;
        let thread = PollThread::spawn(name, period, "spawning the peer watch", move |halted| {
            if halted || abort.is_aborted() {
                return false;
            }
            match died {
                None => {
                    if let Some(e) = probe() {
                        tracing::warn!(target: crate::logging::FAILURE_TARGET,
                            "{e}; aborting the communicator in {grace:?}");
                        abort.record(e);
                        died = Some(Instant::now());
                    }
                    true
                }
                Some(t) if t.elapsed() >= grace => {
                    abort.abort();
                    false
                }
                Some(_) => true,
            }
        })?;
        Ok(PeerWatch { _thread: thread })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn wait_until(what: impl Fn() -> bool) -> bool {
        let t = Instant::now();
        while !what() {
            if t.elapsed() > Duration::from_secs(5) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        true
    }

    #[test]
    fn a_death_is_recorded_at_once_and_aborts_after_the_grace() {
        let abort = AbortFlag::new();
        let calls = Arc::new(AtomicU32::new(0));
        let c = calls.clone();
        let probe = move || {
            (c.fetch_add(1, Ordering::SeqCst) >= 3).then(|| Error::Remote("rank 1 died".into()))
        };
        let grace = Duration::from_millis(300);
        let w = PeerWatch::start_with(
            "test".into(),
            probe,
            abort.clone(),
            grace,
            Duration::from_millis(5),
        )
        .unwrap();
        assert!(
            wait_until(|| abort.error().is_some()),
            "death never recorded"
        );
        let seen = Instant::now();
        assert!(
            matches!(abort.error(), Some(Error::Remote(m)) if m == "rank 1 died"),
            "{:?}",
            abort.error()
        );
        assert!(!abort.is_aborted(), "aborted before the grace period");
        assert!(wait_until(|| abort.is_aborted()), "never aborted");
        assert!(seen.elapsed() >= grace - Duration::from_millis(50));
        drop(w);
    }

    #[test]
    fn dropping_the_watch_does_not_wait_out_the_period() {
        let w = PeerWatch::start_with(
            "test".into(),
            || None,
            AbortFlag::new(),
            Duration::ZERO,
            Duration::from_secs(30),
        )
        .unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let t = Instant::now();
        drop(w);
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "drop took {:?}",
            t.elapsed()
        );
    }

    #[test]
    fn live_peers_leave_the_communicator_alone_and_drop_joins() {
        let abort = AbortFlag::new();
        let calls = Arc::new(AtomicU32::new(0));
        let c = calls.clone();
        let probe = move || {
            c.fetch_add(1, Ordering::SeqCst);
            None
        };
        let w = PeerWatch::start_with(
            "test".into(),
            probe,
            abort.clone(),
            Duration::ZERO,
            Duration::from_millis(1),
        )
        .unwrap();
        assert!(wait_until(|| calls.load(Ordering::SeqCst) >= 5));
        drop(w);
        let after = calls.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            after,
            "still probing after drop"
        );
        assert!(abort.error().is_none() && !abort.is_aborted());
    }
}
