//! Run-time backend choice: one `enum_dispatch` enum per role over traits defined here (the
//! macro cannot cross crates), so callers stay backend-agnostic while every call is a `match`
//! rather than a virtual call.
//!
//! This is the raw layer both the safe API and the C ABI (`oxccl-ffi`) are built on: addresses
//! are plain integers and operations are `unsafe fn`s. It is public only with the `dispatch`
//! feature.
//!
//! Each device backend has a variant in [`AnyBackend`], [`AnyComm`] and [`AnyStream`] (CUDA
//! under the `cuda` feature, HIP under `hip`), a [`DeviceBackend`] impl for its `Backend` type
//! (`host.rs`; one for both GPU backends in `gpu.rs`, whose vendors only name their variants in
//! `cuda.rs` and `hip.rs`), and a probe in `choose.rs`.

pub(crate) mod choose;
#[cfg(feature = "cuda")]
mod cuda;
#[cfg(any(feature = "cuda", feature = "hip"))]
mod gpu;
#[cfg(feature = "hip")]
mod hip;
mod host;

pub use choose::backend;

use enum_dispatch::enum_dispatch;
use oxccl_core::abort::AbortFlag;
use oxccl_core::backend::{Backend, DevicePtr, PointerInfo};
use oxccl_core::bootstrap::{Bootstrap, UniqueId};
use oxccl_core::comm::symmetric::{FlatWindow, LsaTeam};
use oxccl_core::config::CommConfig;
use oxccl_core::datatype::{DataType, RedOp, ScalarSource};
use oxccl_core::plan::{P2pDir, WorkDesc};
use oxccl_core::{CollArgs, Communicator, Error, HostBackend, Result};
use std::sync::Arc;

/// What the layers above need from a core backend beyond `Backend` itself.
pub trait DeviceBackend: Backend {
    /// The stream a C caller means by `raw`.
    ///
    /// # Safety
    /// `raw` is 0 or a live stream handle of this backend's runtime.
    unsafe fn comm_stream(&self, raw: usize) -> Result<Self::Stream>;
    /// Wraps a communicator of this backend into the dispatch enum.
    fn wrap(comm: GenComm<Self>) -> AnyComm;
    /// Wraps a stream of this backend into the dispatch enum.
    fn wrap_stream(stream: Self::Stream) -> AnyStream;
    /// This backend's stream inside `stream`; `None` when it belongs to another backend.
    fn stream_of(stream: &AnyStream) -> Option<&Self::Stream>;
    /// A new stream on `device`, owned by the caller ([`DeviceBackend::destroy_stream`]).
    fn create_stream(&self, device: i32) -> Result<Self::Stream>;
    /// Destroys a stream from [`DeviceBackend::create_stream`].
    ///
    /// # Safety
    /// `stream` came from `create_stream`, its work has completed and it is not used again.
    unsafe fn destroy_stream(&self, stream: &Self::Stream) -> Result<()>;
    /// Whether everything queued on `stream` has completed (never blocks).
    fn query(&self, stream: &Self::Stream) -> Result<bool>;
    /// Copies host bytes to memory of `device` at `dst`; returns once the copy is done.
    ///
    /// # Safety
    /// `dst` is memory of this backend valid for `src.len()` bytes that no queued work uses.
    unsafe fn copy_to_device(&self, device: i32, dst: DevicePtr, src: &[u8]) -> Result<()>;
    /// Copies memory of `device` at `src` into host bytes; returns once the copy is done.
    ///
    /// # Safety
    /// `src` is memory of this backend valid for `dst.len()` bytes that no queued work writes.
    unsafe fn copy_from_device(&self, device: i32, dst: &mut [u8], src: DevicePtr) -> Result<()>;
}

/// Operations on the process-wide backend.
#[enum_dispatch]
pub trait RuntimeBackend {
    /// Short backend name (`"host"`, `"cuda"`, `"hip"`).
    fn name(&self) -> &'static str;
    /// The calling thread's current device (what `ncclCommInitRank` binds to).
    fn current_device(&self) -> Result<i32>;
    /// Number of usable devices.
    fn device_count(&self) -> Result<usize>;
    /// True when calls complete their operations before returning (host backend).
    fn synchronous(&self) -> bool;
    /// `ncclCommInitRank` on this backend.
    fn init_rank(
        &self,
        nranks: usize,
        id: UniqueId,
        rank: usize,
        device: i32,
        config: CommConfig,
    ) -> Result<AnyComm>;
    /// `ncclCommInitAll` on this backend.
    fn init_all(&self, devices: &[i32]) -> Result<Vec<AnyComm>>;
    /// `ncclMemAlloc`.
    fn mem_alloc(&self, device: i32, size: usize) -> Result<DevicePtr>;
    /// `ncclMemFree`.
    ///
    /// # Safety
    /// `ptr` came from `mem_alloc` and no queued work uses it.
    unsafe fn mem_free(&self, ptr: DevicePtr) -> Result<()>;
    /// What the runtime knows about `ptr`.
    fn pointer_info(&self, ptr: DevicePtr) -> Result<PointerInfo>;
    /// A new stream on `device`, owned by the caller.
    fn create_stream(&self, device: i32) -> Result<AnyStream>;
    /// The stream a raw handle names (`CUstream`, `hipStream_t`; 0: the default stream).
    ///
    /// # Safety
    /// `raw` is 0 or a live stream handle of this backend's runtime.
    unsafe fn stream_from_raw(&self, raw: usize) -> Result<AnyStream>;
    /// Destroys a stream from `create_stream`.
    ///
    /// # Safety
    /// As for [`DeviceBackend::destroy_stream`].
    unsafe fn destroy_stream(&self, stream: &AnyStream) -> Result<()>;
    /// Blocks until everything queued on `stream` has run.
    fn synchronize(&self, stream: &AnyStream) -> Result<()>;
    /// Whether everything queued on `stream` has completed.
    fn query(&self, stream: &AnyStream) -> Result<bool>;
    /// Makes `later` wait (on the device, without blocking the host) for the work queued on
    /// `earlier` so far.
    fn order_after(&self, later: &AnyStream, earlier: &AnyStream) -> Result<()>;
    /// Synchronous host-to-device copy.
    ///
    /// # Safety
    /// As for [`DeviceBackend::copy_to_device`].
    unsafe fn copy_to_device(&self, device: i32, dst: DevicePtr, src: &[u8]) -> Result<()>;
    /// Synchronous device-to-host copy.
    ///
    /// # Safety
    /// As for [`DeviceBackend::copy_from_device`].
    unsafe fn copy_from_device(&self, device: i32, dst: &mut [u8], src: DevicePtr) -> Result<()>;
}

/// A core backend made usable through the dispatch enums.
pub struct Backed<B: Backend>(pub Arc<B>);

/// The error for a stream handed to a backend it does not belong to.
fn foreign_stream(backend: &str) -> Error {
    Error::arg(format!(
        "the stream belongs to another backend than {backend}"
    ))
}

impl<B: DeviceBackend> Backed<B> {
    fn own<'a>(&self, stream: &'a AnyStream) -> Result<&'a B::Stream> {
        B::stream_of(stream).ok_or_else(|| foreign_stream(self.0.name()))
    }
}

impl<B: DeviceBackend> RuntimeBackend for Backed<B> {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn current_device(&self) -> Result<i32> {
        self.0.current_device()
    }
    fn device_count(&self) -> Result<usize> {
        self.0.device_count()
    }
    fn synchronous(&self) -> bool {
        self.0.synchronous_api()
    }
    fn init_rank(
        &self,
        nranks: usize,
        id: UniqueId,
        rank: usize,
        device: i32,
        config: CommConfig,
    ) -> Result<AnyComm> {
        Communicator::init_rank(self.0.clone(), nranks, id, rank, device, config)
            .map(|c| B::wrap(GenComm::new(c)))
    }
    fn init_all(&self, devices: &[i32]) -> Result<Vec<AnyComm>> {
        Ok(Communicator::init_all(self.0.clone(), devices)?
            .into_iter()
            .map(|c| B::wrap(GenComm::new(c)))
            .collect())
    }
    fn mem_alloc(&self, device: i32, size: usize) -> Result<DevicePtr> {
        self.0.mem_alloc(device, size)
    }
    unsafe fn mem_free(&self, ptr: DevicePtr) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.0.mem_free(ptr) }
    }
    fn pointer_info(&self, ptr: DevicePtr) -> Result<PointerInfo> {
        self.0.pointer_info(ptr)
    }
    fn create_stream(&self, device: i32) -> Result<AnyStream> {
        self.0.create_stream(device).map(B::wrap_stream)
    }
    unsafe fn stream_from_raw(&self, raw: usize) -> Result<AnyStream> {
        // SAFETY: forwarded from the caller.
        unsafe { self.0.comm_stream(raw) }.map(B::wrap_stream)
    }
    unsafe fn destroy_stream(&self, stream: &AnyStream) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.0.destroy_stream(self.own(stream)?) }
    }
    fn synchronize(&self, stream: &AnyStream) -> Result<()> {
        self.0.stream_synchronize(self.own(stream)?)
    }
    fn query(&self, stream: &AnyStream) -> Result<bool> {
        self.0.query(self.own(stream)?)
    }
    fn order_after(&self, later: &AnyStream, earlier: &AnyStream) -> Result<()> {
        let earlier = self.own(earlier)?;
        let event = self.0.event_create(earlier)?;
        self.0.event_record(&event, earlier)?;
        self.0.stream_wait_event(self.own(later)?, &event)
    }
    unsafe fn copy_to_device(&self, device: i32, dst: DevicePtr, src: &[u8]) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.0.copy_to_device(device, dst, src) }
    }
    unsafe fn copy_from_device(&self, device: i32, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.0.copy_from_device(device, dst, src) }
    }
}

/// The backends compiled into this library.
#[enum_dispatch(RuntimeBackend)]
pub enum AnyBackend {
    /// CPU memory and threads; always available.
    Host(Backed<HostBackend>),
    /// AMD GPUs through the HIP runtime.
    #[cfg(feature = "hip")]
    Hip(Backed<oxccl_hip::HipBackend>),
    /// NVIDIA GPUs through the CUDA driver.
    #[cfg(feature = "cuda")]
    Cuda(Backed<oxccl_cuda::CudaBackend>),
}

/// A stream handle of any compiled-in backend (not owning: see `oxccl::Stream` for that).
#[derive(Clone)]
pub enum AnyStream {
    /// A host-backend worker queue.
    Host(oxccl_core::host::HostStream),
    /// A `hipStream_t`.
    #[cfg(feature = "hip")]
    Hip(oxccl_hip::HipStream),
    /// A `CUstream`.
    #[cfg(feature = "cuda")]
    Cuda(oxccl_cuda::CudaStream),
}

impl AnyStream {
    /// Whether both handles name the same stream.
    pub fn same(&self, other: &AnyStream) -> bool {
        match (self, other) {
            (AnyStream::Host(a), AnyStream::Host(b)) => a.same(b),
            #[cfg(feature = "hip")]
            (AnyStream::Hip(a), AnyStream::Hip(b)) => a == b,
            #[cfg(feature = "cuda")]
            (AnyStream::Cuda(a), AnyStream::Cuda(b)) => a == b,
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }
}

/// Operations on one communicator, whatever its backend.
#[enum_dispatch]
pub trait CommOps {
    /// Identity of the underlying communicator (stable across clones).
    fn key(&self) -> usize;
    /// This rank.
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn nranks(&self) -> usize;
    /// Device of this rank.
    fn device(&self) -> i32;
    /// The id it was created from.
    fn unique_id(&self) -> UniqueId;
    /// Its configuration.
    fn config(&self) -> CommConfig;
    /// Name of its backend.
    fn backend_name(&self) -> &'static str;
    /// True when its operations complete before the API call returns.
    fn synchronous(&self) -> bool;
    /// `Err(InProgress)` while initializing, the first asynchronous error, or `Ok`.
    fn status(&self) -> Result<()>;
    /// Blocks until a pending init finished; returns its outcome.
    fn wait_ready(&self) -> Result<()>;
    /// `ncclCommFinalize`.
    fn finalize(&self) -> Result<()>;
    /// `ncclCommDestroy`.
    fn destroy(&self) -> Result<()>;
    /// `ncclCommAbort`.
    fn abort(&self);
    /// `ncclCommSplit`.
    fn split(&self, color: i32, key: i32, config: Option<CommConfig>) -> Result<Option<AnyComm>>;
    /// `ncclCommShrink`.
    fn shrink(&self, exclude: &[u32], config: Option<CommConfig>) -> Result<AnyComm>;
    /// Checks a raw `ncclRedOp_t` for an operation on `dtype`.
    fn resolve_op(&self, raw: i32, dtype: DataType) -> Result<RedOp>;
    /// `ncclRedOpCreatePreMulSum`.
    fn create_premul_sum(&self, dtype: DataType, scalar: ScalarSource) -> Result<i32>;
    /// `ncclRedOpDestroy`.
    fn destroy_red_op(&self, op: i32) -> Result<()>;
    /// Runs (or records, inside a core group) a collective on raw stream `stream`.
    ///
    /// # Safety
    /// The buffers in `args` are valid for the operation until it has run; `stream` is 0 or a
    /// live stream handle of the backend's runtime.
    unsafe fn collective(&self, args: CollArgs, stream: usize) -> Result<()>;
    /// Runs (or records) a collective on `stream`.
    ///
    /// # Safety
    /// The buffers in `args` are valid for the operation until it has run; `stream` is live.
    unsafe fn collective_on(&self, args: CollArgs, stream: &AnyStream) -> Result<()>;
    /// Runs (or records) one send or receive on raw stream `stream`.
    ///
    /// # Safety
    /// `buf` is valid for `count` elements until the operation has run; `stream` as above.
    unsafe fn p2p(
        &self,
        dir: P2pDir,
        buf: DevicePtr,
        count: u64,
        dtype: DataType,
        peer: u32,
        stream: usize,
    ) -> Result<()>;
    /// Runs (or records) one send or receive on `stream`.
    ///
    /// # Safety
    /// `buf` is valid for `count` elements until the operation has run; `stream` is live.
    unsafe fn p2p_on(
        &self,
        dir: P2pDir,
        buf: DevicePtr,
        count: u64,
        dtype: DataType,
        peer: u32,
        stream: &AnyStream,
    ) -> Result<()>;
    /// Runs a caller-built plan as one collective on raw stream `stream` (MSCCL algorithms).
    ///
    /// # Safety
    /// As for `Communicator::run_plan`; `stream` is 0 or a live stream handle.
    unsafe fn run_plan(
        &self,
        build: Box<dyn FnOnce(u64) -> Result<WorkDesc> + Send>,
        send: DevicePtr,
        recv: DevicePtr,
        stream: usize,
    ) -> Result<()>;
    /// This rank's load/store-accessible team (NCCL's device API).
    fn lsa_team(&self) -> Result<LsaTeam>;
    /// Whether windows can be mapped flat (`map_flat`) on this backend.
    fn flat_mapping(&self) -> bool;
    /// `Communicator::map_flat`: collective.
    ///
    /// # Safety
    /// As for `Communicator::map_flat`.
    unsafe fn map_flat(&self, ptr: DevicePtr, size: u64) -> Result<FlatWindow>;
    /// `Communicator::unmap_flat`.
    ///
    /// # Safety
    /// As for `Communicator::unmap_flat`.
    unsafe fn unmap_flat(&self, w: &FlatWindow) -> Result<()>;
    /// Returns once every rank called it.
    fn host_barrier(&self) -> Result<()>;
    /// The bootstrap and abort flag, for connections the device API makes itself (GIN's).
    fn gin_endpoints(&self) -> Result<(Arc<Bootstrap>, AbortFlag)>;
}

/// A core communicator plus the per-communicator identity the layers above key state by.
pub struct GenComm<B: Backend> {
    comm: Communicator<B>,
    /// Identity of this communicator for group bookkeeping (shared by clones).
    id: Arc<()>,
}

impl<B: Backend> Clone for GenComm<B> {
    fn clone(&self) -> Self {
        GenComm {
            comm: self.comm.clone(),
            id: self.id.clone(),
        }
    }
}

impl<B: Backend> GenComm<B> {
    /// Wraps a fresh communicator.
    pub fn new(comm: Communicator<B>) -> Self {
        GenComm {
            comm,
            id: Arc::new(()),
        }
    }
    /// The core communicator (for embedding Rust code).
    pub fn communicator(&self) -> &Communicator<B> {
        &self.comm
    }
}

impl<B: DeviceBackend> GenComm<B> {
    fn own<'a>(&self, stream: &'a AnyStream) -> Result<&'a B::Stream> {
        B::stream_of(stream).ok_or_else(|| foreign_stream(self.comm.backend().name()))
    }
}

impl<B: DeviceBackend> CommOps for GenComm<B> {
    fn key(&self) -> usize {
        Arc::as_ptr(&self.id) as usize
    }
    fn rank(&self) -> usize {
        self.comm.rank()
    }
    fn nranks(&self) -> usize {
        self.comm.nranks()
    }
    fn device(&self) -> i32 {
        self.comm.device()
    }
    fn unique_id(&self) -> UniqueId {
        self.comm.unique_id()
    }
    fn config(&self) -> CommConfig {
        self.comm.config().clone()
    }
    fn backend_name(&self) -> &'static str {
        self.comm.backend().name()
    }
    fn synchronous(&self) -> bool {
        self.comm.backend().synchronous_api()
    }
    fn status(&self) -> Result<()> {
        self.comm.status()
    }
    fn wait_ready(&self) -> Result<()> {
        self.comm.wait_ready()
    }
    fn finalize(&self) -> Result<()> {
        self.comm.finalize()
    }
    fn destroy(&self) -> Result<()> {
        self.comm.destroy()
    }
    fn abort(&self) {
        self.comm.abort()
    }
    fn split(&self, color: i32, key: i32, config: Option<CommConfig>) -> Result<Option<AnyComm>> {
        Ok(self
            .comm
            .split(color, key, config)?
            .map(|c| B::wrap(GenComm::new(c))))
    }
    fn shrink(&self, exclude: &[u32], config: Option<CommConfig>) -> Result<AnyComm> {
        Ok(B::wrap(GenComm::new(self.comm.shrink(exclude, config)?)))
    }
    fn resolve_op(&self, raw: i32, dtype: DataType) -> Result<RedOp> {
        self.comm.resolve_op(raw, dtype)
    }
    fn create_premul_sum(&self, dtype: DataType, scalar: ScalarSource) -> Result<i32> {
        self.comm.create_premul_sum(dtype, scalar)
    }
    fn destroy_red_op(&self, op: i32) -> Result<()> {
        self.comm.destroy_red_op(op)
    }
    unsafe fn collective(&self, args: CollArgs, stream: usize) -> Result<()> {
        // SAFETY: the caller guarantees `stream` is 0 or a live handle.
        let s = unsafe { self.comm.backend().comm_stream(stream) }?;
        // SAFETY: the caller guarantees the buffers stay valid until the operation has run.
        unsafe { self.comm.collective(args, &s) }
    }
    unsafe fn collective_on(&self, args: CollArgs, stream: &AnyStream) -> Result<()> {
        let s = self.own(stream)?;
        // SAFETY: the caller guarantees the buffers stay valid until the operation has run.
        unsafe { self.comm.collective(args, s) }
    }
    unsafe fn p2p(
        &self,
        dir: P2pDir,
        buf: DevicePtr,
        count: u64,
        dtype: DataType,
        peer: u32,
        stream: usize,
    ) -> Result<()> {
        // SAFETY: the caller guarantees `stream` is 0 or a live handle.
        let s = unsafe { self.comm.backend().comm_stream(stream) }?;
        // SAFETY: the caller guarantees the buffer stays valid until the operation has run.
        unsafe { self.comm.p2p(dir, buf, count, dtype, peer, &s) }
    }
    unsafe fn p2p_on(
        &self,
        dir: P2pDir,
        buf: DevicePtr,
        count: u64,
        dtype: DataType,
        peer: u32,
        stream: &AnyStream,
    ) -> Result<()> {
        let s = self.own(stream)?;
        // SAFETY: the caller guarantees the buffer stays valid until the operation has run.
        unsafe { self.comm.p2p(dir, buf, count, dtype, peer, s) }
    }
    unsafe fn run_plan(
        &self,
        build: Box<dyn FnOnce(u64) -> Result<WorkDesc> + Send>,
        send: DevicePtr,
        recv: DevicePtr,
        stream: usize,
    ) -> Result<()> {
        // SAFETY: the caller guarantees `stream` is 0 or a live handle.
        let s = unsafe { self.comm.backend().comm_stream(stream) }?;
        // SAFETY: forwarded from the caller.
        unsafe { self.comm.run_plan(build, send, recv, &s) }
    }
    fn lsa_team(&self) -> Result<LsaTeam> {
        self.comm.lsa_team()
    }
    fn flat_mapping(&self) -> bool {
        self.comm.backend().flat_mapping()
    }
    unsafe fn map_flat(&self, ptr: DevicePtr, size: u64) -> Result<FlatWindow> {
        // SAFETY: forwarded from the caller.
        unsafe { self.comm.map_flat(ptr, size) }
    }
    unsafe fn unmap_flat(&self, w: &FlatWindow) -> Result<()> {
        // SAFETY: forwarded from the caller.
        unsafe { self.comm.unmap_flat(w) }
    }
    fn host_barrier(&self) -> Result<()> {
        self.comm.host_barrier()
    }
    fn gin_endpoints(&self) -> Result<(Arc<Bootstrap>, AbortFlag)> {
        Ok((self.comm.bootstrap()?, self.comm.abort_flag().clone()))
    }
}

/// A communicator of any compiled-in backend.
#[enum_dispatch(CommOps)]
#[derive(Clone)]
pub enum AnyComm {
    /// On the host backend.
    Host(GenComm<HostBackend>),
    /// On the HIP backend.
    #[cfg(feature = "hip")]
    Hip(GenComm<oxccl_hip::HipBackend>),
    /// On the CUDA backend.
    #[cfg(feature = "cuda")]
    Cuda(GenComm<oxccl_cuda::CudaBackend>),
}
