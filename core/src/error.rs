//! Error type of the runtime, grouped into NCCL's result categories.

use std::fmt;

/// The NCCL result category an [`Error`] maps to at the C boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A device runtime call failed (`ncclUnhandledCudaError`).
    Backend,
    /// An operating-system call failed (`ncclSystemError`).
    System,
    /// A bug or broken invariant inside oxccl (`ncclInternalError`).
    Internal,
    /// A bad argument (`ncclInvalidArgument`).
    InvalidArgument,
    /// A call that is illegal in the current state (`ncclInvalidUsage`).
    InvalidUsage,
    /// A peer died or the network failed (`ncclRemoteError`).
    Remote,
    /// An operation is still running (`ncclInProgress`); a status, not a failure.
    InProgress,
    /// A deadline passed (`ncclTimeout` for 2.30 clients, `ncclRemoteError` before).
    Timeout,
}

/// Every failure oxccl reports, with a sentence a user can act on.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// A device API call returned an error code.
    #[error("{api} failed with code {code}: {detail}")]
    Backend {
        /// The failing entry point, e.g. `cuMemCreate`.
        api: &'static str,
        /// The raw error code.
        code: i64,
        /// The runtime's own description.
        detail: String,
    },
    /// An OS-level failure (sockets, threads, files).
    #[error("{context}: {message}")]
    System {
        /// What oxccl was doing.
        context: String,
        /// The OS error text.
        message: String,
    },
    /// A bad argument from the caller.
    #[error("{0}")]
    InvalidArgument(String),
    /// A call that is not allowed now (destroyed communicator, call outside a group, ...).
    #[error("{0}")]
    InvalidUsage(String),
    /// A peer rank failed or could not be reached.
    #[error("{0}")]
    Remote(String),
    /// A deadline passed.
    #[error("{0}")]
    Timeout(String),
    /// The communicator was aborted locally.
    #[error("communicator was aborted")]
    Aborted,
    /// An operation is still in progress (non-blocking communicators).
    #[error("operation in progress")]
    InProgress,
    /// Broken invariant inside oxccl.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// The NCCL result category of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Backend { .. } => ErrorKind::Backend,
            Error::System { .. } => ErrorKind::System,
            Error::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Error::InvalidUsage(_) => ErrorKind::InvalidUsage,
            Error::Remote(_) => ErrorKind::Remote,
            Error::Timeout(_) => ErrorKind::Timeout,
            // NCCL reports operations on an aborted communicator as invalid usage.
            Error::Aborted => ErrorKind::InvalidUsage,
            Error::InProgress => ErrorKind::InProgress,
            Error::Internal(_) => ErrorKind::Internal,
        }
    }

    /// A system error from an `io::Error`, with what was being done.
    pub fn io(context: impl fmt::Display, err: std::io::Error) -> Error {
        let hint = match err.raw_os_error() {
            Some(libc::EMFILE | libc::ENFILE) => {
                "; every NET peer takes sockets per channel: raise `ulimit -n` (the hard limit) \
                 or lower OXCCL_NET_CHANNELS"
            }
            _ => "",
        };
        Error::System {
            context: context.to_string(),
            message: format!("{err}{hint}"),
        }
    }

    /// Shorthand for [`Error::InvalidArgument`].
    pub fn arg(msg: impl Into<String>) -> Error {
        Error::InvalidArgument(msg.into())
    }

    /// Shorthand for [`Error::InvalidUsage`].
    pub fn usage(msg: impl Into<String>) -> Error {
        Error::InvalidUsage(msg.into())
    }
}

/// Result alias used across oxccl.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_out_of_files_says_what_to_raise() {
        let e = Error::io("dialing", std::io::Error::from_raw_os_error(libc::EMFILE));
        assert!(e.to_string().contains("ulimit -n"), "{e}");
        let e = Error::io(
            "dialing",
            std::io::Error::from_raw_os_error(libc::ECONNREFUSED),
        );
        assert!(!e.to_string().contains("ulimit"), "{e}");
    }
}
