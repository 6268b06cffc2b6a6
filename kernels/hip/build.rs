//! The hipcc rules of backend-hip's build script (its `build.rs` includes this file): compiles
//! `kernels/common/executor.cu` as HIP into one clang offload bundle. kernels/build/common.rs has
//! the rules shared with the CUDA build, docs/kernels.md the environment variables.

use super::common::{self, Flavour};
use std::process::Command;

const HIP: Flavour = Flavour {
    name: "HIP",
    blob: "oxccl.hipfb",
    cfg: "oxccl_hip_kernels",
    compiler_env: "HIPCC",
    home_envs: &["ROCM_PATH", "HIP_PATH"],
    exe: "hipcc",
    archs_env: "OXCCL_HIP_ARCHS",
    dir: "hip",
};

/// CDNA1, CDNA2, CDNA3 (MI300 engineering target) and RDNA2: what Debian's ROCm 5.2 can build.
/// gfx942 (MI300X/MI325X) and gfx950 need ROCm 6 or newer: add them with OXCCL_HIP_ARCHS there.
const DEFAULT_ARCHS: &[&str] = &["gfx908", "gfx90a", "gfx940", "gfx1030"];

/// The build script's work: called by `backend-hip/build.rs`.
pub fn main() {
    common::declare_inputs(&HIP);
    if common::use_prebuilt(&HIP) {
        return;
    }
    let hipcc = match common::find_compiler(&HIP) {
        Ok(p) => p,
        Err(why) => common::no_kernels(&HIP, &why),
    };
    let archs = common::archs(&HIP, DEFAULT_ARCHS);
    if archs.is_empty() {
        common::no_kernels(&HIP, "OXCCL_HIP_ARCHS is empty");
    }

    let kernels = common::kernels_dir();
    let mut cmd = Command::new(&hipcc);
    // hipcc targets NVIDIA whenever it finds an nvcc, which CI also installs.
    cmd.env("HIP_PLATFORM", "amd")
        .arg("--genco")
        .args(["-O3", "-std=c++17", "-x", "hip"])
        // No a*b+c contraction: results must match the host backend's separate roundings.
        .arg("-ffp-contract=off")
        .arg(format!("-I{}", kernels.join("common").display()));
    for a in &archs {
        cmd.arg(format!("--offload-arch={a}"));
    }
    cmd.arg(kernels.join("common/executor.cu"));
    common::compile(&HIP, cmd);

    println!("cargo::rustc-env=OXCCL_HIP_BUILT_ARCHS={}", archs.join(","));
    println!("cargo::rustc-env=OXCCL_HIPCC_USED={}", hipcc.display());
}
