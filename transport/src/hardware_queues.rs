//! CUDA's hardware queues per process (`CUDA_DEVICE_MAX_CONNECTIONS`, 8 by default), which its
//! streams share: work queued behind a kernel that waits for it never starts. oxccl does not
//! change the variable (CUDA reads it once, when the process first uses CUDA); it says when a
//! communicator needs more.

use oxccl_core::config::{self, vars};
use std::sync::Once;

/// Queues that leave every stream of a process its own in oxccl's setups.
const ENOUGH: u32 = 32;

/// Warns once per `once` when the process has fewer than 32 queues; `why(queues)` says what
/// may stall, and the warning ends with the setting that avoids it.
pub fn warn_if_few_hardware_queues(once: &'static Once, why: impl FnOnce(u32) -> String) {
    let queues = config::get(&vars::CUDA_DEVICE_MAX_CONNECTIONS);
    if queues < ENOUGH {
        once.call_once(|| {
            tracing::warn!(target: "oxccl::init",
                "{}; set CUDA_DEVICE_MAX_CONNECTIONS={ENOUGH} before the process first uses CUDA",
                why(queues));
        });
    }
}
