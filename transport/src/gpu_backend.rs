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
use oxccl_core::lock::lock;
use oxccl_core::plan::one_shot::{OneShot, Variant};
use oxccl_core::plan::tuner::Topology;
use oxccl_core::plan::{Protocol, WorkDesc};
use oxccl_kernel_abi::FifoGeometry;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// A GPU backend over one vendor's runtime calls `A` (`oxccl_cuda::CudaBackend` is
/// `GpuBackend<CudaApi>`, `oxccl_hip::HipBackend` is `GpuBackend<HipApi>`). It dereferences to
/// `A`, whose own methods (tests' and tools' buffers, streams, graphs) stay reachable.
#[derive(Clone)]
pub struct GpuBackend<A: DeviceApi> {
    api: A,
    /// How communicators' FIFOs are cut (`OXCCL_FIFO_*`).
    geometry: FifoGeometry,
    /// Ranges of `map_flat` by start (shared by clones).
    flat: Arc<Mutex<BTreeMap<DevicePtr, FlatRange>>>,
}

/// One range of `map_flat`: its size and the mappings in it.
#[derive(Debug)]
struct FlatRange {
    total: usize,
    maps: Vec<(DevicePtr, usize)>,
}

impl<A: DeviceApi> GpuBackend<A> {
    /// Reads the FIFO geometry, then loads the runtime ([`DeviceApi::load`]); fails with an
    /// error (never a panic) where there is no runtime or no device.
    pub fn load() -> Result<Self> {
        let geometry = FifoGeometry::from_env()?;
        Ok(GpuBackend::new(A::load()?, geometry))
    }

    /// A backend over already loaded runtime calls.
    pub fn new(api: A, geometry: FifoGeometry) -> Self {
        GpuBackend {
            api,
            geometry,
            flat: Arc::new(Mutex::new(BTreeMap::new())),
        }
    }

    /// The runtime calls (also reachable through `Deref`).
    pub fn api(&self) -> &A {
        &self.api
    }

    /// How this backend's communicators cut their FIFOs.
    pub fn geometry(&self) -> FifoGeometry {
        self.geometry
    }

    /// Unmaps a [`FlatRange`]'s mappings and frees its addresses (best effort).
    ///
    /// # Safety
    /// Nothing uses the range.
    unsafe fn release_flat(&self, va: DevicePtr, range: &FlatRange) {
        for &(at, size) in &range.maps {
            // SAFETY: mapped by `map_flat` with this size.
            unsafe { self.api.va_unmap(at, size) };
        }
        // SAFETY: reserved by `map_flat` with this size, unmapped above.
        unsafe { self.api.va_free(va, range.total) };
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
    // Allocations, frees, mappings and waits below run relaxed: in global capture mode
    // (PyTorch's default) each would break every capture another thread holds, and a caller's
    // buffer may be dropped, or a communicator made, while one does.
    fn mem_alloc(&self, device: i32, size: usize) -> Result<DevicePtr> {
        let _relaxed = self.api.relaxed_capture()?;
        self.api.shared_alloc(device, size)
    }
    /// Also releases memory from [`Backend::import_handle`].
    unsafe fn mem_free(&self, ptr: DevicePtr) -> Result<()> {
        let _relaxed = self.api.relaxed_capture()?;
        // SAFETY: forwarded from the caller.
        unsafe { self.api.shared_free(ptr) }
    }
    unsafe fn export_handle(&self, ptr: DevicePtr) -> Result<ShareableHandle> {
        self.api.export(ptr)
    }
    unsafe fn import_handle(&self, handle: &ShareableHandle, size: usize) -> Result<DevicePtr> {
        let _relaxed = self.api.relaxed_capture()?;
        // SAFETY: forwarded from the caller.
        unsafe { self.api.import_here(handle, size) }
    }
    fn flat_mapping(&self) -> bool {
        true
    }
    /// Allocation `i` of `handles` at `i * stride` of one new range (at `at` when given),
    /// readable and writable by `device`; on a failure, what was mapped is unmapped and the
    /// range freed.
    unsafe fn map_flat(
        &self,
        device: i32,
        handles: &[ShareableHandle],
        stride: usize,
        at: Option<DevicePtr>,
    ) -> Result<DevicePtr> {
        let total = stride
            .checked_mul(handles.len())
            .ok_or_else(|| Error::arg("symmetric window range overflows the address space"))?;
        let _relaxed = self.api.relaxed_capture()?;
        let (align, _bound) = self.api.flat_begin(device)?;
        // SAFETY: `total` is a multiple of the stride, and so of the granularity; `align` is the
        // granularity.
        let va = unsafe { self.api.va_reserve(total, align, at.unwrap_or(0)) }?;
        if let Some(want) = at.filter(|&want| want != va) {
            // SAFETY: reserved just above, nothing mapped.
            unsafe { self.api.va_free(va, total) };
            return Err(Error::Internal(format!(
                "the {total} bytes of addresses at {want:#x} are taken in this process"
            )));
        }
        let mut range = FlatRange {
            total,
            maps: Vec::with_capacity(handles.len()),
        };
        let mut map_all = || -> Result<()> {
            for (i, h) in handles.iter().enumerate() {
                let (alloc, size) = self.api.flat_allocation(h, stride)?;
                let at = va + (i * stride) as u64;
                // SAFETY: `at..at + size` lies in the fresh reservation (`size` is at most the
                // stride); `alloc` is a live allocation of `size` bytes.
                let mapped = unsafe { self.api.va_map(at, size, alloc) };
                // SAFETY: the mapping, if made, holds a reference of its own.
                unsafe { self.api.allocation_release(alloc) };
                mapped?;
                range.maps.push((at, size));
                // SAFETY: `at..at + size` is mapped above.
                unsafe { self.api.va_set_access(at, size, &[device]) }?;
            }
            Ok(())
        };
        if let Err(e) = map_all() {
            // SAFETY: nothing has used the range yet.
            unsafe { self.release_flat(va, &range) };
            return Err(e);
        }
        lock(&self.flat).insert(va, range);
        Ok(va)
    }
    unsafe fn unmap_flat(&self, base: DevicePtr) -> Result<()> {
        let range = lock(&self.flat)
            .remove(&base)
            .ok_or_else(|| Error::arg(format!("{base:#x} is not a symmetric window range")))?;
        let _relaxed = self.api.relaxed_capture()?;
        // SAFETY: the caller's contract.
        unsafe { self.release_flat(base, &range) };
        Ok(())
    }
    unsafe fn stream_from_raw(&self, raw: usize) -> Result<A::Stream> {
        Ok(A::stream_from_handle(raw))
    }
    fn stream_synchronize(&self, stream: &A::Stream) -> Result<()> {
        let _relaxed = self.api.relaxed_capture()?;
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
        let _relaxed = self.api.relaxed_capture()?;
        self.api.event_sync(A::event_handle(event))
    }
    // Relaxed: the watchdog and the profiler's poller query from threads of their own, and in
    // global capture mode (PyTorch's default) a query from any thread that is not relaxed
    // breaks every capture under way. Our events are never recorded in a capture.
    fn event_query(&self, event: &A::Event) -> Result<Option<bool>> {
        let _relaxed = self.api.relaxed_capture()?;
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
    fn reuses_plans(&self) -> bool {
        // The kernels match a connection's messages in order; tags are only carried along.
        true
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
        Some(transport.plan_channels())
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
        let geometry = self.geometry.for_ranks(ctx.bootstrap.nranks());
        DeviceTransport::connect(self.api.clone(), geometry, ctx)
    }
    fn one_shot_bytes(&self, transport: &DeviceTransport<A>, variant: Variant) -> u64 {
        if A::ONE_SHOT_KERNELS {
            transport.one_shot_bytes(variant)
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
                launch.proxy_parents.as_ref(),
            )
        }?;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake_api::FakeApi;

    /// `FakeApi`'s handle of an allocation of `kib` KiB (0: memory that cannot be mapped).
    fn handle(kib: u8) -> ShareableHandle {
        ShareableHandle(vec![kib])
    }

    /// A flat range maps each rank's allocation at its stride, dropping the extra reference
    /// once mapped; unmapping it unmaps every mapping, then frees the range, once.
    #[test]
    fn flat_ranges_map_at_the_stride_and_release_once() {
        let api = FakeApi::default();
        let be = GpuBackend::new(api.clone(), FifoGeometry::default());
        // SAFETY: `FakeApi` touches no memory.
        let va = unsafe { be.map_flat(3, &[handle(4), handle(8)], 8192, None) }.unwrap();
        assert_eq!(va, 0x1000);
        assert_eq!(
            api.calls(),
            [
                "flat_begin 3",
                "va_reserve 16384",
                "flat_allocation 4096",
                "va_map 0x1000 4096 0x2000",
                "allocation_release 0x2000",
                "va_set_access 0x1000 4096 [3]",
                "flat_allocation 8192",
                "va_map 0x3000 8192 0x3000",
                "allocation_release 0x3000",
                "va_set_access 0x3000 8192 [3]",
            ]
        );
        // SAFETY: as above.
        unsafe { be.unmap_flat(va) }.unwrap();
        assert_eq!(
            api.calls(),
            [
                "va_unmap 0x1000 4096",
                "va_unmap 0x3000 8192",
                "va_free 0x1000 16384"
            ]
        );
        // SAFETY: as above.
        let again = unsafe { be.unmap_flat(va) }.unwrap_err().to_string();
        assert!(again.contains("is not a symmetric window range"), "{again}");
        assert!(api.calls().is_empty());
    }

    /// A range asked for at an address starts there, or fails (freed, nothing mapped) when the
    /// driver hands out another.
    #[test]
    fn flat_ranges_at_an_address_start_there_or_fail() {
        let api = FakeApi::default();
        let be = GpuBackend::new(api.clone(), FifoGeometry::default());
        // SAFETY: `FakeApi` touches no memory.
        let va = unsafe { be.map_flat(0, &[handle(4)], 4096, Some(0x40000)) }.unwrap();
        assert_eq!(va, 0x40000);
        assert_eq!(api.calls()[1], "va_reserve 4096 at 0x40000");
        // SAFETY: as above.
        let e = unsafe { be.map_flat(0, &[handle(4)], 4096, Some(0x1000)) }.unwrap_err();
        assert!(e.to_string().contains("at 0x1000 are taken"), "{e}");
        let calls = api.calls();
        assert_eq!(
            calls[1..],
            ["va_reserve 4096", "va_free 0x2000 4096"],
            "{calls:?}"
        );
    }

    /// A rank whose allocation cannot be mapped fails the range: what was mapped is unmapped
    /// and the range freed, and nothing is left to unmap.
    #[test]
    fn flat_ranges_roll_back_what_they_mapped() {
        let api = FakeApi::default();
        let be = GpuBackend::new(api.clone(), FifoGeometry::default());
        // SAFETY: `FakeApi` touches no memory.
        let e = unsafe { be.map_flat(0, &[handle(4), handle(0)], 8192, None) }.unwrap_err();
        assert!(e.to_string().contains("not mappable"), "{e}");
        assert_eq!(
            api.calls(),
            [
                "flat_begin 0",
                "va_reserve 16384",
                "flat_allocation 4096",
                "va_map 0x1000 4096 0x2000",
                "allocation_release 0x2000",
                "va_set_access 0x1000 4096 [0]",
                "va_unmap 0x1000 4096",
                "va_free 0x1000 16384",
            ]
        );
        // SAFETY: as above.
        assert!(unsafe { be.unmap_flat(0x1000) }.is_err());
        // A range larger than the address space is refused before anything is reserved.
        // SAFETY: as above.
        let e = unsafe { be.map_flat(0, &[handle(1), handle(1)], usize::MAX, None) }.unwrap_err();
        assert!(e.to_string().contains("overflows the address space"), "{e}");
        assert!(api.calls().is_empty());
    }

    /// A whole allocation is mapped for every device named, and a failure undoes the mapping
    /// and the reservation (not the caller's reference to the allocation).
    #[test]
    fn whole_mappings_undo_their_own_steps() {
        let api = FakeApi::default();
        // SAFETY: `FakeApi` touches no memory.
        let va = unsafe { api.va_map_new(0x77, 4096, 4096, &[0, 1]) }.unwrap();
        assert_eq!(
            api.calls(),
            [
                "va_reserve 4096",
                "va_map 0x1000 4096 0x77",
                "va_set_access 0x1000 4096 [0, 1]",
            ]
        );
        assert_eq!(va, 0x1000);
        // SAFETY: as above.
        assert!(unsafe { api.va_map_new(0x77, 4096, 4096, &[-1]) }.is_err());
        assert_eq!(
            api.calls(),
            [
                "va_reserve 4096",
                "va_map 0x2000 4096 0x77",
                "va_set_access 0x2000 4096 [-1]",
                "va_unmap 0x2000 4096",
                "va_free 0x2000 4096",
            ]
        );
    }
}
