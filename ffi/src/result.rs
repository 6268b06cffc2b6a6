//! `ncclResult_t` values: mapping core errors onto them and `ncclGetErrorString`'s texts.

use crate::abi::ncclResult_t;
use oxccl_core::{Error, ErrorKind};
use std::ffi::CStr;

/// The result code for an error category.
///
/// `Timeout` becomes `ncclRemoteError` in the NCCL build: NCCL 2.28 has no `ncclTimeout`, and 8
/// is its `ncclNumResults`, which a 2.28 client cannot interpret. RCCL's 2.30-level header has
/// `ncclTimeout = 8`.
pub fn code_for(kind: ErrorKind) -> ncclResult_t {
    match kind {
        ErrorKind::Backend => ncclResult_t::UNHANDLED_CUDA_ERROR,
        ErrorKind::System => ncclResult_t::SYSTEM_ERROR,
        ErrorKind::Internal => ncclResult_t::INTERNAL_ERROR,
        ErrorKind::InvalidArgument => ncclResult_t::INVALID_ARGUMENT,
        ErrorKind::InvalidUsage => ncclResult_t::INVALID_USAGE,
        ErrorKind::Remote => ncclResult_t::REMOTE_ERROR,
        ErrorKind::InProgress => ncclResult_t::IN_PROGRESS,
        #[cfg(not(feature = "rccl"))]
        ErrorKind::Timeout => ncclResult_t::REMOTE_ERROR,
        #[cfg(feature = "rccl")]
        ErrorKind::Timeout => ncclResult_t::TIMEOUT,
    }
}

/// The result code for an error.
pub fn code_of(err: &Error) -> ncclResult_t {
    code_for(err.kind())
}

/// `ncclGetErrorString`: NCCL's wording, as NUL-terminated static strings.
pub fn error_string(code: ncclResult_t) -> &'static CStr {
    match code.0 {
        0 => c"no error",
        1 => c"unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
        2 => c"unhandled system error (run with NCCL_DEBUG=INFO for details)",
        3 => c"internal error - please report this issue to the NCCL developers",
        4 => c"invalid argument (run with NCCL_DEBUG=WARN for details)",
        5 => c"invalid usage (run with NCCL_DEBUG=WARN for details)",
        6 => c"remote process exited or there was a network error",
        7 => c"NCCL operation in progress",
        #[cfg(feature = "rccl")]
        8 => c"timeout",
        _ => c"unknown result code",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_match_nccl() {
        let s = |c| error_string(ncclResult_t(c)).to_str().unwrap();
        assert_eq!(s(0), "no error");
        assert_eq!(
            s(1),
            "unhandled cuda error (run with NCCL_DEBUG=INFO for details)"
        );
        assert_eq!(
            s(2),
            "unhandled system error (run with NCCL_DEBUG=INFO for details)"
        );
        assert_eq!(
            s(3),
            "internal error - please report this issue to the NCCL developers"
        );
        assert_eq!(
            s(4),
            "invalid argument (run with NCCL_DEBUG=WARN for details)"
        );
        assert_eq!(s(5), "invalid usage (run with NCCL_DEBUG=WARN for details)");
        assert_eq!(s(6), "remote process exited or there was a network error");
        assert_eq!(s(7), "NCCL operation in progress");
        #[cfg(not(feature = "rccl"))]
        assert_eq!(s(8), "unknown result code");
        #[cfg(feature = "rccl")]
        assert_eq!(s(8), "timeout");
        assert_eq!(s(9), "unknown result code");
        assert_eq!(s(-1), "unknown result code");
        assert_eq!(s(i32::MAX), "unknown result code");
    }

    #[test]
    fn mapping() {
        let c = |k| code_for(k).0;
        assert_eq!(c(ErrorKind::Backend), 1);
        assert_eq!(c(ErrorKind::System), 2);
        assert_eq!(c(ErrorKind::Internal), 3);
        assert_eq!(c(ErrorKind::InvalidArgument), 4);
        assert_eq!(c(ErrorKind::InvalidUsage), 5);
        assert_eq!(c(ErrorKind::Remote), 6);
        assert_eq!(c(ErrorKind::InProgress), 7);
        #[cfg(not(feature = "rccl"))]
        assert_eq!(c(ErrorKind::Timeout), 6, "a 2.28 client must never see 8");
        #[cfg(feature = "rccl")]
        assert_eq!(c(ErrorKind::Timeout), 8);
        assert_eq!(code_of(&Error::Aborted).0, 5);
    }
}
