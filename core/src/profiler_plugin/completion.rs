//! The KernelCh events of launches on backends with an asynchronous API (CUDA, HIP): their
//! operations complete after the launch returned, so a thread of the process polls a completion
//! event recorded after each such launch and raises the launch's KernelCh events once it has
//! completed, as NCCL's proxy raises them once the kernel's channels are done (their task
//! events have stopped by then, in NCCL as here). The stop times are when the poll saw the
//! completion.

use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

/// Whether the operation completed: `Some(true)`, not yet `Some(false)`, `None` when the
/// backend cannot tell (its events are raised at once).
pub type Query = Box<dyn FnMut() -> Option<bool> + Send>;

/// Raises the events once the operation completed.
pub type Finish = Box<dyn FnOnce() + Send>;

/// How often the thread polls while something is pending: a kernel of a small operation runs
/// for microseconds, and a poll (`cuEventQuery`) costs less than one.
const POLL: Duration = Duration::from_micros(20);

/// A launch waiting for its completion.
struct Pending {
    /// The profiler context its events go to.
    ctx: usize,
    query: Query,
    finish: Finish,
}

struct Poller {
    pending: Mutex<Vec<Pending>>,
    wake: Condvar,
}

fn poller() -> &'static Poller {
    static POLLER: OnceLock<Poller> = OnceLock::new();
    static THREAD: std::sync::Once = std::sync::Once::new();
    let p = POLLER.get_or_init(|| Poller {
        pending: Mutex::new(Vec::new()),
        wake: Condvar::new(),
    });
    THREAD.call_once(|| {
        let spawned = std::thread::Builder::new()
            .name("oxccl-profiler".into())
            .spawn(|| poll_forever(poller()));
        if let Err(e) = spawned {
            tracing::warn!(target: "oxccl::init", "profiler: no completion thread ({e}); KernelCh events are raised at launch");
        }
    });
    p
}

fn poll_forever(p: &Poller) {
    let mut pending = crate::lock::lock(&p.pending);
    loop {
        while pending.is_empty() {
            pending = p.wake.wait(pending).unwrap_or_else(|e| e.into_inner());
        }
        let mut done = Vec::new();
        let mut i = 0;
        while i < pending.len() {
            if (pending[i].query)() == Some(false) {
                i += 1;
            } else {
                done.push(pending.swap_remove(i));
            }
        }
        drop(pending);
        // Outside the lock: raising calls into the plugin.
        for d in done {
            (d.finish)();
        }
        std::thread::sleep(POLL);
        pending = crate::lock::lock(&p.pending);
    }
}

/// Runs `finish` once `query` says the operation completed, on the polling thread; events for
/// the profiler context `ctx`.
pub fn when_done(ctx: usize, query: Query, finish: Finish) {
    let _ = POLLER_READY.set(());
    let p = poller();
    crate::lock::lock(&p.pending).push(Pending { ctx, query, finish });
    p.wake.notify_one();
}

/// Raises now what is still pending for the context `ctx`, which is about to be finalized.
pub fn flush(ctx: usize) {
    if POLLER_READY.get().is_none() {
        return;
    }
    let p = poller();
    let mine: Vec<Pending> = {
        let mut pending = crate::lock::lock(&p.pending);
        let (mine, rest) = std::mem::take(&mut *pending)
            .into_iter()
            .partition(|q| q.ctx == ctx);
        *pending = rest;
        mine
    };
    for m in mine {
        (m.finish)();
    }
}

/// Set once something was handed to the poller: before that, `flush` has nothing to do (and
/// starts no thread).
static POLLER_READY: OnceLock<()> = OnceLock::new();

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn finishes_once_done_and_flushes_a_context() {
        let polls = Arc::new(AtomicU32::new(0));
        let finished = Arc::new(AtomicU32::new(0));
        let (p, f) = (polls.clone(), finished.clone());
        when_done(
            1,
            Box::new(move || Some(p.fetch_add(1, Ordering::SeqCst) >= 3)),
            Box::new(move || {
                f.fetch_add(1, Ordering::SeqCst);
            }),
        );
        let f = finished.clone();
        // Never completes: flushed with its context.
        when_done(
            2,
            Box::new(|| Some(false)),
            Box::new(move || {
                f.fetch_add(10, Ordering::SeqCst);
            }),
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while finished.load(Ordering::SeqCst) != 1 {
            assert!(std::time::Instant::now() < deadline, "never finished");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(polls.load(Ordering::SeqCst) >= 4);
        flush(2);
        assert_eq!(finished.load(Ordering::SeqCst), 11);
        flush(2);
        assert_eq!(finished.load(Ordering::SeqCst), 11);
    }
}
