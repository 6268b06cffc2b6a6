//! The device transport of oxccl's GPU backends, written once for both vendors.
//!
//! [`DeviceTransport`] holds one communicator's connections on a GPU and launches its plan
//! executors: the FIFO allocation and the bootstrap record exchange, peer FIFO import, the
//! choice of P2P, SHM or NET per pair, the connection table, sender-local counters, argument
//! arenas, shared buffers that grow and are retired instead of freed, the abort flag in mapped
//! pinned memory, the SM-count records that cap the blocks of ranks sharing a GPU, graph
//! capture, cross-stream ordering and teardown. It is generic over [`DeviceApi`], the small set
//! of runtime calls that `oxccl-cuda` implements on the CUDA driver and `oxccl-hip` on the HIP
//! runtime; what truly differs between them (parameter sizes, kernel lookup, block shape) sits
//! behind that trait too. [`GpuBackend`] is core's `Backend` written once over the same trait,
//! so the vendor crates implement only `DeviceApi`.

mod api;
mod device;
#[cfg(test)]
mod fake_api;
pub mod gin_context;
pub mod gin_windows;
mod gpu_backend;
pub mod hardware_queues;
mod ll_area;
mod net;
mod peer_fd;
mod runtime_connect;
mod shm;

pub use api::{CaptureStatus, DeviceApi, Executor, Handle};
pub use device::{DeviceTransport, launch_threads};
pub use gpu_backend::GpuBackend;
pub use net::net_channels;
pub use peer_fd::{PeerFdError, fd_of_process};
