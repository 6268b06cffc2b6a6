//! The abort flag and error state shared by everything a communicator owns.
//!
//! Every blocking wait in the runtime polls an [`AbortFlag`], so `abort` is local, idempotent and
//! returns promptly even while an operation waits on a dead peer.

use crate::error::Error;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often blocking waits look at the abort flag.
pub const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// A cloneable flag that aborts every wait of one communicator, plus its first asynchronous error.
#[derive(Clone, Default, Debug)]
pub struct AbortFlag {
    inner: Arc<AbortInner>,
}

#[derive(Default, Debug)]
struct AbortInner {
    aborted: AtomicBool,
    /// Set once `error` holds an error: every API call asks, and almost never finds one.
    has_error: AtomicBool,
    error: Mutex<Option<Error>>,
}

impl AbortFlag {
    /// A fresh flag, not aborted, with no error recorded.
    pub fn new() -> AbortFlag {
        AbortFlag::default()
    }

    /// Marks the owner aborted; every wait watching this flag returns [`Error::Aborted`].
    pub fn abort(&self) {
        self.inner.aborted.store(true, Ordering::Release);
    }

    /// True once [`AbortFlag::abort`] was called.
    pub fn is_aborted(&self) -> bool {
        self.inner.aborted.load(Ordering::Acquire)
    }

    /// `Err(Aborted)` once aborted, so waits can `?` it in their loop.
    pub fn check(&self) -> Result<(), Error> {
        if self.is_aborted() {
            Err(Error::Aborted)
        } else {
            Ok(())
        }
    }

    /// Records the first asynchronous error (later ones are dropped, as NCCL keeps the first).
    pub fn record(&self, err: Error) {
        let mut slot = self.inner.error.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            tracing::warn!(target: crate::logging::FAILURE_TARGET, "asynchronous error: {err}");
            *slot = Some(err);
            self.inner.has_error.store(true, Ordering::Release);
        }
    }

    /// The first asynchronous error recorded, if any.
    pub fn error(&self) -> Option<Error> {
        if !self.inner.has_error.load(Ordering::Acquire) {
            return None;
        }
        self.inner
            .error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// How often an [`AbortWatcher`] looks at its flag.
const WATCH_INTERVAL: Duration = Duration::from_millis(10);

/// A thread that calls `tick` every `period` until `tick` returns false or the owner drops it;
/// dropping wakes it at once and joins it.
pub(crate) struct PollThread {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl PollThread {
    /// Starts the thread. `tick` gets whether the owner has asked it to stop (read before the
    /// call, so the call after a stop request is the last); it returns false to end early.
    pub(crate) fn spawn(
        name: String,
        period: Duration,
        what: &'static str,
        mut tick: impl FnMut(bool) -> bool + Send + 'static,
    ) -> Result<PollThread, Error> {
        let stop = Arc::new(AtomicBool::new(false));
        let halt = stop.clone();
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                loop {
                    let halted = halt.load(Ordering::Acquire);
                    if !tick(halted) || halted {
                        break;
                    }
                    // Parked rather than asleep, so that a drop does not wait out the period.
                    std::thread::park_timeout(period);
                }
            })
            .map_err(|e| Error::io(what, e))?;
        Ok(PollThread {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for PollThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// A thread that runs a callback once its [`AbortFlag`] is raised; stopped and joined on drop.
///
/// Device backends use it to mirror the flag into memory their kernels poll, so an abort also
/// stops kernels spinning on a dead peer.
pub struct AbortWatcher {
    _thread: PollThread,
}

impl AbortFlag {
    /// Starts a thread named `name` that calls `on_abort` once this flag is raised.
    pub fn watch(
        &self,
        name: String,
        on_abort: impl FnOnce() + Send + 'static,
    ) -> Result<AbortWatcher, Error> {
        let flag = self.clone();
        let mut on_abort = Some(on_abort);
        // The stop request is read before the flag: an abort raised just before the owner
        // stops the watcher (abort then destroy) must still reach the device, or kernels keep
        // spinning.
        let thread = PollThread::spawn(
            name,
            WATCH_INTERVAL,
            "spawning the abort watcher",
            move |_| {
                if flag.is_aborted()
                    && let Some(f) = on_abort.take()
                {
                    f();
                }
                true
            },
        )?;
        Ok(AbortWatcher { _thread: thread })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn the_first_recorded_error_is_kept_and_seen_from_every_clone() {
        let flag = AbortFlag::new();
        let other = flag.clone();
        assert!(flag.error().is_none());
        flag.record(Error::Internal("first".into()));
        flag.record(Error::Internal("second".into()));
        assert!(
            other
                .error()
                .is_some_and(|e| e.to_string().contains("first"))
        );
    }

    #[test]
    fn watcher_fires_once_and_joins_on_drop() {
        let flag = AbortFlag::new();
        let hits = Arc::new(AtomicU32::new(0));
        let h = hits.clone();
        let w = flag
            .watch("test-watch".into(), move || {
                h.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(hits.load(Ordering::SeqCst), 0, "fired before the abort");
        flag.abort();
        let t = Instant::now();
        while hits.load(Ordering::SeqCst) == 0 && t.elapsed() < Duration::from_secs(2) {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        drop(w);
    }

    /// Abort immediately followed by teardown (what `ncclCommAbort` does) still fires.
    #[test]
    fn watcher_fires_when_dropped_right_after_the_abort() {
        for _ in 0..20 {
            let flag = AbortFlag::new();
            let hits = Arc::new(AtomicU32::new(0));
            let h = hits.clone();
            let w = flag
                .watch("test-watch".into(), move || {
                    h.fetch_add(1, Ordering::SeqCst);
                })
                .unwrap();
            flag.abort();
            drop(w);
            assert_eq!(hits.load(Ordering::SeqCst), 1);
        }
    }
}

/// A deadline for a blocking wait; `None` waits forever (but still watches the abort flag).
#[derive(Clone, Copy, Debug)]
pub struct Deadline(Option<Instant>);

impl Deadline {
    /// A deadline `timeout` from now; a zero timeout means no deadline.
    pub fn after(timeout: Duration) -> Deadline {
        if timeout.is_zero() {
            Deadline(None)
        } else {
            Deadline(Some(Instant::now() + timeout))
        }
    }

    /// No deadline.
    pub fn never() -> Deadline {
        Deadline(None)
    }

    /// True once the deadline has passed.
    pub fn expired(&self) -> bool {
        self.0.is_some_and(|d| Instant::now() >= d)
    }

    /// Time left, capped at `cap` so waits wake up to poll the abort flag.
    pub fn slice(&self, cap: Duration) -> Duration {
        match self.0 {
            None => cap,
            Some(d) => d.saturating_duration_since(Instant::now()).min(cap),
        }
    }
}
