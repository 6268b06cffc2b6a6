//! Compiles `tests/c/net_plugin/oxccl_test_net.c` into shared libraries, one per variant, in
//! `OUT_DIR` (named by `OXCCL_TEST_NET_PLUGIN_DIR` for the tests). `cc` builds only static
//! archives, so its compiler is invoked directly with `-shared -fPIC` (`build_so.rs`, shared with
//! `core/build.rs`).

#[path = "build_so.rs"]
mod build_so;

use build_so::build_so;
use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("manifest dir"));
    let src = manifest.join("../tests/c/net_plugin/oxccl_test_net.c");
    println!("cargo:rerun-if-changed={}", src.display());
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    println!(
        "cargo:rustc-env=OXCCL_TEST_NET_PLUGIN_DIR={}",
        out.display()
    );
    if !src.exists() {
        // A packaged crate (`cargo package`, a registry) has no workspace tests beside it; only
        // the workspace's own tests load these plugins.
        return;
    }
    let compiler = cc::Build::new().get_compiler();
    let variants: [(&str, &[&str]); 18] = [
        ("libnccl-net-oxtest.so", &[]),
        ("libnccl-net-oxtest6.so", &["-DOXTEST_V6"]),
        ("libnccl-net-oxtest7.so", &["-DOXTEST_V7"]),
        ("libnccl-net-oxtest8.so", &["-DOXTEST_V8"]),
        ("libnccl-net-oxtest9.so", &["-DOXTEST_V9"]),
        ("libnccl-net-oxtest10.so", &["-DOXTEST_V10"]),
        ("libnccl-net-oxtest12.so", &["-DOXTEST_V12"]),
        // Both of NCCL 2.30's newest symbols: v12 must win.
        ("libnccl-net-oxtest12-11.so", &["-DOXTEST_V12_AND_V11"]),
        ("libnccl-net-oxtest-nosym.so", &["-DOXTEST_NO_SYMBOL"]),
        ("libnccl-net-oxtest-badinit.so", &["-DOXTEST_FAIL_INIT"]),
        // A GIN plugin beside the net plugin, for ranks that are threads of one process.
        ("libnccl-net-oxtest-gin.so", &["-DOXTEST_GIN=11"]),
        ("libnccl-net-oxtest-gin13.so", &["-DOXTEST_GIN=13"]),
        // Every GIN put fails: the error reaches the communicator.
        (
            "libnccl-net-oxtest-gin-fail.so",
            &["-DOXTEST_GIN=11", "-DOXTEST_GIN_FAIL_AFTER_DEFAULT=0"],
        ),
        // A GIN plugin of another type than the proxy (GDAKI): oxccl's own messages then.
        (
            "libnccl-net-oxtest-gin-gdaki.so",
            &["-DOXTEST_GIN=11", "-DOXTEST_GIN_TYPE=3"],
        ),
        // Four devices at made-up PCI places (far, none, two beside the GPU of
        // `connect::tests`): choosing the devices nearest a GPU.
        (
            "libnccl-net-oxtest-devs.so",
            &[concat!(
                "-DOXTEST_PCI_PATHS_DEFAULT=\"",
                "/sys/devices/pci0000:80/0000:80:01.0/0000:81:00.0;-;",
                "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.1;",
                "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/0000:03:00.2\""
            )],
        ),
        // GPU memory (GPUDirect RDMA) in host memory standing in for it: the CPU tests.
        ("libnccl-net-oxtest-gdr.so", &["-DOXTEST_GDR_DEFAULT=fake"]),
        (
            "libnccl-net-oxtest-gdr-dmabuf.so",
            &[
                "-DOXTEST_GDR_DEFAULT=fake",
                "-DOXTEST_DMABUF_DEFAULT=1",
                "-DOXTEST_FORCE_FLUSH_DEFAULT=1",
            ],
        ),
        // Real GPU memory through the CUDA driver, opened at run time: for the GPU machine
        // (`tests/gpu/run.sh`, OXCCL_GDR_PLUGIN); the CPU tests never load it.
        (
            "libnccl-net-oxtest-gdr-cuda.so",
            &["-DOXTEST_GDR_DEFAULT=cuda"],
        ),
    ];
    for (name, defs) in variants {
        build_so(&compiler, &src, &out.join(name), defs);
    }
}
