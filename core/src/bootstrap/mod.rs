//! Bootstrap: the unique id, TCP rendezvous of the ranks, and small authenticated messages.
//!
//! STUB: signatures only; replaced by the real implementation.

use crate::abort::AbortFlag;
use crate::error::{Error, Result};
use std::net::IpAddr;
use std::time::Duration;

/// Bytes in an `ncclUniqueId`.
pub const UNIQUE_ID_BYTES: usize = 128;

/// The 128-byte rendezvous token: root address and port, random secret, magic and version.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UniqueId(pub [u8; UNIQUE_ID_BYTES]);

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UniqueId(..)")
    }
}

impl UniqueId {
    /// Creates an id and starts the root listener for it in this process.
    pub fn generate(_opts: &BootstrapOptions) -> Result<UniqueId> {
        Err(Error::Internal("bootstrap not implemented".into()))
    }
}

/// Timeouts and addresses of the bootstrap network.
#[derive(Debug, Clone)]
pub struct BootstrapOptions {
    /// How long init waits for every rank to arrive.
    pub init_timeout: Duration,
}

impl BootstrapOptions {
    /// Defaults, overridden by the environment.
    pub fn from_env() -> BootstrapOptions {
        BootstrapOptions {
            init_timeout: Duration::from_secs(300),
        }
    }
}

/// One rank's connection to the bootstrap network of a communicator.
pub struct Bootstrap {
    rank: u32,
    nranks: u32,
}

impl Bootstrap {
    /// Rendezvous with the other ranks through the root named in `id`.
    pub fn init(
        _id: &UniqueId,
        rank: u32,
        nranks: u32,
        _opts: &BootstrapOptions,
        _abort: &AbortFlag,
    ) -> Result<Bootstrap> {
        let _ = Bootstrap { rank, nranks };
        Err(Error::Internal("bootstrap not implemented".into()))
    }
    /// This rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }
    /// Number of ranks.
    pub fn nranks(&self) -> u32 {
        self.nranks
    }
    /// Every rank's `mine`, indexed by rank.
    pub fn all_gather(&self, _mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        Err(Error::Internal("bootstrap not implemented".into()))
    }
    /// Returns once every rank has entered the barrier.
    pub fn barrier(&self) -> Result<()> {
        Err(Error::Internal("bootstrap not implemented".into()))
    }
    /// Sends a message to `peer` under `tag`.
    pub fn send(&self, _peer: u32, _tag: u64, _data: &[u8]) -> Result<()> {
        Err(Error::Internal("bootstrap not implemented".into()))
    }
    /// Receives the next message from `peer` under `tag`.
    pub fn recv(&self, _peer: u32, _tag: u64) -> Result<Vec<u8>> {
        Err(Error::Internal("bootstrap not implemented".into()))
    }
    /// The local address other ranks reach this rank on (for data listeners).
    pub fn local_ip(&self) -> IpAddr {
        IpAddr::from([127, 0, 0, 1])
    }
}
