//! Locking a mutex whose holder may have panicked.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, taking its data as it is when a holder panicked: a panic on one thread must not
/// make every later call that needs the lock panic too.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
