//! Running a program under valgrind's memcheck and reading its verdict.

use std::path::PathBuf;
use std::process::Command;

/// valgrind's path when it is installed.
pub fn valgrind() -> Option<PathBuf> {
    let out = Command::new("valgrind").arg("--version").output().ok()?;
    out.status.success().then(|| PathBuf::from("valgrind"))
}

/// A memcheck run's outcome.
pub struct Memcheck {
    /// The program succeeded and memcheck saw no error.
    pub success: bool,
    /// Its output and memcheck's report.
    pub log: String,
}

/// Runs `bin args` under memcheck; any memcheck error makes the run fail.
pub fn run(valgrind: &PathBuf, bin: &str, args: &[&str]) -> Memcheck {
    let out = Command::new(valgrind)
        .args([
            "--tool=memcheck",
            "--error-exitcode=99",
            // Leaks are not the question here, and thread-local state at exit would be one.
            "--leak-check=no",
            "--quiet",
        ])
        .arg(bin)
        .args(args)
        .env("OXCCL_OP_TIMEOUT", "600")
        .output()
        .expect("valgrind starts");
    Memcheck {
        success: out.status.success(),
        log: format!(
            "exit {:?}\n{}{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}
