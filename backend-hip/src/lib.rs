//! oxccl backend for AMD GPUs (filled by the HIP backend issue).

pub mod kernels;
