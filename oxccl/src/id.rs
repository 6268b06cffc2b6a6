//! The unique id every rank of a communicator is created from.

use crate::error::{Error, Result};
use oxccl_core::bootstrap::{BootstrapOptions, UNIQUE_ID_BYTES};
use std::fmt;
use std::str::FromStr;

/// The 128-byte rendezvous token of a communicator (`ncclUniqueId`): where the root listens and
/// the secret its ranks share.
///
/// One rank creates it with [`UniqueId::new`] and hands it to the others: as bytes, or as the
/// 256 hexadecimal digits of its [`Display`](fmt::Display) form, which [`FromStr`] parses back
/// (so it travels in an environment variable or a file). `Debug` never prints the secret.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UniqueId(pub(crate) oxccl_core::bootstrap::UniqueId);

impl UniqueId {
    /// Number of bytes of an id.
    pub const BYTES: usize = UNIQUE_ID_BYTES;

    /// A new id, with its rendezvous root listening in this process (`ncclGetUniqueId`).
    /// `NCCL_COMM_ID` and `NCCL_SOCKET_IFNAME` apply as in NCCL.
    pub fn new() -> Result<UniqueId> {
        Ok(UniqueId(oxccl_core::bootstrap::UniqueId::generate(
            &BootstrapOptions::from_env(),
        )?))
    }

    /// The id every process derives from the same `host:port` without talking to the others;
    /// rank 0's init starts the root there (the `NCCL_COMM_ID` scheme).
    pub fn from_address(host_port: &str) -> Result<UniqueId> {
        Ok(UniqueId(oxccl_core::bootstrap::UniqueId::from_comm_id(
            host_port,
        )?))
    }

    /// An id received as bytes (checks length, magic and format version).
    pub fn from_bytes(bytes: &[u8]) -> Result<UniqueId> {
        Ok(UniqueId(oxccl_core::bootstrap::UniqueId::from_bytes(
            bytes,
        )?))
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; UNIQUE_ID_BYTES] {
        self.0.as_bytes()
    }
}

impl fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_bytes()
            .iter()
            .try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl FromStr for UniqueId {
    type Err = Error;
    fn from_str(s: &str) -> Result<UniqueId> {
        let s = s.trim();
        if s.len() != 2 * UNIQUE_ID_BYTES || !s.is_ascii() {
            return Err(Error::arg(format!(
                "a unique id is {} hexadecimal digits, got {} characters",
                2 * UNIQUE_ID_BYTES,
                s.len()
            )));
        }
        let bytes = (0..UNIQUE_ID_BYTES)
            .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16))
            .collect::<std::result::Result<Vec<u8>, _>>()
            .map_err(|e| Error::arg(format!("a unique id is hexadecimal: {e}")))?;
        UniqueId::from_bytes(&bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_bad_text() {
        let id = UniqueId::from_address("127.0.0.1:29511").unwrap();
        let text = id.to_string();
        assert_eq!(text.len(), 256);
        assert_eq!(text.parse::<UniqueId>().unwrap(), id);
        assert_eq!(UniqueId::from_bytes(id.as_bytes()).unwrap(), id);
        assert_eq!("12".parse::<UniqueId>().unwrap_err().code(), 4);
        let bad = "zz".repeat(128);
        assert!(
            bad.parse::<UniqueId>()
                .unwrap_err()
                .to_string()
                .contains("hexadecimal")
        );
        assert!("00".repeat(128).parse::<UniqueId>().is_err());
    }
}
