//! A test-only HIP runtime for NVIDIA GPUs, built as `libamdhip64.so`.
//!
//! It exports every `hip*` entry point that backend-hip loads (`backend-hip/src/runtime.rs`,
//! `Hip::has`) and forwards each to the CUDA driver API (cudarc's `sys`, loaded at run time), so
//! the HIP backend's host code (memory, VMM export and import, IPC, streams, events, modules, the
//! P2P transport, launches) runs on an NVIDIA GPU with our kernels compiled by nvcc with HIP's
//! launch ABI (`build.rs`, `hip-on-cuda-kernels`). `tests/gpu/hip-on-cuda.sh` drives it; docs/hip.md
//! says what this proves and what it cannot (wavefront 64, AMD memory ordering, xGMI, AMD code
//! objects).
//!
//! Types and values are HIP's as backend-hip declares them ([`types`]); this runtime announces
//! itself as HIP 6.2, so the backend uses ROCm 6's memory-type numbering and CUDA's layout of
//! `hipMemAllocationProp`. Behaviour follows HIP's runtime: every thread has a current device
//! (device 0 until `hipSetDevice`), which is the device's primary CUDA context made current on
//! that thread ([`context`]). CUDA results become the HIP codes of the same meaning
//! ([`status`]). Without libcuda every entry point fails with `hipErrorNoDevice` and a sentence
//! saying so; nothing panics across the C boundary ([`boundary`]).

// The exported names are HIP's, and each export's safety contract is HIP's documentation of the
// function of the same name: a per-function `# Safety` section would only repeat it.
#![allow(non_snake_case, clippy::missing_safety_doc)]

pub mod boundary;
pub mod context;
pub mod status;
pub mod types;

pub mod device_api;
pub mod error_api;
pub mod graph_api;
pub mod ipc_api;
pub mod memory_api;
pub mod module_api;
pub mod stream_api;
pub mod vmm_api;
