//! The process's limit on open files, raised before NET connections are made.
//!
//! Every NET peer takes sockets per channel (a control socket and the data sockets of each
//! link, both ways, plus the LL links), so a communicator across hosts opens hundreds of them
//! at a few dozen ranks, past the common soft limit of 1024. NCCL's bootstrap root raises the
//! soft limit to the hard one for the same reason; oxccl does it in every rank that connects
//! over a network, once per process.

use std::sync::OnceLock;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, once; logs a change at INFO and a
/// failure at WARN (the connections may still fit).
pub fn raise_to_hard_limit() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| match raise() {
        Ok(Some((from, to))) => {
            tracing::info!(target: "oxccl::net", "open-file limit raised from {from} to {to}")
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(target: "oxccl::net", "could not raise the open-file limit: {e}"),
    });
}

/// `Some((old, new))` when the soft limit moved.
fn raise() -> std::io::Result<Option<(u64, u64)>> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit for the call to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if lim.rlim_cur >= lim.rlim_max {
        return Ok(None);
    }
    let from = lim.rlim_cur;
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: `lim` holds the current hard limit and a soft limit not above it.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(Some((from, lim.rlim_cur)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_ends_at_the_hard_one() {
        raise_to_hard_limit();
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: as in `raise`.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        assert_eq!(lim.rlim_cur, lim.rlim_max);
    }
}
