//! oxccl backend for NVIDIA GPUs: the CUDA driver API, loaded at run time through cudarc.
//!
//! [`CudaBackend::load`] fails cleanly (no panic) where no driver or no device exists. Memory is
//! VMM memory shareable with peers ([`memory`]), connections are P2P FIFOs in peer-mapped memory
//! ([`transport`]), and operations run as the kernels of `kernels/common` embedded as a fatbin
//! ([`kernels`]).

pub mod driver;
pub mod kernels;
pub mod memory;
pub mod modules;
pub mod transport;

use crate::driver::{CUcontext, CUdevice, CUevent, Shared};
use crate::memory::Memory;
use crate::modules::Modules;
use cudarc::driver::sys;
pub use kernels::{FifoGeometry, MAX_CHANNELS};
use oxccl_core::abort::AbortFlag;
use oxccl_core::backend::{
    Backend, ConnectContext, DevicePtr, Launch, PointerInfo, ShareableHandle,
};
use oxccl_core::config::{self, vars};
use oxccl_core::error::{Error, Result};
use oxccl_core::plan::Protocol;
use oxccl_core::plan::one_shot::OneShot;
use oxccl_core::plan::tuner::Topology;
use oxccl_device_transport::DeviceApi;
use std::sync::Arc;
pub use transport::{CudaApi, CudaStream, CudaTransport};

/// The CUDA backend: one primary context per device, retained for the process lifetime.
pub struct CudaBackend {
    mem: Arc<Memory>,
    modules: Arc<Modules>,
    devices: Vec<CUdevice>,
    geometry: FifoGeometry,
}

/// A CUDA event (timing disabled), destroyed on drop.
pub struct CudaEvent(Shared<CUevent>);

impl Drop for CudaEvent {
    fn drop(&mut self) {
        // SAFETY: the event is ours; the driver defers destruction until recorded work is done.
        let _ = unsafe { sys::cuEventDestroy_v2(self.0.0) };
    }
}

impl CudaBackend {
    /// Loads the driver, initialises it and retains every device's primary context.
    ///
    /// Fails with an error (never a panic) when no driver library exists or it has no device.
    pub fn load() -> Result<CudaBackend> {
        let geometry = FifoGeometry::from_env()?;
        if !driver::driver_present() {
            return Err(Error::Backend {
                api: "dlopen(libcuda.so)",
                code: 0,
                detail: "no CUDA driver".into(),
            });
        }
        // SAFETY: first driver call; the library is present.
        unsafe { call!(cuInit(0)) }?;
        let mut n = 0i32;
        // SAFETY: writes the device count.
        unsafe { call!(cuDeviceGetCount(&mut n)) }?;
        let mut devices = Vec::new();
        for i in 0..n {
            let mut d: CUdevice = 0;
            // SAFETY: `i` is below the device count.
            unsafe { call!(cuDeviceGet(&mut d, i)) }?;
            devices.push(d);
        }
        let mut peer = vec![vec![false; devices.len()]; devices.len()];
        for (a, &da) in devices.iter().enumerate() {
            for (b, &db) in devices.iter().enumerate() {
                if a != b {
                    let mut can = 0i32;
                    // SAFETY: both devices are valid.
                    unsafe { call!(cuDeviceCanAccessPeer(&mut can, da, db)) }?;
                    peer[a][b] = can != 0;
                }
            }
        }
        // NCCL's switch for its cuMem* path; 0 selects cuMemAlloc + legacy IPC here too.
        let cumem_off = !config::get(&vars::NCCL_CUMEM_ENABLE);
        let mut vmm = Vec::with_capacity(devices.len());
        for &d in &devices {
            let mut supported = 0i32;
            // SAFETY: `d` is a valid device; writes an integer attribute.
            unsafe {
                call!(cuDeviceGetAttribute(
                    &mut supported,
                    sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_ADDRESS_MANAGEMENT_SUPPORTED,
                    d
                ))
            }?;
            vmm.push(supported != 0 && !cumem_off);
        }
        Ok(CudaBackend {
            mem: Arc::new(Memory::new(devices.clone(), peer, vmm)),
            modules: Arc::new(Modules::default()),
            devices,
            geometry,
        })
    }

    /// Memory management, for tests and tools that need device buffers.
    pub fn memory(&self) -> &Memory {
        &self.mem
    }

    /// Copies `src` to memory of `device` at `dst` (synchronous; for tests and tools).
    ///
    /// # Safety
    /// `dst` is device memory of at least `src.len()` bytes.
    pub unsafe fn copy_to_device(&self, device: i32, dst: DevicePtr, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        let _g = self.mem.bind(device)?;
        // SAFETY: the caller guarantees `dst` holds `src.len()` bytes; `device`'s context is
        // bound.
        unsafe { crate::driver::copy_h2d_complete(dst, src) }
    }

    /// Copies memory of `device` at `src` into `dst` (synchronous; for tests and tools).
    ///
    /// # Safety
    /// `src` is device memory of at least `dst.len()` bytes.
    pub unsafe fn copy_from_device(
        &self,
        device: i32,
        dst: &mut [u8],
        src: DevicePtr,
    ) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        let _g = self.mem.bind(device)?;
        // SAFETY: the caller guarantees `src` holds `dst.len()` bytes.
        unsafe { call!(cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), src, dst.len())) }
    }

    /// `cuMemAlloc` on `device` (plain device memory, as `cudaMalloc`; for tests and tools).
    pub fn plain_alloc(&self, device: i32, bytes: usize) -> Result<DevicePtr> {
        let _g = self.mem.bind(device)?;
        let mut p = 0;
        // SAFETY: allocates in `device`'s context.
        unsafe { call!(cuMemAlloc_v2(&mut p, bytes.max(1))) }?;
        Ok(p)
    }

    /// Frees [`CudaBackend::plain_alloc`] memory.
    ///
    /// # Safety
    /// `ptr` came from `plain_alloc` and no work uses it.
    pub unsafe fn plain_free(&self, device: i32, ptr: DevicePtr) -> Result<()> {
        let _g = self.mem.bind(device)?;
        // SAFETY: forwarded from the caller.
        unsafe { call!(cuMemFree_v2(ptr)) }
    }

    /// A new non-blocking stream on `device` (for tests and tools).
    pub fn stream_create(&self, device: i32) -> Result<CudaStream> {
        let _g = self.mem.bind(device)?;
        // The transport's own set-up streams are made the same way.
        let s = self.api().stream_create()?;
        Ok(CudaStream(Shared(s as sys::CUstream)))
    }

    /// The shared transport's runtime calls over this backend's memory and modules.
    fn api(&self) -> CudaApi {
        CudaApi {
            mem: self.mem.clone(),
            modules: self.modules.clone(),
        }
    }
}

impl Backend for CudaBackend {
    type Stream = CudaStream;
    type Event = CudaEvent;
    type Transport = CudaTransport;

    fn name(&self) -> &'static str {
        "cuda"
    }
    fn device_count(&self) -> Result<usize> {
        Ok(self.devices.len())
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
        Ok(self.devices.iter().position(|&x| x == d).unwrap_or(0) as i32)
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
    fn mem_alloc(&self, device: i32, size: usize) -> Result<DevicePtr> {
        self.mem.alloc(device, size)
    }
    unsafe fn mem_free(&self, ptr: DevicePtr) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.mem.free(ptr) }
    }
    unsafe fn export_handle(&self, ptr: DevicePtr) -> Result<ShareableHandle> {
        self.mem.export(ptr)
    }
    unsafe fn import_handle(&self, handle: &ShareableHandle, _size: usize) -> Result<DevicePtr> {
        let d = self.current_device()?;
        self.mem.import(handle, d)
    }
    fn flat_mapping(&self) -> bool {
        true
    }
    unsafe fn map_flat(
        &self,
        device: i32,
        handles: &[ShareableHandle],
        stride: usize,
    ) -> Result<DevicePtr> {
        self.mem.map_flat(device, handles, stride)
    }
    unsafe fn unmap_flat(&self, base: DevicePtr) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.mem.unmap_flat(base) }
    }
    unsafe fn stream_from_raw(&self, raw: usize) -> Result<CudaStream> {
        Ok(CudaStream(Shared(raw as sys::CUstream)))
    }
    fn stream_synchronize(&self, stream: &CudaStream) -> Result<()> {
        // SAFETY: the stream is live (`stream_from_raw`'s contract).
        unsafe { call!(cuStreamSynchronize(stream.raw())) }
    }
    fn is_capturing(&self, stream: &CudaStream) -> Result<bool> {
        Ok(transport::capture_state(stream.raw())?
            != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }
    fn event_create(&self, stream: &CudaStream) -> Result<CudaEvent> {
        // An event records only on streams of the context it was made in, and the calling
        // thread's current context may be another device's: make it in the stream's.
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: the stream is live (`stream_from_raw`'s contract); `ctx` is an out-pointer.
        unsafe { call!(cuStreamGetCtx(stream.raw(), &mut ctx)) }?;
        // SAFETY: the driver just named the live stream's context.
        let _g = unsafe { self.mem.bind_context(ctx) }?;
        // Timing disabled: the transport's events are made alike.
        let e = self.api().event_create()?;
        Ok(CudaEvent(Shared(e as CUevent)))
    }
    fn event_record(&self, event: &CudaEvent, stream: &CudaStream) -> Result<()> {
        // SAFETY: both handles are live.
        unsafe { call!(cuEventRecord(event.0.0, stream.raw())) }
    }
    fn event_synchronize(&self, event: &CudaEvent) -> Result<()> {
        // SAFETY: the event is live.
        unsafe { call!(cuEventSynchronize(event.0.0)) }
    }
    fn event_query(&self, event: &CudaEvent) -> Result<Option<bool>> {
        // SAFETY: the event is live; the query never blocks.
        match unsafe { sys::cuEventQuery(event.0.0) } {
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(Some(false)),
            rc => crate::driver::check("cuEventQuery", rc).map(|()| Some(true)),
        }
    }
    fn stream_id(&self, stream: &CudaStream) -> u64 {
        stream.raw() as u64
    }
    fn stream_wait_event(&self, stream: &CudaStream, event: &CudaEvent) -> Result<()> {
        // SAFETY: both handles are live.
        unsafe { call!(cuStreamWaitEvent(stream.raw(), event.0.0, 0)) }
    }
    unsafe fn memcpy_async(
        &self,
        device: i32,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        stream: &CudaStream,
    ) -> Result<()> {
        // One thread may drive several devices (ncclCommInitAll): queue from the stream's own.
        let _g = self.mem.bind(device)?;
        // SAFETY: the caller guarantees both ranges; unified addressing resolves their kinds.
        unsafe { call!(cuMemcpyAsync(dst, src, bytes, stream.raw())) }
    }
    fn pointer_info(&self, ptr: DevicePtr) -> Result<PointerInfo> {
        self.mem.pointer_info(ptr)
    }
    fn zero_copy(&self) -> bool {
        true
    }
    fn exposable(&self, ptr: DevicePtr) -> bool {
        self.mem.peer_accessible(ptr)
    }
    fn max_chunk_bytes(&self, proto: Protocol) -> Option<u64> {
        Some(self.geometry.message_bytes(proto))
    }
    fn max_channels(&self, transport: &CudaTransport) -> Option<u32> {
        Some((self.geometry.channels as u32).min(transport.max_blocks()))
    }
    fn max_direct_channels(&self, transport: &CudaTransport) -> Option<u32> {
        transport.direct_channels()
    }
    fn connect_on_use(
        &self,
        transport: &CudaTransport,
        work: &oxccl_core::plan::WorkDesc,
        bootstrap: &std::sync::Arc<oxccl_core::bootstrap::Bootstrap>,
        abort: &oxccl_core::abort::AbortFlag,
    ) -> Result<()> {
        transport.connect_on_use(work, bootstrap, abort)
    }
    fn needs_peer_watch(&self) -> bool {
        true
    }
    fn topology(&self, transport: &CudaTransport) -> Option<Topology> {
        transport.topology()
    }
    fn connect(&self, ctx: &ConnectContext<'_>) -> Result<CudaTransport> {
        CudaTransport::connect(self.api(), self.geometry, ctx)
    }
    fn one_shot_bytes(&self, transport: &CudaTransport, proto: Protocol) -> u64 {
        transport.one_shot_bytes(proto)
    }

    unsafe fn launch_one_shot(
        &self,
        stream: &CudaStream,
        transport: &CudaTransport,
        op: &OneShot,
        abort: &AbortFlag,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { transport.launch_one_shot(stream.handle(), op, abort) }
    }

    unsafe fn launch(
        &self,
        stream: &CudaStream,
        launch: Launch<Self>,
    ) -> Result<Option<CudaEvent>> {
        // SAFETY: forwarded from the caller.
        unsafe {
            launch.transport.launch(
                stream.handle(),
                &launch.work,
                &launch.buffers,
                &launch.abort,
            )
        }?;
        Ok(None)
    }
}
