//! Plain device buffers, synchronous copies and streams on a chosen device, for tests and tools
//! (the GPU check drives the HIP backend with them, as it drives the CUDA backend with its own).

use crate::runtime::hip_call;
use crate::{HipBackend, HipStream, sys, with_device};
use oxccl_core::backend::DevicePtr;
use oxccl_core::error::Result;
use std::ffi::c_void;

impl HipBackend {
    /// `hipMalloc` on `device` (plain device memory).
    pub fn plain_alloc(&self, device: i32, bytes: usize) -> Result<DevicePtr> {
        with_device(self, device, || {
            let mut p: *mut c_void = std::ptr::null_mut();
            // SAFETY: `p` is a valid out-pointer.
            unsafe { hip_call!(self.hip, hipMalloc(&mut p, bytes.max(1))) }?;
            Ok(p as DevicePtr)
        })
    }

    /// Frees [`HipBackend::plain_alloc`] memory.
    ///
    /// # Safety
    /// `ptr` came from `plain_alloc` and no work uses it.
    pub unsafe fn plain_free(&self, device: i32, ptr: DevicePtr) -> Result<()> {
        with_device(self, device, || {
            // SAFETY: forwarded from the caller.
            unsafe { hip_call!(self.hip, hipFree(ptr as *mut c_void)) }
        })
    }

    /// Copies `src` to memory of `device` at `dst` and waits for the copy.
    ///
    /// # Safety
    /// `dst` is device memory of at least `src.len()` bytes.
    pub unsafe fn copy_to_device(&self, device: i32, dst: DevicePtr, src: &[u8]) -> Result<()> {
        // SAFETY: forwarded from the caller; `src` outlives the synchronised copy.
        unsafe { self.copy_and_wait(device, dst as *mut c_void, src.as_ptr().cast(), src.len()) }
    }

    /// Copies memory of `device` at `src` into `dst` and waits for the copy.
    ///
    /// # Safety
    /// `src` is device memory of at least `dst.len()` bytes.
    pub unsafe fn copy_from_device(
        &self,
        device: i32,
        dst: &mut [u8],
        src: DevicePtr,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller; `dst` outlives the synchronised copy.
        unsafe {
            self.copy_and_wait(
                device,
                dst.as_mut_ptr().cast(),
                src as *const c_void,
                dst.len(),
            )
        }
    }

    /// A copy on `device`'s null stream, which is then synchronised: the copy has landed when
    /// this returns, whatever kind of host memory took part.
    ///
    /// # Safety
    /// Both ranges hold `bytes` bytes.
    unsafe fn copy_and_wait(
        &self,
        device: i32,
        dst: *mut c_void,
        src: *const c_void,
        bytes: usize,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        with_device(self, device, || {
            // SAFETY: the caller guarantees both ranges; the null stream is synchronised before
            // the host memory can go away.
            unsafe {
                hip_call!(
                    self.hip,
                    hipMemcpyAsync(
                        dst,
                        src,
                        bytes,
                        sys::hipMemcpyKind::hipMemcpyDefault,
                        std::ptr::null_mut()
                    )
                )?;
                hip_call!(self.hip, hipStreamSynchronize(std::ptr::null_mut()))
            }
        })
    }

    /// A new non-blocking stream on `device`.
    pub fn stream_on(&self, device: i32) -> Result<HipStream> {
        with_device(self, device, || self.stream_create())
    }
}
