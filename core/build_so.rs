//! Compiling one C test plugin into a shared library: the helper of the build scripts of
//! `oxccl-core` (tuner, environment and profiler plugins) and `oxccl-net` (network plugins),
//! which both include this file (`net/build_so.rs` is a link to it, so that each crate packages
//! on its own).

use std::path::Path;
use std::process::Command;

/// Compiles `src` into the shared library `out` with the extra compiler flags `defs` (`-D…`,
/// `-Wl,…`). `cc` builds only
/// static archives, so its compiler is invoked directly with `-shared -fPIC`.
pub fn build_so(compiler: &cc::Tool, src: &Path, out: &Path, defs: &[&str]) {
    let status = Command::new(compiler.path())
        .args(["-shared", "-fPIC", "-O2", "-Wall", "-std=gnu11", "-o"])
        .arg(out)
        .arg(src)
        .args(defs)
        // dlopen of the CUDA driver (part of libc since glibc 2.34, a library before).
        .arg("-ldl")
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!(
            "building the test plugin {}: compiler exited with {s}",
            out.display()
        ),
        Err(e) => panic!("building the test plugin {}: {e}", out.display()),
    }
}
