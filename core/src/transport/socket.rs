//! STUB: the socket mesh (replaced by the real implementation).

use crate::abort::AbortFlag;
use crate::bootstrap::Bootstrap;
use crate::error::{Error, Result};
use std::time::Duration;

/// Full mesh of TCP connections between the ranks of one communicator.
pub struct SocketMesh;

impl SocketMesh {
    /// Connects to every peer.
    pub fn connect(_b: &Bootstrap, _abort: &AbortFlag, _timeout: Duration) -> Result<SocketMesh> {
        Err(Error::Internal("socket mesh not implemented".into()))
    }
    /// Sends `data` to `peer` under `tag`; never waits for the peer to receive.
    pub fn send(&self, _peer: u32, _tag: u64, _data: &[u8]) -> Result<()> {
        Err(Error::Internal("socket mesh not implemented".into()))
    }
    /// Receives the next message from `peer` under `tag` into `out` (exact length).
    pub fn recv(&self, _peer: u32, _tag: u64, _out: &mut [u8], _abort: &AbortFlag) -> Result<()> {
        Err(Error::Internal("socket mesh not implemented".into()))
    }
}
