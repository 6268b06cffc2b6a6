//! Thin checked wrappers over the CUDA driver API (cudarc's `sys`, loaded at run time).
//!
//! Every raw call goes through [`check`], which turns a `CUresult` into core's
//! [`Error::Backend`] with the entry point's name and the driver's own description. Only entry
//! points that exist in CUDA 12+ drivers are used: cudarc panics on a missing symbol.

use cudarc::driver::sys;
use oxccl_core::error::{Error, Result};
use std::ffi::CStr;

pub use cudarc::driver::sys::{
    CUcontext, CUdevice, CUdeviceptr, CUevent, CUfunction, CUmemGenericAllocationHandle, CUmodule,
    CUstream,
};

/// Maps a driver return code to `Ok` or [`Error::Backend`].
pub fn check(api: &'static str, r: sys::CUresult) -> Result<()> {
    if r == sys::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let mut s: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: cuGetErrorString only writes a pointer to a static string (or leaves it null).
    let ok = unsafe { sys::cuGetErrorString(r, &mut s) } == sys::CUresult::CUDA_SUCCESS;
    let detail = if ok && !s.is_null() {
        // SAFETY: the driver returned a NUL-terminated static string.
        unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
    } else {
        format!("{r:?}")
    };
    Err(Error::Backend {
        api,
        code: r as u32 as i64,
        detail,
    })
}

/// True when a CUDA driver library can be opened (nothing else is loaded or called).
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the driver's library names; no symbol is called.
    unsafe { sys::is_culib_present() }
}

/// Calls a driver entry point and checks its result: `call!(cuInit(0))`.
#[macro_export]
#[doc(hidden)]
macro_rules! call {
    ($f:ident ( $($a:expr),* $(,)? )) => {
        $crate::driver::check(stringify!($f), cudarc::driver::sys::$f($($a),*))
    };
}

/// A driver handle that may be used from any thread (the driver API is thread safe).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shared<T>(pub T);

// SAFETY: CUDA driver handles (contexts, streams, events, modules, functions) are opaque
// pointers the driver allows on every thread of the process.
unsafe impl<T> Send for Shared<T> {}
// SAFETY: as above; the handles are never dereferenced on the Rust side.
unsafe impl<T> Sync for Shared<T> {}

/// Copies `src` to device memory at `dst` and returns once the copy has landed.
///
/// A plain `cuMemcpyHtoD` from pageable memory may return before its DMA ends (CUDA's "API
/// synchronization behavior"), and launches on non-blocking streams, which ours are, are not
/// ordered after it: a collective launched right after could read the old contents, or have
/// the copy's tail land on its result (`safe-check` saw it on some machines only: CHANGELOG.md,
/// buffers uploaded just before). The copy goes on the calling thread's default stream
/// (`CU_STREAM_PER_THREAD`, which waits for the legacy stream only, never for a collective's
/// stream) and is waited for there.
///
/// # Safety
/// `dst` is device memory of the current context holding at least `src.len()` bytes.
pub unsafe fn copy_h2d_complete(dst: CUdeviceptr, src: &[u8]) -> Result<()> {
    if src.is_empty() {
        return Ok(());
    }
    // `CU_STREAM_PER_THREAD` from cuda.h, a handle value rather than a pointer.
    let per_thread = std::ptr::without_provenance_mut::<sys::CUstream_st>(2);
    // SAFETY: the caller guarantees `dst`; `src` stays borrowed until the stream has finished
    // the copy below.
    unsafe {
        check(
            "cuMemcpyHtoDAsync",
            sys::cuMemcpyHtoDAsync_v2(dst, src.as_ptr().cast(), src.len(), per_thread),
        )?;
        check("cuStreamSynchronize", sys::cuStreamSynchronize(per_thread))
    }
}
