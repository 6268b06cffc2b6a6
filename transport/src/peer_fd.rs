//! Another process's file descriptor copied into this one, as both GPU backends import
//! shareable memory: `pidfd_open` + `pidfd_getfd` (Linux 5.6+; it needs ptrace permission over
//! the exporter: the same user and no stricter Yama setting, or `CAP_SYS_PTRACE`).

/// Which system call of [`fd_of_process`] failed, and the error the OS reported; each backend
/// words its own message from it.
#[derive(Debug)]
pub struct PeerFdError {
    /// `"pidfd_open"` or `"pidfd_getfd"`.
    pub call: &'static str,
    /// The OS error, read right after the failed call.
    pub os: std::io::Error,
}

/// Descriptor `fd` of process `pid`, duplicated into this process (the caller closes it).
pub fn fd_of_process(pid: u32, fd: i32) -> Result<i32, PeerFdError> {
    let failed = |call| PeerFdError {
        call,
        os: std::io::Error::last_os_error(),
    };
    // SAFETY: plain system call with integer arguments; returns a new descriptor or -1.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if pidfd < 0 {
        return Err(failed("pidfd_open"));
    }
    // SAFETY: plain system call; `pidfd` is ours and `fd` a number in that process.
    let local = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd as i32, fd, 0) };
    let e = (local < 0).then(|| failed("pidfd_getfd"));
    // SAFETY: closes the pidfd opened above, which nothing else owns.
    unsafe { libc::close(pidfd as i32) };
    match e {
        Some(e) => Err(e),
        None => Ok(local as i32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    /// A process that does not exist fails at `pidfd_open`; a descriptor of this very process
    /// comes back as a new descriptor of the same file (where the kernel has the calls).
    #[test]
    fn descriptors_come_from_the_process_named() {
        let e = fd_of_process(i32::MAX as u32, 0).unwrap_err();
        assert_eq!(e.call, "pidfd_open", "{e:?}");
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        match fd_of_process(std::process::id(), file.as_raw_fd()) {
            Ok(local) => {
                assert_ne!(local, file.as_raw_fd());
                let same = |fd: i32| std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
                assert_eq!(same(local), same(file.as_raw_fd()));
                // SAFETY: the duplicate is ours and used no more.
                unsafe { libc::close(local) };
            }
            Err(e) => eprintln!("no pidfd_getfd here: {e:?}"),
        }
    }
}
