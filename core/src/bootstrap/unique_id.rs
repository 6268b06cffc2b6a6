//! The 128-byte unique id (`ncclUniqueId`): where the root is and the secret its ranks share.
//!
//! Layout (little endian unless noted): magic `OXCCLUID` (8), format version (2), flags (1),
//! address family 4/6 (1), root port big endian (2), reserved (2), root address (16, IPv4 in the
//! first 4), secret (8), nonce (8), zero padding to 128.

use super::iface;
use super::process::fnv1a;
use super::root::{self, RootConfig};
use super::wire::SessionKey;
use super::{BootstrapOptions, UNIQUE_ID_BYTES};
use crate::error::{Error, Result};
use std::net::{IpAddr, SocketAddr, TcpListener, ToSocketAddrs};

const ID_MAGIC: [u8; 8] = *b"OXCCLUID";
const ID_VERSION: u16 = 1;
/// The root is not running yet: rank 0's init starts it (the `NCCL_COMM_ID` scheme).
const FLAG_ROOT_AT_INIT: u8 = 1;

/// The 128-byte rendezvous token: root address and port, random secret, magic and version.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UniqueId(pub [u8; UNIQUE_ID_BYTES]);

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        match self.fields() {
            Ok(fl) => write!(f, "UniqueId(root={})", fl.root),
            Err(_) => f.write_str("UniqueId(invalid)"),
        }
    }
}

/// The decoded content of a [`UniqueId`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct IdFields {
    pub root: SocketAddr,
    pub key: SessionKey,
    pub root_at_init: bool,
}

impl UniqueId {
    /// Creates an id and starts the root listener for it in this process.
    ///
    /// With `opts.comm_id` (`NCCL_COMM_ID`) set, the id only encodes that address and no root is
    /// started here: rank 0's [`super::Bootstrap::init`] starts it, as in NCCL.
    pub fn generate(opts: &BootstrapOptions) -> Result<UniqueId> {
        if let Some(spec) = &opts.comm_id {
            return UniqueId::from_comm_id(spec);
        }
        let ip = iface::root_ip(opts.socket_ifname.as_deref())?;
        let listener = TcpListener::bind((ip, 0))
            .map_err(|e| Error::io(format!("binding the bootstrap root on {ip}"), e))?;
        let root = listener
            .local_addr()
            .map_err(|e| Error::io("bootstrap root address", e))?;
        let key = SessionKey {
            // Zero is what an all-zero (uninitialised) id would carry.
            secret: rand::random::<u64>() | 1,
            nonce: rand::random::<u64>(),
        };
        root::spawn_root(
            listener,
            RootConfig {
                key,
                advertised: root,
                handshake_timeout: opts.handshake_timeout,
                linger: opts.root_linger,
                idle_limit: None,
            },
        )?;
        Ok(UniqueId::encode(&IdFields {
            root,
            key,
            root_at_init: false,
        }))
    }

    /// The id every process derives from the same `NCCL_COMM_ID` ("host:port").
    ///
    /// All processes must derive the same bytes without talking to each other, so the secret is
    /// a hash of the address: like NCCL's fixed magic in this mode, it guards against accidents,
    /// not against an attacker who knows the address.
    pub fn from_comm_id(spec: &str) -> Result<UniqueId> {
        let addrs: Vec<SocketAddr> = spec
            .to_socket_addrs()
            .map_err(|e| {
                Error::arg(format!(
                    "NCCL_COMM_ID=\"{spec}\" is not a valid host:port: {e}"
                ))
            })?
            .collect();
        let root = addrs
            .iter()
            .find(|a| a.is_ipv4())
            .or(addrs.first())
            .copied()
            .ok_or_else(|| Error::arg(format!("NCCL_COMM_ID=\"{spec}\" resolves to no address")))?;
        let text = root.to_string();
        Ok(UniqueId::encode(&IdFields {
            root,
            key: SessionKey {
                secret: fnv1a(&[b"oxccl NCCL_COMM_ID secret ", text.as_bytes()]) | 1,
                nonce: fnv1a(&[b"oxccl NCCL_COMM_ID nonce ", text.as_bytes()]),
            },
            root_at_init: true,
        }))
    }

    /// Parses an id received from another process (checks length, magic and version).
    pub fn from_bytes(bytes: &[u8]) -> Result<UniqueId> {
        let arr: [u8; UNIQUE_ID_BYTES] = bytes.try_into().map_err(|_| {
            Error::arg(format!(
                "a unique id has {UNIQUE_ID_BYTES} bytes, got {}",
                bytes.len()
            ))
        })?;
        let id = UniqueId(arr);
        id.fields()?;
        Ok(id)
    }

    /// The raw bytes (what `ncclGetUniqueId` hands out).
    pub fn as_bytes(&self) -> &[u8; UNIQUE_ID_BYTES] {
        &self.0
    }

    /// The root's address.
    pub fn root_addr(&self) -> Result<SocketAddr> {
        Ok(self.fields()?.root)
    }

    /// The id holding `f`.
    pub(crate) fn encode(f: &IdFields) -> UniqueId {
        let mut b = [0u8; UNIQUE_ID_BYTES];
        b[0..8].copy_from_slice(&ID_MAGIC);
        b[8..10].copy_from_slice(&ID_VERSION.to_le_bytes());
        b[10] = if f.root_at_init { FLAG_ROOT_AT_INIT } else { 0 };
        match f.root.ip() {
            IpAddr::V4(v4) => {
                b[11] = 4;
                b[16..20].copy_from_slice(&v4.octets());
            }
            IpAddr::V6(v6) => {
                b[11] = 6;
                b[16..32].copy_from_slice(&v6.octets());
            }
        }
        b[12..14].copy_from_slice(&f.root.port().to_be_bytes());
        b[32..40].copy_from_slice(&f.key.secret.to_le_bytes());
        b[40..48].copy_from_slice(&f.key.nonce.to_le_bytes());
        UniqueId(b)
    }

    /// Decodes the id, refusing foreign or corrupted bytes.
    pub(crate) fn fields(&self) -> Result<IdFields> {
        let b = &self.0;
        if b[0..8] != ID_MAGIC {
            return Err(Error::arg(
                "not an oxccl unique id (bad magic): pass the bytes from ncclGetUniqueId unchanged \
                 to every rank, and do not mix NCCL and oxccl processes",
            ));
        }
        let version = u16::from_le_bytes([b[8], b[9]]);
        if version != ID_VERSION {
            return Err(Error::arg(format!(
                "unique id format version {version}, this oxccl understands {ID_VERSION} (mixed \
                 oxccl versions?)"
            )));
        }
        let ip: IpAddr = match b[11] {
            4 => IpAddr::from([b[16], b[17], b[18], b[19]]),
            6 => IpAddr::from(<[u8; 16]>::try_from(&b[16..32]).expect("16 bytes")),
            f => {
                return Err(Error::arg(format!(
                    "unique id has a bad address family {f}"
                )));
            }
        };
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Ok(IdFields {
            root: SocketAddr::new(ip, u16::from_be_bytes([b[12], b[13]])),
            key: SessionKey {
                secret: u64_at(32),
                nonce: u64_at(40),
            },
            root_at_init: b[10] & FLAG_ROOT_AT_INIT != 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_unique_id_roundtrip() {
        for root in ["10.1.2.3:4242", "[fd00::7]:31337"] {
            let f = IdFields {
                root: root.parse().unwrap(),
                key: SessionKey {
                    secret: 0xdead_beef,
                    nonce: 42,
                },
                root_at_init: false,
            };
            let id = UniqueId::encode(&f);
            let back = UniqueId::from_bytes(id.as_bytes()).unwrap();
            assert_eq!(back, id);
            assert_eq!(back.root_addr().unwrap(), f.root);
            let g = back.fields().unwrap();
            assert_eq!(g.key, f.key);
            assert!(!g.root_at_init);
            assert!(!format!("{id:?}").contains("dead"));
        }
        assert!(
            UniqueId::from_bytes(&[0u8; 128])
                .unwrap_err()
                .to_string()
                .contains("magic")
        );
        assert!(UniqueId::from_bytes(&[0u8; 12]).is_err());
        let a = UniqueId::from_comm_id("127.0.0.1:29500").unwrap();
        let b = UniqueId::from_comm_id("127.0.0.1:29500").unwrap();
        assert_eq!(a, b);
        assert!(a.fields().unwrap().root_at_init);
        assert!(UniqueId::from_comm_id("no-port").is_err());
    }
}
