//! The build script of backend-hip: its rules live in `kernels/hip/build.rs` (what only hipcc
//! sees), on top of `kernels/build/common.rs` (what both kernel builds share); docs/kernels.md
//! lists the environment variables.

#[path = "kernels/build/common.rs"]
#[allow(dead_code)]
mod common;

#[path = "kernels/hip/build.rs"]
mod hipcc;

fn main() {
    hipcc::main();
}
