//! `NCCL_DEBUG`, `NCCL_DEBUG_SUBSYS` and `NCCL_DEBUG_FILE` mapped onto `tracing`.
//!
//! The subscriber is installed lazily, once, and only when `NCCL_DEBUG` is set, so an embedding
//! application's own logging is untouched otherwise.

use std::sync::{Once, OnceLock};

static API_BANNER: OnceLock<&'static str> = OnceLock::new();

/// Sets the API level named in the start-up banner (the RCCL build names its own); first call wins.
pub fn set_api_banner(banner: &'static str) {
    let _ = API_BANNER.set(banner);
}

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
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        use crate::config::{get, vars};
        let Some(level) = get(&vars::NCCL_DEBUG).and_then(|d| level_for(&d)) else {
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
        tracing::warn!(target: "oxccl::init", "oxccl {} ({api})", env!("CARGO_PKG_VERSION"));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

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
