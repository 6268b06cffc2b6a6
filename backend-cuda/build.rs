//! The build script of backend-cuda: its rules live in `kernels/cuda/build.rs` (what only nvcc
//! sees), on top of `kernels/build/common.rs` (what both kernel builds share); docs/kernels.md
//! lists the environment variables.

#[path = "kernels/build/common.rs"]
#[allow(dead_code)]
mod common;

#[path = "kernels/cuda/build.rs"]
#[allow(dead_code)]
mod nvcc;

fn main() {
    nvcc::main();
}
