//! gpu-check's backend choice, on any machine: `--backend hip` reaches the HIP backend's loader
//! (and its `OXCCL_HIP_RUNTIME`), a runtime that cannot be used is a SKIP (exit 2), and an
//! unknown backend is refused. The GPU runs are tests/gpu/run.sh and tests/gpu/hip-on-cuda.sh.

use std::process::Command;

fn gpu_check(args: &[&str], envs: &[(&str, &str)]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-check"))
        .args(args)
        .envs(envs.iter().copied())
        .output()
        .expect("run gpu-check");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn listing_cases_needs_no_backend() {
    let (rc, text) = gpu_check(
        &[
            "--backend",
            "hip",
            "--list",
            "--ranks",
            "2",
            "--types",
            "f32",
        ],
        &[],
    );
    assert_eq!(rc, 0, "{text}");
    assert!(text.contains("cases per rank"), "{text}");
}

#[test]
fn the_hip_backend_loads_the_runtime_it_is_given() {
    let absent = std::env::temp_dir().join("oxccl-absent-dir/libamdhip64.so");
    let absent = absent.to_string_lossy().into_owned();
    let (rc, text) = gpu_check(
        &["--backend", "hip", "--mode", "initall", "--ranks", "1"],
        &[("OXCCL_HIP_RUNTIME", absent.as_str())],
    );
    assert_eq!(rc, 2, "{text}");
    assert!(text.starts_with("SKIP"), "{text}");
    assert!(text.contains("OXCCL_HIP_RUNTIME"), "{text}");
    assert!(text.contains(&absent), "{text}");
}

#[test]
fn an_unknown_backend_is_refused() {
    let (rc, text) = gpu_check(&["--backend", "vulkan", "--ranks", "1"], &[]);
    assert_ne!(rc, 0, "{text}");
    assert!(text.contains("unknown backend vulkan"), "{text}");
}
