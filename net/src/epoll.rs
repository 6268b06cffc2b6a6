//! An epoll set that closes itself: the one place the socket network calls epoll, for the
//! receive sides' readiness ([`Readiness`](super::readiness::Readiness)) and the helper threads
//! ([`SocketWorkers`](super::socket_workers::SocketWorkers)).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Events taken per [`Epoll::wait`] at most.
pub(crate) const BATCH: usize = 64;

/// An epoll set.
pub(crate) struct Epoll(OwnedFd);

impl Epoll {
    /// An empty set.
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: plain system call; the result is checked.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor just opened and owned by nothing else.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Watches `fd` for `events` (`EPOLL*` bits), reporting `data` with them.
    pub fn add(&self, fd: RawFd, events: libc::c_int, data: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: events as u32,
            u64: data,
        };
        // SAFETY: our epoll set, and a valid event for the duration of the call.
        let rc = unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Stops watching `fd` (before it is closed); one not watched is ignored.
    pub fn remove(&self, fd: RawFd) {
        // SAFETY: our epoll set; a descriptor not in it only returns an error.
        unsafe {
            libc::epoll_ctl(
                self.0.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                std::ptr::null_mut(),
            )
        };
    }

    /// Waits up to `timeout_ms` (-1: without end, 0: not at all) and calls `seen` with the data
    /// of each event, at most [`BATCH`].
    pub fn wait(&self, timeout_ms: i32, mut seen: impl FnMut(u64)) {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; BATCH];
        // SAFETY: `events` holds BATCH entries for the duration of the call.
        let n = unsafe {
            libc::epoll_wait(
                self.0.as_raw_fd(),
                events.as_mut_ptr(),
                BATCH as i32,
                timeout_ms,
            )
        };
        for ev in events.iter().take(n.max(0) as usize) {
            seen(ev.u64);
        }
    }
}
