//! The HIP side of the device transport: [`HipApi`], the shared transport's runtime calls on
//! the HIP runtime. Connections, arenas, graph capture, NET and SHM are
//! `oxccl_device_transport::DeviceTransport`, the same code the CUDA backend runs.
//!
//! None of this has run on an AMD GPU; `tests/hip-on-cuda` runs it on NVIDIA GPUs.

use crate::code_object::CodeObject;
use crate::kernels::{self, HIP_INLINE_ARGS_BYTES};
use crate::runtime::MemoryType;
use crate::runtime::hip_call;
use crate::{
    Alloc, AllocKind, FALLBACK_GRANULARITY, HANDLE_FD, HANDLE_IPC, HipApi, HipEvent, HipStream,
    fd_handle_owner, read_u64, sys, with_device,
};
use oxccl_core::backend::{DevicePtr, PointerInfo, ShareableHandle};
use oxccl_core::datatype::DataType;
use oxccl_core::error::{Error, Result};
use oxccl_core::lock::lock;
use oxccl_device_transport::{CaptureStatus, DeviceApi, DeviceTransport, Executor, Handle};
use std::ffi::c_void;

/// Thread-block size of the executor kernels: four 64-lane wavefronts on CDNA (eight 32-lane
/// ones on RDNA), below the kernels' `__launch_bounds__`.
pub const BLOCK_THREADS: u32 = 256;
const _: () = assert!(BLOCK_THREADS.is_multiple_of(64));
const _: () = assert!(BLOCK_THREADS <= kernels::MAX_THREADS_PER_BLOCK);

/// One communicator's connections on the HIP backend.
pub type HipTransport = DeviceTransport<HipApi>;

/// Keeps a device current; restores the previous one when dropped.
pub struct HipBound {
    be: HipApi,
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
pub struct HipRelaxed(Option<(HipApi, sys::hipStreamCaptureMode)>);

impl Drop for HipRelaxed {
    fn drop(&mut self) {
        if let Some((be, mode)) = &mut self.0 {
            // SAFETY: restores the mode `relaxed_capture` replaced; `mode` is a valid pointer.
            let _ = unsafe { hip_call!(be.hip, hipThreadExchangeStreamCaptureMode(mode)) };
        }
    }
}

impl HipApi {
    /// `hipMemcpyAsync` of `bytes` bytes in direction `kind` on stream `s` (0: the null stream).
    ///
    /// # Safety
    /// Both ranges hold `bytes` bytes until the copy has run.
    unsafe fn memcpy_kind(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        kind: sys::hipMemcpyKind,
        s: Handle,
    ) -> Result<()> {
        // SAFETY: the caller's contract; `s` is 0 or a live stream.
        unsafe {
            hip_call!(
                self.hip,
                hipMemcpyAsync(
                    dst as *mut c_void,
                    src as *const c_void,
                    bytes,
                    kind,
                    stream(s)
                )
            )
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
    type Stream = HipStream;
    type Event = HipEvent;
    const ZERO_COPY: bool = false;
    const ONE_SHOT_KERNELS: bool = false;

    fn bind(&self, device: i32) -> Result<HipBound> {
        let prev = self.current_device()?;
        if prev == device {
            return Ok(HipBound {
                be: self.clone(),
                prev: None,
            });
        }
        self.set_device(device)?;
        Ok(HipBound {
            be: self.clone(),
            prev: Some(prev),
        })
    }

    fn kernels_missing(&self) -> Option<Error> {
        (!self.has_kernels()).then(CodeObject::missing)
    }

    fn has_one_shot(&self) -> bool {
        // The one-shot kernels are not looked up on HIP yet: collectives take the plans.
        false
    }

    fn pci_bus_id(&self, device: i32) -> Option<String> {
        if !self.hip.has("hipDeviceGetPCIBusId") {
            return None;
        }
        let mut buf = [0 as std::ffi::c_char; 32];
        // SAFETY: `buf` is writable for `len` bytes; HIP validates the ordinal and writes a
        // NUL-terminated id that fits.
        unsafe {
            hip_call!(
                self.hip,
                hipDeviceGetPCIBusId(buf.as_mut_ptr(), buf.len() as i32, device)
            )
        }
        .ok()?;
        // SAFETY: NUL-terminated within `buf` (HIP's contract, and the buffer is zeroed).
        let id = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
        Some(id.to_string_lossy().into_owned())
    }

    fn multiprocessors(&self, device: i32) -> Result<u32> {
        if !self.hip.has("hipDeviceGetAttribute") {
            // Unknown: ranks sharing this device get no block cap (see the records' `sms`).
            return Ok(0);
        }
        let mut n = 0i32;
        // SAFETY: `n` is a valid out-pointer; HIP validates the ordinal.
        unsafe {
            hip_call!(
                self.hip,
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
        let r = unsafe { hip_call!(self.hip, hipDeviceCanAccessPeer(&mut can, device, peer)) };
        r.is_ok() && can != 0
    }

    fn enable_peer_access(&self, device: i32, peer: i32) -> Result<()> {
        let _g = self.bind(device)?;
        // SAFETY: `peer` is a valid ordinal (the pair was checked); the flags must be 0.
        match unsafe { hip_call!(self.hip, hipDeviceEnablePeerAccess(peer, 0)) } {
            Ok(()) => {}
            Err(Error::Backend { code, .. })
                if code == i64::from(sys::hipError_t::hipErrorPeerAccessAlreadyEnabled.0) => {}
            Err(e) => {
                tracing::debug!(target: "oxccl::hip", "hipDeviceEnablePeerAccess({peer}): {e}");
            }
        }
        Ok(())
    }

    fn shared_alloc(&self, device: i32, size: usize) -> Result<DevicePtr> {
        let Some(g) = self.vmm_granularity(device) else {
            let size = size.max(1);
            let p = with_device(self, device, || {
                let mut p: *mut c_void = std::ptr::null_mut();
                // SAFETY: `p` is a valid out-pointer.
                unsafe { hip_call!(self.hip, hipMalloc(&mut p, size)) }?;
                Ok(p as DevicePtr)
            })?;
            lock(&self.allocs).insert(
                p,
                Alloc {
                    size,
                    device,
                    kind: AllocKind::Malloc,
                },
            );
            return Ok(p);
        };
        let size = size.max(1).next_multiple_of(g);
        let prop = self.hip.alloc_prop(device);
        let mut handle: sys::hipMemGenericAllocationHandle_t = std::ptr::null_mut();
        // SAFETY: `handle` is a valid out-pointer; `prop` is laid out for this runtime; `size`
        // is a multiple of the granularity.
        unsafe { hip_call!(self.hip, hipMemCreate(&mut handle, size, prop.as_ptr(), 0)) }?;
        // SAFETY: `handle` is a live allocation of `size` bytes, a granularity multiple.
        match unsafe { self.va_map_new(handle as Handle, size, g, &self.access_devices(device)) } {
            Ok(va) => {
                let kind = AllocKind::Vmm {
                    handle: handle as usize,
                    exported_fds: Vec::new(),
                };
                lock(&self.allocs).insert(va, Alloc { size, device, kind });
                Ok(va)
            }
            Err(e) => {
                // SAFETY: `handle` is unmapped and unused.
                let _ = unsafe { hip_call!(self.hip, hipMemRelease(handle)) };
                Err(e)
            }
        }
    }

    unsafe fn shared_free(&self, ptr: DevicePtr) -> Result<()> {
        let a = lock(&self.allocs)
            .remove(&ptr)
            .ok_or_else(|| Error::arg(format!("{ptr:#x} was not allocated by ncclMemAlloc")))?;
        let p = ptr as *mut c_void;
        match a.kind {
            AllocKind::Vmm {
                handle,
                exported_fds,
            } => {
                for fd in exported_fds {
                    // SAFETY: the descriptor came from hipMemExportToShareableHandle and is ours.
                    unsafe { libc::close(fd) };
                }
                // SAFETY: the caller guarantees nothing uses the range; it was mapped by us
                // with this size, and the handle is released once.
                unsafe {
                    hip_call!(self.hip, hipMemUnmap(p, a.size))?;
                    hip_call!(self.hip, hipMemAddressFree(p, a.size))?;
                    hip_call!(
                        self.hip,
                        hipMemRelease(handle as sys::hipMemGenericAllocationHandle_t)
                    )
                }
            }
            // SAFETY: from hipMalloc, unused from now on (caller's contract).
            AllocKind::Malloc => unsafe { hip_call!(self.hip, hipFree(p)) },
            // SAFETY: from hipIpcOpenMemHandle, unused from now on (caller's contract).
            AllocKind::Ipc => unsafe { hip_call!(self.hip, hipIpcCloseMemHandle(p)) },
        }
    }

    /// Handle bytes: a tag, the offset of `ptr` in its allocation, the allocation's size, then
    /// (VMM) the exporter's pid and file descriptor or (hipMalloc) the 64-byte IPC handle.
    fn export(&self, ptr: DevicePtr) -> Result<ShareableHandle> {
        let mut allocs = lock(&self.allocs);
        let (&base, a) = allocs
            .range_mut(..=ptr)
            .next_back()
            .filter(|(b, a)| ptr < **b + a.size as u64)
            .ok_or_else(|| Error::arg(format!("{ptr:#x} was not allocated by ncclMemAlloc")))?;
        let mut out = Vec::with_capacity(84);
        match &mut a.kind {
            AllocKind::Vmm {
                handle,
                exported_fds,
            } => {
                let mut fd: i32 = -1;
                // SAFETY: `fd` receives an int for the POSIX-fd handle type; `handle` is live.
                unsafe {
                    hip_call!(
                        self.hip,
                        hipMemExportToShareableHandle(
                            (&mut fd as *mut i32).cast(),
                            *handle as sys::hipMemGenericAllocationHandle_t,
                            sys::hipMemAllocationHandleType::hipMemHandleTypePosixFileDescriptor,
                            0
                        )
                    )
                }?;
                exported_fds.push(fd);
                out.push(HANDLE_FD);
                out.extend_from_slice(&(ptr - base).to_le_bytes());
                out.extend_from_slice(&(a.size as u64).to_le_bytes());
                out.extend_from_slice(&std::process::id().to_le_bytes());
                out.extend_from_slice(&fd.to_le_bytes());
            }
            AllocKind::Malloc => {
                let mut h = sys::hipIpcMemHandle_t::default();
                // SAFETY: `h` is a valid out-pointer; `base` is the start of a hipMalloc block.
                unsafe { hip_call!(self.hip, hipIpcGetMemHandle(&mut h, base as *mut c_void)) }?;
                out.push(HANDLE_IPC);
                out.extend_from_slice(&(ptr - base).to_le_bytes());
                out.extend_from_slice(&(a.size as u64).to_le_bytes());
                out.extend(h.reserved.iter().map(|&c| c as u8));
            }
            AllocKind::Ipc => {
                return Err(Error::usage(
                    "memory imported from a peer cannot be exported again",
                ));
            }
        }
        Ok(ShareableHandle(out))
    }

    unsafe fn import(
        &self,
        handle: &ShareableHandle,
        _device: i32,
        bytes: usize,
    ) -> Result<DevicePtr> {
        // SAFETY: forwarded from the caller; the transport bound `_device` (import maps for
        // the current device).
        unsafe { self.import_here(handle, bytes) }
    }

    fn dev_alloc(&self, bytes: usize) -> Result<DevicePtr> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is a valid out-pointer.
        unsafe { hip_call!(self.hip, hipMalloc(&mut p, bytes.max(16))) }?;
        Ok(p as DevicePtr)
    }

    unsafe fn dev_free(&self, ptr: DevicePtr) {
        if ptr != 0 {
            // SAFETY: `ptr` came from hipMalloc and the caller ensured no work uses it.
            let _ = unsafe { hip_call!(self.hip, hipFree(ptr as *mut c_void)) };
        }
    }

    fn host_alloc(&self, bytes: usize) -> Result<(*mut u8, DevicePtr)> {
        // The inherent `HipApi::host_alloc`, which the tests and tools call too.
        HipApi::host_alloc(self, bytes.max(16))
    }

    unsafe fn host_free(&self, host: *mut u8) {
        if !host.is_null() {
            // SAFETY: forwarded from the caller.
            let _ = unsafe { HipApi::host_free(self, host) };
        }
    }

    unsafe fn host_register(&self, host: *mut u8, bytes: usize) -> Result<DevicePtr> {
        let flags = sys::hipHostRegisterMapped | sys::hipHostRegisterPortable;
        // SAFETY: the caller keeps the range mapped until `host_unregister`.
        unsafe { hip_call!(self.hip, hipHostRegister(host.cast(), bytes, flags)) }?;
        let mut d: *mut c_void = std::ptr::null_mut();
        // SAFETY: registered above as mapped; `d` is a valid out-pointer.
        let mapped =
            unsafe { hip_call!(self.hip, hipHostGetDevicePointer(&mut d, host.cast(), 0)) };
        if let Err(e) = mapped {
            // SAFETY: registered above, unused.
            let _ = unsafe { hip_call!(self.hip, hipHostUnregister(host.cast())) };
            return Err(e);
        }
        Ok(d as DevicePtr)
    }

    unsafe fn host_unregister(&self, host: *mut u8) {
        // SAFETY: registered by `host_register`; the caller ensured no work uses it.
        let _ = unsafe { hip_call!(self.hip, hipHostUnregister(host.cast())) };
    }

    unsafe fn copy_h2d(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        // SAFETY: the caller passes device memory of at least `src.len()` bytes; the copy is
        // complete (the null stream synchronised) before `src` can be dropped.
        unsafe {
            self.memcpy_kind(
                dst,
                src.as_ptr() as DevicePtr,
                src.len(),
                sys::hipMemcpyKind::hipMemcpyHostToDevice,
                0,
            )?;
            hip_call!(self.hip, hipStreamSynchronize(std::ptr::null_mut()))
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
            self.memcpy_kind(
                dst,
                src as DevicePtr,
                bytes,
                sys::hipMemcpyKind::hipMemcpyHostToDevice,
                s,
            )
        }
    }

    unsafe fn copy_d2h_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        bytes: usize,
        s: Handle,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe {
            self.memcpy_kind(
                dst as DevicePtr,
                src,
                bytes,
                sys::hipMemcpyKind::hipMemcpyDeviceToHost,
                s,
            )
        }
    }

    fn has_word_writes(&self, _device: i32) -> bool {
        // Stream writes of device words are part of HIP on every GPU it runs on; a runtime
        // without the entry points keeps GIN's words in host memory.
        self.hip.api.hipStreamWriteValue32.is_ok() && self.hip.api.hipStreamWriteValue64.is_ok()
    }

    unsafe fn write_word_async(
        &self,
        dst: DevicePtr,
        value: u64,
        wide: bool,
        s: Handle,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller; flags 0 orders the write after the stream's work.
        unsafe {
            if wide {
                hip_call!(
                    self.hip,
                    hipStreamWriteValue64(stream(s), dst as *mut c_void, value, 0)
                )
            } else {
                hip_call!(
                    self.hip,
                    hipStreamWriteValue32(stream(s), dst as *mut c_void, value as u32, 0)
                )
            }
        }
    }

    unsafe fn memset_zero_async(&self, dst: DevicePtr, bytes: usize, s: Handle) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe {
            hip_call!(
                self.hip,
                hipMemsetAsync(dst as *mut c_void, 0, bytes, stream(s))
            )
        }
    }

    fn stream_create(&self) -> Result<Handle> {
        // The inherent `HipApi::stream_create` (a `HipStream`), not this one.
        Ok(HipApi::stream_create(self)?.0)
    }

    unsafe fn stream_destroy(&self, s: Handle) {
        // SAFETY: the caller's stream, with nothing queued.
        let _ = unsafe { hip_call!(self.hip, hipStreamDestroy(stream(s))) };
    }

    fn stream_sync(&self, s: Handle) -> Result<()> {
        // SAFETY: a live stream of the transport.
        unsafe { hip_call!(self.hip, hipStreamSynchronize(stream(s))) }
    }

    fn event_create(&self) -> Result<Handle> {
        let mut e: sys::hipEvent_t = std::ptr::null_mut();
        // SAFETY: `e` is a valid out-pointer; the flag is a defined value.
        unsafe {
            hip_call!(
                self.hip,
                hipEventCreateWithFlags(&mut e, sys::hipEventDisableTiming)
            )
        }?;
        Ok(e as Handle)
    }

    fn event_record(&self, e: Handle, s: Handle) -> Result<()> {
        // SAFETY: a live event of the transport, recorded on a live stream.
        unsafe { hip_call!(self.hip, hipEventRecord(event(e), stream(s))) }
    }

    fn event_sync(&self, e: Handle) -> Result<()> {
        // SAFETY: a live event (an unrecorded event is complete).
        unsafe { hip_call!(self.hip, hipEventSynchronize(event(e))) }
    }

    unsafe fn event_destroy(&self, e: Handle) {
        // SAFETY: the caller's event, not used afterwards.
        let _ = unsafe { hip_call!(self.hip, hipEventDestroy(event(e))) };
    }

    fn stream_wait_event(&self, s: Handle, e: Handle) -> Result<()> {
        // SAFETY: a live event of the transport; the stream is live.
        unsafe { hip_call!(self.hip, hipStreamWaitEvent(stream(s), event(e), 0)) }
    }

    fn capture_status(&self, s: Handle) -> Result<CaptureStatus> {
        if !self.hip.has("hipStreamIsCapturing") {
            // A runtime without graph capture cannot be capturing.
            return Ok(CaptureStatus::None);
        }
        let mut status = sys::hipStreamCaptureStatus::hipStreamCaptureStatusNone;
        // SAFETY: `status` is a valid out-pointer; the stream is 0 or live.
        unsafe { hip_call!(self.hip, hipStreamIsCapturing(stream(s), &mut status)) }?;
        Ok(match status {
            sys::hipStreamCaptureStatus::hipStreamCaptureStatusNone => CaptureStatus::None,
            sys::hipStreamCaptureStatus::hipStreamCaptureStatusActive => CaptureStatus::Active,
            _ => CaptureStatus::Invalidated,
        })
    }

    fn relaxed_capture(&self) -> Result<HipRelaxed> {
        if !self.hip.has("hipThreadExchangeStreamCaptureMode") {
            return Ok(HipRelaxed(None));
        }
        let mut mode = sys::hipStreamCaptureMode::hipStreamCaptureModeRelaxed;
        // SAFETY: swaps this thread's capture mode; the previous one is written to `mode`.
        unsafe { hip_call!(self.hip, hipThreadExchangeStreamCaptureMode(&mut mode)) }?;
        Ok(HipRelaxed(Some((self.clone(), mode))))
    }

    fn executor(&self, device: i32, dtype: DataType, _block_bytes: usize) -> Result<Executor> {
        // HIP passes the block by address only (work.h: OXCCL_INLINE_ARGS_BYTES).
        Ok(Executor {
            func: self.function(device, dtype)? as Handle,
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
                self.hip,
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

    fn load() -> Result<HipApi> {
        HipApi::open()
    }

    fn stream_handle(stream: &HipStream) -> Handle {
        stream.0
    }

    fn stream_from_handle(raw: Handle) -> HipStream {
        HipStream(raw)
    }

    fn event_handle(event: &HipEvent) -> Handle {
        event.raw
    }

    fn device_count(&self) -> Result<usize> {
        let mut n = 0;
        // SAFETY: `n` is a valid out-pointer.
        unsafe { hip_call!(self.hip, hipGetDeviceCount(&mut n)) }?;
        Ok(n.max(0) as usize)
    }

    fn current_device(&self) -> Result<i32> {
        let mut d = 0;
        // SAFETY: `d` is a valid out-pointer.
        unsafe { hip_call!(self.hip, hipGetDevice(&mut d)) }?;
        Ok(d)
    }

    fn set_device(&self, device: i32) -> Result<()> {
        // SAFETY: hipSetDevice validates the ordinal itself.
        unsafe { hip_call!(self.hip, hipSetDevice(device)) }
    }

    fn granularity(&self, device: i32) -> Result<usize> {
        Ok(self.vmm_granularity(device).unwrap_or(FALLBACK_GRANULARITY))
    }

    unsafe fn import_here(&self, handle: &ShareableHandle, size: usize) -> Result<DevicePtr> {
        let b = &handle.0;
        let malformed = || Error::arg("malformed HIP memory handle");
        let tag = *b.first().ok_or_else(malformed)?;
        let offset = read_u64(b, 1).ok_or_else(malformed)?;
        let alloc_size = read_u64(b, 9).ok_or_else(malformed)? as usize;
        if offset.saturating_add(size as u64) > alloc_size as u64 {
            return Err(Error::arg("imported range exceeds the exported allocation"));
        }
        let device = self.current_device()?;
        match tag {
            HANDLE_FD => {
                let (pid, fd) = fd_handle_owner(b).ok_or_else(malformed)?;
                // In this process the exporter's descriptor is ours already; it stays open
                // until the exporting allocation is freed.
                let h = self.import_allocation(pid, fd)?;
                let g = self.vmm_granularity(device).unwrap_or(FALLBACK_GRANULARITY);
                // SAFETY: `h` is a live allocation of `alloc_size` bytes, a granularity multiple.
                match unsafe { self.va_map_new(h as Handle, alloc_size, g, &[device]) } {
                    Ok(va) => {
                        let kind = AllocKind::Vmm {
                            handle: h as usize,
                            exported_fds: Vec::new(),
                        };
                        lock(&self.allocs).insert(
                            va,
                            Alloc {
                                size: alloc_size,
                                device,
                                kind,
                            },
                        );
                        Ok(va + offset)
                    }
                    Err(e) => {
                        // SAFETY: `h` is unmapped and unused.
                        let _ = unsafe { hip_call!(self.hip, hipMemRelease(h)) };
                        Err(e)
                    }
                }
            }
            HANDLE_IPC => {
                let raw = b.get(17..17 + 64).ok_or_else(malformed)?;
                let mut h = sys::hipIpcMemHandle_t::default();
                for (d, s) in h.reserved.iter_mut().zip(raw) {
                    *d = *s as std::ffi::c_char;
                }
                let mut p: *mut c_void = std::ptr::null_mut();
                // SAFETY: `p` is a valid out-pointer; `h` came from a peer's hipIpcGetMemHandle
                // (the caller's contract).
                unsafe {
                    hip_call!(
                        self.hip,
                        hipIpcOpenMemHandle(&mut p, h, sys::hipIpcMemLazyEnablePeerAccess)
                    )
                }?;
                lock(&self.allocs).insert(
                    p as DevicePtr,
                    Alloc {
                        size: alloc_size,
                        device,
                        kind: AllocKind::Ipc,
                    },
                );
                Ok(p as DevicePtr + offset)
            }
            _ => Err(malformed()),
        }
    }

    fn flat_begin(&self, device: i32) -> Result<(usize, Option<HipBound>)> {
        // The runtime's VMM calls name their device: nothing is bound.
        let g = self.vmm_granularity(device).unwrap_or(FALLBACK_GRANULARITY);
        Ok((g, None))
    }

    fn flat_allocation(&self, handle: &ShareableHandle, stride: usize) -> Result<(Handle, usize)> {
        let malformed = || {
            Error::usage(
                "a rank's symmetric window is not VMM memory; allocate it with ncclMemAlloc",
            )
        };
        let b = &handle.0;
        if b.first() != Some(&HANDLE_FD) {
            return Err(malformed());
        }
        let size = read_u64(b, 9).ok_or_else(malformed)? as usize;
        let (pid, fd) = fd_handle_owner(b).ok_or_else(malformed)?;
        if size > stride {
            return Err(Error::arg(
                "a symmetric window's allocation exceeds the stride",
            ));
        }
        let alloc = self.import_allocation(pid, fd)?;
        Ok((alloc as Handle, size))
    }

    unsafe fn va_reserve(&self, bytes: usize, align: usize, at: DevicePtr) -> Result<DevicePtr> {
        let mut va: *mut c_void = std::ptr::null_mut();
        // SAFETY: `va` is a valid out-pointer; size and alignment are granularity multiples;
        // `at` is only a hint.
        unsafe {
            hip_call!(
                self.hip,
                hipMemAddressReserve(&mut va, bytes, align, at as *mut c_void, 0)
            )
        }?;
        Ok(va as DevicePtr)
    }

    unsafe fn va_map(&self, at: DevicePtr, bytes: usize, alloc: Handle) -> Result<()> {
        // SAFETY: the caller guarantees a free part of our reservation and a live allocation of
        // at least `bytes` bytes.
        unsafe {
            hip_call!(
                self.hip,
                hipMemMap(
                    at as *mut c_void,
                    bytes,
                    0,
                    alloc as sys::hipMemGenericAllocationHandle_t,
                    0
                )
            )
        }
    }

    unsafe fn allocation_release(&self, alloc: Handle) {
        // SAFETY: the caller's reference, not used again.
        let _ = unsafe {
            hip_call!(
                self.hip,
                hipMemRelease(alloc as sys::hipMemGenericAllocationHandle_t)
            )
        };
    }

    unsafe fn va_set_access(&self, at: DevicePtr, bytes: usize, devices: &[i32]) -> Result<()> {
        let desc: Vec<sys::hipMemAccessDesc> = devices
            .iter()
            .map(|&d| sys::hipMemAccessDesc {
                location: sys::hipMemLocation {
                    type_: sys::hipMemLocationType::hipMemLocationTypeDevice,
                    id: d,
                },
                flags: sys::hipMemAccessFlags::hipMemAccessFlagsProtReadWrite,
            })
            .collect();
        // SAFETY: `at` maps `bytes` bytes (the caller's contract); `desc` holds `desc.len()`
        // valid entries.
        unsafe {
            hip_call!(
                self.hip,
                hipMemSetAccess(at as *mut c_void, bytes, desc.as_ptr(), desc.len())
            )
        }
    }

    unsafe fn va_unmap(&self, at: DevicePtr, bytes: usize) {
        // SAFETY: mapped by us with this size, unused (the caller's contract).
        let _ = unsafe { hip_call!(self.hip, hipMemUnmap(at as *mut c_void, bytes)) };
    }

    unsafe fn va_free(&self, va: DevicePtr, bytes: usize) {
        // SAFETY: reserved by us with this size, nothing mapped (the caller's contract).
        let _ = unsafe { hip_call!(self.hip, hipMemAddressFree(va as *mut c_void, bytes)) };
    }

    fn stream_event(&self, _stream: Handle) -> Result<HipEvent> {
        // Timing off (cheaper, never read): the transport's events are made alike. On the
        // current device: the runtime's bindings have no call that names a stream's device.
        let raw = self.event_create()?;
        Ok(HipEvent {
            raw,
            hip: self.hip.clone(),
        })
    }

    fn event_query(&self, e: Handle) -> Result<Option<bool>> {
        // SAFETY: the event is live (owned by the backend's `HipEvent`).
        unsafe { self.hip.event_done(event(e)) }
    }

    unsafe fn memcpy_async(
        &self,
        _device: i32,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        s: Handle,
    ) -> Result<()> {
        // SAFETY: the caller guarantees both ranges; hipMemcpyDefault infers the direction
        // from the unified address space.
        unsafe { self.memcpy_kind(dst, src, bytes, sys::hipMemcpyKind::hipMemcpyDefault, s) }
    }

    fn pointer_info(&self, ptr: DevicePtr) -> Result<PointerInfo> {
        // VMM ranges first: the runtime's range query does not cover them everywhere.
        if let Some((base, size)) = self.find(ptr) {
            let device = lock(&self.allocs).get(&base).map_or(-1, |a| a.device);
            return Ok(PointerInfo {
                on_device: true,
                device,
                base,
                size,
            });
        }
        let host = PointerInfo {
            on_device: false,
            device: -1,
            base: ptr,
            size: 0,
        };
        let mut attr = sys::hipPointerAttribute_t::default();
        // SAFETY: `attr` is a valid out-pointer; the query accepts any address.
        let r = unsafe {
            hip_call!(
                self.hip,
                hipPointerGetAttributes(&mut attr, ptr as *const c_void)
            )
        };
        if r.is_err() {
            // ROCm 5 answers pageable host memory with hipErrorInvalidValue.
            return Ok(host);
        }
        match self.hip.memory_type(attr.memoryType.0) {
            MemoryType::Device | MemoryType::Managed => {
                let mut base: sys::hipDeviceptr_t = std::ptr::null_mut();
                let mut size = 0usize;
                // SAFETY: both out-pointers are valid; `ptr` is device memory per the query.
                let r = unsafe {
                    hip_call!(
                        self.hip,
                        hipMemGetAddressRange(&mut base, &mut size, ptr as sys::hipDeviceptr_t)
                    )
                };
                let (base, size) = match r {
                    Ok(()) => (base as DevicePtr, size),
                    Err(_) => (ptr, 0),
                };
                Ok(PointerInfo {
                    on_device: true,
                    device: attr.device,
                    base,
                    size,
                })
            }
            _ => Ok(host),
        }
    }

    fn exposable(&self, _ptr: DevicePtr) -> bool {
        false
    }

    fn caller_stream_create(&self, device: i32) -> Result<HipStream> {
        // hipStreamCreate binds the stream to the current device.
        self.set_device(device)?;
        HipApi::stream_create(self)
    }

    unsafe fn caller_stream_destroy(&self, s: Handle) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { HipApi::stream_destroy(self, HipStream(s)) }
    }

    fn caller_stream_done(&self, s: Handle) -> Result<bool> {
        match self.stream_query(&HipStream(s))? {
            Some(done) => Ok(done),
            None => Err(Error::usage(
                "this HIP runtime has no hipStreamQuery; synchronize instead",
            )),
        }
    }

    unsafe fn caller_copy_to_device(&self, device: i32, dst: DevicePtr, src: &[u8]) -> Result<()> {
        self.set_device(device)?;
        // SAFETY: the caller guarantees `dst`; `src` is borrowed until the synchronize below.
        unsafe {
            DeviceApi::memcpy_async(self, device, dst, src.as_ptr() as DevicePtr, src.len(), 0)
        }?;
        self.stream_sync(0)
    }

    unsafe fn caller_copy_from_device(
        &self,
        device: i32,
        dst: &mut [u8],
        src: DevicePtr,
    ) -> Result<()> {
        self.set_device(device)?;
        // SAFETY: the caller guarantees `src`; `dst` is borrowed until the synchronize below.
        unsafe {
            DeviceApi::memcpy_async(
                self,
                device,
                dst.as_mut_ptr() as DevicePtr,
                src,
                dst.len(),
                0,
            )
        }?;
        self.stream_sync(0)
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
