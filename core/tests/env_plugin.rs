//! The environment plugin (`NCCL_ENV_PLUGIN`): the registry reads through it. One test per
//! binary: the plugin loads once per process, on the registry's first read. ABI v1 here;
//! `env_plugin_v2.rs` loads the v2 library.

use oxccl_core::config::{self, vars};
use std::time::Duration;

#[test]
fn the_registry_reads_through_the_env_plugin() {
    let lib = format!(
        "{}/libnccl-env-oxtest.so",
        env!("OXCCL_TEST_NET_PLUGIN_DIR")
    );
    // SAFETY: this binary's only test, before anything reads the environment.
    unsafe {
        std::env::set_var("NCCL_ENV_PLUGIN", &lib);
        std::env::set_var("OXCCL_OP_TIMEOUT", "99");
        std::env::set_var("NCCL_SOCKET_FAMILY", "AF_INET");
    }
    // The plugin answers for OXCCL_OP_TIMEOUT (7), overriding the process environment (99).
    assert_eq!(config::env_plugin_name(), Some("oxtest-env-v1"));
    assert_eq!(config::get(&vars::OXCCL_OP_TIMEOUT), Duration::from_secs(7));
    // It hands the other names to the process environment.
    assert_eq!(
        config::get(&vars::NCCL_SOCKET_FAMILY).as_deref(),
        Some("AF_INET")
    );
}
