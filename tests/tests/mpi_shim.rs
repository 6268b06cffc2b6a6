//! The MPI stand-in that runs nccl-tests with a process per GPU (`scripts/nccl-tests/mpi-shim`):
//! built with the system C compiler and run at several rank counts by its own launcher.

use std::path::{Path, PathBuf};
use std::process::Command;

fn shim_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/nccl-tests/mpi-shim")
}

/// Compiles `args` with `cc`; `None` (the test is skipped) where no C compiler is installed.
fn cc(args: &[&str]) -> Option<()> {
    let out = Command::new("cc").args(args).output().ok()?;
    assert!(
        out.status.success(),
        "cc {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(())
}

#[test]
fn every_collective_nccl_tests_calls_agrees_on_every_rank() {
    let dir = shim_dir();
    let tmp = std::env::temp_dir().join(format!("oxccl-mpi-shim-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let lib = tmp.join("libmpi.so");
    let exe = tmp.join("check");
    let (dir_s, lib_s, exe_s) = (
        dir.to_str().unwrap(),
        lib.to_str().unwrap(),
        exe.to_str().unwrap(),
    );
    let shim = format!("{dir_s}/mpi_shim.c");
    let check = format!("{dir_s}/check.c");
    if cc(&[
        "-O2", "-fPIC", "-shared", "-Wall", "-Werror", "-o", lib_s, &shim,
    ])
    .is_none()
    {
        eprintln!("no C compiler (cc): skipped");
        return;
    }
    let libdir = format!("-L{}", tmp.display());
    cc(&[
        "-O2", "-Wall", "-Werror", "-I", dir_s, "-o", exe_s, &check, &libdir, "-lmpi",
    ])
    .unwrap();
    for n in [1u32, 2, 4, 7] {
        let out = Command::new("bash")
            .arg(dir.join("launch.sh"))
            .arg(n.to_string())
            .arg("--")
            .args([
                "sh",
                "-c",
                "OXCCL_MPI_HOSTNAME=h$((OXCCL_MPI_RANK / 2)) exec \"$0\"",
            ])
            .arg(&exe)
            .env("LD_LIBRARY_PATH", &tmp)
            .env("OXCCL_MPI_JOB", format!("test-{}-{n}", std::process::id()))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{n} ranks: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            stdout.matches(": ok").count(),
            n as usize,
            "{n} ranks: {stdout}"
        );
    }
    let _ = std::fs::remove_dir_all(&tmp);
}
