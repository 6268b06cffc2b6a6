//! Configuration: the registry of environment variables ([`vars`], read with [`get`]) and a
//! communicator's options (`ncclConfig_t` fields as Rust values) with their overrides.
//!
//! Every variable oxccl reads is declared once in [`vars`]; only this module reads the
//! environment. A bad value is warned about once per variable (naming it and the value) and the
//! default is used, as NCCL does.

mod env;
mod env_plugin;
pub use env_plugin::name as env_plugin_name;
pub mod vars;

pub use env::{Entry, Env, Flag, Scope, Value, Var, bad_value, get, get_set, is_set};

use std::time::Duration;

/// Options of one communicator; the C layer fills it from `ncclConfig_t`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommConfig {
    /// Init and operations block until done (`blocking`, `NCCL_COMM_BLOCKING`).
    pub blocking: bool,
    /// Minimum channels (`minCTAs`).
    pub min_ctas: u32,
    /// Maximum channels (`maxCTAs`).
    pub max_ctas: u32,
    /// Share resources with the parent on split (`splitShare`).
    pub split_share: bool,
    /// Name shown in logs (`commName`).
    pub comm_name: Option<String>,
    /// Network plugin name (`netName`).
    pub net_name: Option<String>,
    /// CTA policy (`CTAPolicy`).
    pub cta_policy: i32,
    /// How long init waits for every rank.
    pub init_timeout: Duration,
}

impl Default for CommConfig {
    fn default() -> CommConfig {
        CommConfig {
            blocking: true,
            min_ctas: 1,
            max_ctas: 64,
            split_share: false,
            comm_name: None,
            net_name: None,
            cta_policy: 0,
            init_timeout: Duration::from_secs(300),
        }
    }
}

impl CommConfig {
    /// Defaults with NCCL's environment overrides applied.
    pub fn from_env() -> CommConfig {
        let mut c = CommConfig::default();
        c.apply_env();
        c
    }

    /// Applies `NCCL_COMM_BLOCKING`, `NCCL_MIN_CTAS`, `NCCL_MAX_CTAS`, `NCCL_CTA_POLICY`,
    /// `OXCCL_INIT_TIMEOUT` (seconds) on top of the current values.
    pub fn apply_env(&mut self) {
        if let Some(b) = get_set(&vars::NCCL_COMM_BLOCKING) {
            self.blocking = b != 0;
        }
        let min = get_set(&vars::NCCL_MIN_CTAS).or_else(|| get_set(&vars::NCCL_MIN_NCHANNELS));
        if let Some(v) = min {
            self.min_ctas = v.clamp(1, 64) as u32;
        }
        let max = get_set(&vars::NCCL_MAX_CTAS).or_else(|| get_set(&vars::NCCL_MAX_NCHANNELS));
        if let Some(v) = max {
            self.max_ctas = v.clamp(1, 64) as u32;
        }
        if let Some(v) = get_set(&vars::NCCL_CTA_POLICY) {
            self.cta_policy = v as i32;
        }
        if let Some(v) = get_set(&vars::OXCCL_INIT_TIMEOUT) {
            self.init_timeout = v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The names in backquotes at the start of the doc table's cells (`NAME`, `NAME=value`).
    fn documented() -> BTreeSet<String> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/environment.md");
        let text = std::fs::read_to_string(path).expect("docs/environment.md");
        let mut names = BTreeSet::new();
        for line in text.lines().filter(|l| l.starts_with('|')) {
            let first = line.split('|').nth(1).unwrap_or("");
            for code in first.split('`').skip(1).step_by(2) {
                let name: String = code
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                if name.len() > 1 && name == code.split('=').next().unwrap_or("") {
                    names.insert(name);
                }
            }
        }
        names
    }

    #[test]
    fn registry_and_docs_agree() {
        let registered: BTreeSet<String> = vars::ALL.iter().map(|v| v.name().to_string()).collect();
        assert_eq!(
            registered.len(),
            vars::ALL.len(),
            "a variable is declared twice"
        );
        let documented = documented();
        let undocumented: Vec<_> = registered.difference(&documented).collect();
        assert!(
            undocumented.is_empty(),
            "not in docs/environment.md's table: {undocumented:?}"
        );
        let unknown: Vec<_> = documented
            .iter()
            .filter(|n| n.starts_with("NCCL_") || n.starts_with("OXCCL_"))
            .filter(|n| !registered.contains(*n))
            .collect();
        assert!(
            unknown.is_empty(),
            "documented but not registered: {unknown:?}"
        );
        for v in vars::ALL {
            assert!(
                !v.doc().is_empty() && !v.doc().contains('\n'),
                "{}",
                v.name()
            );
        }
    }

    #[test]
    fn bad_values_fall_back_to_the_default() {
        let map = |k: &'static str, v: &'static str| move |n: &str| (n == k).then(|| v.to_string());
        let f = map("NCCL_P2P_DISABLE", "maybe");
        assert!(!Env::from_fn(&f).get(&vars::NCCL_P2P_DISABLE));
        let f = map("NCCL_P2P_DISABLE", " 1 ");
        assert!(Env::from_fn(&f).get(&vars::NCCL_P2P_DISABLE));
        let f = map("OXCCL_BLOCK_THREADS", "100");
        assert_eq!(Env::from_fn(&f).get(&vars::OXCCL_BLOCK_THREADS), None);
        let f = map("OXCCL_BLOCK_THREADS", "256");
        assert_eq!(Env::from_fn(&f).get(&vars::OXCCL_BLOCK_THREADS), Some(256));
        let f = map("OXCCL_INIT_TIMEOUT", "");
        let e = Env::from_fn(&f);
        assert!(e.is_set(&vars::OXCCL_INIT_TIMEOUT));
        assert_eq!(e.get_set(&vars::OXCCL_INIT_TIMEOUT), None);
        let f = map("OXCCL_WATCHDOG_SECONDS", "2.5");
        assert_eq!(
            Env::from_fn(&f).get(&vars::OXCCL_WATCHDOG_SECONDS),
            Duration::from_millis(2500)
        );
        // Text is kept as written, an empty value included.
        let f = map("NCCL_NET", "");
        assert_eq!(Env::from_fn(&f).get(&vars::NCCL_NET).as_deref(), Some(""));
    }
}
