//! Error names and descriptions. They need no driver: a program reports "no device" through them
//! on a machine without libcuda.

use crate::status;
use crate::types::HipError;
use std::ffi::c_char;

/// `hipGetErrorName`: HIP's name of the code (a static string).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGetErrorName(code: HipError) -> *const c_char {
    status::name(code).as_ptr()
}

/// `hipGetErrorString`: HIP's description, followed by the detail of this thread's latest failure
/// when it returned this code (which CUDA call failed, and CUDA's own words).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGetErrorString(code: HipError) -> *const c_char {
    status::explain(code).as_ptr()
}
