//! The error type of the safe API: NCCL's result categories, each with the sentence saying what
//! went wrong.

use oxccl_core::ErrorKind;

/// Every failure the safe API reports. The variant is the `ncclResult_t` category
/// ([`Error::code`]); the text is a sentence a user can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A device runtime call failed (`ncclUnhandledCudaError`).
    #[error("device runtime error: {0}")]
    Device(String),
    /// An operating-system call failed: sockets, threads, files (`ncclSystemError`).
    #[error("system error: {0}")]
    System(String),
    /// A bug or broken invariant inside oxccl (`ncclInternalError`).
    #[error("internal error: {0}")]
    Internal(String),
    /// A bad argument: wrong length, rank out of range, buffer on another device
    /// (`ncclInvalidArgument`).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A call not allowed now: aborted or finalized communicator, call inside a group
    /// (`ncclInvalidUsage`).
    #[error("invalid usage: {0}")]
    InvalidUsage(String),
    /// A peer failed or could not be reached (`ncclRemoteError`).
    #[error("remote error: {0}")]
    Remote(String),
    /// The operation is still running (`ncclInProgress`); a state, not a failure.
    #[error("operation in progress")]
    InProgress,
    /// A deadline passed (`ncclTimeout`).
    #[error("timeout: {0}")]
    Timeout(String),
}

impl Error {
    /// The `ncclResult_t` value of this category (`ncclTimeout` is 8, as in NCCL 2.30).
    pub fn code(&self) -> i32 {
        match self {
            Error::Device(_) => 1,
            Error::System(_) => 2,
            Error::Internal(_) => 3,
            Error::InvalidArgument(_) => 4,
            Error::InvalidUsage(_) => 5,
            Error::Remote(_) => 6,
            Error::InProgress => 7,
            Error::Timeout(_) => 8,
        }
    }

    /// Shorthand for [`Error::InvalidArgument`].
    pub(crate) fn arg(msg: impl Into<String>) -> Error {
        Error::InvalidArgument(msg.into())
    }

    /// Shorthand for [`Error::InvalidUsage`].
    pub(crate) fn usage(msg: impl Into<String>) -> Error {
        Error::InvalidUsage(msg.into())
    }
}

impl From<oxccl_core::Error> for Error {
    fn from(e: oxccl_core::Error) -> Error {
        // The variant's own prefix ("internal error: ") is added by this type's `Display`.
        let text = match &e {
            oxccl_core::Error::Internal(m) => m.clone(),
            e => e.to_string(),
        };
        match e.kind() {
            ErrorKind::Backend => Error::Device(text),
            ErrorKind::System => Error::System(text),
            ErrorKind::Internal => Error::Internal(text),
            ErrorKind::InvalidArgument => Error::InvalidArgument(text),
            ErrorKind::InvalidUsage => Error::InvalidUsage(text),
            ErrorKind::Remote => Error::Remote(text),
            ErrorKind::InProgress => Error::InProgress,
            ErrorKind::Timeout => Error::Timeout(text),
        }
    }
}

/// Result of the safe API.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_errors_keep_their_category_and_sentence() {
        let e = Error::from(oxccl_core::Error::arg("count 3 is not a multiple of 2"));
        assert_eq!(e.code(), 4);
        assert!(e.to_string().contains("count 3"), "{e}");
        assert_eq!(Error::from(oxccl_core::Error::Aborted).code(), 5);
        assert_eq!(
            Error::from(oxccl_core::Error::InProgress),
            Error::InProgress
        );
    }
}
