//! The nvcc rules of backend-cuda's build script (its `build.rs` includes this file): compiles
//! `kernels/common/executor.cu` into one fatbin. kernels/build/common.rs has the rules shared
//! with the HIP build, docs/kernels.md the environment variables.

use super::common::{self, Flavour};
use std::process::Command;

const CUDA: Flavour = Flavour {
    name: "CUDA",
    blob: "oxccl.fatbin",
    cfg: "oxccl_cuda_kernels",
    compiler_env: "NVCC",
    home_envs: &["CUDA_HOME", "CUDA_PATH"],
    exe: "nvcc",
    archs_env: "OXCCL_CUDA_ARCHS",
    dir: "cuda",
};

/// Turing through Blackwell; the newest also ships as PTX so later GPUs can JIT it.
const DEFAULT_ARCHS: &[&str] = &["75", "80", "90", "100"];

/// The build script's work: called by `backend-cuda/build.rs`.
pub fn main() {
    common::declare_inputs(&CUDA);
    if common::use_prebuilt(&CUDA) {
        return;
    }
    let nvcc = match common::find_compiler(&CUDA) {
        Ok(p) => p,
        Err(why) => common::no_kernels(&CUDA, &why),
    };
    // Accept "90", "sm_90" and "compute_90" alike.
    let archs: Vec<u32> = common::archs(&CUDA, DEFAULT_ARCHS)
        .iter()
        .map(|a| {
            let digits = a.trim_start_matches("sm_").trim_start_matches("compute_");
            digits.parse().unwrap_or_else(|_| {
                common::no_kernels(
                    &CUDA,
                    &format!("OXCCL_CUDA_ARCHS entry {a:?} is not an SM number"),
                )
            })
        })
        .collect();
    let Some(&newest) = archs.iter().max() else {
        common::no_kernels(&CUDA, "OXCCL_CUDA_ARCHS is empty");
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
    for a in &archs {
        cmd.arg(format!("-gencode=arch=compute_{a},code=sm_{a}"));
    }
    cmd.arg(format!(
        "-gencode=arch=compute_{newest},code=compute_{newest}"
    ));
    cmd.arg(kernels.join("common/executor.cu"));
    common::compile(&CUDA, cmd);

    // For tests: which cubins the fatbin must hold, and the nvcc that can build host tests.
    let list: Vec<String> = archs.iter().map(u32::to_string).collect();
    println!("cargo::rustc-env=OXCCL_CUDA_BUILT_ARCHS={}", list.join(","));
    println!("cargo::rustc-env=OXCCL_NVCC_USED={}", nvcc.display());
}
