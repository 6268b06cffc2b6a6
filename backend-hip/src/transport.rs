//! The HIP side of the device transport: [`HipApi`], the shared transport's runtime calls on
//! the HIP runtime. Connections, arenas, graph capture, NET and SHM are
//! `oxccl_device_transport::DeviceTransport`, the same code the CUDA backend runs.
//!
//! None of this has run on an AMD GPU; `tests/hip-on-cuda` runs it on NVIDIA GPUs.

use crate::code_object::CodeObject;
use crate::kernels::{self, HIP_INLINE_ARGS_BYTES};
use crate::runtime::hip_call;
use crate::{HipBackend, sys};
use oxccl_core::backend::{Backend, DevicePtr, ShareableHandle};
use oxccl_core::datatype::DataType;
use oxccl_core::error::{Error, Result};
use oxccl_device_transport::{CaptureStatus, DeviceApi, DeviceTransport, Executor, Handle};
use std::ffi::c_void;

/// Thread-block size of the executor kernels: four 64-lane wavefronts on CDNA (eight 32-lane
/// ones on RDNA), below the kernels' `__launch_bounds__`.
pub const BLOCK_THREADS: u32 = 256;
const _: () = assert!(BLOCK_THREADS.is_multiple_of(64));
const _: () = assert!(BLOCK_THREADS <= kernels::MAX_THREADS_PER_BLOCK);

/// One communicator's connections on the HIP backend.
pub type HipTransport = DeviceTransport<HipApi>;

/// The shared transport's runtime calls on the HIP runtime (a clone of the backend: the
/// runtime, its allocation table and its modules).
#[derive(Clone)]
pub struct HipApi(pub(crate) HipBackend);

/// Keeps a device current; restores the previous one when dropped.
pub struct HipBound {
    be: HipBackend,
    prev: Option<i32>,
}

impl Drop for HipBound {
    fn drop(&mut self) {
        if let Some(prev) = self.prev {
            let _ = self.be.set_device(prev);
        }
    }
}

/// This thread's capture mode switched to relaxed, restored on drop; inert where the runtime
/// lacks `hipThreadExchangeStreamCaptureMode`.
pub struct HipRelaxed(Option<(HipBackend, sys::hipStreamCaptureMode)>);

impl Drop for HipRelaxed {
    fn drop(&mut self) {
        if let Some((be, mode)) = &mut self.0 {
            // SAFETY: restores the mode `relaxed_capture` replaced; `mode` is a valid pointer.
            let _ = unsafe { hip_call!(be.hip, hipThreadExchangeStreamCaptureMode(mode)) };
        }
    }
}

fn stream(h: Handle) -> sys::hipStream_t {
    h as sys::hipStream_t
}

fn event(h: Handle) -> sys::hipEvent_t {
    h as sys::hipEvent_t
}

impl DeviceApi for HipApi {
    type Bound = HipBound;
    type Relaxed = HipRelaxed;
    const BLOCK_THREADS: u32 = BLOCK_THREADS;
    const SIZED_LAUNCHES: bool = false;
    const NAME: &'static str = "hip";

    fn bind(&self, device: i32) -> Result<HipBound> {
        let prev = self.0.current_device()?;
        if prev == device {
            return Ok(HipBound {
                be: self.0.clone(),
                prev: None,
            });
        }
        self.0.set_device(device)?;
        Ok(HipBound {
            be: self.0.clone(),
            prev: Some(prev),
        })
    }

    fn kernels_missing(&self) -> Option<Error> {
        (!self.0.has_kernels()).then(CodeObject::missing)
    }

    fn has_one_shot(&self) -> bool {
        // The one-shot kernels are not looked up on HIP yet: collectives take the plans.
        false
    }

    fn pci_bus_id(&self, device: i32) -> Option<String> {
        if !self.0.hip.has("hipDeviceGetPCIBusId") {
            return None;
        }
        let mut buf = [0 as std::ffi::c_char; 32];
        // SAFETY: `buf` is writable for `len` bytes; HIP validates the ordinal and writes a
        // NUL-terminated id that fits.
        unsafe {
            hip_call!(
                self.0.hip,
                hipDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, device)
            )
        }
        .ok()?;
        // SAFETY: NUL-terminated within `buf` (HIP's contract, and the buffer is zeroed).
        let id = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
        Some(id.to_string_lossy().into_owned())
    }

    fn multiprocessors(&self, device: i32) -> Result<u32> {
        if !self.0.hip.has("hipDeviceGetAttribute") {
            // Unknown: ranks sharing this device get no block cap (see the records' `sms`).
            return Ok(0);
        }
        let mut n = 0i32;
        // SAFETY: `n` is a valid out-pointer; HIP validates the ordinal.
        unsafe {
            hip_call!(
                self.0.hip,
                hipDeviceGetAttribute(
                    &mut n,
                    sys::hipDeviceAttribute_t::hipDeviceAttributeMultiprocessorCount,
                    device
                )
            )
        }?;
        Ok(n.max(1) as u32)
    }

    fn can_access_peer(&self, device: i32, peer: i32) -> bool {
        let mut can = 0;
        // SAFETY: `can` is a valid out-pointer; HIP validates both ordinals.
        let r = unsafe { hip_call!(self.0.hip, hipDeviceCanAccessPeer(&mut can, device, peer)) };
        r.is_ok() && can != 0
    }

    fn enable_peer_access(&self, device: i32, peer: i32) -> Result<()> {
        let _g = self.bind(device)?;
        // SAFETY: `peer` is a valid ordinal (the pair was checked); the flags must be 0.
        match unsafe { hip_call!(self.0.hip, hipDeviceEnablePeerAccess(peer, 0)) } {
            Ok(()) => {}
            Err(Error::Backend { code, .. })
                if code == i64::from(sys::hipError_t::hipErrorPeerAccessAlreadyEnabled.0) => {}
            Err(e) => {
                tracing::debug!(target: "oxccl::hip", "hipDeviceEnablePeerAccess({peer}): {e}");
            }
        }
        Ok(())
    }

    fn shared_alloc(&self, device: i32, bytes: usize) -> Result<DevicePtr> {
        self.0.mem_alloc(device, bytes)
    }

    unsafe fn shared_free(&self, ptr: DevicePtr) {
        // SAFETY: forwarded from the caller.
        let _ = unsafe { self.0.mem_free(ptr) };
    }

    fn export(&self, ptr: DevicePtr) -> Result<ShareableHandle> {
        // SAFETY: `ptr` is a live allocation of this backend (the transport's FIFOs).
        unsafe { self.0.export_handle(ptr) }
    }

    unsafe fn import(
        &self,
        handle: &ShareableHandle,
        _device: i32,
        bytes: usize,
    ) -> Result<DevicePtr> {
        // SAFETY: forwarded from the caller; the transport bound `_device` (import maps for
        // the current device).
        unsafe { self.0.import_handle(handle, bytes) }
    }

    fn dev_alloc(&self, bytes: usize) -> Result<DevicePtr> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is a valid out-pointer.
        unsafe { hip_call!(self.0.hip, hipMalloc(&mut p, bytes.max(16))) }?;
        Ok(p as DevicePtr)
    }

    unsafe fn dev_free(&self, ptr: DevicePtr) {
        if ptr != 0 {
            // SAFETY: `ptr` came from hipMalloc and the caller ensured no work uses it.
            let _ = unsafe { hip_call!(self.0.hip, hipFree(ptr as *mut c_void)) };
        }
    }

    fn host_alloc(&self, bytes: usize) -> Result<(*mut u8, DevicePtr)> {
        self.0.host_alloc(bytes.max(16))
    }

    unsafe fn host_free(&self, host: *mut u8) {
        if !host.is_null() {
            // SAFETY: forwarded from the caller.
            let _ = unsafe { self.0.host_free(host) };
        }
    }

    unsafe fn host_register(&self, host: *mut u8, bytes: usize) -> Result<DevicePtr> {
        let flags = sys::hipHostRegisterMapped | sys::hipHostRegisterPortable;
        // SAFETY: the caller keeps the range mapped until `host_unregister`.
        unsafe { hip_call!(self.0.hip, hipHostRegister(host.cast(), bytes, flags)) }?;
        let mut d: *mut c_void = std::ptr::null_mut();
        // SAFETY: registered above as mapped; `d` is a valid out-pointer.
        let mapped =
            unsafe { hip_call!(self.0.hip, hipHostGetDevicePointer(&mut d, host.cast(), 0)) };
        if let Err(e) = mapped {
            // SAFETY: registered above, unused.
            let _ = unsafe { hip_call!(self.0.hip, hipHostUnregister(host.cast())) };
            return Err(e);
        }
        Ok(d as DevicePtr)
    }

    unsafe fn host_unregister(&self, host: *mut u8) {
        // SAFETY: registered by `host_register`; the caller ensured no work uses it.
        let _ = unsafe { hip_call!(self.0.hip, hipHostUnregister(host.cast())) };
    }

    unsafe fn copy_h2d(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        // SAFETY: the caller passes device memory of at least `src.len()` bytes; the copy is
        // complete (the null stream synchronised) before `src` can be dropped.
        unsafe {
            hip_call!(
                self.0.hip,
                hipMemcpyAsync(
                    dst as *mut c_void,
                    src.as_ptr().cast(),
                    src.len(),
                    sys::hipMemcpyKind::hipMemcpyHostToDevice,
                    std::ptr::null_mut()
                )
            )?;
            hip_call!(self.0.hip, hipStreamSynchronize(std::ptr::null_mut()))
        }
    }

    unsafe fn copy_h2d_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        bytes: usize,
        s: Handle,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe {
            hip_call!(
                self.0.hip,
                hipMemcpyAsync(
                    dst as *mut c_void,
                    src.cast(),
                    bytes,
                    sys::hipMemcpyKind::hipMemcpyHostToDevice,
                    stream(s)
                )
            )
        }
    }

    unsafe fn memset_zero_async(&self, dst: DevicePtr, bytes: usize, s: Handle) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe {
            hip_call!(
                self.0.hip,
                hipMemsetAsync(dst as *mut c_void, 0, bytes, stream(s))
            )
        }
    }

    fn stream_create(&self) -> Result<Handle> {
        Ok(self.0.stream_create()?.0)
    }

    unsafe fn stream_destroy(&self, s: Handle) {
        // SAFETY: the caller's stream, with nothing queued.
        let _ = unsafe { hip_call!(self.0.hip, hipStreamDestroy(stream(s))) };
    }

    fn stream_sync(&self, s: Handle) -> Result<()> {
        // SAFETY: a live stream of the transport.
        unsafe { hip_call!(self.0.hip, hipStreamSynchronize(stream(s))) }
    }

    fn event_create(&self) -> Result<Handle> {
        let mut e: sys::hipEvent_t = std::ptr::null_mut();
        // SAFETY: `e` is a valid out-pointer; the flag is a defined value.
        unsafe {
            hip_call!(
                self.0.hip,
                hipEventCreateWithFlags(&mut e, sys::hipEventDisableTiming)
            )
        }?;
        Ok(e as Handle)
    }

    fn event_record(&self, e: Handle, s: Handle) -> Result<()> {
        // SAFETY: a live event of the transport, recorded on a live stream.
        unsafe { hip_call!(self.0.hip, hipEventRecord(event(e), stream(s))) }
    }

    fn event_sync(&self, e: Handle) -> Result<()> {
        // SAFETY: a live event (an unrecorded event is complete).
        unsafe { hip_call!(self.0.hip, hipEventSynchronize(event(e))) }
    }

    unsafe fn event_destroy(&self, e: Handle) {
        // SAFETY: the caller's event, not used afterwards.
        let _ = unsafe { hip_call!(self.0.hip, hipEventDestroy(event(e))) };
    }

    fn stream_wait_event(&self, s: Handle, e: Handle) -> Result<()> {
        // SAFETY: a live event of the transport; the stream is live.
        unsafe { hip_call!(self.0.hip, hipStreamWaitEvent(stream(s), event(e), 0)) }
    }

    fn capture_status(&self, s: Handle) -> Result<CaptureStatus> {
        if !self.0.hip.has("hipStreamIsCapturing") {
            // A runtime without graph capture cannot be capturing.
            return Ok(CaptureStatus::None);
        }
        let mut status = sys::hipStreamCaptureStatus::hipStreamCaptureStatusNone;
        // SAFETY: `status` is a valid out-pointer; the stream is 0 or live.
        unsafe { hip_call!(self.0.hip, hipStreamIsCapturing(stream(s), &mut status)) }?;
        Ok(match status {
            sys::hipStreamCaptureStatus::hipStreamCaptureStatusNone => CaptureStatus::None,
            sys::hipStreamCaptureStatus::hipStreamCaptureStatusActive => CaptureStatus::Active,
            _ => CaptureStatus::Invalidated,
        })
    }

    fn relaxed_capture(&self) -> Result<HipRelaxed> {
        if !self.0.hip.has("hipThreadExchangeStreamCaptureMode") {
            return Ok(HipRelaxed(None));
        }
        let mut mode = sys::hipStreamCaptureMode::hipStreamCaptureModeRelaxed;
        // SAFETY: swaps this thread's capture mode; the previous one is written to `mode`.
        unsafe { hip_call!(self.0.hip, hipThreadExchangeStreamCaptureMode(&mut mode)) }?;
        Ok(HipRelaxed(Some((self.0.clone(), mode))))
    }

    fn executor(&self, device: i32, dtype: DataType, _block_bytes: usize) -> Result<Executor> {
        // HIP passes the block by address only (work.h: OXCCL_INLINE_ARGS_BYTES).
        Ok(Executor {
            func: self.0.function(device, dtype)? as Handle,
            inline_cap: None,
            address_cap: HIP_INLINE_ARGS_BYTES,
        })
    }

    fn one_shot(&self, _device: i32, _dtype: DataType) -> Result<Handle> {
        Err(Error::usage(
            "the HIP backend has no one-shot kernels (has_one_shot is false)",
        ))
    }

    unsafe fn launch(
        &self,
        func: Handle,
        grid: u32,
        threads: u32,
        params: &mut [u8],
        s: Handle,
    ) -> Result<()> {
        let mut ptrs = [params.as_mut_ptr().cast::<c_void>()];
        // SAFETY: `func` takes one parameter of `params.len()` bytes (the caller's contract).
        unsafe {
            hip_call!(
                self.0.hip,
                hipModuleLaunchKernel(
                    func as sys::hipFunction_t,
                    grid,
                    1,
                    1,
                    threads,
                    1,
                    1,
                    0,
                    stream(s),
                    ptrs.as_mut_ptr(),
                    std::ptr::null_mut()
                )
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxccl_core::plan::Protocol;

    #[test]
    fn chunk_bound_leaves_one_slot() {
        assert_eq!(
            kernels::FifoGeometry::default().message_bytes(Protocol::Simple),
            7 * 256 * 1024
        );
        assert_eq!(BLOCK_THREADS % 64, 0);
    }
}
