//! oxccl backend for NVIDIA GPUs (filled by the CUDA backend issue).

pub mod kernels;
