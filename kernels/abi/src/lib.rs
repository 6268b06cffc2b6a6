//! The Rust side of the device kernels' ABI, shared by `oxccl-cuda` and `oxccl-hip`.
//!
//! The kernels (`kernels/common/`) read a C layout declared in `kernels/common/oxccl/work.h`;
//! this crate mirrors it and builds what the kernels read, so the two GPU backends cannot drift
//! apart while neither depends on the other:
//!
//! - `work`: `DevStep`, `DevChannel`, `DevConn`, `LaunchArgs` (sizes, alignments
//!   and field offsets asserted with the same numbers as `work.h`), the kernel names, and
//!   `encode`, the lowering of a plan's `WorkDesc` into per-channel device steps;
//! - `fifo`: the FIFO allocation layout, the connection table and the per-rank record the
//!   device transport (`oxccl-device-transport`, both backends) publishes at connect;
//! - `args_block`: the position-independent argument block of one launch and the kernel
//!   parameters that carry it;
//! - `one_shot`: the one-shot kernels' parameters, names, inbox size and grid.
//!
//! Everything is re-exported at the crate root (each backend's `kernels` module re-exports it
//! again). No `unsafe`: uploads are explicit little-endian serialisation.

#![forbid(unsafe_code)]

mod args_block;
mod fifo;
mod one_shot;
mod work;

pub use args_block::*;
pub use fifo::*;
pub use one_shot::*;
pub use work::*;
