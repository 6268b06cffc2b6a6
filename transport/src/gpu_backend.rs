//! [`GpuBackend`]: core's `Backend` for both GPU vendors, written once over [`DeviceApi`].
//!
//! The vendor crates implement the runtime calls (`DeviceApi`); what a `Backend` adds on top
//! (the FIFO geometry's limits, forwarding to the shared [`DeviceTransport`], the typed streams
//! and events) is the same for both and lives here.

use crate::api::{CaptureStatus, DeviceApi};
use crate::device::DeviceTransport;
use oxccl_core::abort::AbortFlag;
use oxccl_core::backend::{
    Backend, ConnectContext, DevicePtr, Launch, PointerInfo, ShareableHandle,
};
use oxccl_core::bootstrap::Bootstrap;
use oxccl_core::error::{Error, Result};
use oxccl_core::plan::one_shot::OneShot;
use oxccl_core::plan::tuner::Topology;
use oxccl_core::plan::{Protocol, WorkDesc};
use oxccl_kernel_abi::FifoGeometry;
use std::sync::Arc;

/// A GPU backend over one vendor's runtime calls `A` (`oxccl_cuda::CudaBackend` is
/// `GpuBackend<CudaApi>`, `oxccl_hip::HipBackend` is `GpuBackend<HipApi>`). It dereferences to
/// `A`, whose own methods (tests' and tools' buffers, streams, graphs) stay reachable.
#[derive(Clone)]
pub struct GpuBackend<A: DeviceApi> {
    api: A,
    /// How communicators' FIFOs are cut (`OXCCL_FIFO_*`).
    geometry: FifoGeometry,
}

impl<A: DeviceApi> GpuBackend<A> {
    /// Reads the FIFO geometry, then loads the runtime ([`DeviceApi::load`]); fails with an
    /// error (never a panic) where there is no runtime or no device.
    pub fn load() -> Result<Self> {
        let geometry = FifoGeometry::from_env()?;
        Ok(GpuBackend {
            api: A::load()?,
            geometry,
        })
    }

    /// A backend over already loaded runtime calls.
    pub fn new(api: A, geometry: FifoGeometry) -> Self {
        GpuBackend { api, geometry }
    }

    /// The runtime calls (also reachable through `Deref`).
    pub fn api(&self) -> &A {
        &self.api
    }

    /// How this backend's communicators cut their FIFOs.
    pub fn geometry(&self) -> FifoGeometry {
        self.geometry
    }
}

impl<A: DeviceApi> std::ops::Deref for GpuBackend<A> {
    type Target = A;
    fn deref(&self) -> &A {
        &self.api
    }
}

impl<A: DeviceApi> Backend for GpuBackend<A> {
    type Stream = A::Stream;
    type Event = A::Event;
    type Transport = DeviceTransport<A>;

    fn name(&self) -> &'static str {
        A::NAME
    }
    fn device_count(&self) -> Result<usize> {
        self.api.device_count()
    }
    fn current_device(&self) -> Result<i32> {
        self.api.current_device()
    }
    fn set_device(&self, device: i32) -> Result<()> {
        self.api.set_device(device)
    }
    fn granularity(&self, device: i32) -> Result<usize> {
        self.api.granularity(device)
    }
    fn mem_alloc(&self, device: i32, size: usize) -> Result<DevicePtr> {
        self.api.shared_alloc(device, size)
    }
    /// Also releases memory from [`Backend::import_handle`].
    unsafe fn mem_free(&self, ptr: DevicePtr) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.api.shared_free(ptr) }
    }
    unsafe fn export_handle(&self, ptr: DevicePtr) -> Result<ShareableHandle> {
        self.api.export(ptr)
    }
    unsafe fn import_handle(&self, handle: &ShareableHandle, size: usize) -> Result<DevicePtr> {
        // SAFETY: forwarded from the caller.
        unsafe { self.api.import_here(handle, size) }
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
        // SAFETY: forwarded from the caller.
        unsafe { self.api.map_flat(device, handles, stride) }
    }
    unsafe fn unmap_flat(&self, base: DevicePtr) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.api.unmap_flat(base) }
    }
    unsafe fn stream_from_raw(&self, raw: usize) -> Result<A::Stream> {
        Ok(A::stream_from_handle(raw))
    }
    fn stream_synchronize(&self, stream: &A::Stream) -> Result<()> {
        self.api.stream_sync(A::stream_handle(stream))
    }
    fn is_capturing(&self, stream: &A::Stream) -> Result<bool> {
        Ok(self.api.capture_status(A::stream_handle(stream))? != CaptureStatus::None)
    }
    fn event_create(&self, stream: &A::Stream) -> Result<A::Event> {
        self.api.stream_event(A::stream_handle(stream))
    }
    fn event_record(&self, event: &A::Event, stream: &A::Stream) -> Result<()> {
        self.api
            .event_record(A::event_handle(event), A::stream_handle(stream))
    }
    fn event_synchronize(&self, event: &A::Event) -> Result<()> {
        self.api.event_sync(A::event_handle(event))
    }
    fn event_query(&self, event: &A::Event) -> Result<Option<bool>> {
        self.api.event_query(A::event_handle(event))
    }
    fn stream_id(&self, stream: &A::Stream) -> u64 {
        A::stream_handle(stream) as u64
    }
    fn stream_wait_event(&self, stream: &A::Stream, event: &A::Event) -> Result<()> {
        self.api
            .stream_wait_event(A::stream_handle(stream), A::event_handle(event))
    }
    unsafe fn memcpy_async(
        &self,
        device: i32,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        stream: &A::Stream,
    ) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe {
            self.api
                .memcpy_async(device, dst, src, bytes, A::stream_handle(stream))
        }
    }
    fn pointer_info(&self, ptr: DevicePtr) -> Result<PointerInfo> {
        self.api.pointer_info(ptr)
    }
    fn zero_copy(&self) -> bool {
        A::ZERO_COPY
    }
    fn exposable(&self, ptr: DevicePtr) -> bool {
        self.api.exposable(ptr)
    }
    fn max_chunk_bytes(&self, proto: Protocol) -> Option<u64> {
        Some(self.geometry.message_bytes(proto))
    }
    fn max_channels(&self, transport: &DeviceTransport<A>) -> Option<u32> {
        Some((self.geometry.channels as u32).min(transport.max_blocks()))
    }
    fn max_direct_channels(&self, transport: &DeviceTransport<A>) -> Option<u32> {
        transport.direct_channels()
    }
    fn connect_on_use(
        &self,
        transport: &DeviceTransport<A>,
        work: &WorkDesc,
        bootstrap: &Arc<Bootstrap>,
        abort: &AbortFlag,
    ) -> Result<()> {
        transport.connect_on_use(work, bootstrap, abort)
    }
    fn needs_peer_watch(&self) -> bool {
        true
    }
    fn topology(&self, transport: &DeviceTransport<A>) -> Option<Topology> {
        transport.topology()
    }
    fn connect(&self, ctx: &ConnectContext<'_>) -> Result<DeviceTransport<A>> {
        DeviceTransport::connect(self.api.clone(), self.geometry, ctx)
    }
    fn one_shot_bytes(&self, transport: &DeviceTransport<A>, proto: Protocol) -> u64 {
        if A::ONE_SHOT_KERNELS {
            transport.one_shot_bytes(proto)
        } else {
            0
        }
    }
    unsafe fn launch_one_shot(
        &self,
        stream: &A::Stream,
        transport: &DeviceTransport<A>,
        op: &OneShot,
        abort: &AbortFlag,
    ) -> Result<()> {
        if !A::ONE_SHOT_KERNELS {
            return Err(Error::Internal(format!(
                "the {} backend has no one-shot kernels",
                self.name()
            )));
        }
        // SAFETY: forwarded from the caller.
        unsafe { transport.launch_one_shot(A::stream_handle(stream), op, abort) }
    }
    unsafe fn launch(&self, stream: &A::Stream, launch: Launch<Self>) -> Result<Option<A::Event>> {
        // SAFETY: forwarded from the caller.
        unsafe {
            launch.transport.launch(
                A::stream_handle(stream),
                &launch.work,
                &launch.buffers,
                &launch.abort,
            )
        }?;
        Ok(None)
    }
}
