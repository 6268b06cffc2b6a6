//! A bound on lingering roots. After its rendezvous a root keeps answering late ranks with an
//! explicit error for `root_linger` (10 minutes by default), which costs a listener and two
//! threads; a program creating communicators in a loop piled them up until thread creation
//! failed (10^4 init/abort cycles: reliability suite T10). Only the newest [`MAX_LINGERING`] roots of a
//! process linger; an older one stops when a newer one starts, and a late rank of its id then
//! hears that the root is gone (also an explicit error).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Roots of one process that may linger at once.
pub(crate) const MAX_LINGERING: usize = 16;

/// How often a lingering root looks whether it was cut short.
pub(crate) const LOOK: Duration = Duration::from_millis(200);

static LINGERING: Mutex<VecDeque<Arc<AtomicBool>>> = Mutex::new(VecDeque::new());

/// One root's right to linger; gives it back on drop.
pub(crate) struct Ticket(Arc<AtomicBool>);

impl Ticket {
    /// A ticket for a root starting to linger; the oldest lingering root beyond the bound is
    /// told to stop.
    pub fn take() -> Ticket {
        let flag = Arc::new(AtomicBool::new(false));
        let mut q = LINGERING.lock().unwrap_or_else(|p| p.into_inner());
        q.push_back(flag.clone());
        while q.len() > MAX_LINGERING {
            if let Some(old) = q.pop_front() {
                old.store(true, Ordering::Release);
            }
        }
        Ticket(flag)
    }

    /// True once a newer root took this one's place.
    pub fn cut_short(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut q = LINGERING.lock().unwrap_or_else(|p| p.into_inner());
        q.retain(|f| !Arc::ptr_eq(f, &self.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_newest_roots_linger() {
        let tickets: Vec<Ticket> = (0..MAX_LINGERING + 3).map(|_| Ticket::take()).collect();
        // Other tests of this process may hold tickets too: at least the first 3 are cut.
        assert!(tickets[..3].iter().all(Ticket::cut_short));
        assert!(!tickets.last().unwrap().cut_short());
    }
}
