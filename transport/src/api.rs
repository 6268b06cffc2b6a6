//! The runtime calls the shared transport needs from a vendor: [`DeviceApi`].
//!
//! Each GPU backend implements it on its own runtime (the CUDA driver API, the HIP runtime);
//! everything else about connecting and launching is written once in this crate. Handles
//! (streams, events, kernel functions) travel as [`Handle`] integers: both runtimes' handles are
//! opaque pointers, and integers are `Send` and `Sync` without wrappers.

use oxccl_core::backend::{DevicePtr, PointerInfo, ShareableHandle};
use oxccl_core::datatype::DataType;
use oxccl_core::error::{Error, Result};
use std::os::fd::OwnedFd;

/// A runtime handle (`CUstream`, `hipEvent_t`, `CUfunction`, ...) as an integer; 0 is null (for
/// streams: the legacy default stream).
pub type Handle = usize;

/// A stream's graph-capture status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureStatus {
    /// Not capturing: launches run eagerly.
    None,
    /// Capturing: launches become graph nodes.
    Active,
    /// The capture was invalidated by an earlier call (an error: NCCL fails too).
    Invalidated,
}

/// The executor entry point chosen for one launch and how its argument block travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Executor {
    /// The kernel function.
    pub func: Handle,
    /// `Some(cap)`: the block is copied into the kernel parameters, which hold `cap` bytes of
    /// it. `None`: the block travels by address (the parameters then hold `address_cap` bytes
    /// of which only the address is used).
    pub inline_cap: Option<usize>,
    /// The inline capacity of the entry point used when the block travels by address (the
    /// parameter size that entry point was compiled for).
    pub address_cap: usize,
}

/// The calls into one vendor's runtime that the shared transport makes.
///
/// Implementations only forward to their runtime; they decide nothing about connections,
/// buffers or ordering. All memory calls act on the device bound by [`DeviceApi::bind`].
///
/// It is also everything [`crate::GpuBackend`], the one `Backend` of both GPU vendors, asks of a
/// runtime (the second group of calls below): each vendor crate implements this trait once.
pub trait DeviceApi: Clone + Send + Sync + 'static {
    /// What [`DeviceApi::bind`] returns: keeps a device current until dropped (on the thread
    /// that bound it; a proxy thread holds one for its whole life).
    type Bound: 'static;
    /// What [`DeviceApi::relaxed_capture`] returns: restores the capture mode when dropped.
    type Relaxed;
    /// Largest (and, without [`DeviceApi::SIZED_LAUNCHES`], every) executor block size.
    const BLOCK_THREADS: u32;
    /// Whether launches with small steps get fewer threads, and `OXCCL_BLOCK_THREADS` may fix
    /// the block size (CUDA); else every launch uses [`DeviceApi::BLOCK_THREADS`] (HIP: whole
    /// wavefronts of 64 lanes).
    const SIZED_LAUNCHES: bool;
    /// Short name for messages (`"cuda"`, `"hip"`).
    const NAME: &'static str;
    /// The backend's stream (`Backend::Stream`): a raw handle that does not own the stream.
    type Stream: Clone + Send + Sync + 'static;
    /// The backend's event (`Backend::Event`), destroyed when dropped.
    type Event: Send + Sync + 'static;
    /// Whether ranks of one process may run zero-copy plans (`Backend::zero_copy`).
    const ZERO_COPY: bool;
    /// Whether the backend launches one-shot kernels at all; else `Backend::one_shot_bytes` is
    /// 0 and `Backend::launch_one_shot` refuses without asking the transport.
    const ONE_SHOT_KERNELS: bool;

    /// Makes `device` current for the calling thread until the guard drops.
    fn bind(&self, device: i32) -> Result<Self::Bound>;
    /// `None` when executor kernels can be launched; else the error saying why not (built
    /// without kernels, no code object).
    fn kernels_missing(&self) -> Option<Error>;
    /// Whether this build has the one-shot kernels ([`DeviceApi::one_shot`]).
    fn has_one_shot(&self) -> bool;
    /// The PCI bus id of `device` (`DDDD:BB:DD.F`), which places it among the network devices
    /// ([`oxccl_net::nic_affinity`]); `None` when the runtime does not say.
    fn pci_bus_id(&self, device: i32) -> Option<String>;
    /// Multiprocessors (SMs, CUs) of `device`; 0 when unknown.
    fn multiprocessors(&self, device: i32) -> Result<u32>;
    /// Whether `device` can access memory of `peer` directly.
    fn can_access_peer(&self, device: i32, peer: i32) -> bool;
    /// Lets kernels on `device` read and write plain allocations of `peer` (zero-copy plans
    /// use peers' own buffers).
    fn enable_peer_access(&self, device: i32, peer: i32) -> Result<()>;

    /// Shareable device memory on `device` (exportable to other processes, mapped for its
    /// peers): the FIFO allocation.
    fn shared_alloc(&self, device: i32, bytes: usize) -> Result<DevicePtr>;
    /// Frees [`DeviceApi::shared_alloc`] memory or an [`DeviceApi::import`] mapping (the
    /// transport ignores a failure; `Backend::mem_free` reports it).
    ///
    /// # Safety
    /// Nothing uses `ptr` any more.
    unsafe fn shared_free(&self, ptr: DevicePtr) -> Result<()>;
    /// Exports the allocation containing `ptr` for other processes.
    fn export(&self, ptr: DevicePtr) -> Result<ShareableHandle>;
    /// Maps a peer's exported allocation (at least `bytes` long) for `device`.
    ///
    /// # Safety
    /// `handle` is a peer's export of a live allocation of at least `bytes` bytes.
    unsafe fn import(
        &self,
        handle: &ShareableHandle,
        device: i32,
        bytes: usize,
    ) -> Result<DevicePtr>;

    /// Plain device memory (at least 16 bytes).
    fn dev_alloc(&self, bytes: usize) -> Result<DevicePtr>;
    /// Frees [`DeviceApi::dev_alloc`] memory (0 is ignored).
    ///
    /// # Safety
    /// No queued or running work uses `ptr`.
    unsafe fn dev_free(&self, ptr: DevicePtr);
    /// Pinned, portable host memory mapped into the device address space: (host, device).
    fn host_alloc(&self, bytes: usize) -> Result<(*mut u8, DevicePtr)>;
    /// Frees [`DeviceApi::host_alloc`] memory (null is ignored).
    ///
    /// # Safety
    /// Neither the host nor the device uses `host` any more.
    unsafe fn host_free(&self, host: *mut u8);
    /// Pins and maps `bytes` bytes of host memory at `host` (portable); its device address.
    ///
    /// # Safety
    /// `host..host+bytes` stays mapped until [`DeviceApi::host_unregister`].
    unsafe fn host_register(&self, host: *mut u8, bytes: usize) -> Result<DevicePtr>;
    /// Undoes [`DeviceApi::host_register`].
    ///
    /// # Safety
    /// No work uses the registered range any more.
    unsafe fn host_unregister(&self, host: *mut u8);

    /// Whether `device` supports GPUDirect RDMA (a network reading and writing its memory).
    /// Default: yes, left to the network's `PTR_CUDA` bit (HIP); CUDA asks the driver.
    fn gpu_direct_rdma(&self, device: i32) -> bool {
        let _ = device;
        true
    }
    /// Whether the driver exports `device`'s memory as dma-buf file descriptors (default: no).
    fn dma_buf_supported(&self, device: i32) -> bool {
        let _ = device;
        false
    }
    /// Compute capability (major, minor) of `device`, when the runtime has one (default: none,
    /// which makes receives through GPUDirect RDMA flush).
    fn compute_capability(&self, device: i32) -> Option<(u32, u32)> {
        let _ = device;
        None
    }
    /// A dma-buf file descriptor for `bytes` bytes of [`DeviceApi::dev_alloc`] memory at `ptr`
    /// (page aligned), `None` when the driver cannot make one (the default).
    fn dma_buf_fd(&self, ptr: DevicePtr, bytes: usize) -> Option<OwnedFd> {
        let _ = (ptr, bytes);
        None
    }

    /// Copies `src` to device memory at `dst` and waits for the copy.
    ///
    /// # Safety
    /// `dst` holds `src.len()` bytes.
    unsafe fn copy_h2d(&self, dst: DevicePtr, src: &[u8]) -> Result<()>;
    /// Queues a copy of `bytes` bytes from host memory at `src` to `dst` on `stream`.
    ///
    /// # Safety
    /// Both ranges stay valid until the copy has run.
    unsafe fn copy_h2d_async(
        &self,
        dst: DevicePtr,
        src: *const u8,
        bytes: usize,
        stream: Handle,
    ) -> Result<()>;
    /// Queues a copy of `bytes` bytes from device memory at `src` to host memory at `dst` on
    /// `stream`.
    ///
    /// # Safety
    /// Both ranges stay valid until the copy has run.
    unsafe fn copy_d2h_async(
        &self,
        dst: *mut u8,
        src: DevicePtr,
        bytes: usize,
        stream: Handle,
    ) -> Result<()>;
    /// Whether [`DeviceApi::write_word_async`] works (default: no; CUDA's and HIP's stream
    /// memory operations do).
    fn has_word_writes(&self, device: i32) -> bool {
        let _ = device;
        false
    }
    /// Queues a write of `value` to the device word at `dst` (8 bytes when `wide`, else its low
    /// 4) on `stream`, done by the GPU's front end without a kernel, and seen only after
    /// everything queued before it on `stream`.
    ///
    /// # Safety
    /// `dst` holds the word, aligned, until the write has run.
    unsafe fn write_word_async(
        &self,
        dst: DevicePtr,
        value: u64,
        wide: bool,
        stream: Handle,
    ) -> Result<()> {
        let _ = (dst, value, wide, stream);
        Err(Error::Internal(
            "this runtime has no stream writes of device words".into(),
        ))
    }
    /// Queues zeroing `bytes` bytes at `dst` on `stream`.
    ///
    /// # Safety
    /// `dst` holds `bytes` bytes until the memset has run.
    unsafe fn memset_zero_async(&self, dst: DevicePtr, bytes: usize, stream: Handle) -> Result<()>;

    /// A new non-blocking stream on the bound device.
    fn stream_create(&self) -> Result<Handle>;
    /// Destroys a stream of [`DeviceApi::stream_create`].
    ///
    /// # Safety
    /// Nothing is queued on it or uses it afterwards.
    unsafe fn stream_destroy(&self, stream: Handle);
    /// Waits until everything queued on `stream` has run.
    fn stream_sync(&self, stream: Handle) -> Result<()>;
    /// A new event without timing.
    fn event_create(&self) -> Result<Handle>;
    /// Records `event` at the tail of `stream`.
    fn event_record(&self, event: Handle, stream: Handle) -> Result<()>;
    /// Waits until the work before `event` has run (an unrecorded event is complete).
    fn event_sync(&self, event: Handle) -> Result<()>;
    /// Destroys an event of [`DeviceApi::event_create`].
    ///
    /// # Safety
    /// The event is not used afterwards.
    unsafe fn event_destroy(&self, event: Handle);
    /// Makes `stream` wait for `event` without blocking the host.
    fn stream_wait_event(&self, stream: Handle, event: Handle) -> Result<()>;
    /// `stream`'s graph-capture status.
    fn capture_status(&self, stream: Handle) -> Result<CaptureStatus>;
    /// Switches this thread's capture mode to relaxed until the guard drops, so that the
    /// transport's own allocations and host waits do not invalidate a user's capture.
    fn relaxed_capture(&self) -> Result<Self::Relaxed>;

    /// The executor for `dtype` on `device` for an argument block of `block_bytes`.
    fn executor(&self, device: i32, dtype: DataType, block_bytes: usize) -> Result<Executor>;
    /// The one-shot kernel for `dtype` on `device`.
    fn one_shot(&self, device: i32, dtype: DataType) -> Result<Handle>;
    /// Launches `func` with `grid` blocks of `threads` threads on `stream`; `params` is its one
    /// parameter's bytes.
    ///
    /// # Safety
    /// `func` takes one parameter of `params.len()` bytes, and everything it references stays
    /// valid until the kernel has run.
    unsafe fn launch(
        &self,
        func: Handle,
        grid: u32,
        threads: u32,
        params: &mut [u8],
        stream: Handle,
    ) -> Result<()>;
    // The calls of the generic backend (`GpuBackend`), where the vendors differ in more than
    // the entry points' names.

    /// Loads the runtime (`Backend`'s constructor, after the FIFO geometry is read); a clean
    /// error, never a panic, without a runtime or a device.
    fn load() -> Result<Self>;
    /// The raw handle of a backend stream.
    fn stream_handle(stream: &Self::Stream) -> Handle;
    /// The backend stream for a raw handle (0: the default stream); it does not own it.
    fn stream_from_handle(raw: Handle) -> Self::Stream;
    /// The raw handle of a backend event.
    fn event_handle(event: &Self::Event) -> Handle;
    /// Number of devices this process can use.
    fn device_count(&self) -> Result<usize>;
    /// The calling thread's current device.
    fn current_device(&self) -> Result<i32>;
    /// Makes `device` current for the calling thread (and leaves it current).
    fn set_device(&self, device: i32) -> Result<()>;
    /// Allocation granularity of shareable memory on `device`, in bytes.
    fn granularity(&self, device: i32) -> Result<usize>;
    /// [`DeviceApi::import`] for the calling thread's current device (`Backend::import_handle`).
    ///
    /// # Safety
    /// `handle` is a peer's export of a live allocation of at least `bytes` bytes.
    unsafe fn import_here(&self, handle: &ShareableHandle, bytes: usize) -> Result<DevicePtr>;
    /// Where a flat range on `device` is reserved: the alignment of its reservation and, where
    /// the vendor's mapping calls act in the current context (CUDA), the guard that keeps
    /// `device` current while the range is mapped (`Backend::map_flat`).
    fn flat_begin(&self, device: i32) -> Result<(usize, Option<Self::Bound>)>;
    /// The allocation behind a rank's exported `handle`, taken with a reference of its own
    /// (released with [`DeviceApi::allocation_release`] once mapped), and the bytes to map of
    /// it; refuses memory that is not VMM memory or exceeds `stride`.
    fn flat_allocation(&self, handle: &ShareableHandle, stride: usize) -> Result<(Handle, usize)>;
    /// Reserves `bytes` bytes of device address space aligned to `align`, starting at `at` if
    /// it is not 0 and that range is free (the driver takes it as a hint: the caller checks).
    ///
    /// # Safety
    /// `bytes` and `align` are multiples of the granularity.
    unsafe fn va_reserve(&self, bytes: usize, align: usize, at: DevicePtr) -> Result<DevicePtr>;
    /// Maps `bytes` bytes of allocation `alloc` at `at`.
    ///
    /// # Safety
    /// `at..at + bytes` lies in a reservation of ours and is not mapped; `alloc` is live and
    /// at least `bytes` long.
    unsafe fn va_map(&self, at: DevicePtr, bytes: usize, alloc: Handle) -> Result<()>;
    /// Drops a reference to `alloc` (a mapping holds one of its own); failures are ignored.
    ///
    /// # Safety
    /// The reference is ours and not used again.
    unsafe fn allocation_release(&self, alloc: Handle);
    /// Lets kernels on `devices` read and write the mapped `at..at + bytes`.
    ///
    /// # Safety
    /// `at..at + bytes` is mapped.
    unsafe fn va_set_access(&self, at: DevicePtr, bytes: usize, devices: &[i32]) -> Result<()>;
    /// Unmaps `at..at + bytes` (best effort: failures are ignored).
    ///
    /// # Safety
    /// Nothing uses the mapping any more.
    unsafe fn va_unmap(&self, at: DevicePtr, bytes: usize);
    /// Frees a reservation of [`DeviceApi::va_reserve`] (best effort: failures are ignored).
    ///
    /// # Safety
    /// Nothing in the reservation is mapped any more.
    unsafe fn va_free(&self, va: DevicePtr, bytes: usize);
    /// Reserves `bytes` bytes aligned to `align`, maps all of `alloc` there and lets kernels on
    /// `devices` read and write it; undoes its own steps on failure (the caller still holds
    /// its reference to `alloc`). Both vendors' allocations and imports map this way.
    ///
    /// # Safety
    /// `alloc` is a live allocation of `bytes` bytes; `bytes` and `align` are multiples of the
    /// granularity.
    unsafe fn va_map_new(
        &self,
        alloc: Handle,
        bytes: usize,
        align: usize,
        devices: &[i32],
    ) -> Result<DevicePtr> {
        // SAFETY: the caller's contract.
        let va = unsafe { self.va_reserve(bytes, align, 0) }?;
        // SAFETY: `va` is a fresh reservation of `bytes` bytes; `alloc` is that long.
        if let Err(e) = unsafe { self.va_map(va, bytes, alloc) } {
            // SAFETY: undoes the reservation above.
            unsafe { self.va_free(va, bytes) };
            return Err(e);
        }
        // SAFETY: mapped above.
        if let Err(e) = unsafe { self.va_set_access(va, bytes, devices) } {
            // SAFETY: undoes the mapping and reservation above.
            unsafe {
                self.va_unmap(va, bytes);
                self.va_free(va, bytes);
            }
            return Err(e);
        }
        Ok(va)
    }
    /// A new event (timing off) that can be recorded on `stream`, destroyed when dropped.
    fn stream_event(&self, stream: Handle) -> Result<Self::Event>;
    /// Whether the work before `event` has run, without blocking; `None` where the runtime
    /// cannot tell.
    fn event_query(&self, event: Handle) -> Result<Option<bool>>;
    /// Queues a copy of `bytes` bytes from `src` to `dst` on `stream`, a stream of `device`
    /// (either side may be host or device memory).
    ///
    /// # Safety
    /// Both ranges are valid for `bytes` bytes until the copy has run.
    unsafe fn memcpy_async(
        &self,
        device: i32,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        stream: Handle,
    ) -> Result<()>;
    /// What the runtime (and the backend's allocation table) knows about `ptr`.
    fn pointer_info(&self, ptr: DevicePtr) -> Result<PointerInfo>;
    /// Whether every device of this process can read and write `ptr`'s memory directly
    /// (`Backend::exposable`).
    fn exposable(&self, ptr: DevicePtr) -> bool;

    // The calls of the dispatch layer (`oxccl::dispatch`), which offers streams and synchronous
    // copies to the safe API's and the C ABI's callers.

    /// A new non-blocking stream on `device`, owned by the caller.
    fn caller_stream_create(&self, device: i32) -> Result<Self::Stream>;
    /// Destroys a stream of [`DeviceApi::caller_stream_create`], reporting a failure.
    ///
    /// # Safety
    /// The stream's work has completed and it is not used again.
    unsafe fn caller_stream_destroy(&self, stream: Handle) -> Result<()>;
    /// Whether everything queued on `stream` has completed (never blocks).
    fn caller_stream_done(&self, stream: Handle) -> Result<bool>;
    /// Copies host bytes to memory of `device` at `dst`; returns once the copy has landed.
    ///
    /// # Safety
    /// `dst` is memory of this runtime valid for `src.len()` bytes that no queued work uses.
    unsafe fn caller_copy_to_device(&self, device: i32, dst: DevicePtr, src: &[u8]) -> Result<()>;
    /// Copies memory of `device` at `src` into host bytes; returns once the copy has landed.
    ///
    /// # Safety
    /// `src` is memory of this runtime valid for `dst.len()` bytes that no queued work writes.
    unsafe fn caller_copy_from_device(
        &self,
        device: i32,
        dst: &mut [u8],
        src: DevicePtr,
    ) -> Result<()>;
}
