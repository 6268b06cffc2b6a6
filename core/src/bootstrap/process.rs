//! Who this process is (pid, host) and whether a peer process on this host is still alive.
//!
//! A dead peer normally shows up as EOF on its sockets, but not when a forked child still holds
//! them open; `/proc/<pid>/stat` catches that case for peers that share our pid namespace.

use crate::config::{get, vars};
use std::sync::OnceLock;

/// Identity of the calling process, computed once.
#[derive(Clone, Debug)]
pub(crate) struct ProcessIdentity {
    pub pid: u32,
    /// Start time in clock ticks since boot (field 22 of `/proc/<pid>/stat`); 0 when unknown.
    pub start_time: u64,
    pub hostname: String,
    /// NCCL's host identity: of host name and boot id, or of `NCCL_HOSTID` when that is set.
    pub host_hash: u64,
    /// Of host name and boot id whatever `NCCL_HOSTID` says: equal means the same machine
    /// (same kernel boot), sharing its CPUs and its `/proc`.
    pub machine_hash: u64,
    /// Hash of the pid namespace: equal (with `machine_hash`) means our `/proc` shows the peer.
    pub pidns_hash: u64,
}

/// The calling process's identity.
pub(crate) fn current() -> &'static ProcessIdentity {
    static ID: OnceLock<ProcessIdentity> = OnceLock::new();
    ID.get_or_init(|| {
        let pid = std::process::id();
        let hostname = hostname();
        let boot_id = read_trimmed("/proc/sys/kernel/random/boot_id").unwrap_or_default();
        let pidns = std::fs::read_link("/proc/self/ns/pid")
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let start_time = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| parse_stat(&s))
            .map_or(0, |(_, t)| t);
        ProcessIdentity {
            pid,
            start_time,
            host_hash: host_hash(&hostname, &boot_id, get(&vars::NCCL_HOSTID)),
            machine_hash: host_hash(&hostname, &boot_id, None),
            pidns_hash: fnv1a(&[pidns.as_bytes()]),
            hostname,
        }
    })
}

/// The host hash: of host name and boot id, as NCCL computes it, or of `NCCL_HOSTID` alone when
/// that is set (NCCL's override replaces the whole string, so processes of one machine with
/// different values are different hosts, joined only by the network).
fn host_hash(hostname: &str, boot_id: &str, host_id: Option<String>) -> u64 {
    match host_id.filter(|h| !h.is_empty()) {
        Some(id) => fnv1a(&[b"NCCL_HOSTID\0", id.as_bytes()]),
        None => fnv1a(&[hostname.as_bytes(), b"\0", boot_id.as_bytes()]),
    }
}

/// FNV-1a: a hash that is identical in every build and process (unlike `DefaultHasher`).
pub fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

fn read_trimmed(path: &str) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// The host name, for error messages (std has no `gethostname`).
pub(crate) fn hostname() -> String {
    read_trimmed("/proc/sys/kernel/hostname")
        .or_else(|| read_trimmed("/etc/hostname"))
        .or_else(|| get(&vars::HOSTNAME).filter(|h| !h.is_empty()))
        .unwrap_or_else(|| "unknown-host".to_string())
        .chars()
        .take(255)
        .collect()
}

/// State letter and start time from the text of `/proc/<pid>/stat`.
fn parse_stat(text: &str) -> Option<(char, u64)> {
    // The command name may contain spaces and parentheses; it ends at the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // Field 3 is the state and field 22 the start time, so 18 fields lie between them.
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// `Err(why)` once the process `pid` that started at `start_time` is gone.
///
/// Anything this cannot decide (no `/proc`, permission errors) counts as alive: a false "dead"
/// would break a healthy communicator, a false "alive" only delays detection to EOF or timeout.
pub(crate) fn check_alive(pid: u32, start_time: u64) -> Result<(), String> {
    if pid == current().pid {
        return Ok(());
    }
    let text = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return if std::path::Path::new("/proc/self/stat").exists() {
                Err("its process no longer exists".into())
            } else {
                Ok(())
            };
        }
        Err(_) => return Ok(()),
    };
    match parse_stat(&text) {
        Some(('Z' | 'X' | 'x', _)) => Err("its process exited (zombie)".into()),
        Some((_, t)) if start_time != 0 && t != start_time => {
            Err("its process exited (the pid now belongs to another process)".into())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_host_id_replaces_host_name_and_boot_id() {
        let plain = host_hash("node1", "b00t", None);
        assert_eq!(plain, host_hash("node1", "b00t", Some(String::new())));
        assert_ne!(plain, host_hash("node2", "b00t", None));
        assert_ne!(plain, host_hash("node1", "other-boot", None));
        let a = host_hash("node1", "b00t", Some("host0".into()));
        assert_eq!(a, host_hash("node2", "x", Some("host0".into())));
        assert_ne!(a, host_hash("node1", "b00t", Some("host1".into())));
        assert_ne!(a, plain);
    }

    #[test]
    fn bootstrap_process_stat_parsing() {
        let line = "1234 (a (weird) name) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 987654 20";
        assert_eq!(parse_stat(line), Some(('S', 987654)));
        assert_eq!(parse_stat("garbage"), None);
        let me = current();
        assert!(me.start_time > 0);
        assert!(check_alive(me.pid, me.start_time).is_ok());
        // pid 1 exists in every namespace; a wrong start time reads as "pid reused".
        assert!(check_alive(1, 0).is_ok());
        assert!(check_alive(1, u64::MAX).is_err());
        assert!(check_alive(u32::MAX - 7, 0).is_err());
    }
}
