//! GIN through the exported C functions on the host backend, carried by a GIN plugin: the
//! network plugin `NCCL_NET_PLUGIN` names (oxccl's C test plugin, `OXTEST_GIN`) also exports
//! `ncclGinPlugin_v11` of the proxy type, an in-process plugin that copies between the ranks'
//! memory, so oxccl hands it every descriptor (`iput` / `iputSignal`). The scenario is the one
//! of `device_api_gin.rs`; the plugin's own counters show that it carried every put.

mod gin_device;

use gin_device::{RANKS, three_ranks_put_signal_and_count};
use std::ffi::CString;
use std::time::Duration;

/// A counter the test plugin exports, from the already loaded library at `path`.
fn counter(path: &str, name: &str) -> i32 {
    let (p, n) = (CString::new(path).unwrap(), CString::new(name).unwrap());
    // SAFETY: the library is loaded already (RTLD_NOLOAD), so no initialisers run; the
    // counters are `int f(void)`.
    unsafe {
        let h = libc::dlopen(p.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        assert!(!h.is_null(), "{path} is not loaded");
        let f: unsafe extern "C" fn() -> i32 = std::mem::transmute(libc::dlsym(h, n.as_ptr()));
        f()
    }
}

#[test]
fn a_gin_plugin_of_the_net_plugin_carries_every_put() {
    let lib = format!(
        "{}/libnccl-net-oxtest-gin.so",
        oxccl_net::TEST_NET_PLUGIN_DIR
    );
    // SAFETY: the first thing this test binary does, before any thread reads the environment.
    unsafe {
        std::env::set_var("OXCCL_BACKEND", "host");
        std::env::set_var("NCCL_GIN_NCONTEXTS", "2");
        std::env::set_var("NCCL_GIN_PROXY_QUEUE_SIZE", "4");
        std::env::set_var("NCCL_NET_PLUGIN", &lib);
    }
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_secs(120));
        eprintln!("HANG: the GIN plugin test did not finish within 120 s");
        std::process::exit(99);
    });
    three_ranks_put_signal_and_count();
    // Each rank: a put and a signal add to each peer.
    let puts = (2 * RANKS * (RANKS - 1)) as i32;
    assert_eq!(counter(&lib, "oxtest_gin_put_count"), puts);
    assert_eq!(counter(&lib, "oxtest_gin_signal_count"), puts);
    // Per rank and context: signals (strongly ordered), inline values, two windows and two
    // device communicators' resource buffers, all host memory.
    assert_eq!(
        counter(&lib, "oxtest_gin_reg_strong_count"),
        (RANKS * 2) as i32
    );
    assert_eq!(
        counter(&lib, "oxtest_gin_reg_host_count"),
        (RANKS * 2 * 6) as i32
    );
    assert_eq!(counter(&lib, "oxtest_gin_reg_cuda_count"), 0);
    assert_eq!(
        counter(&lib, "oxtest_gin_open_colls"),
        0,
        "closed with the communicators"
    );
    assert_eq!(
        counter(&lib, "oxtest_gin_finalize_count"),
        counter(&lib, "oxtest_gin_init_count")
    );
}
