//! oxccl: collective communication (NCCL's operations) for Rust programs, on NVIDIA GPUs
//! (CUDA), AMD GPUs (HIP) or the CPU (the host backend), chosen at run time.
//!
//! A program builds and runs without any GPU toolkit: device runtimes are loaded at run time,
//! and [`Runtime::auto`] falls back to the host backend where none is present. The same code
//! then runs unchanged on GPUs.
//!
//! # First example
//!
//! Four ranks in four threads of one process, each adding its vector into everyone's:
//!
//! ```
//! use oxccl::{Collectives, Communicator, ReduceOp, Runtime, UniqueId};
//!
//! let rt = Runtime::auto()?; // CUDA, else HIP, else the host; OXCCL_BACKEND overrides
//! let nranks = 4.min(rt.device_count()?);
//! let id = UniqueId::new()?;
//! let sums = std::thread::scope(|s| {
//!     let workers: Vec<_> = (0..nranks)
//!         .map(|rank| {
//!             let rt = rt.clone();
//!             s.spawn(move || -> oxccl::Result<Vec<f32>> {
//!                 let device = rt.device(rank)?;
//!                 let comm = Communicator::init(&id, rank, nranks, &device)?;
//!                 let mut buf = device.buffer_from(&[rank as f32; 3])?;
//!                 comm.all_reduce_in_place(&mut buf, ReduceOp::Sum)?;
//!                 buf.to_vec() // waits for the operation
//!             })
//!         })
//!         .collect();
//!     workers.into_iter().map(|w| w.join().unwrap()).collect::<oxccl::Result<Vec<_>>>()
//! })?;
//! let total = (0..nranks).sum::<usize>() as f32;
//! assert!(sums.iter().all(|v| v == &[total; 3]));
//! # Ok::<(), oxccl::Error>(())
//! ```
//!
//! Processes started by torchrun (or anything setting `RANK`, `WORLD_SIZE`, `LOCAL_RANK`,
//! `MASTER_ADDR`, `MASTER_PORT`) call [`Communicator::from_env`] instead; other launchers pass
//! a [`UniqueId`] (its `Display` form is hex) from rank 0 to the others.
//!
//! # Soundness of asynchronous work
//!
//! On a GPU an operation runs on a [`Stream`] after its call returned. The rule that keeps safe
//! code free of use-after-free and data races is: **buffer reuse and release are
//! stream-ordered.**
//!
//! - An operation borrows its buffers for the call: `&` for what it reads, `&mut` for what it
//!   writes, so one buffer cannot be both the input and the output of an out-of-place
//!   operation, and no host code holds a reference into device memory.
//! - Each [`DeviceBuffer`] remembers the streams of the operations that used it. Host access
//!   ([`DeviceBuffer::copy_to_host`], [`DeviceBuffer::copy_from_host`], [`DeviceBuffer::to_vec`])
//!   and the release on drop first wait for those streams; an operation queued on another
//!   stream first makes its stream wait (on the device) for them. The buffer keeps them alive.
//! - Operations of a [`Group`] only run when the outermost group ends, so they borrow their
//!   buffers and communicators until then (the group's lifetime `'b`, which inner groups
//!   share); operations outside a group are refused while one is open on the thread, and so is
//!   a second [`Group::start`]. A forgotten group never runs, and the thread says so.
//! - Parts of a buffer are [`DeviceSlice`]s (read) and [`DeviceSliceMut`]s (written), borrowed
//!   from it as `&` and `&mut` slices are: disjoint exclusive views (bucketed gradients over
//!   one flat buffer) may be used by different operations at once. Every operation takes them
//!   where it takes a buffer ([`DeviceInput`], [`DeviceOutput`]).
//! - The traits that decide which borrows an operation keeps ([`Collectives`],
//!   [`DeviceInput`], [`DeviceOutput`], [`Element`]) are sealed.
//! - Only the sealed [`Element`] types can be elements: every bit pattern a reduction writes is
//!   a valid value of them.
//!
//! Consequences: a program may queue many operations and never wait; waiting happens where
//! the host touches data ([`Communicator::synchronize`] or [`Stream::synchronize`] to wait
//! explicitly). Forgetting a value (`std::mem::forget`) cannot break the rule: a forgotten
//! group is refused, not launched, and a forgotten buffer is only leaked. The `unsafe`
//! escape hatch ([`Communicator::collective_raw`], [`Stream::from_raw`]) leaves it to the
//! caller; CUDA graph capture goes through it too. With the `cudarc` feature, operations on
//! `CudaSlice`s follow cudarc's own event tracking instead.
//!
//! Misuse does not compile. Passing one buffer as both input and output:
//!
//! ```compile_fail,E0502
//! use oxccl::{Collectives, Communicator, ReduceOp, Runtime, UniqueId};
//!
//! let rt = Runtime::host();
//! let comm = Communicator::init(&UniqueId::new()?, 0, 1, &rt.device(0)?)?;
//! let mut buf = rt.device(0)?.alloc::<f32>(8)?;
//! comm.all_reduce(&buf, &mut buf, ReduceOp::Sum)?; // error: `buf` borrowed mutably and shared
//! # Ok::<(), oxccl::Error>(())
//! ```
//!
//! Freeing a buffer while a group that uses it is open, and the other misuses that do not
//! compile: see [`soundness`].
//!
//! # NCCL functions and their methods
//!
//! | NCCL | oxccl |
//! |---|---|
//! | `ncclGetVersion` | `env!("CARGO_PKG_VERSION")` of this crate |
//! | `ncclGetUniqueId` | [`UniqueId::new`] ([`UniqueId::from_address`] for `NCCL_COMM_ID`) |
//! | `ncclCommInitRank`, `ncclCommInitRankConfig` | [`Communicator::init`], [`Communicator::init_nonblocking`] |
//! | `ncclCommInitAll` | [`Communicator::init_all`] |
//! | `ncclCommInitRankScalable` | [`Communicator::init`] (one id suffices) |
//! | `ncclCommSplit` | [`Communicator::split`] |
//! | `ncclCommFinalize` | [`Communicator::finalize`] |
//! | `ncclCommDestroy` | dropping the [`Communicator`] |
//! | `ncclCommAbort` | [`Communicator::abort`], [`AbortHandle::abort`] |
//! | `ncclCommGetAsyncError` | [`Communicator::async_error`], [`PendingInit::poll`] |
//! | `ncclCommCount`, `ncclCommUserRank`, `ncclCommCuDevice` | [`Communicator::size`], [`Communicator::rank`], [`Communicator::device`] |
//! | `ncclGetErrorString`, `ncclGetLastError` | [`Error`]'s `Display`; [`Error::code`] is the `ncclResult_t` |
//! | `ncclMemAlloc`, `ncclMemFree` | [`Device::alloc`], [`Device::buffer_from`]; dropping the [`DeviceBuffer`] |
//! | `ncclAllReduce` | [`Collectives::all_reduce`], [`Collectives::all_reduce_in_place`] |
//! | `ncclBroadcast`, `ncclBcast` | [`Collectives::broadcast`], [`Collectives::broadcast_in_place`] |
//! | `ncclReduce` | [`Collectives::reduce`], [`Collectives::reduce_in_place`] |
//! | `ncclAllGather` | [`Collectives::all_gather`], [`Collectives::all_gather_in_place`] |
//! | `ncclReduceScatter` | [`Collectives::reduce_scatter`], [`Collectives::reduce_scatter_in_place`] |
//! | `ncclAlltoAll` (RCCL `ncclAllToAll`) | [`Collectives::all_to_all`] |
//! | `ncclAllToAllv` (RCCL) | [`Collectives::all_to_allv`] |
//! | `ncclGather`, `ncclScatter` | [`Collectives::gather`], [`Collectives::scatter`] and their `_in_place` forms |
//! | `ncclSend`, `ncclRecv` | [`Collectives::send`], [`Collectives::recv`] |
//! | `ncclGroupStart`, `ncclGroupEnd` | [`Group::start`] ([`Group::nested`] inside one), [`Group::end`] (or dropping the [`Group`]) |
//! | `ncclRedOpCreatePreMulSum`, `ncclRedOpDestroy` | [`ReduceOp::PreMulSum`] (nothing to destroy) |
//! | any operation on raw pointers and a `cudaStream_t` | [`Communicator::collective_raw`], [`Communicator::send_raw`], [`Communicator::recv_raw`] (`unsafe`) |
//! | `cudaStreamSynchronize`, `cudaStreamQuery` on the operation's stream | [`Stream::synchronize`], [`Stream::is_complete`] |
//! | `ncclCommRegister`, `ncclCommWindowRegister` | not needed: [`DeviceBuffer`]s are VMM memory peers can map |
//! | `ncclCommShrink`, `ncclCommRevoke`, `ncclCommSuspend`, `ncclGroupSimulateEnd`, `ncclAllReduceWithBias` | C ABI only so far |
//!
//! # Features
//!
//! - `cuda` (default): the CUDA backend. `hip` (default): the HIP backend. Their build scripts
//!   compile the device kernels when nvcc or hipcc is installed, which takes minutes.
//! - A program that only needs the host backend (CI, a laptop, docs) turns both off and
//!   compiles no GPU code at all:
//!   `oxccl = { version = "0.1", default-features = false }`.
//! - `cudarc`: operations on cudarc's `CudaSlice<T>` on a cudarc `CudaStream`
//!   (`Communicator::on_cudarc`).
//! - `dispatch`: the raw, `unsafe` backend dispatch layer the C ABI (`oxccl-ffi`) is built on.
//!
//! # Environment
//!
//! `OXCCL_BACKEND` (`host`, `cuda`, `hip`, `auto`) picks [`Runtime::auto`]'s backend; NCCL's
//! variables (`NCCL_DEBUG`, `NCCL_ALGO`, `NCCL_PROTO`, `NCCL_SOCKET_IFNAME`, ...) apply as they
//! do to the C library.

#![warn(missing_docs)]

mod buffer;
mod collectives;
mod comm;
#[cfg(feature = "cudarc")]
mod cudarc_interop;
pub mod device_api;
#[cfg(feature = "dispatch")]
pub mod dispatch;
#[cfg(not(feature = "dispatch"))]
#[allow(dead_code, unreachable_pub)]
mod dispatch;
mod element;
mod error;
mod fp8;
mod group;
mod id;
mod launch_env;
mod op;
mod private;
mod raw;
mod runtime;
pub mod soundness;
mod stream;

pub use buffer::{DeviceBuffer, DeviceInput, DeviceOutput, DeviceSlice, DeviceSliceMut};
pub use collectives::{AllToAllv, Collectives, OnStream};
pub use comm::{AbortHandle, Communicator, PendingInit};
#[cfg(feature = "cudarc")]
pub use cudarc_interop::CudarcOps;
pub use device_api::{DevComm, DevCommRequirements, LsaTeam, SymmetricWindow};
pub use element::Element;
pub use error::{Error, Result};
pub use fp8::{F8E4M3, F8E5M2};
pub use group::{Group, GroupOps, NestedGroup};
pub use half::{bf16, f16};
pub use id::UniqueId;
pub use op::ReduceOp;
pub use raw::RawCollective;
pub use runtime::{Device, Runtime};
pub use stream::Stream;

#[cfg(test)]
mod tests {
    /// The handles a program shares between rank threads are `Send` and `Sync`.
    #[test]
    fn handles_cross_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<crate::Runtime>();
        shared::<crate::Device>();
        shared::<crate::Communicator>();
        shared::<crate::DeviceBuffer<f32>>();
        shared::<crate::Stream>();
        shared::<crate::UniqueId>();
        shared::<crate::AbortHandle>();
        shared::<crate::Error>();
    }
}
