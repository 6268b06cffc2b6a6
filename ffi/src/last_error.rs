//! The text behind `ncclGetLastError`.
//!
//! NCCL keeps one fixed `char[1024]` and callers hold on to the pointer it returns, so the storage
//! here never moves or shrinks: a per-thread buffer overwritten in place (replacing a `CString`
//! would leave the caller's pointer dangling), plus a process-wide copy for threads that have not
//! failed themselves (errors raised on internal threads, or a different thread asking). Success
//! never clears either, as in NCCL.

use std::cell::Cell;
use std::ffi::c_char;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, Ordering};

/// Bytes of each buffer, NUL included.
pub const LEN: usize = 1024;

struct LocalBuf {
    bytes: [Cell<u8>; LEN],
    set: Cell<bool>,
}

thread_local! {
    static LOCAL: LocalBuf = const {
        LocalBuf { bytes: [const { Cell::new(0) }; LEN], set: Cell::new(false) }
    };
}

// Atomics rather than a plain array: C callers read it through the pointer we hand out while
// another thread may be writing; the writers are serialised by `GLOBAL_LOCK`.
static GLOBAL: [AtomicU8; LEN] = [const { AtomicU8::new(0) }; LEN];
static GLOBAL_LOCK: Mutex<()> = Mutex::new(());

/// `msg` cut to fit `LEN - 1` bytes at a character boundary, with NULs replaced so C sees it all.
fn fitted(msg: &str) -> impl Iterator<Item = u8> + '_ {
    let mut end = msg.len().min(LEN - 1);
    while !msg.is_char_boundary(end) {
        end -= 1;
    }
    msg.as_bytes()[..end]
        .iter()
        .map(|&b| if b == 0 { b' ' } else { b })
}

/// Records `msg` as the calling thread's and the process's last error.
pub fn set(msg: &str) {
    let _ = LOCAL.try_with(|l| {
        let mut n = 0;
        for (slot, b) in l.bytes.iter().zip(fitted(msg)) {
            slot.set(b);
            n += 1;
        }
        l.bytes[n].set(0);
        l.set.set(true);
    });
    let _guard = GLOBAL_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let mut n = 0;
    for (slot, b) in GLOBAL.iter().zip(fitted(msg)) {
        slot.store(b, Ordering::Relaxed);
        n += 1;
    }
    GLOBAL[n].store(0, Ordering::Release);
}

/// The pointer `ncclGetLastError` returns: this thread's buffer once it recorded an error, the
/// process-wide copy before. Valid for the thread's (or process's) lifetime; never NULL.
pub fn get() -> *const c_char {
    LOCAL
        .try_with(|l| {
            if l.set.get() {
                // Cell<u8> is repr(transparent) over u8, so the array reads as a C string.
                Some(l.bytes.as_ptr() as *const c_char)
            } else {
                None
            }
        })
        .ok()
        .flatten()
        // AtomicU8 has the size and alignment of u8.
        .unwrap_or(GLOBAL.as_ptr() as *const c_char)
}

/// The current text as a Rust string (for tests and logging).
pub fn current() -> String {
    // SAFETY: `get` returns a pointer to a live, NUL-terminated buffer of LEN bytes (the last byte
    // is never written with anything but NUL).
    unsafe { std::ffi::CStr::from_ptr(get()) }
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    /// Reads the C string at `p`.
    fn read(p: *const c_char) -> String {
        // SAFETY: `p` comes from `get`: a live, NUL-terminated buffer of this thread or process.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap().to_string()
    }

    #[test]
    fn pointer_stays_valid_and_is_overwritten_in_place() {
        set("first error");
        let p = get();
        assert_eq!(read(p), "first error");
        set("a later, longer error message");
        assert_eq!(get(), p, "the buffer must not move");
        // The old pointer still addresses the same buffer, now holding the new text.
        assert_eq!(read(p), "a later, longer error message");
        set("short");
        assert_eq!(read(p), "short");
    }

    #[test]
    fn long_messages_are_truncated_at_a_char_boundary() {
        let long = "é".repeat(LEN);
        set(&long);
        let s = current();
        assert!(s.len() < LEN);
        assert!(s.chars().all(|c| c == 'é'));
        set("nul\0inside");
        assert_eq!(current(), "nul inside");
    }

    #[test]
    fn other_threads_fall_back_to_the_process_copy() {
        std::thread::spawn(|| set("raised on a worker thread"))
            .join()
            .unwrap();
        let seen = std::thread::spawn(|| {
            let p = get() as usize;
            (p, current())
        })
        .join()
        .unwrap();
        assert_eq!(seen.0, GLOBAL.as_ptr() as usize);
        // Other tests may write concurrently; the copy is always some complete recorded message.
        assert!(!seen.1.is_empty());
    }
}
