//! The nvcc rules of the build scripts that compile `kernels/common/executor.cu` for NVIDIA GPUs
//! (each includes this file): backend-cuda's fatbin ([`main`]), and the same kernels with HIP's
//! launch ABI for the HIP backend run on NVIDIA by `tests/hip-on-cuda` ([`HIP_LAUNCH_ABI`]).
//! kernels/build/common.rs has the rules shared with the HIP build, docs/kernels.md the
//! environment variables.

use super::common::{self, Flavour};
use std::process::Command;

/// backend-cuda's kernels: CUDA's launch ABI (arguments inline in 1-16 KB parameters).
pub const CUDA: Flavour = Flavour {
    name: "CUDA",
    blob: "oxccl.fatbin",
    cfg: "oxccl_cuda_kernels",
    compiler_env: "NVCC",
    home_envs: &["CUDA_HOME", "CUDA_PATH"],
    exe: "nvcc",
    archs_env: "OXCCL_CUDA_ARCHS",
    dir: "cuda",
};

/// The same kernels with HIP's launch ABI (`OXCCL_HIP_LAUNCH_ABI`: 32-byte parameters holding
/// the argument block's address), which backend-hip's launches pass.
pub const HIP_LAUNCH_ABI: Flavour = Flavour {
    name: "CUDA with HIP's launch ABI",
    blob: "oxccl-hip-abi.fatbin",
    cfg: "oxccl_hip_abi_kernels",
    compiler_env: "NVCC",
    home_envs: &["CUDA_HOME", "CUDA_PATH"],
    exe: "nvcc",
    archs_env: "OXCCL_HIP_ON_CUDA_ARCHS",
    dir: "cuda",
};

/// Turing through Blackwell; the newest also ships as PTX so later GPUs can JIT it.
const DEFAULT_ARCHS: &[&str] = &["75", "80", "90", "100"];

/// The build script's work: called by `backend-cuda/build.rs`.
pub fn main() {
    build(&CUDA, DEFAULT_ARCHS, &[], "OXCCL_CUDA_BUILT_ARCHS");
}

/// Compiles `kernels/common/executor.cu` into `OUT_DIR/<flavour.blob>` for the SM list in
/// `$<flavour.archs_env>` (else `default_archs`), with `-D<define>` for each of `defines`; the
/// SM list it built is given to the crate's tests as the variable `built_archs_var`.
pub fn build(f: &Flavour, default_archs: &[&str], defines: &[&str], built_archs_var: &str) {
    common::declare_inputs(f);
    if common::use_prebuilt(f) {
        return;
    }
    let nvcc = match common::find_compiler(f) {
        Ok(p) => p,
        Err(why) => common::no_kernels(f, &why),
    };
    // Accept "90", "sm_90" and "compute_90" alike.
    let archs: Vec<u32> = common::archs(f, default_archs)
        .iter()
        .map(|a| {
            let digits = a.trim_start_matches("sm_").trim_start_matches("compute_");
            digits.parse().unwrap_or_else(|_| {
                common::no_kernels(
                    f,
                    &format!("{} entry {a:?} is not an SM number", f.archs_env),
                )
            })
        })
        .collect();
    let Some(&newest) = archs.iter().max() else {
        common::no_kernels(f, &format!("{} is empty", f.archs_env));
    };

    let kernels = common::kernels_dir();
    let mut cmd = Command::new(&nvcc);
    cmd.arg("--fatbin")
        // Uncompressed: the loader needs no decompression, and tests can find the entry names.
        .arg("--no-compress")
        .args(["-O3", "-std=c++17", "-Xptxas=-warn-spills"])
        // No a*b+c contraction: results must match the host backend's separate roundings.
        .arg("-fmad=false")
        .arg(format!("-I{}", kernels.join("common").display()))
        .arg(format!("--threads={}", common::jobs(archs.len() + 1)));
    for d in defines {
        cmd.arg(format!("-D{d}"));
    }
    for a in &archs {
        cmd.arg(format!("-gencode=arch=compute_{a},code=sm_{a}"));
    }
    cmd.arg(format!(
        "-gencode=arch=compute_{newest},code=compute_{newest}"
    ));
    cmd.arg(kernels.join("common/executor.cu"));
    common::compile(f, cmd);

    // For tests: which cubins the fatbin must hold, and the nvcc that can build host tests.
    let list: Vec<String> = archs.iter().map(u32::to_string).collect();
    println!("cargo::rustc-env={built_archs_var}={}", list.join(","));
    println!("cargo::rustc-env=OXCCL_NVCC_USED={}", nvcc.display());
}
