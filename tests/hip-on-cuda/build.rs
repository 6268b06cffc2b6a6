//! Compiles the shared kernels (`kernels/common/executor.cu`) with nvcc and HIP's launch ABI
//! (`OXCCL_HIP_LAUNCH_ABI`) into `OUT_DIR/oxccl-hip-abi.fatbin`, which the
//! `hip-on-cuda-kernels` binary writes out for `OXCCL_HIP_CODE_OBJECT`. The rules are the CUDA
//! backend's (`kernels/cuda/build.rs`); `OXCCL_HIP_ON_CUDA_ARCHS` picks the SMs (default 90, the
//! test machines' H100/H200). Without nvcc the blob is empty and the binary says so.

#[path = "../../kernels/build/common.rs"]
#[allow(dead_code)]
mod common;

#[path = "../../kernels/cuda/build.rs"]
#[allow(dead_code)]
mod nvcc;

fn main() {
    nvcc::build(
        &nvcc::HIP_LAUNCH_ABI,
        &["90"],
        &["OXCCL_HIP_LAUNCH_ABI"],
        "OXCCL_HIP_ABI_BUILT_ARCHS",
    );
}
