//! The environment plugin (`NCCL_ENV_PLUGIN`) at ABI v1: the registry reads through it.

mod support;

#[test]
fn the_registry_reads_through_the_env_plugin() {
    support::registry_reads_through("libnccl-env-oxtest.so", "oxtest-env-v1");
}
