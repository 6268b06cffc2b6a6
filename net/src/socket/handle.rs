//! A listen handle's bytes: the listener's address, its token and how it cuts messages.

use super::MAX_SOCKS;
use crate::{HANDLE_BYTES, Handle};
use oxccl_core::error::{Error, Result};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// First bytes of a socket handle (tells a socket handle from another network's).
const HANDLE_MAGIC: [u8; 8] = *b"OXSOCKH1";

/// What a handle says: where to connect, the listen token, and how the listener cuts messages
/// (its data socket count, inline limit and smallest part), which the connecting side adopts:
/// both sides must cut every message alike, whatever each one's environment says.
pub(super) struct HandleInfo {
    pub(super) addr: SocketAddr,
    pub(super) token: u64,
    pub(super) nsocks: usize,
    pub(super) inline_max: usize,
    pub(super) min_task: usize,
    /// The listening side allows both directions on one control socket.
    pub(super) duplex: bool,
}

pub(super) fn encode_handle(h: &mut Handle, info: &HandleInfo) {
    *h = [0u8; HANDLE_BYTES];
    h[0..8].copy_from_slice(&HANDLE_MAGIC);
    match info.addr.ip() {
        IpAddr::V4(a) => {
            h[8] = 4;
            h[9..13].copy_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            h[8] = 6;
            h[9..25].copy_from_slice(&a.octets());
        }
    }
    h[25..27].copy_from_slice(&info.addr.port().to_le_bytes());
    h[27..35].copy_from_slice(&info.token.to_le_bytes());
    h[35..39].copy_from_slice(&(info.nsocks as u32).to_le_bytes());
    h[39..47].copy_from_slice(&(info.inline_max as u64).to_le_bytes());
    h[47..55].copy_from_slice(&(info.min_task as u64).to_le_bytes());
    h[55] = u8::from(info.duplex);
}

pub(super) fn decode_handle(h: &Handle) -> Result<HandleInfo> {
    if h[0..8] != HANDLE_MAGIC {
        return Err(Error::Internal(
            "a network handle that the socket network did not make".into(),
        ));
    }
    let ip = match h[8] {
        4 => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(&h[9..13]).expect("4"))),
        6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&h[9..25]).expect("16"))),
        f => return Err(Error::Internal(format!("network handle family {f}"))),
    };
    let port = u16::from_le_bytes([h[25], h[26]]);
    let nsocks = u32::from_le_bytes(h[35..39].try_into().expect("4")) as usize;
    if nsocks > MAX_SOCKS {
        return Err(Error::Internal(format!(
            "network handle with {nsocks} sockets"
        )));
    }
    let size = |at: usize| -> usize {
        usize::try_from(u64::from_le_bytes(h[at..at + 8].try_into().expect("8")))
            .unwrap_or(usize::MAX)
    };
    Ok(HandleInfo {
        addr: SocketAddr::new(ip, port),
        token: u64::from_le_bytes(h[27..35].try_into().expect("8")),
        nsocks,
        inline_max: size(39),
        min_task: size(47).max(1),
        duplex: h[55] == 1,
    })
}

/// Points a listen handle at `to` instead (a relay standing between the ranks in tests);
/// returns the address it named.
#[cfg(test)]
pub(crate) fn redirect_handle(h: &mut Handle, to: SocketAddr) -> Result<SocketAddr> {
    let mut info = decode_handle(h)?;
    let was = std::mem::replace(&mut info.addr, to);
    encode_handle(h, &info);
    Ok(was)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn net_socket_handle_round_trips_and_rejects_foreign_bytes() {
        let mut h = [0u8; HANDLE_BYTES];
        let info = HandleInfo {
            addr: "[::1]:4242".parse().unwrap(),
            token: 99,
            nsocks: 3,
            inline_max: 1000,
            min_task: 77,
            duplex: true,
        };
        encode_handle(&mut h, &info);
        let back = decode_handle(&h).unwrap();
        assert_eq!(
            (
                back.addr,
                back.token,
                back.nsocks,
                back.inline_max,
                back.min_task,
                back.duplex
            ),
            (info.addr, 99, 3, 1000, 77, true)
        );
        assert!(decode_handle(&[7u8; HANDLE_BYTES]).is_err());
        h[35] = 200;
        assert!(decode_handle(&h).is_err());
    }
}
