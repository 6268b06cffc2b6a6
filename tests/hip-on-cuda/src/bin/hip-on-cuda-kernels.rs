//! Writes the kernels this crate's build compiled (nvcc, HIP's launch ABI; see `build.rs`) to the
//! file named by its argument: the code object `OXCCL_HIP_CODE_OBJECT` points backend-hip at when
//! it runs on an NVIDIA GPU through `libamdhip64.so` of this crate.
//!
//! ```text
//! hip-on-cuda-kernels OUT.fatbin
//! ```
//! Exits 1 when the build had no nvcc (the blob is empty) or the file cannot be written.

/// The fatbin `build.rs` compiled (empty without nvcc).
static KERNELS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/oxccl-hip-abi.fatbin"));

fn main() {
    let Some(out) = std::env::args_os().nth(1) else {
        eprintln!("usage: hip-on-cuda-kernels OUT.fatbin");
        std::process::exit(2);
    };
    if KERNELS.is_empty() {
        eprintln!("hip-on-cuda-kernels: built without nvcc, no kernels to write (see docs/hip.md)");
        std::process::exit(1);
    }
    if let Err(e) = std::fs::write(&out, KERNELS) {
        eprintln!("hip-on-cuda-kernels: {}: {e}", out.to_string_lossy());
        std::process::exit(1);
    }
    let archs = option_env!("OXCCL_HIP_ABI_BUILT_ARCHS").unwrap_or("?");
    println!(
        "{}: {} bytes, sm_{archs} (HIP launch ABI)",
        out.to_string_lossy(),
        KERNELS.len()
    );
}
