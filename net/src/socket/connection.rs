//! Connection set-up: the listener that admits sockets presenting the hello, and the dial.

use super::handle::{HandleInfo, encode_handle};
use super::{MAX_SOCKS, SocketNet};
use crate::{Handle, Listen, Net};
use oxccl_core::abort::Deadline;
use oxccl_core::bootstrap::listener::AuthListener;
use oxccl_core::bootstrap::wire::{self, ConnKind, HELLO_BYTES, Hello, SessionKey, Watch};
use oxccl_core::error::{Error, Result};
use oxccl_core::lock::lock;
use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Bytes that follow the hello on every connection: listen token, socket index.
const PREAMBLE_BYTES: usize = 12;

/// Connections that arrived at a listener, by listen token: (socket index, socket).
pub(super) type Arrivals = Arc<Mutex<HashMap<u64, Vec<(u32, TcpStream)>>>>;

/// A listen: the token its connections present, and how many sockets make one.
pub(super) struct SocketListen {
    pub(super) token: u64,
    pub(super) nsocks: usize,
    pub(super) arrived: Arrivals,
}

impl SocketNet {
    /// A listen whose connections have `nsocks` data sockets.
    pub(super) fn listen_with(
        &self,
        dev: usize,
        handle: &mut Handle,
        nsocks: usize,
    ) -> Result<Listen> {
        self.properties(dev)?;
        let (addr, arrived) = self.acceptor(dev)?;
        let token = rand::random::<u64>();
        encode_handle(
            handle,
            &HandleInfo {
                addr,
                token,
                nsocks,
                inline_max: self.config.inline_max,
                min_task: self.config.min_task,
                duplex: self.config.duplex,
            },
        );
        Ok(Listen(Box::new(SocketListen {
            token,
            nsocks,
            arrived,
        })))
    }

    /// Device `dev`'s listener address (every listen on it shares the listener) and the
    /// arrival table; the listener starts on first use.
    fn acceptor(&self, dev: usize) -> Result<(SocketAddr, Arrivals)> {
        let mut slots = lock(&self.listeners);
        if let Some(l) = &slots[dev] {
            return Ok((l.local_addr(), self.arrived.clone()));
        }
        let ip = self.devices[dev].0;
        let listener = TcpListener::bind((ip, 0))
            .map_err(|e| Error::io(format!("binding a network listener on {ip}"), e))?;
        let (key, timeout, table) = (self.key, self.handshake_timeout, self.arrived.clone());
        let listener = AuthListener::spawn(listener, "net", move |stream, peer| {
            if let Err(why) = admit(&stream, key, timeout, &table) {
                tracing::warn!(target: "oxccl::net", "dropped network connection from {peer}: {why}");
            }
        })?;
        let addr = listener.local_addr();
        slots[dev] = Some(listener);
        Ok((addr, self.arrived.clone()))
    }
}

/// Checks a new connection's hello and preamble, then files it under its token.
fn admit(
    stream: &TcpStream,
    key: SessionKey,
    timeout: Duration,
    table: &Mutex<HashMap<u64, Vec<(u32, TcpStream)>>>,
) -> std::result::Result<(), String> {
    let watch = Watch::new(Deadline::after(timeout), None);
    let mut h = [0u8; HELLO_BYTES];
    wire::read_exact_watched(stream, &mut h, &watch).map_err(|e| format!("hello: {e}"))?;
    Hello::decode(&h, ConnKind::Net, &key)?;
    let mut p = [0u8; PREAMBLE_BYTES];
    wire::read_exact_watched(stream, &mut p, &watch).map_err(|e| format!("preamble: {e}"))?;
    let token = u64::from_le_bytes(p[0..8].try_into().expect("8 bytes"));
    let index = u32::from_le_bytes(p[8..12].try_into().expect("4 bytes"));
    if index as usize > MAX_SOCKS {
        return Err(format!("socket index {index} out of range"));
    }
    let s = stream
        .try_clone()
        .map_err(|e| format!("cloning the socket: {e}"))?;
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    s.set_read_timeout(None).map_err(|e| e.to_string())?;
    let mut t = lock(table);
    let entry = t.entry(token).or_default();
    if entry.len() > MAX_SOCKS {
        return Err("too many connections for one token".into());
    }
    entry.push((index, s));
    Ok(())
}

/// Opens one socket of a connection and presents the hello and preamble.
pub(super) fn dial(
    addr: SocketAddr,
    rank: u32,
    key: SessionKey,
    token: u64,
    index: u32,
    timeout: Duration,
) -> Result<TcpStream> {
    let watch = Watch::new(Deadline::after(timeout), None);
    let s = wire::connect_watched(addr, Some(Deadline::after(timeout)), &watch)
        .map_err(|e| Error::Remote(format!("connecting to network peer {addr}: {e}")))?;
    let hello = Hello {
        kind: ConnKind::Net,
        rank,
        key,
    }
    .encode();
    let mut pre = [0u8; PREAMBLE_BYTES];
    pre[0..8].copy_from_slice(&token.to_le_bytes());
    pre[8..12].copy_from_slice(&index.to_le_bytes());
    wire::write_all_watched(&s, &[&hello, &pre], &watch)
        .map_err(|e| Error::Remote(format!("greeting network peer {addr}: {e}")))?;
    s.set_nodelay(true)
        .and_then(|()| s.set_write_timeout(None))
        .map_err(|e| Error::io("setting up a network socket", e))?;
    Ok(s)
}
