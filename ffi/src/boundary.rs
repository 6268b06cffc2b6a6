//! The panic and error boundary every export goes through, and the macro emitting `ncclX` and
//! its `pncclX` profiling twin around one implementation.

use crate::abi::ncclResult_t;
use crate::{handles, last_error, result};
use oxccl_core::Error;
use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// Records `err` for `ncclGetLastError` and the log; returns its result code.
pub fn report(api: &str, err: &Error) -> ncclResult_t {
    let msg = format!("{api}: {err}");
    tracing::warn!(target: "oxccl::call", "{msg}");
    last_error::set(&msg);
    result::code_of(err)
}

fn panic_text(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic payload".to_string()
    }
}

/// Runs `f`, turning panics into `Error::Internal` and poisoning the communicator it was using.
fn guarded<T>(api: &str, f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    #[cfg(feature = "rccl")]
    oxccl_core::logging::set_api_banner("RCCL API level 2.30.4");
    oxccl_core::logging::init_for_c_library();
    handles::clear_current();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let text = panic_text(payload.as_ref());
            handles::poison_current(&format!("a panic in {api}: {text}"));
            Err(Error::Internal(format!("panic: {text}")))
        }
    }
}

/// Boundary of exports returning `ncclResult_t`. `Err(InProgress)` is a status (non-blocking
/// communicators), returned as `ncclInProgress` without touching the last-error text.
pub fn call(api: &str, f: impl FnOnce() -> Result<(), Error>) -> ncclResult_t {
    match guarded(api, f) {
        Ok(()) => ncclResult_t::SUCCESS,
        Err(Error::InProgress) => ncclResult_t::IN_PROGRESS,
        Err(e) => report(api, &e),
    }
}

/// Boundary of exports returning a value instead of a code: on failure the error is recorded for
/// `ncclGetLastError` and `fallback` is returned.
pub fn call_value<T>(api: &str, fallback: T, f: impl FnOnce() -> Result<T, Error>) -> T {
    match guarded(api, f) {
        Ok(v) => v,
        Err(e) => {
            report(api, &e);
            fallback
        }
    }
}

/// Emits an exported C function and its `p`-prefixed profiling twin, both calling one
/// implementation inside the boundary. Internal code calls implementations, never exports, so a
/// profiler interposing `ncclX` and forwarding to `pncclX` cannot loop.
///
/// `fn name, pname(args) => imp;` for `ncclResult_t` functions (`imp` returns `Result<()>`);
/// `fn name, pname(args) -> T [fallback] => imp;` for the others (`imp` returns `Result<T>`).
macro_rules! nccl_api {
    ($(#[$m:meta])* fn $name:ident, $pname:ident($($a:ident: $t:ty),* $(,)?) => $imp:path;) => {
        $(#[$m])*
        ///
        /// # Safety
        /// The caller follows the C API contract of this function in the header: every pointer is
        /// NULL or valid for what the call reads and writes.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $crate::abi::ncclResult_t {
            // SAFETY: the caller's guarantees are forwarded unchanged to the implementation.
            $crate::boundary::call(stringify!($name), || unsafe { $imp($($a),*) })
        }
        #[doc = concat!("Profiling twin of [`", stringify!($name), "`] (same implementation).")]
        ///
        /// # Safety
        /// As for the plain function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $pname($($a: $t),*) -> $crate::abi::ncclResult_t {
            // SAFETY: the caller's guarantees are forwarded unchanged to the implementation.
            $crate::boundary::call(stringify!($name), || unsafe { $imp($($a),*) })
        }
    };
    ($(#[$m:meta])* fn $name:ident, $pname:ident($($a:ident: $t:ty),* $(,)?) -> $ret:ty [$fallback:expr] => $imp:path;) => {
        $(#[$m])*
        ///
        /// # Safety
        /// The caller follows the C API contract of this function in the header: every pointer is
        /// NULL or valid for what the call reads and writes.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($a: $t),*) -> $ret {
            // SAFETY: the caller's guarantees are forwarded unchanged to the implementation.
            $crate::boundary::call_value(stringify!($name), $fallback, || unsafe { $imp($($a),*) })
        }
        #[doc = concat!("Profiling twin of [`", stringify!($name), "`] (same implementation).")]
        ///
        /// # Safety
        /// As for the plain function.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $pname($($a: $t),*) -> $ret {
            // SAFETY: the caller's guarantees are forwarded unchanged to the implementation.
            $crate::boundary::call_value(stringify!($name), $fallback, || unsafe { $imp($($a),*) })
        }
    };
}
pub(crate) use nccl_api;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panics_become_internal_errors_with_their_text() {
        let r = call("ncclTestPanic", || panic!("boom {}", 42));
        assert_eq!(r, ncclResult_t::INTERNAL_ERROR);
        let text = last_error::current();
        assert!(
            text.contains("ncclTestPanic") && text.contains("boom 42"),
            "{text}"
        );
    }

    #[test]
    fn errors_map_and_in_progress_is_silent() {
        last_error::set("previous");
        assert_eq!(
            call("ncclTest", || Err(Error::InProgress)),
            ncclResult_t::IN_PROGRESS
        );
        assert_eq!(last_error::current(), "previous");
        assert_eq!(call("ncclTest", || Ok(())), ncclResult_t::SUCCESS);
        assert_eq!(last_error::current(), "previous", "success never clears");
        assert_eq!(
            call("ncclTest", || Err(Error::arg("bad thing"))),
            ncclResult_t::INVALID_ARGUMENT
        );
        assert_eq!(last_error::current(), "ncclTest: bad thing");
        assert_eq!(
            call_value("ncclTestValue", -1, || Err(Error::usage("nope"))),
            -1
        );
        assert_eq!(last_error::current(), "ncclTestValue: nope");
    }
}
