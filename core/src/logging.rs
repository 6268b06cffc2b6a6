//! `NCCL_DEBUG`, `NCCL_DEBUG_SUBSYS` and `NCCL_DEBUG_FILE` mapped onto `tracing`.
//!
//! The subscriber is installed lazily, once. In the Rust crate only when `NCCL_DEBUG` is set, so
//! an embedding application's own logging is untouched otherwise. In the C libraries
//! ([`init_for_c_library`]) also without it, for what must never go unseen: a hang report of the
//! watchdog and a communicator's failure (target [`FAILURE_TARGET`]) reach stderr, where a
//! stalled job is otherwise silent.

use std::sync::{Once, OnceLock};

static API_BANNER: OnceLock<&'static str> = OnceLock::new();

/// Sets the API level named in the start-up banner (the RCCL build names its own); first call wins.
pub fn set_api_banner(banner: &'static str) {
    let _ = API_BANNER.set(banner);
}

/// The target of hang reports and communicator failures: logged at WARN, shown by the C
/// libraries even without `NCCL_DEBUG`.
pub const FAILURE_TARGET: &str = "oxccl::watchdog";

/// The filter of the C libraries when `NCCL_DEBUG` is unset.
pub const DEFAULT_C_DIRECTIVES: &str = "off,oxccl::watchdog=warn";

/// NCCL's subsystem names and the `tracing` targets that carry them.
const SUBSYSTEMS: &[(&str, &str)] = &[
    ("INIT", "oxccl::init"),
    ("COLL", "oxccl::coll"),
    ("P2P", "oxccl::p2p"),
    ("SHM", "oxccl::shm"),
    ("NET", "oxccl::net"),
    ("GRAPH", "oxccl::graph"),
    ("TUNING", "oxccl::tuning"),
    ("ENV", "oxccl::env"),
    ("ALLOC", "oxccl::alloc"),
    ("CALL", "oxccl::call"),
    ("PROXY", "oxccl::proxy"),
    ("BOOTSTRAP", "oxccl::bootstrap"),
    ("REG", "oxccl::reg"),
    ("PROFILE", "oxccl::profile"),
];

/// The `tracing` level for an `NCCL_DEBUG` value, or `None` when logging stays off.
pub fn level_for(debug: &str) -> Option<&'static str> {
    match debug.trim().to_ascii_uppercase().as_str() {
        "VERSION" | "WARN" | "ABORT" => Some("warn"),
        "INFO" => Some("info"),
        "TRACE" => Some("trace"),
        _ => None,
    }
}

/// Filter directives for a level and an `NCCL_DEBUG_SUBSYS` list (`^` excludes, `ALL` means all).
pub fn directives(level: &str, subsys: Option<&str>) -> String {
    let subsys = subsys.unwrap_or("INIT,BOOTSTRAP,ENV");
    let (exclude, list) = match subsys.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, subsys),
    };
    let named: Vec<String> = list
        .split(',')
        .map(|s| s.trim().to_ascii_uppercase())
        .collect();
    let all = named.iter().any(|s| s == "ALL");
    let mut out = vec![format!("warn")];
    for (name, target) in SUBSYSTEMS {
        let listed = all || named.iter().any(|s| s == name);
        if listed != exclude {
            out.push(format!("{target}={level}"));
        }
    }
    out.join(",")
}

/// Expands NCCL's `%h` (host name) and `%p` (pid) in a log file name.
pub fn expand_file_name(pattern: &str) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    pattern
        .replace("%h", &host)
        .replace("%p", &std::process::id().to_string())
}

/// Installs the log subscriber from the environment (once per process; later calls do nothing).
pub fn init_from_env() {
    install(false);
}

/// [`init_from_env`] for the C libraries: without `NCCL_DEBUG`, hang reports and communicator
/// failures still reach stderr ([`DEFAULT_C_DIRECTIVES`]).
pub fn init_for_c_library() {
    install(true);
}

fn install(c_library: bool) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        use crate::config::{get, vars};
        let Some(level) = get(&vars::NCCL_DEBUG).and_then(|d| level_for(&d)) else {
            if c_library {
                let _ = tracing_subscriber::fmt()
                    .with_env_filter(tracing_subscriber::EnvFilter::new(DEFAULT_C_DIRECTIVES))
                    .with_thread_ids(true)
                    .with_ansi(false)
                    .with_writer(std::io::stderr)
                    .try_init();
            }
            return;
        };
        let filter = directives(level, get(&vars::NCCL_DEBUG_SUBSYS).as_deref());
        let builder = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_thread_ids(true)
            .with_ansi(false);
        let file = get(&vars::NCCL_DEBUG_FILE)
            .and_then(|p| std::fs::File::create(expand_file_name(&p)).ok());
        // A second subscriber (the embedding application's) wins; ours then stays silent.
        let _ = match file {
            Some(f) => builder.with_writer(std::sync::Mutex::new(f)).try_init(),
            None => builder.with_writer(std::io::stderr).try_init(),
        };
        let api = API_BANNER.get().copied().unwrap_or("NCCL API level 2.28.9");
        tracing::info!(target: "oxccl::init", "oxccl {} ({api})", env!("CARGO_PKG_VERSION"));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The C libraries' default, in a child process (a subscriber is process-wide): failures
    /// reach stderr, nothing else does.
    #[test]
    fn c_library_shows_failures_without_nccl_debug() {
        if std::env::var_os("OXCCL_LOGGING_CHILD").is_some() {
            init_for_c_library();
            tracing::warn!(target: FAILURE_TARGET, "hang report: rank 3 unreachable");
            tracing::warn!(target: "oxccl::init", "a warning NCCL shows only with NCCL_DEBUG");
            tracing::info!(target: "oxccl::init", "the version banner");
            return;
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "logging::tests::c_library_shows_failures_without_nccl_debug",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("OXCCL_LOGGING_CHILD", "1")
            .env_remove("NCCL_DEBUG")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        assert!(err.contains("hang report: rank 3 unreachable"), "{err}");
        assert!(!err.contains("only with NCCL_DEBUG"), "{err}");
        assert!(!err.contains("version banner"), "{err}");
    }

    #[test]
    fn debug_levels() {
        assert_eq!(level_for("info"), Some("info"));
        assert_eq!(level_for("WARN"), Some("warn"));
        assert_eq!(level_for("TRACE"), Some("trace"));
        assert_eq!(level_for("NONE"), None);
        assert_eq!(level_for(""), None);
    }

    #[test]
    fn subsystem_lists() {
        let d = directives("info", Some("COLL,NET"));
        assert!(d.contains("oxccl::coll=info") && d.contains("oxccl::net=info"));
        assert!(!d.contains("oxccl::init=info"));
        let d = directives("info", Some("^COLL"));
        assert!(!d.contains("oxccl::coll=info") && d.contains("oxccl::init=info"));
        let d = directives("trace", Some("ALL"));
        assert!(d.contains("oxccl::p2p=trace"));
        let d = directives("info", None);
        assert!(d.contains("oxccl::init=info") && d.contains("oxccl::bootstrap=info"));
        assert!(!d.contains("oxccl::coll=info"));
    }

    #[test]
    fn file_name_pattern() {
        let name = expand_file_name("/tmp/nccl.%h.%p.log");
        assert!(name.ends_with(&format!(".{}.log", std::process::id())));
        assert!(!name.contains('%'));
    }
}
