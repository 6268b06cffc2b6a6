//! NVIDIA's example environment plugin (NCCL's `plugins/env/example`, built unchanged with its
//! Makefile), named by `OXCCL_NV_ENV_EXAMPLE`: the registry reads through it (it hands every
//! name to `getenv`). Without the variable it says it skipped: CI has no copy of NVIDIA's
//! repository.

use oxccl_core::config::{self, vars};
use std::time::Duration;

#[test]
fn nvidia_example_env_plugin_answers_for_the_registry() {
    let Some(lib) = std::env::var_os("OXCCL_NV_ENV_EXAMPLE") else {
        eprintln!("SKIPPED: OXCCL_NV_ENV_EXAMPLE names no build of NVIDIA's example env plugin");
        return;
    };
    // SAFETY: this binary's only test, before anything reads the environment.
    unsafe {
        std::env::set_var("NCCL_ENV_PLUGIN", &lib);
        std::env::set_var("OXCCL_OP_TIMEOUT", "99");
    }
    assert_eq!(config::env_plugin_name(), Some("ncclEnvExample"));
    assert_eq!(
        config::get(&vars::OXCCL_OP_TIMEOUT),
        Duration::from_secs(99)
    );
    assert_eq!(config::get(&vars::NCCL_SOCKET_FAMILY), None);
}
