//! The device abstraction: everything `core` needs from CUDA, HIP or the host.
//!
//! Modelled on wgpu-hal: associated types, static dispatch, `unsafe fn`s whose contracts are
//! listed under `# Safety`. `core` validates arguments; backends trust them.

use crate::abort::AbortFlag;
use crate::bootstrap::Bootstrap;
use crate::error::{Error, Result};
use crate::plan::one_shot::{OneShot, Variant};
use crate::plan::{HostLayout, Protocol, WorkDesc};
use std::sync::Arc;
use std::time::Duration;

pub use crate::plan::DevicePtr;

/// What a pointer query found out about an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PointerInfo {
    /// The address is device memory (false: pageable or pinned host memory).
    pub on_device: bool,
    /// Device ordinal owning the memory (-1 for host memory).
    pub device: i32,
    /// Start of the allocation that contains the address.
    pub base: DevicePtr,
    /// Size of that allocation in bytes.
    pub size: usize,
}

/// An exported memory handle another process can import (bytes are backend specific).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareableHandle(pub Vec<u8>);

/// What a backend's transport needs to connect one rank to its peers at communicator init.
pub struct ConnectContext<'a> {
    /// The communicator's bootstrap network (for exchanging addresses and handles).
    pub bootstrap: &'a Bootstrap,
    /// The communicator's abort flag; connection waits watch it.
    pub abort: &'a AbortFlag,
    /// Device this rank runs on.
    pub device: i32,
    /// Deadline for connection set-up.
    pub timeout: Duration,
    /// The host of every rank when the ranks span several hosts (`None`: one host).
    pub hosts: Option<&'a HostLayout>,
}

/// One operation bound to its buffers, ready to run on a stream.
pub struct Launch<B: Backend> {
    /// The plan.
    pub work: Arc<WorkDesc>,
    /// Buffer table indexed by `BufId` (slot `BufId::SCRATCH` is filled by the executor).
    pub buffers: Vec<DevicePtr>,
    /// Connections to the peers.
    pub transport: Arc<B::Transport>,
    /// The communicator's abort flag and async-error slot.
    pub abort: AbortFlag,
    /// Where a backend that times its channels stamps them (the host backend), for a profiler
    /// plugin's KernelCh events; `None` when none asked for them.
    pub channel_times: Option<Arc<crate::profiler_plugin::ChannelTimes>>,
    /// The task events a NET proxy hangs its ProxyOp events under; `None` when no profiler
    /// asked for proxy events.
    pub proxy_parents: Option<ProxyParents>,
}

/// A launch's task events, for the ProxyOp events of the NET proxy that moves their data.
pub struct ProxyParents {
    /// Where the events go.
    pub raiser: crate::profiler_plugin::Raiser,
    /// Each task's event (0: not raised) and, for a send or receive of a group, the buffer that
    /// is its own (`None`: every step of the plan is the task's).
    pub tasks: Vec<(crate::profiler_plugin::Handle, Option<crate::plan::BufId>)>,
}

impl ProxyParents {
    /// The task event of a step whose own data is in buffer `buf` (its source when it sends,
    /// its destination when it receives); 0 when no task claims it.
    pub fn task_of(&self, buf: Option<crate::plan::BufId>) -> crate::profiler_plugin::Handle {
        self.tasks
            .iter()
            .find(|(_, b)| b.is_none() || *b == buf)
            .map_or(0, |(h, _)| *h)
    }
}

/// A device runtime: memory, streams, events, copies, and launching plan executors.
pub trait Backend: Send + Sync + Sized + 'static {
    /// A queue of work executed in order (`CUstream`, `hipStream_t`, a host worker).
    type Stream: Clone + Send + Sync + 'static;
    /// A marker recorded on a stream.
    type Event: Send + Sync + 'static;
    /// Per-communicator connections to the peers.
    type Transport: Send + Sync + 'static;

    /// Short name for logs (`"cuda"`, `"hip"`, `"host"`).
    fn name(&self) -> &'static str;
    /// Number of devices this process can use.
    fn device_count(&self) -> Result<usize>;
    /// The calling thread's current device.
    fn current_device(&self) -> Result<i32>;
    /// Makes `device` current for the calling thread.
    fn set_device(&self, device: i32) -> Result<()>;

    /// Allocation granularity of VMM memory on `device`, in bytes.
    fn granularity(&self, device: i32) -> Result<usize>;
    /// Reserves, creates, maps and enables access to `size` bytes of shareable device memory.
    fn mem_alloc(&self, device: i32, size: usize) -> Result<DevicePtr>;
    /// Frees memory from [`Backend::mem_alloc`].
    ///
    /// # Safety
    /// `ptr` came from `mem_alloc` of this backend, is not used afterwards and no queued work uses it.
    unsafe fn mem_free(&self, ptr: DevicePtr) -> Result<()>;
    /// Exports the allocation containing `ptr` for another process.
    ///
    /// # Safety
    /// `ptr` came from `mem_alloc` and stays allocated while the handle is in use.
    unsafe fn export_handle(&self, ptr: DevicePtr) -> Result<ShareableHandle>;
    /// Maps memory exported by a peer; returns its address here.
    ///
    /// # Safety
    /// `handle` came from `export_handle` of a live peer allocation of at least `size` bytes.
    unsafe fn import_handle(&self, handle: &ShareableHandle, size: usize) -> Result<DevicePtr>;

    /// Whether [`Backend::map_flat`] works (symmetric windows of NCCL's device API).
    fn flat_mapping(&self) -> bool {
        false
    }
    /// Maps the allocations behind `handles` (from `export_handle`, one per rank of a
    /// load/store-accessible team, in team order) at `stride`-byte steps of one new address
    /// range that kernels on `device` may read and write: the flat view of a symmetric window
    /// (NCCL's device API). With `at`, the range must start there, else the call fails (the
    /// address space there is taken). Returns the range's start; [`Backend::unmap_flat`]
    /// releases it. Backends without one refuse.
    ///
    /// # Safety
    /// The handles' allocations stay allocated while the mapping is in use.
    unsafe fn map_flat(
        &self,
        _device: i32,
        _handles: &[ShareableHandle],
        _stride: usize,
        _at: Option<DevicePtr>,
    ) -> Result<DevicePtr> {
        Err(Error::usage(format!(
            "the {} backend has no symmetric memory (NCCL device API)",
            self.name()
        )))
    }
    /// Releases a range from [`Backend::map_flat`].
    ///
    /// # Safety
    /// No queued or running work uses the range any more.
    unsafe fn unmap_flat(&self, _base: DevicePtr) -> Result<()> {
        Ok(())
    }

    /// The stream for a raw handle from a C caller (`cudaStream_t`; 0 is the default stream).
    ///
    /// # Safety
    /// `raw` is 0 or a live stream of this backend's runtime.
    unsafe fn stream_from_raw(&self, raw: usize) -> Result<Self::Stream>;
    /// Blocks until everything queued on `stream` has run; reports the first failure.
    fn stream_synchronize(&self, stream: &Self::Stream) -> Result<()>;
    /// True while `stream` is being captured into a graph.
    fn is_capturing(&self, stream: &Self::Stream) -> Result<bool>;
    /// A new event that can be recorded on `stream` (made on the stream's device: one thread
    /// may drive several devices, as `ncclCommInitAll` and nccl-tests `-g N` do).
    fn event_create(&self, stream: &Self::Stream) -> Result<Self::Event>;
    /// Records `event` at the current tail of `stream`.
    fn event_record(&self, event: &Self::Event, stream: &Self::Stream) -> Result<()>;
    /// Blocks the calling thread until the work before `event` has run.
    fn event_synchronize(&self, event: &Self::Event) -> Result<()>;
    /// Whether the work before `event` has run, without blocking (`cuEventQuery`); `None`
    /// where this backend cannot tell, which leaves its operations out of the watchdog.
    fn event_query(&self, _event: &Self::Event) -> Result<Option<bool>> {
        Ok(None)
    }
    /// A number naming `stream` in hang reports (the raw handle; 0 where there is none).
    fn stream_id(&self, _stream: &Self::Stream) -> u64 {
        0
    }
    /// Makes `stream` wait for `event` without blocking the host.
    fn stream_wait_event(&self, stream: &Self::Stream, event: &Self::Event) -> Result<()>;

    /// Queues a copy of `bytes` bytes on `stream`, a stream of `device`.
    ///
    /// # Safety
    /// Both ranges are valid for `bytes` bytes until the copy has run.
    unsafe fn memcpy_async(
        &self,
        device: i32,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        stream: &Self::Stream,
    ) -> Result<()>;
    /// What the runtime knows about `ptr`.
    fn pointer_info(&self, ptr: DevicePtr) -> Result<PointerInfo>;

    /// True when API calls complete their operations before returning (the host backend, whose
    /// "streams" a C caller cannot synchronise).
    fn synchronous_api(&self) -> bool {
        false
    }

    /// Largest message one step of `proto` may send before its peer receives (bounded device
    /// FIFOs): plans send a chunk and only then receive, so a chunk must fit. `None`: unbounded.
    fn max_chunk_bytes(&self, _proto: Protocol) -> Option<u64> {
        None
    }

    /// Whether a plan may run again under later sequence numbers: its executor matches messages
    /// on a connection by order and never reads the steps' tags (device kernels).
    fn reuses_plans(&self) -> bool {
        false
    }

    /// Whether ranks of one process may run zero-copy plans (the executors implement them and
    /// connecting enables direct access between the process's devices).
    fn zero_copy(&self) -> bool {
        false
    }

    /// Whether every device of this process can read and write `ptr`'s memory directly, so
    /// that a zero-copy plan may hand its address to ranks on other devices.
    fn exposable(&self, _ptr: DevicePtr) -> bool {
        false
    }

    /// Whether this backend's operations wait on peers where no bootstrap wait sees them (in
    /// device memory), so that the communicator must watch its peers for deaths itself.
    fn needs_peer_watch(&self) -> bool {
        false
    }

    /// What joins the ranks of `transport`, for the tuner; `None`: judge by the backend's name
    /// (one host, NVLink between GPUs).
    fn topology(&self, _transport: &Self::Transport) -> Option<crate::plan::tuner::Topology> {
        None
    }

    /// Most channels one operation on `transport` may use (connections are set up per channel,
    /// and ranks sharing a device must fit on it together). `None`: any.
    fn max_channels(&self, _transport: &Self::Transport) -> Option<u32> {
        None
    }

    /// Most channels one direct plan on `transport` may use (some pairs of peers may have
    /// connections on fewer channels than ring and tree neighbours). `None`: as for any plan.
    fn max_direct_channels(&self, _transport: &Self::Transport) -> Option<u32> {
        None
    }

    /// Connects, before `work` is launched, the peers it reaches that init left unconnected
    /// (NET peers that no ring or tree joins, connected on first use as NCCL does). Never waits
    /// for those peers: the connections complete in the background while the operation's
    /// kernels wait on their FIFOs, and a failure aborts the communicator through `abort`.
    fn connect_on_use(
        &self,
        _transport: &Self::Transport,
        _work: &WorkDesc,
        _bootstrap: &Arc<Bootstrap>,
        _abort: &AbortFlag,
    ) -> Result<()> {
        Ok(())
    }

    /// Largest message ([`OneShot::message_bytes`]) that `transport`'s one-shot kernels take in
    /// `variant` ([`Backend::launch_one_shot`]); 0: this backend has none.
    fn one_shot_bytes(&self, _transport: &Self::Transport, _variant: Variant) -> u64 {
        0
    }

    /// Queues a one-shot collective (see [`crate::plan::one_shot`]) on `stream`. Only called
    /// when [`Backend::one_shot_bytes`] admits `op`'s message size; failures during execution go
    /// to `abort`.
    ///
    /// # Safety
    /// `op.send` and `op.recv` are valid for the operation's extent until it has run.
    unsafe fn launch_one_shot(
        &self,
        _stream: &Self::Stream,
        _transport: &Self::Transport,
        _op: &OneShot,
        _abort: &AbortFlag,
    ) -> Result<()> {
        Err(crate::error::Error::Internal(format!(
            "the {} backend has no one-shot kernels",
            self.name()
        )))
    }

    /// Connects this rank to its peers for one communicator.
    fn connect(&self, ctx: &ConnectContext<'_>) -> Result<Self::Transport>;
    /// Queues one operation on `stream`; failures during execution go to `launch.abort`.
    /// Backends with a synchronous API return an event that completes with this operation
    /// alone (not with whatever else shares the stream), which the caller waits for.
    ///
    /// # Safety
    /// Every buffer in `launch.buffers` is valid for the regions the plan touches until the
    /// operation has run.
    unsafe fn launch(
        &self,
        stream: &Self::Stream,
        launch: Launch<Self>,
    ) -> Result<Option<Self::Event>>;
}
