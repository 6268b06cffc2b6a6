//! Builds the C logger shim that every plugin kind receives (`csrc/net_plugin_log.c`), and the
//! test tuner, environment and profiler plugins that the plugin tests load by path
//! (`tests/c/tuner_plugin/`, `tests/c/env_plugin/`, `tests/c/profiler_plugin/`), and the CUDA
//! stand-ins NVIDIA's Inspector profiler runs with on the host backend (`tests/c/cuda_stub/`).
//! The test network plugins are `oxccl-net`'s (`net/build.rs`).

#[path = "build_so.rs"]
mod build_so;

use build_so::build_so;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=csrc/net_plugin_log.c");
    cc::Build::new()
        .file("csrc/net_plugin_log.c")
        .warnings(true)
        .compile("oxccl_net_plugin_log");
    test_plugins();
}

/// Compiles the test tuner, environment and profiler plugins into shared libraries, one per
/// variant, in `OUT_DIR` (named by `OXCCL_TEST_PLUGIN_DIR` for the tests).
fn test_plugins() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("manifest dir"));
    let tuner = manifest.join("../tests/c/tuner_plugin/oxccl_test_tuner.c");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    println!("cargo:rustc-env=OXCCL_TEST_PLUGIN_DIR={}", out.display());
    if !tuner.exists() {
        // A packaged crate (`cargo package`, a registry) has no workspace tests beside it; only
        // the workspace's own tests load these plugins.
        return;
    }
    let compiler = cc::Build::new().get_compiler();
    // The test tuner plugin (`tests/c/tuner_plugin/`), one library per ABI version.
    println!("cargo:rerun-if-changed={}", tuner.display());
    let tuners: [(&str, &[&str]); 5] = [
        ("libnccl-tuner-oxtest6.so", &["-DOXTEST_TUNER_V6"]),
        ("libnccl-tuner-oxtest.so", &[]),
        ("libnccl-tuner-oxtest4.so", &["-DOXTEST_TUNER_V4"]),
        ("libnccl-tuner-oxtest3.so", &["-DOXTEST_TUNER_V3"]),
        ("libnccl-tuner-oxtest2.so", &["-DOXTEST_TUNER_V2"]),
    ];
    for (name, defs) in tuners {
        build_so(&compiler, &tuner, &out.join(name), defs);
    }
    // The test environment plugin (`tests/c/env_plugin/`), ABI v1 and v2.
    let env = manifest.join("../tests/c/env_plugin/oxccl_test_env.c");
    println!("cargo:rerun-if-changed={}", env.display());
    build_so(&compiler, &env, &out.join("libnccl-env-oxtest.so"), &[]);
    build_so(
        &compiler,
        &env,
        &out.join("libnccl-env-oxtest2.so"),
        &["-DOXTEST_ENV_V2"],
    );
    // The test profiler plugin (`tests/c/profiler_plugin/`), one library per ABI version.
    let profiler = manifest.join("../tests/c/profiler_plugin/oxccl_test_profiler.c");
    println!("cargo:rerun-if-changed={}", profiler.display());
    let profilers: [(&str, &[&str]); 5] = [
        ("libnccl-profiler-oxtest.so", &[]),
        (
            "libnccl-profiler-oxtest4.so",
            &["-DOXTEST_PROFILER_VERSION=4"],
        ),
        (
            "libnccl-profiler-oxtest3.so",
            &["-DOXTEST_PROFILER_VERSION=3"],
        ),
        (
            "libnccl-profiler-oxtest2.so",
            &["-DOXTEST_PROFILER_VERSION=2"],
        ),
        (
            "libnccl-profiler-oxtest1.so",
            &["-DOXTEST_PROFILER_VERSION=1"],
        ),
    ];
    for (name, defs) in profilers {
        build_so(&compiler, &profiler, &out.join(name), defs);
    }
    cuda_stubs(&compiler, &manifest, &out);
}

/// The CUDA runtime and driver stand-ins (`tests/c/cuda_stub/`): `libcudart.so.12` and `.13`
/// with CUDA's soname and symbol version (a plugin built against either finds its references
/// there), and `libcuda.so`, in `OUT_DIR/cuda_stub/`: `OUT_DIR` itself is on the library path of
/// every test cargo runs (the logger shim's link search), where a `libcuda.so` without the
/// driver's functions would be found by anything looking for CUDA.
fn cuda_stubs(compiler: &cc::Tool, manifest: &std::path::Path, out: &std::path::Path) {
    let stub = manifest.join("../tests/c/cuda_stub/oxccl_cuda_stub.c");
    println!("cargo:rerun-if-changed={}", stub.display());
    let out = &out.join("cuda_stub");
    std::fs::create_dir_all(out).expect("cuda_stub folder");
    for major in [12, 13] {
        let name = format!("libcudart.so.{major}");
        let map = out.join(format!("{name}.map"));
        std::fs::write(&map, format!("{name} {{ global: *; }};\n")).expect("version script");
        let soname = format!("-Wl,-soname,{name}");
        let script = format!("-Wl,--version-script={}", map.display());
        build_so(compiler, &stub, &out.join(&name), &[&soname, &script]);
    }
    build_so(
        compiler,
        &stub,
        &out.join("libcuda.so"),
        &["-Wl,-soname,libcuda.so"],
    );
}
