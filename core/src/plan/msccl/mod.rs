//! MSCCL algorithm files as plans: [`MscclAlgo::load`] / [`MscclAlgo::parse`] read and check an
//! algorithm (every rank's part), and [`MscclAlgo::lower`] turns one rank's part into a
//! [`crate::plan::WorkDesc`] that `Communicator::run_plan` runs like any collective. The C
//! layer's `mscclLoadAlgo` / `mscclRunAlgo` (RCCL flavour) and Rust programs use them alike;
//! the supported subset and the mapping are in `docs/msccl.md`.

mod lower;
mod parse;

pub use lower::Sizes;
pub use parse::{Buf, ChunkRef, Gpu, MStep, MscclAlgo, StepType, Tb};
