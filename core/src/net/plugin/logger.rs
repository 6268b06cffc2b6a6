//! The callbacks a plugin's `init` receives (network and tuner plugins): the logger (a
//! C-variadic function, defined in `core/csrc/net_plugin_log.c` because stable Rust cannot
//! define one) and the v10+ profiler callback (a no-op: a network plugin's events hang under
//! proxy steps, which oxccl does not raise).

use super::abi::{self, Logger, NcclResult, ProfilerCallback};
use std::ffi::{CStr, c_char, c_int, c_ulong, c_void};

unsafe extern "C" {
    /// Formats a plugin's message and hands it to the sink (C, `net_plugin_log.c`).
    fn oxccl_net_plugin_logger(
        level: c_int,
        flags: c_ulong,
        file: *const c_char,
        line: c_int,
        fmt: *const c_char,
        ...
    );
    /// Sets the sink and the highest level that is formatted.
    fn oxccl_net_log_set_sink(
        sink: extern "C" fn(c_int, c_ulong, *const c_char, c_int, *const c_char),
        max_level: c_int,
    );
}

/// Text of a C string that may be NULL.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string valid for the call.
unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// NCCL's TUNING subsystem bit: what tuner plugins log under.
const SUBSYS_TUNING: c_ulong = 0x40;

/// Receives every formatted plugin message and logs it under target `oxccl::net`, or
/// `oxccl::tuning` for messages of the TUNING subsystem (tuner plugins).
extern "C" fn sink(
    level: c_int,
    flags: c_ulong,
    file: *const c_char,
    line: c_int,
    msg: *const c_char,
) {
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: the shim passes its own NUL-terminated buffer and the plugin's `file`, which
        // is NULL or a C string (`__FILE__` or a function name) valid during the call.
        let (file, msg) = unsafe { (text(file), text(msg)) };
        let msg = msg.trim_end();
        if flags & SUBSYS_TUNING != 0 {
            match level {
                abi::level::WARN | abi::level::ABORT => {
                    tracing::warn!(target: "oxccl::tuning", "TUNER/Plugin {file}:{line} {msg}")
                }
                abi::level::TRACE => {
                    tracing::trace!(target: "oxccl::tuning", "TUNER/Plugin {file}:{line} {msg}")
                }
                abi::level::NONE => {}
                _ => tracing::info!(target: "oxccl::tuning", "TUNER/Plugin {file}:{line} {msg}"),
            }
            return;
        }
        match level {
            abi::level::WARN => {
                tracing::warn!(target: "oxccl::net", "NET/Plugin {file}:{line} {msg}")
            }
            abi::level::ABORT => {
                tracing::error!(target: "oxccl::net", "NET/Plugin {file}:{line} {msg}")
            }
            abi::level::TRACE => {
                tracing::trace!(target: "oxccl::net", "NET/Plugin {file}:{line} {msg}")
            }
            abi::level::NONE => {}
            _ => tracing::info!(target: "oxccl::net", "NET/Plugin {file}:{line} {msg}"),
        }
    });
}

/// The plugin log level matching what `tracing` lets through now.
fn max_level() -> c_int {
    use tracing::level_filters::LevelFilter;
    match LevelFilter::current() {
        LevelFilter::OFF => abi::level::NONE,
        LevelFilter::ERROR | LevelFilter::WARN => abi::level::WARN,
        LevelFilter::INFO | LevelFilter::DEBUG => abi::level::INFO,
        _ => abi::level::TRACE,
    }
}

/// The logger to pass to a plugin's `init` (connects the sink, and sets the level from what
/// `tracing` lets through at this moment).
pub(crate) fn logger() -> Logger {
    // SAFETY: stores a function pointer and an int in the shim's atomics.
    unsafe { oxccl_net_log_set_sink(sink, max_level()) };
    oxccl_net_plugin_logger
}

/// The v10+ profiler callback: the events have no parent to hang under (oxccl raises no proxy
/// steps), so they are ignored.
extern "C" fn profiler(
    _e_handle: *mut *mut c_void,
    _kind: c_int,
    _p_handle: *mut c_void,
    _plugin_id: i64,
    _ext: *mut c_void,
) -> NcclResult {
    abi::SUCCESS
}

/// The profiler callback to pass to a v10+ `init`.
pub(crate) fn profiler_callback() -> ProfilerCallback {
    profiler
}
