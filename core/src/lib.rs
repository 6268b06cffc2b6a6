//! oxccl-core: everything of the collective runtime that is not vendor specific.
//!
//! Design choices:
//! - `core` is generic over [`backend::Backend`]; the hot path has no virtual calls.
//! - Operations become plans ([`plan::WorkDesc`]): per-channel lists of one generic primitive that
//!   the host backend runs on threads and the GPU kernels run on the device.
//! - Every blocking wait watches an [`abort::AbortFlag`], so abort always returns.
//! - The host backend ([`host::HostBackend`]) runs everything on CPU, for GPU-less machines and
//!   for simulating rank counts no machine here has.

pub mod abort;
pub mod backend;
pub mod bootstrap;
pub mod datatype;
pub mod error;
pub mod lock;
pub mod plan;
pub mod plugin_abi;
pub mod plugin_lib;
pub mod profiler_plugin;
pub mod reduce;
pub mod shm_segment;
pub mod tuner_plugin;

pub use error::{Error, ErrorKind, Result};
pub mod comm;
pub mod config;
pub mod host;
pub mod logging;
#[doc(hidden)]
pub mod testing;

pub use comm::{CollArgs, Communicator};
pub use host::HostBackend;
