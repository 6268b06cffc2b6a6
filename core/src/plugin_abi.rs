//! What every kind of NCCL plugin (network, tuner, profiler, environment) shares at the C
//! boundary: `ncclResult_t`, the log levels, and the logger a plugin's `init` receives (a
//! C-variadic function, defined in `core/csrc/net_plugin_log.c` because stable Rust cannot
//! define one). It lives in core because the tuner, profiler and environment plugins, which core
//! loads, hand plugins the same logger as the network plugins of `oxccl-net` do.

use std::ffi::{CStr, c_char, c_int, c_ulong};

/// `ncclResult_t`.
pub type NcclResult = c_int;
/// `ncclSuccess`.
pub const SUCCESS: NcclResult = 0;

/// Logger levels (`ncclDebugLogLevel`).
pub mod level {
    use std::ffi::c_int;
    /// `NCCL_LOG_NONE`.
    pub const NONE: c_int = 0;
    /// `NCCL_LOG_VERSION`.
    pub const VERSION: c_int = 1;
    /// `NCCL_LOG_WARN`.
    pub const WARN: c_int = 2;
    /// `NCCL_LOG_INFO`.
    pub const INFO: c_int = 3;
    /// `NCCL_LOG_ABORT`.
    pub const ABORT: c_int = 4;
    /// `NCCL_LOG_TRACE`.
    pub const TRACE: c_int = 5;
}

/// The logger a plugin's `init` receives: C varargs after `fmt`.
pub type Logger = unsafe extern "C" fn(c_int, c_ulong, *const c_char, c_int, *const c_char, ...);

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
/// NCCL's PROFILE subsystem bit: what profiler plugins (NVIDIA's Inspector) log under.
const SUBSYS_PROFILE: c_ulong = 0x4000;

/// Logs one plugin message at its NCCL level under `tracing` target `$target`, prefixed
/// `$prefix` (targets are constants in `tracing`, hence a macro).
macro_rules! emit {
    ($target:literal, $prefix:literal, $level:expr, $file:expr, $line:expr, $msg:expr) => {
        match $level {
            level::WARN => {
                tracing::warn!(target: $target, "{} {}:{} {}", $prefix, $file, $line, $msg)
            }
            level::ABORT => {
                tracing::error!(target: $target, "{} {}:{} {}", $prefix, $file, $line, $msg)
            }
            level::TRACE => {
                tracing::trace!(target: $target, "{} {}:{} {}", $prefix, $file, $line, $msg)
            }
            level::NONE => {}
            _ => tracing::info!(target: $target, "{} {}:{} {}", $prefix, $file, $line, $msg),
        }
    };
}

/// Receives every formatted plugin message and logs it under target `oxccl::net`, or
/// `oxccl::tuning` for messages of the TUNING subsystem (tuner plugins), or `oxccl::profile`
/// for the PROFILE subsystem's (profiler plugins).
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
            emit!("oxccl::tuning", "TUNER/Plugin", level, file, line, msg);
        } else if flags & SUBSYS_PROFILE != 0 {
            emit!("oxccl::profile", "PROFILER/Plugin", level, file, line, msg);
        } else {
            emit!("oxccl::net", "NET/Plugin", level, file, line, msg);
        }
    });
}

/// The plugin log level matching what `tracing` lets through now.
fn max_level() -> c_int {
    use tracing::level_filters::LevelFilter;
    match LevelFilter::current() {
        LevelFilter::OFF => level::NONE,
        LevelFilter::ERROR | LevelFilter::WARN => level::WARN,
        LevelFilter::INFO | LevelFilter::DEBUG => level::INFO,
        _ => level::TRACE,
    }
}

/// The logger to pass to a plugin's `init` (connects the sink, and sets the level from what
/// `tracing` lets through at this moment).
pub fn logger() -> Logger {
    // SAFETY: stores a function pointer and an int in the shim's atomics.
    unsafe { oxccl_net_log_set_sink(sink, max_level()) };
    oxccl_net_plugin_logger
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `sink` logs for one message of subsystems `flags`.
    fn logged(flags: c_ulong) -> String {
        crate::testing::capture_logs(|| {
            sink(level::INFO, flags, c"f.cc".as_ptr(), 7, c"hello\n".as_ptr())
        })
        .1
    }

    #[test]
    fn messages_go_to_their_plugin_kinds_subsystem() {
        let net = logged(0x10);
        assert!(net.contains("oxccl::net: NET/Plugin f.cc:7 hello"), "{net}");
        let tuner = logged(SUBSYS_TUNING);
        assert!(
            tuner.contains("oxccl::tuning: TUNER/Plugin f.cc:7 hello"),
            "{tuner}"
        );
        let profiler = logged(SUBSYS_PROFILE);
        assert!(
            profiler.contains("oxccl::profile: PROFILER/Plugin f.cc:7 hello"),
            "{profiler}"
        );
    }
}
