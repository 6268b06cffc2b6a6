//! GIN through the exported C functions on the host backend when the network plugin's GIN
//! plugin is not of the proxy type (oxccl's C test plugin built to report GDAKI): oxccl
//! initializes it, sees the type, and carries GIN over its own messages instead. The scenario
//! is the one of `device_api_gin.rs`; the plugin never receives a put.

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
fn a_gin_plugin_of_another_type_leaves_gin_to_oxccl_s_messages() {
    let lib = format!(
        "{}/libnccl-net-oxtest-gin-gdaki.so",
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
        eprintln!("HANG: the GIN fallback test did not finish within 120 s");
        std::process::exit(99);
    });
    three_ranks_put_signal_and_count();
    assert_eq!(
        counter(&lib, "oxtest_gin_init_count"),
        RANKS as i32,
        "asked once per rank"
    );
    assert_eq!(counter(&lib, "oxtest_gin_put_count"), 0, "and never used");
    assert_eq!(counter(&lib, "oxtest_gin_open_colls"), 0);
}
