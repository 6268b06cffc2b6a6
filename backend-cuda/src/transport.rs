//! The CUDA side of the device transport: [`CudaApi`], the shared transport's runtime calls on
//! the CUDA driver API. Connections, arenas, graph capture, NET and SHM are
//! `oxccl_device_transport::DeviceTransport`, written once for both GPU backends.

use crate::driver::{
    CUcontext, CUdevice, CUdeviceptr, CUevent, CUmemGenericAllocationHandle, CUstream, Shared,
};
use crate::kernels::{self, CUDA_INLINE_ARGS_BYTES, CUDA_LARGE_INLINE_ARGS_BYTES};
use crate::memory::{CtxGuard, Memory, read_write};
use crate::modules::{Modules, ParamsSize};
use crate::{CudaEvent, call};
use cudarc::driver::sys;
use oxccl_core::backend::{DevicePtr, PointerInfo, ShareableHandle};
use oxccl_core::datatype::DataType;
use oxccl_core::error::{Error, Result};
use oxccl_device_transport::{CaptureStatus, DeviceApi, DeviceTransport, Executor, Handle};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Arc;

/// Thread-block size of the executor kernels, small launches apart (`OXCCL_BLOCK_THREADS`
/// fixes it for all: 256 runs the launch shape of the HIP backend, which checks on NVIDIA that
/// the shared kernels do not depend on the block or warp width).
const BLOCK_THREADS: u32 = 512;

/// One communicator's connections on the CUDA backend.
pub type CudaTransport = DeviceTransport<CudaApi>;

/// A CUDA stream handle (0 is the legacy default stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CudaStream(pub Shared<CUstream>);

impl CudaStream {
    /// The raw handle.
    pub fn raw(&self) -> CUstream {
        self.0.0
    }

    /// The raw handle as the shared transport's [`Handle`].
    pub fn handle(&self) -> Handle {
        self.0.0 as Handle
    }
}

/// The shared transport's runtime calls on the CUDA driver (the backend's memory tables and
/// loaded modules).
#[derive(Clone)]
pub struct CudaApi {
    pub(crate) mem: Arc<Memory>,
    pub(crate) modules: Arc<Modules>,
}

/// This thread's stream-capture mode switched to relaxed, restored on drop (as NCCL does around
/// its own allocations while a user's stream captures).
pub struct RelaxedCapture(sys::CUstreamCaptureMode);

impl Drop for RelaxedCapture {
    fn drop(&mut self) {
        // SAFETY: restores the mode `relaxed_capture` replaced.
        let _ = unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut self.0) };
    }
}

/// `s`'s graph-capture status.
pub(crate) fn capture_state(s: CUstream) -> Result<sys::CUstreamCaptureStatus> {
    let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: `s` is a live stream; writes its capture status.
    unsafe { call!(cuStreamIsCapturing(s, &mut st)) }?;
    Ok(st)
}

fn stream(h: Handle) -> CUstream {
    h as CUstream
}

fn event(h: Handle) -> CUevent {
    h as CUevent
}

impl DeviceApi for CudaApi {
    type Bound = CtxGuard;
    type Relaxed = RelaxedCapture;
    const BLOCK_THREADS: u32 = BLOCK_THREADS;
    const SIZED_LAUNCHES: bool = true;
    const NAME: &'static str = "cuda";
    type Stream = CudaStream;
    type Event = CudaEvent;
    const ZERO_COPY: bool = true;
    const ONE_SHOT_KERNELS: bool = true;

    fn bind(&self, device: i32) -> Result<CtxGuard> {
        self.mem.bind(device)
    }

    fn kernels_missing(&self) -> Option<Error> {
        (!kernels::kernels_built())
            .then(|| Error::usage("oxccl was built without device kernels (no nvcc at build time)"))
    }

    fn has_one_shot(&self) -> bool {
        kernels::kernels_built()
    }

    fn multiprocessors(&self, device: i32) -> Result<u32> {
        self.mem.multiprocessors(device)
    }

    fn pci_bus_id(&self, device: i32) -> Option<String> {
        self.mem.pci_bus_id(device).ok()
    }

    fn gpu_direct_rdma(&self, device: i32) -> bool {
        let attr = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED;
        self.mem.attribute(device, attr).is_ok_and(|v| v != 0)
    }

    fn dma_buf_supported(&self, device: i32) -> bool {
        let attr = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED;
        // An older driver that lacks the export call would panic in the binding: look first.
        // SAFETY: only looks the symbol up (never calls it through this type) in the driver
        // library the backend already opened.
        let exported = unsafe {
            sys::culib()
                .get::<unsafe extern "C" fn()>(b"cuMemGetHandleForAddressRange\0")
                .is_ok()
        };
        exported && self.mem.attribute(device, attr).is_ok_and(|v| v != 0)
    }

    fn compute_capability(&self, device: i32) -> Option<(u32, u32)> {
        use sys::CUdevice_attribute as A;
        let major = self
            .mem
            .attribute(device, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
            .ok()?;
        let minor = self
            .mem
            .attribute(device, A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
            .ok()?;
        Some((major.max(0) as u32, minor.max(0) as u32))
    }

    fn dma_buf_fd(&self, ptr: DevicePtr, bytes: usize) -> Option<OwnedFd> {
        let mut fd: std::ffi::c_int = -1;
        // SAFETY: `ptr..ptr+bytes` is device memory of the bound context (the caller's
        // contract); the driver writes a new descriptor into `fd`. Callers check
        // `dma_buf_supported` first, so the entry point exists.
        let r = unsafe {
            call!(cuMemGetHandleForAddressRange(
                (&mut fd as *mut std::ffi::c_int).cast(),
                ptr,
                bytes,
                sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                0
            ))
        };
        match r {
            // SAFETY: a descriptor the driver just opened for us, owned by nobody else.
            Ok(()) if fd >= 0 => Some(unsafe { OwnedFd::from_raw_fd(fd) }),
            Ok(()) => None,
            Err(e) => {
                tracing::info!(target: "oxccl::net",
                    "no dma-buf for {bytes} bytes of GPU memory ({e}): registering with regMr");
                None
            }
        }
    }

    fn can_access_peer(&self, device: i32, peer: i32) -> bool {
        let (Ok(d), Ok(p)) = (usize::try_from(device), usize::try_from(peer)) else {
            return false;
        };
        self.mem
            .peer
            .get(d)
            .and_then(|r| r.get(p))
            .copied()
            .unwrap_or(false)
    }

    fn enable_peer_access(&self, device: i32, peer: i32) -> Result<()> {
        self.mem.enable_peer_access(device, peer)
    }

    fn shared_alloc(&self, device: i32, bytes: usize) -> Result<DevicePtr> {
        self.alloc_shared(device, bytes)
    }

    unsafe fn shared_free(&self, ptr: DevicePtr) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.mem.free(ptr) }
    }

    fn export(&self, ptr: DevicePtr) -> Result<ShareableHandle> {
        self.mem.export(ptr)
    }

    unsafe fn import(
        &self,
        handle: &ShareableHandle,
        device: i32,
        _bytes: usize,
    ) -> Result<DevicePtr> {
        self.import_mapped(handle, device)
    }

    fn dev_alloc(&self, bytes: usize) -> Result<DevicePtr> {
        let mut p: CUdeviceptr = 0;
        // SAFETY: allocates in the current context; `p` receives the address.
        unsafe { call!(cuMemAlloc_v2(&mut p, bytes.max(16))) }?;
        Ok(p)
    }

    unsafe fn dev_free(&self, ptr: DevicePtr) {
        if ptr != 0 {
            // SAFETY: `ptr` came from cuMemAlloc and the caller ensured no work uses it.
            let _ = unsafe { sys::cuMemFree_v2(ptr) };
        }
    }

    fn host_alloc(&self, bytes: usize) -> Result<(*mut u8, DevicePtr)> {
        let mut p: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: allocates pinned, device-mapped host memory; `p` receives the address.
        unsafe {
            call!(cuMemHostAlloc(
                &mut p,
                bytes.max(16),
                sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE
            ))
        }?;
        let mut dev: CUdeviceptr = 0;
        // SAFETY: `p` was allocated with DEVICEMAP; `dev` receives its device address.
        if let Err(e) = unsafe { call!(cuMemHostGetDevicePointer_v2(&mut dev, p, 0)) } {
            // SAFETY: ours, unused.
            let _ = unsafe { sys::cuMemFreeHost(p) };
            return Err(e);
        }
        Ok((p.cast(), dev))
    }

    unsafe fn host_free(&self, host: *mut u8) {
        if !host.is_null() {
            // SAFETY: `host` came from cuMemHostAlloc and no work uses it.
            let _ = unsafe { sys::cuMemFreeHost(host.cast()) };
        }
    }

    unsafe fn host_register(&self, host: *mut u8, bytes: usize) -> Result<DevicePtr> {
        // SAFETY: the caller keeps the range mapped until `host_unregister`.
        unsafe {
            call!(cuMemHostRegister_v2(
                host.cast(),
                bytes,
                sys::CU_MEMHOSTREGISTER_DEVICEMAP | sys::CU_MEMHOSTREGISTER_PORTABLE
            ))
        }?;
        let mut dev: CUdeviceptr = 0;
        // SAFETY: registered above with DEVICEMAP; `dev` receives the device address.
        if let Err(e) = unsafe { call!(cuMemHostGetDevicePointer_v2(&mut dev, host.cast(), 0)) } {
            // SAFETY: registered above, unused.
            let _ = unsafe { sys::cuMemHostUnregister(host.cast()) };
            return Err(e);
        }
        Ok(dev)
    }

    unsafe fn host_unregister(&self, host: *mut u8) {
        // SAFETY: registered by `host_register`; the caller ensured no work uses it.
        let _ = unsafe { sys::cuMemHostUnregister(host.cast()) };
    }

    unsafe fn copy_h2d(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        // SAFETY: the caller guarantees `dst` holds `src.len()` bytes in the current context.
        unsafe { crate::driver::copy_h2d_complete(dst, src) }
    }

    unsafe fn copy_h2d_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        bytes: usize,
        s: Handle,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { call!(cuMemcpyHtoDAsync_v2(dst, src.cast(), bytes, stream(s))) }
    }

    unsafe fn copy_d2h_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        bytes: usize,
        s: Handle,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { call!(cuMemcpyDtoHAsync_v2(dst.cast(), src, bytes, stream(s))) }
    }

    fn has_word_writes(&self, device: i32) -> bool {
        // CUDA 12 made 32-bit stream writes universal; 64-bit ones remain a device's choice.
        let wide = sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS;
        self.mem.attribute(device, wide).is_ok_and(|v| v != 0)
    }

    unsafe fn write_word_async(
        &self,
        dst: DevicePtr,
        value: u64,
        wide: bool,
        s: Handle,
    ) -> Result<()> {
        // Flags 0: the write waits for the stream's earlier writes to be visible.
        // SAFETY: forwarded from the caller.
        unsafe {
            if wide {
                call!(cuStreamWriteValue64_v2(stream(s), dst, value, 0))
            } else {
                call!(cuStreamWriteValue32_v2(stream(s), dst, value as u32, 0))
            }
        }
    }

    unsafe fn memset_zero_async(&self, dst: DevicePtr, bytes: usize, s: Handle) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { call!(cuMemsetD8Async(dst, 0, bytes, stream(s))) }
    }

    fn stream_create(&self) -> Result<Handle> {
        let mut s: CUstream = std::ptr::null_mut();
        // SAFETY: creates a stream in the device's (current) context.
        unsafe {
            call!(cuStreamCreate(
                &mut s,
                sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32
            ))
        }?;
        Ok(s as Handle)
    }

    unsafe fn stream_destroy(&self, s: Handle) {
        // SAFETY: the caller's stream, with nothing queued.
        let _ = unsafe { sys::cuStreamDestroy_v2(stream(s)) };
    }

    fn stream_sync(&self, s: Handle) -> Result<()> {
        // SAFETY: a live stream of the transport.
        unsafe { call!(cuStreamSynchronize(stream(s))) }
    }

    fn event_create(&self) -> Result<Handle> {
        let mut e: CUevent = std::ptr::null_mut();
        // SAFETY: creates an event in the current (the device's) context.
        unsafe {
            call!(cuEventCreate(
                &mut e,
                sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32
            ))
        }?;
        Ok(e as Handle)
    }

    fn event_record(&self, e: Handle, s: Handle) -> Result<()> {
        // SAFETY: a live event of the transport, recorded on a live stream.
        unsafe { call!(cuEventRecord(event(e), stream(s))) }
    }

    fn event_sync(&self, e: Handle) -> Result<()> {
        // SAFETY: a live event (recorded or not: an unrecorded event is complete).
        unsafe { call!(cuEventSynchronize(event(e))) }
    }

    unsafe fn event_destroy(&self, e: Handle) {
        // SAFETY: the caller's event, not used afterwards.
        let _ = unsafe { sys::cuEventDestroy_v2(event(e)) };
    }

    fn stream_wait_event(&self, s: Handle, e: Handle) -> Result<()> {
        // SAFETY: a live event of the transport; the stream is live.
        unsafe { call!(cuStreamWaitEvent(stream(s), event(e), 0)) }
    }

    fn capture_status(&self, s: Handle) -> Result<CaptureStatus> {
        Ok(match capture_state(stream(s))? {
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE => CaptureStatus::None,
            sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE => CaptureStatus::Active,
            _ => CaptureStatus::Invalidated,
        })
    }

    fn relaxed_capture(&self) -> Result<RelaxedCapture> {
        let mut mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
        // SAFETY: swaps this thread's capture mode; the previous one is written back to `mode`.
        unsafe { call!(cuThreadExchangeStreamCaptureMode(&mut mode)) }?;
        Ok(RelaxedCapture(mode))
    }

    fn executor(&self, device: i32, dtype: DataType, block_bytes: usize) -> Result<Executor> {
        // Inline in the smallest parameter family that holds the block (1008, 4000 or 16000
        // bytes), else by address through the default entry points.
        let inline = block_bytes <= CUDA_LARGE_INLINE_ARGS_BYTES;
        let (size, cap) = ParamsSize::for_block(block_bytes, inline);
        let func = self.modules.function(device, dtype, size)?;
        Ok(Executor {
            func: func.0 as Handle,
            inline_cap: inline.then_some(cap),
            address_cap: CUDA_INLINE_ARGS_BYTES,
        })
    }

    fn one_shot(&self, device: i32, dtype: DataType) -> Result<Handle> {
        Ok(self.modules.one_shot(device, dtype)?.0 as Handle)
    }

    unsafe fn launch(
        &self,
        func: Handle,
        grid: u32,
        threads: u32,
        params: &mut [u8],
        s: Handle,
    ) -> Result<()> {
        let mut ptrs = [params.as_mut_ptr().cast::<std::ffi::c_void>()];
        let func = func as sys::CUfunction;
        // Programmatic dependent launch: the block scheduling and argument staging of this
        // kernel overlap the end of the one before it, which waits for it where it matters
        // (`oxccl_grid_dependency_wait`). Measured on an H100: 0.4-0.5 us less per launch of a
        // kernel that waits on the host.
        let mut attr = sys::CUlaunchAttribute {
            id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
            pad: [0; 4],
            value: sys::CUlaunchAttributeValue { pad: [0; 64] },
        };
        attr.value.programmaticStreamSerializationAllowed = 1;
        let config = sys::CUlaunchConfig {
            gridDimX: grid,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: threads,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: 0,
            hStream: stream(s),
            attrs: &mut attr,
            numAttrs: u32::from(self.modules.dependent_launch(func)),
        };
        // SAFETY: `func` takes one parameter of `params.len()` bytes (the caller's contract);
        // the driver copies it and the configuration before returning.
        unsafe {
            call!(cuLaunchKernelEx(
                &config,
                func,
                ptrs.as_mut_ptr(),
                std::ptr::null_mut()
            ))
        }
    }

    fn load() -> Result<CudaApi> {
        CudaApi::open()
    }

    fn stream_handle(stream: &CudaStream) -> Handle {
        stream.handle()
    }

    fn stream_from_handle(raw: Handle) -> CudaStream {
        CudaStream(Shared(raw as sys::CUstream))
    }

    fn event_handle(event: &CudaEvent) -> Handle {
        event.0.0 as Handle
    }

    fn device_count(&self) -> Result<usize> {
        Ok(self.mem.devices.len())
    }

    fn current_device(&self) -> Result<i32> {
        let mut c: CUcontext = std::ptr::null_mut();
        // SAFETY: writes the calling thread's current context.
        unsafe { call!(cuCtxGetCurrent(&mut c)) }?;
        if c.is_null() {
            return Ok(0);
        }
        let mut d: CUdevice = 0;
        // SAFETY: a context is current.
        unsafe { call!(cuCtxGetDevice(&mut d)) }?;
        Ok(self.mem.devices.iter().position(|&x| x == d).unwrap_or(0) as i32)
    }

    fn set_device(&self, device: i32) -> Result<()> {
        let g = self.mem.bind(device)?;
        // Keep the new context current.
        std::mem::forget(g);
        Ok(())
    }

    fn granularity(&self, device: i32) -> Result<usize> {
        self.mem.granularity(device)
    }

    unsafe fn import_here(&self, handle: &ShareableHandle, _bytes: usize) -> Result<DevicePtr> {
        let d = self.current_device()?;
        self.import_mapped(handle, d)
    }

    fn flat_begin(&self, device: i32) -> Result<(usize, Option<CtxGuard>)> {
        let gran = self.mem.granularity(device)?;
        // The driver's VMM calls act in the current context.
        Ok((gran, Some(self.mem.bind(device)?)))
    }

    fn flat_allocation(&self, handle: &ShareableHandle, stride: usize) -> Result<(Handle, usize)> {
        let (alloc, size) = self.mem.flat_allocation(handle, stride)?;
        Ok((alloc as Handle, size))
    }

    unsafe fn va_reserve(&self, bytes: usize, align: usize, at: DevicePtr) -> Result<DevicePtr> {
        let mut va: CUdeviceptr = 0;
        // SAFETY: reserves `bytes` bytes of addresses (at `at` if free); `va` receives the start.
        unsafe { call!(cuMemAddressReserve(&mut va, bytes, align, at, 0)) }?;
        Ok(va)
    }

    unsafe fn va_map(&self, at: DevicePtr, bytes: usize, alloc: Handle) -> Result<()> {
        // SAFETY: the caller guarantees a free part of our reservation and a live allocation of
        // at least `bytes` bytes.
        unsafe {
            call!(cuMemMap(
                at,
                bytes,
                0,
                alloc as CUmemGenericAllocationHandle,
                0
            ))
        }
    }

    unsafe fn allocation_release(&self, alloc: Handle) {
        // SAFETY: the caller's reference, not used again.
        let _ = unsafe { sys::cuMemRelease(alloc as CUmemGenericAllocationHandle) };
    }

    unsafe fn va_set_access(&self, at: DevicePtr, bytes: usize, devices: &[i32]) -> Result<()> {
        let descs: Vec<sys::CUmemAccessDesc> = devices.iter().map(|&d| read_write(d)).collect();
        // SAFETY: `at..at + bytes` is mapped (the caller's contract); `descs` holds
        // `descs.len()` valid entries.
        unsafe { call!(cuMemSetAccess(at, bytes, descs.as_ptr(), descs.len())) }
    }

    unsafe fn va_unmap(&self, at: DevicePtr, bytes: usize) {
        // SAFETY: mapped by us with this size, unused (the caller's contract).
        let _ = unsafe { sys::cuMemUnmap(at, bytes) };
    }

    unsafe fn va_free(&self, va: DevicePtr, bytes: usize) {
        // SAFETY: reserved by us with this size, nothing mapped (the caller's contract).
        let _ = unsafe { sys::cuMemAddressFree(va, bytes) };
    }

    fn stream_event(&self, s: Handle) -> Result<CudaEvent> {
        // An event records only on streams of the context it was made in, and the calling
        // thread's current context may be another device's: make it in the stream's.
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: the stream is live (`stream_from_raw`'s contract); `ctx` is an out-pointer.
        unsafe { call!(cuStreamGetCtx(stream(s), &mut ctx)) }?;
        // SAFETY: the driver just named the live stream's context.
        let _g = unsafe { self.mem.bind_context(ctx) }?;
        // Timing disabled: the transport's events are made alike.
        let e = self.event_create()?;
        Ok(CudaEvent(Shared(e as CUevent)))
    }

    fn event_query(&self, e: Handle) -> Result<Option<bool>> {
        // SAFETY: the event is live; the query never blocks.
        match unsafe { sys::cuEventQuery(event(e)) } {
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(Some(false)),
            rc => crate::driver::check("cuEventQuery", rc).map(|()| Some(true)),
        }
    }

    unsafe fn memcpy_async(
        &self,
        device: i32,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        s: Handle,
    ) -> Result<()> {
        // One thread may drive several devices (ncclCommInitAll): queue from the stream's own.
        let _g = self.mem.bind(device)?;
        // SAFETY: the caller guarantees both ranges; unified addressing resolves their kinds.
        unsafe { call!(cuMemcpyAsync(dst, src, bytes, stream(s))) }
    }

    fn pointer_info(&self, ptr: DevicePtr) -> Result<PointerInfo> {
        self.mem.pointer_info(ptr)
    }

    fn exposable(&self, ptr: DevicePtr) -> bool {
        self.mem.peer_accessible(ptr)
    }

    fn caller_stream_create(&self, device: i32) -> Result<CudaStream> {
        // The inherent `CudaApi::stream_create`, not the transport's `DeviceApi` one.
        CudaApi::stream_create(self, device)
    }

    unsafe fn caller_stream_destroy(&self, s: Handle) -> Result<()> {
        // SAFETY: the caller guarantees the stream is ours, idle and not used again.
        crate::driver::check("cuStreamDestroy", unsafe {
            sys::cuStreamDestroy_v2(stream(s))
        })
    }

    fn caller_stream_done(&self, s: Handle) -> Result<bool> {
        // SAFETY: the stream is live (it came from `create_stream` or a caller who keeps it).
        match unsafe { sys::cuStreamQuery(stream(s)) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            r => crate::driver::check("cuStreamQuery", r).map(|()| false),
        }
    }

    unsafe fn caller_copy_to_device(&self, device: i32, dst: DevicePtr, src: &[u8]) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.copy_to_device(device, dst, src) }
    }

    unsafe fn caller_copy_from_device(
        &self,
        device: i32,
        dst: &mut [u8],
        src: DevicePtr,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.copy_from_device(device, dst, src) }
    }
}
