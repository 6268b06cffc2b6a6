//! What the plugin tests share (each runs in a binary of its own: a plugin loads once per
//! process). Not every binary uses every helper.
#![allow(dead_code)]

pub mod profiler;
pub mod tuner;

use oxccl_core::config::{self, vars};
use std::time::Duration;

/// Loads our test environment plugin `lib` (named `name`) and checks that the registry reads
/// through it: the plugin answers `OXCCL_OP_TIMEOUT` (7) over the process environment (99)
/// and hands other names on to the process environment.
pub fn registry_reads_through(lib: &str, name: &str) {
    let lib = format!("{}/{lib}", env!("OXCCL_TEST_PLUGIN_DIR"));
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

/// The buffers one rank used.
#[derive(Debug, Clone, Copy)]
pub struct Buffers {
    /// Input (of a send: its buffer).
    pub send: u64,
    /// Output (of a receive: its buffer).
    pub recv: u64,
}

/// Two host ranks, one AllReduce of 1000 floats each, checked; the buffers of each rank.
pub fn all_reduce_on_two_ranks() -> Vec<Buffers> {
    oxccl_core::testing::on_host_ranks(2, |_| {}, all_reduce)
}

/// Rank `rank` of two runs one AllReduce of 1000 floats on `comm`, checked; its buffers.
pub fn all_reduce(
    rank: usize,
    comm: &oxccl_core::Communicator<oxccl_core::HostBackend>,
    stream: &oxccl_core::host::HostStream,
) -> Buffers {
    use oxccl_core::CollArgs;
    use oxccl_core::datatype::{DataType, RedOp};
    use oxccl_core::plan::CollKind;
    let send = vec![rank as f32 + 1.0; 1000];
    let mut recv = vec![0.0f32; 1000];
    let args = CollArgs {
        kind: CollKind::AllReduce,
        send: send.as_ptr() as u64,
        recv: recv.as_mut_ptr() as u64,
        count: 1000,
        dtype: DataType::Float32,
        op: RedOp::Sum,
        root: 0,
        layout: None,
    };
    // SAFETY: both buffers hold 1000 floats and outlive the call, which is synchronous on the
    // host backend.
    unsafe { comm.collective(args, stream) }.unwrap();
    assert!(recv.iter().all(|&v| v == 3.0));
    Buffers {
        send: send.as_ptr() as u64,
        recv: recv.as_ptr() as u64,
    }
}
