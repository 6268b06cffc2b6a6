//! What every rank learns about every other rank at rendezvous.

use super::process;
use super::wire::{Dec, Enc};
use std::net::SocketAddr;

/// One rank's entry in the rendezvous table: where to reach it and how to name it in errors.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PeerInfo {
    /// The rank.
    pub rank: u32,
    /// Its bootstrap listener.
    pub addr: SocketAddr,
    /// Its process id (in its own pid namespace).
    pub pid: u32,
    /// Its host name.
    pub hostname: String,
    /// Its host as NCCL names hosts (host name and boot id, or `NCCL_HOSTID`): equal values
    /// mean the same host.
    pub host_hash: u64,
    /// Hash of host name and boot id, whatever `NCCL_HOSTID` says: equal values mean the same
    /// machine, whose CPUs the two processes share.
    pub machine_hash: u64,
    /// Hash of its pid namespace: with an equal `machine_hash`, its pid is valid in our `/proc`.
    pub pidns_hash: u64,
    /// Its process start time in clock ticks (tells a reused pid from the original process).
    pub start_time: u64,
}

impl PeerInfo {
    /// This process as rank `rank`, listening on `addr`.
    pub(crate) fn local(rank: u32, addr: SocketAddr) -> PeerInfo {
        let me = process::current();
        PeerInfo {
            rank,
            addr,
            pid: me.pid,
            hostname: me.hostname.clone(),
            host_hash: me.host_hash,
            machine_hash: me.machine_hash,
            pidns_hash: me.pidns_hash,
            start_time: me.start_time,
        }
    }

    /// True when `other` runs on the same host (as `NCCL_HOSTID` may say).
    pub fn same_host(&self, other: &PeerInfo) -> bool {
        self.host_hash == other.host_hash
    }

    /// True when this rank's process is visible in the calling process's `/proc`.
    pub fn shares_proc_with_caller(&self) -> bool {
        let me = process::current();
        self.machine_hash == me.machine_hash && self.pidns_hash == me.pidns_hash
    }

    /// "rank 3 (pid 1234 on host node7)", for error messages.
    pub fn describe(&self) -> String {
        format!(
            "rank {} (pid {} on host {})",
            self.rank, self.pid, self.hostname
        )
    }

    /// Appends the wire form (root table and registrations).
    pub(crate) fn encode(&self, e: &mut Enc) {
        e.u32(self.rank)
            .addr(self.addr)
            .u32(self.pid)
            .u64(self.start_time)
            .u64(self.host_hash)
            .u64(self.machine_hash)
            .u64(self.pidns_hash)
            .bytes(self.hostname.as_bytes());
    }

    /// Reads what [`PeerInfo::encode`] wrote.
    pub(crate) fn decode(d: &mut Dec<'_>) -> Result<PeerInfo, String> {
        let rank = d.u32()?;
        let addr = d.addr()?;
        let pid = d.u32()?;
        let start_time = d.u64()?;
        let host_hash = d.u64()?;
        let machine_hash = d.u64()?;
        let pidns_hash = d.u64()?;
        let hostname = d.string()?;
        if hostname.len() > 255 {
            return Err("host name longer than 255 bytes".into());
        }
        Ok(PeerInfo {
            rank,
            addr,
            pid,
            hostname,
            host_hash,
            machine_hash,
            pidns_hash,
            start_time,
        })
    }
}
