//! What the environment-plugin tests share (each runs in a binary of its own: the plugin loads
//! once per process, on the configuration registry's first read).

use oxccl_core::config::{self, vars};
use std::time::Duration;

/// Loads our test environment plugin `lib` (named `name`) and checks that the registry reads
/// through it: the plugin answers `OXCCL_OP_TIMEOUT` (7) over the process environment (99)
/// and hands other names on to the process environment.
pub fn registry_reads_through(lib: &str, name: &str) {
    let lib = format!("{}/{lib}", env!("OXCCL_TEST_NET_PLUGIN_DIR"));
    // SAFETY: each binary's only test, before anything reads the environment.
    unsafe {
        std::env::set_var("NCCL_ENV_PLUGIN", &lib);
        std::env::set_var("OXCCL_OP_TIMEOUT", "99");
        std::env::set_var("NCCL_SOCKET_FAMILY", "AF_INET");
    }
    assert_eq!(config::env_plugin_name(), Some(name));
    assert_eq!(config::get(&vars::OXCCL_OP_TIMEOUT), Duration::from_secs(7));
    assert_eq!(
        config::get(&vars::NCCL_SOCKET_FAMILY).as_deref(),
        Some("AF_INET")
    );
}
