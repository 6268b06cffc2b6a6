//! Host streams: ordered worker queues, one thread each.

use crate::error::{Error, Result};
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};

/// A job queued on a host stream.
pub type Job = Box<dyn FnOnce() -> Result<()> + Send>;

/// An ordered queue of jobs run by one worker thread, like a device stream.
#[derive(Clone)]
pub struct HostStream {
    shared: Arc<Shared>,
}

struct Shared {
    queue: Mutex<Queue>,
    changed: Condvar,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    running: bool,
    error: Option<Error>,
    closed: bool,
    /// Jobs completed so far (events record a target count).
    completed: u64,
    /// Jobs ever queued.
    queued: u64,
}

impl HostStream {
    /// A new stream with its worker thread.
    pub fn new(name: &str) -> Result<HostStream> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            changed: Condvar::new(),
        });
        let worker = shared.clone();
        std::thread::Builder::new()
            .name(format!("oxccl-stream-{name}"))
            .spawn(move || worker.run())
            .map_err(|e| Error::io("spawning a host stream thread", e))?;
        Ok(HostStream { shared })
    }

    /// Queues `job` after everything already queued; returns its position.
    pub fn push(&self, job: Job) -> u64 {
        let mut q = self.shared.lock();
        q.jobs.push_back(job);
        q.queued += 1;
        let pos = q.queued;
        drop(q);
        self.shared.changed.notify_all();
        pos
    }

    /// Jobs queued so far (an event recorded now completes when this many have run).
    pub fn tail(&self) -> u64 {
        self.shared.lock().queued
    }

    /// True once job number `pos` has run.
    pub fn has_run(&self, pos: u64) -> bool {
        self.shared.lock().completed >= pos
    }

    /// A number naming this stream (its shared state's address), for hang reports.
    pub fn id(&self) -> u64 {
        Arc::as_ptr(&self.shared) as u64
    }

    /// Blocks until job number `pos` has run.
    pub fn wait_for(&self, pos: u64) {
        let mut q = self.shared.lock();
        while q.completed < pos {
            q = self
                .shared
                .changed
                .wait(q)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Blocks until the queue is empty and idle; returns (and clears) the first job error.
    pub fn synchronize(&self) -> Result<()> {
        let mut q = self.shared.lock();
        while !q.jobs.is_empty() || q.running {
            q = self
                .shared
                .changed
                .wait(q)
                .unwrap_or_else(|p| p.into_inner());
        }
        match q.error.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// True when both handles are the same stream.
    pub fn same(&self, other: &HostStream) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }
}

impl Drop for HostStream {
    fn drop(&mut self) {
        // The worker holds one reference; when only it and this handle remain, let it exit.
        if Arc::strong_count(&self.shared) == 2 {
            self.shared.lock().closed = true;
            self.shared.changed.notify_all();
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn run(&self) {
        loop {
            let mut q = self.lock();
            let job = loop {
                if let Some(j) = q.jobs.pop_front() {
                    break j;
                }
                if q.closed {
                    return;
                }
                q = self.changed.wait(q).unwrap_or_else(|p| p.into_inner());
            };
            q.running = true;
            drop(q);
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job))
                .unwrap_or_else(|_| Err(Error::Internal("a host stream job panicked".into())));
            let mut q = self.lock();
            q.running = false;
            q.completed += 1;
            if let Err(e) = result {
                q.error.get_or_insert(e);
            }
            drop(q);
            self.changed.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn runs_in_order_and_reports_errors() {
        let s = HostStream::new("t").unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        for i in 0..10 {
            let log = log.clone();
            s.push(Box::new(move || {
                log.lock().unwrap().push(i);
                Ok(())
            }));
        }
        s.synchronize().unwrap();
        assert_eq!(*log.lock().unwrap(), (0..10).collect::<Vec<_>>());
        s.push(Box::new(|| Err(Error::Remote("peer gone".into()))));
        let ran = Arc::new(AtomicU32::new(0));
        let r2 = ran.clone();
        s.push(Box::new(move || {
            r2.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }));
        assert!(matches!(s.synchronize(), Err(Error::Remote(_))));
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert!(s.synchronize().is_ok(), "errors are reported once");
    }

    #[test]
    fn panicking_job_becomes_an_error() {
        let s = HostStream::new("p").unwrap();
        s.push(Box::new(|| panic!("boom")));
        assert!(matches!(s.synchronize(), Err(Error::Internal(_))));
    }
}
