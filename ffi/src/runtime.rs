//! Run-time backend choice: one `enum_dispatch` enum per role, over traits defined here (the
//! macro cannot cross crates), so the exports stay backend-agnostic while every call is a `match`
//! rather than a virtual call.
//!
//! Each device backend has a variant in [`AnyBackend`] and [`AnyComm`] (CUDA under the `nccl`
//! feature, HIP under `rccl`), an [`FfiBackend`] impl for its `Backend` type, and a probe in
//! [`choose`].

use enum_dispatch::enum_dispatch;
use oxccl_core::backend::{Backend, DevicePtr};
use oxccl_core::bootstrap::UniqueId;
use oxccl_core::config::CommConfig;
use oxccl_core::datatype::{DataType, RedOp, ScalarSource};
use oxccl_core::host::HostStream;
use oxccl_core::plan::P2pDir;
use oxccl_core::{CollArgs, Communicator, Error, HostBackend, Result};
use std::sync::{Arc, OnceLock};

/// What the C layer needs from a core backend beyond `Backend` itself.
pub trait FfiBackend: Backend {
    /// The stream a C caller means by `raw`.
    ///
    /// # Safety
    /// `raw` is 0 or a live stream handle of this backend's runtime.
    unsafe fn comm_stream(&self, raw: usize) -> Result<Self::Stream>;
    /// Wraps a communicator of this backend into the dispatch enum.
    fn wrap(comm: GenComm<Self>) -> AnyComm;
}

impl FfiBackend for HostBackend {
    unsafe fn comm_stream(&self, raw: usize) -> Result<HostStream> {
        // Core runs each communicator's operations on its own queue, so ranks of one process
        // sharing a raw handle (usually NULL) never wait behind each other; the stream itself
        // only orders completion, and the backend already caches it per handle.
        // SAFETY: forwarded from the caller.
        unsafe { self.stream_from_raw(raw) }
    }
    fn wrap(comm: GenComm<Self>) -> AnyComm {
        AnyComm::Host(comm)
    }
}

// HIP BACKEND (rccl feature).
#[cfg(feature = "rccl")]
impl FfiBackend for oxccl_hip::HipBackend {
    unsafe fn comm_stream(&self, raw: usize) -> Result<oxccl_hip::HipStream> {
        // SAFETY: forwarded from the caller.
        unsafe { self.stream_from_raw(raw) }
    }
    fn wrap(comm: GenComm<Self>) -> AnyComm {
        AnyComm::Hip(comm)
    }
}

#[cfg(feature = "nccl")]
impl FfiBackend for oxccl_cuda::CudaBackend {
    unsafe fn comm_stream(&self, raw: usize) -> Result<oxccl_cuda::CudaStream> {
        // SAFETY: forwarded from the caller.
        unsafe { self.stream_from_raw(raw) }
    }
    fn wrap(comm: GenComm<Self>) -> AnyComm {
        AnyComm::Cuda(comm)
    }
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
}

/// A core backend made usable from the C layer.
pub struct Runtime<B: Backend>(pub Arc<B>);

impl<B: FfiBackend> RuntimeBackend for Runtime<B> {
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
}

/// The backends compiled into this library.
#[enum_dispatch(RuntimeBackend)]
pub enum AnyBackend {
    /// CPU memory and threads; always available.
    Host(Runtime<HostBackend>),
    /// AMD GPUs through the HIP runtime (RCCL flavour).
    #[cfg(feature = "rccl")]
    Hip(Runtime<oxccl_hip::HipBackend>),
    /// NVIDIA GPUs through the CUDA driver.
    #[cfg(feature = "nccl")]
    Cuda(Runtime<oxccl_cuda::CudaBackend>),
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
    /// Runs (or records) one send or receive.
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
}

/// A core communicator plus the C layer's per-communicator state.
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

impl<B: FfiBackend> CommOps for GenComm<B> {
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
}

/// A communicator of any compiled-in backend.
#[enum_dispatch(CommOps)]
#[derive(Clone)]
pub enum AnyComm {
    /// On the host backend.
    Host(GenComm<HostBackend>),
    /// On the HIP backend (RCCL flavour).
    #[cfg(feature = "rccl")]
    Hip(GenComm<oxccl_hip::HipBackend>),
    /// On the CUDA backend.
    #[cfg(feature = "nccl")]
    Cuda(GenComm<oxccl_cuda::CudaBackend>),
}

/// Picks the backend from `OXCCL_BACKEND` (`host`, `cuda`, `hip`, `auto` or unset).
fn choose() -> Result<AnyBackend> {
    let wanted = std::env::var("OXCCL_BACKEND")
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let host = || AnyBackend::from(Runtime(Arc::new(HostBackend::new())));
    match wanted.as_str() {
        "host" => Ok(host()),
        // HIP BACKEND (rccl feature): forced, its load error is the answer.
        #[cfg(feature = "rccl")]
        "hip" => Ok(AnyBackend::from(Runtime(Arc::new(
            oxccl_hip::HipBackend::load()?,
        )))),
        "" | "auto" => {
            // HIP BACKEND (rccl feature): a runtime with at least one device wins.
            #[cfg(feature = "rccl")]
            if let Some(b) = probe_hip() {
                return Ok(b);
            }
            #[cfg(feature = "nccl")]
            match oxccl_cuda::CudaBackend::load() {
                Ok(b) if b.device_count().unwrap_or(0) > 0 => {
                    tracing::info!(target: "oxccl::init", "using the CUDA backend ({} devices)",
                        b.device_count().unwrap_or(0));
                    return Ok(AnyBackend::from(Runtime(Arc::new(b))));
                }
                Ok(_) => {
                    tracing::info!(target: "oxccl::init", "no CUDA device: using the host backend")
                }
                Err(e) => {
                    tracing::info!(target: "oxccl::init", "CUDA unavailable ({e}): using the host backend")
                }
            }
            tracing::info!(target: "oxccl::init", "using the host backend");
            Ok(host())
        }
        #[cfg(feature = "nccl")]
        "cuda" => {
            let b = oxccl_cuda::CudaBackend::load()?;
            if b.device_count()? == 0 {
                return Err(Error::usage("OXCCL_BACKEND=cuda: no CUDA device"));
            }
            Ok(AnyBackend::from(Runtime(Arc::new(b))))
        }
        // Each flavour matches its own device backend above; only the other one reaches here.
        #[allow(unreachable_patterns)]
        "cuda" | "hip" => Err(Error::usage(format!(
            "OXCCL_BACKEND={wanted}: this build of oxccl has no {wanted} backend yet; use OXCCL_BACKEND=host"
        ))),
        other => Err(Error::arg(format!(
            "OXCCL_BACKEND={other} is not one of host, cuda, hip, auto"
        ))),
    }
}

/// HIP BACKEND (rccl feature): the HIP backend when its runtime loads and sees a device.
#[cfg(feature = "rccl")]
fn probe_hip() -> Option<AnyBackend> {
    match oxccl_hip::HipBackend::load() {
        Ok(b) => {
            tracing::info!(target: "oxccl::init", "using the HIP backend ({:?})", b.runtime());
            Some(AnyBackend::from(Runtime(Arc::new(b))))
        }
        Err(e) => {
            tracing::info!(target: "oxccl::init", "not using the HIP backend: {e}");
            None
        }
    }
}

/// The process-wide backend, chosen on first use.
pub fn backend() -> Result<&'static AnyBackend> {
    static BACKEND: OnceLock<Result<AnyBackend>> = OnceLock::new();
    BACKEND.get_or_init(choose).as_ref().map_err(Clone::clone)
}
