//! Communicator configuration (`ncclConfig_t` fields as Rust values) and environment overrides.

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
        if let Some(b) = env_int("NCCL_COMM_BLOCKING") {
            self.blocking = b != 0;
        }
        if let Some(v) = env_int("NCCL_MIN_CTAS").or_else(|| env_int("NCCL_MIN_NCHANNELS")) {
            self.min_ctas = v.clamp(1, 64) as u32;
        }
        if let Some(v) = env_int("NCCL_MAX_CTAS").or_else(|| env_int("NCCL_MAX_NCHANNELS")) {
            self.max_ctas = v.clamp(1, 64) as u32;
        }
        if let Some(v) = env_int("NCCL_CTA_POLICY") {
            self.cta_policy = v as i32;
        }
        if let Some(v) = env_int("OXCCL_INIT_TIMEOUT") {
            self.init_timeout = Duration::from_secs(v.max(0) as u64);
        }
    }
}

/// An integer environment variable; unset or unparsable is `None`.
pub fn env_int(name: &str) -> Option<i64> {
    std::env::var(name).ok()?.trim().parse().ok()
}

/// A 0/1 variable: `Some(false)`, `Some(true)`, or `None` when empty or unreadable (warned).
pub(crate) fn parse_switch(name: &str, v: &str) -> Option<bool> {
    match v.trim() {
        "0" => Some(false),
        "1" => Some(true),
        "" => None,
        other => {
            tracing::warn!("{name}={other:?} is neither 0 nor 1; ignored");
            None
        }
    }
}
