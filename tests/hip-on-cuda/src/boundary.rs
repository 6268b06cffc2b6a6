//! The C boundary: every export runs its body through [`export`] (or [`with_driver`] /
//! [`with_context`]), which turns a [`Failure`] into its HIP code, remembers its detail for
//! `hipGetErrorString`, and stops panics (cudarc panics on a symbol the driver lacks) from
//! unwinding into C. The driver is opened and initialised once, on first use.

use crate::context;
use crate::status::{self, Failure, HipResult, cu};
use crate::types::HipError;
use cudarc::driver::sys;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

/// The sentence of every call made on a machine without libcuda.
pub const NO_DRIVER: &str = "no CUDA driver: libcuda.so could not be loaded (oxccl's HIP-on-CUDA test runtime runs HIP calls on the CUDA driver)";

/// Runs an entry point's body: its failure becomes a HIP code, a panic `hipErrorUnknown`.
pub fn export(api: &'static str, body: impl FnOnce() -> HipResult) -> HipError {
    let failure = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => return HipError::SUCCESS,
        Ok(Err(f)) => f,
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("a panic");
            Failure::new(HipError::UNKNOWN, format!("{api}: {what}"))
        }
    };
    status::record(&failure);
    failure.code
}

/// [`export`] after making sure the driver is loaded and initialised.
pub fn with_driver(api: &'static str, body: impl FnOnce() -> HipResult) -> HipError {
    export(api, || {
        driver()?;
        body()
    })
}

/// [`with_driver`] with the calling thread's current device made current first (HIP's implicit
/// device 0 on a thread that never chose one).
pub fn with_context(api: &'static str, body: impl FnOnce() -> HipResult) -> HipError {
    with_driver(api, || {
        context::ensure_current()?;
        body()
    })
}

/// Loads libcuda and runs `cuInit` once; later calls return the first outcome.
pub fn driver() -> HipResult {
    static INIT: OnceLock<HipResult> = OnceLock::new();
    INIT.get_or_init(|| {
        // SAFETY: only tries to open the driver's library names; nothing is called.
        if !unsafe { sys::is_culib_present() } {
            return Err(Failure::new(HipError::NO_DEVICE, NO_DRIVER));
        }
        // SAFETY: the library is present; cuInit takes flags, 0 being the only defined value.
        cu("cuInit", unsafe { sys::cuInit(0) })
    })
    .clone()
}

/// Writes `value` through a caller's out-pointer; a null pointer is `hipErrorInvalidValue`.
///
/// # Safety
/// `p` is null or valid for a write of `T`.
pub unsafe fn put<T>(p: *mut T, value: T) -> HipResult {
    if p.is_null() {
        return Err(Failure::invalid("a null out-pointer"));
    }
    // SAFETY: non-null, and valid for writes by the caller's contract.
    unsafe { p.write(value) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_becomes_its_code_and_a_panic_unknown() {
        assert_eq!(export("t", || Ok(())), HipError::SUCCESS);
        let code = export("t", || Err(Failure::invalid("bad")));
        assert_eq!(code, HipError::INVALID_VALUE);
        let code = export("hipTest", || panic!("symbol missing"));
        assert_eq!(code, HipError::UNKNOWN);
        let s = status::explain(HipError::UNKNOWN)
            .to_string_lossy()
            .into_owned();
        assert!(s.contains("hipTest: symbol missing"), "{s}");
    }

    #[test]
    fn null_out_pointers_are_invalid_values() {
        // SAFETY: null is allowed and rejected.
        let r = unsafe { put::<i32>(std::ptr::null_mut(), 1) };
        assert_eq!(r.unwrap_err().code, HipError::INVALID_VALUE);
        let mut x = 0;
        // SAFETY: `x` is a live i32.
        unsafe { put(&mut x, 7) }.unwrap();
        assert_eq!(x, 7);
    }
}
