//! Rank-to-rank bootstrap connections: opened lazily on first use, authenticated both ways, each
//! drained by a reader thread into the rank's [`Mailbox`].
//!
//! Either side may open the connection of a pair, and both may do so at once; each side sends on
//! the first connection it registered for a peer and never switches, which keeps every
//! (peer, tag) stream in order while all connections are read.

use super::info::PeerInfo;
use super::listener::AuthListener;
use super::mailbox::{Mailbox, Service, WaitSpec};
use super::wire::{
    self, ConnKind, FRAME_HEADER_BYTES, GOODBYE_TAG, HELLO_BYTES, Hello, IoFail, MAX_BOOTSTRAP_MSG,
    SessionKey, Watch,
};
use crate::abort::Deadline;
use crate::error::{Error, Result};
use crate::lock::lock;
use std::io::Read;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One authenticated connection's sending half.
pub(crate) struct Conn {
    stream: TcpStream,
    write: Mutex<()>,
}

#[derive(Default)]
struct Registry {
    /// The connection this rank sends on, per peer.
    send: Vec<Option<Arc<Conn>>>,
    /// Connections per peer whose reader is still running.
    open: Vec<u32>,
    all: Vec<Arc<Conn>>,
}

/// The bootstrap connections of one rank.
pub(crate) struct PeerNet {
    me: u32,
    nranks: u32,
    key: SessionKey,
    handshake_timeout: Duration,
    pub mailbox: Mailbox,
    reg: Mutex<Registry>,
    /// Serialises connection attempts per peer, so two senders do not both dial.
    dialing: Vec<Mutex<()>>,
    closed: AtomicBool,
}

impl PeerNet {
    /// Connections of rank `me` of `nranks`, authenticated with `key`.
    pub fn new(me: u32, nranks: u32, key: SessionKey, handshake_timeout: Duration) -> PeerNet {
        let n = nranks as usize;
        PeerNet {
            me,
            nranks,
            key,
            handshake_timeout: handshake_timeout.max(Duration::from_millis(10)),
            mailbox: Mailbox::new(me, Service::Bootstrap),
            reg: Mutex::new(Registry {
                send: (0..n).map(|_| None).collect(),
                open: vec![0; n],
                all: Vec::new(),
            }),
            dialing: (0..n).map(|_| Mutex::new(())).collect(),
            closed: AtomicBool::new(false),
        }
    }

    fn hello(&self) -> [u8; HELLO_BYTES] {
        Hello {
            kind: ConnKind::Bootstrap,
            rank: self.me,
            key: self.key,
        }
        .encode()
    }

    /// Serves this rank's listener: every accepted connection goes through here.
    pub fn listen(self: &Arc<Self>, listener: std::net::TcpListener) -> Result<AuthListener> {
        let net = self.clone();
        AuthListener::spawn(listener, "bootstrap", move |stream, peer| {
            if let Err(why) = net.accept(stream) {
                tracing::warn!(target: "oxccl::bootstrap", "rank {}: dropped bootstrap connection from {peer}: {why}", net.me);
            }
        })
    }

    fn accept(self: &Arc<Self>, stream: TcpStream) -> Result<(), String> {
        let watch = Watch::new(Deadline::after(self.handshake_timeout), None);
        let mut h = [0u8; HELLO_BYTES];
        wire::read_exact_watched(&stream, &mut h, &watch).map_err(|e| format!("hello: {e}"))?;
        let hello = Hello::decode(&h, ConnKind::Bootstrap, &self.key)?;
        if hello.rank >= self.nranks || hello.rank == self.me {
            return Err(format!(
                "hello claims rank {} of {}",
                hello.rank, self.nranks
            ));
        }
        wire::tune_stream(&stream, "bootstrap connection").map_err(|e| e.to_string())?;
        // Register before acking, so the peer can never send on a connection nobody reads.
        self.register(hello.rank, &stream, Some(&watch))
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    /// Starts reading `stream` and makes it the send connection to `peer` unless one exists;
    /// returns the send connection. With `ack`, sends this rank's hello first, before any
    /// message of another thread can use the connection.
    fn register(
        self: &Arc<Self>,
        peer: u32,
        stream: &TcpStream,
        ack: Option<&Watch<'_>>,
    ) -> Result<Arc<Conn>> {
        let reader = stream
            .try_clone()
            .map_err(|e| Error::io("cloning a bootstrap socket", e))?;
        let conn = Arc::new(Conn {
            stream: stream
                .try_clone()
                .map_err(|e| Error::io("cloning a bootstrap socket", e))?,
            write: Mutex::new(()),
        });
        let held = conn.clone();
        let write_guard = lock(&held.write);
        let sender = {
            let mut reg = lock(&self.reg);
            if self.closed.load(Ordering::Acquire) {
                let _ = stream.shutdown(Shutdown::Both);
                return Err(Error::usage("the bootstrap network was closed"));
            }
            reg.all.push(conn.clone());
            reg.open[peer as usize] += 1;
            // Sends to a peer must all use one connection, or they could overtake each other.
            reg.send[peer as usize].get_or_insert(conn).clone()
        };
        if let Some(watch) = ack
            && let Err(e) = wire::write_all_watched(stream, &[&self.hello()], watch)
        {
            self.unregister(peer, &held);
            return Err(Error::Remote(format!("ack: {e}")));
        }
        drop(write_guard);
        let net = self.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("oxccl-bs-{}-{peer}", self.me))
            .spawn(move || net.read_loop(peer, reader));
        if let Err(e) = spawned {
            self.unregister(peer, &held);
            return Err(Error::io("spawning a bootstrap reader thread", e));
        }
        Ok(sender)
    }

    /// Undoes [`PeerNet::register`] for a connection whose reader never ran.
    fn unregister(&self, peer: u32, conn: &Arc<Conn>) {
        let _ = conn.stream.shutdown(Shutdown::Both);
        let mut reg = lock(&self.reg);
        reg.all.retain(|c| !Arc::ptr_eq(c, conn));
        reg.open[peer as usize] = reg.open[peer as usize].saturating_sub(1);
        if reg.send[peer as usize]
            .as_ref()
            .is_some_and(|c| Arc::ptr_eq(c, conn))
        {
            reg.send[peer as usize] = None;
        }
    }

    fn read_loop(self: Arc<Self>, peer: u32, mut stream: TcpStream) {
        let mut goodbye = false;
        let why = loop {
            let mut h = [0u8; FRAME_HEADER_BYTES];
            if let Err(e) = stream.read_exact(&mut h) {
                break format!(
                    "connection closed without a goodbye (process exited or crashed): {e}"
                );
            }
            let (tag, len) = wire::parse_header(&h);
            if tag == GOODBYE_TAG {
                goodbye = true;
                continue;
            }
            if len > MAX_BOOTSTRAP_MSG as u64 {
                break format!("it sent a malformed frame of {len} bytes");
            }
            let mut payload = vec![0u8; len as usize];
            if let Err(e) = stream.read_exact(&mut payload) {
                break format!("connection lost in the middle of a message: {e}");
            }
            self.mailbox.push(peer, tag, payload);
        };
        let _ = stream.shutdown(Shutdown::Both);
        self.connection_ended(peer, goodbye, &why);
    }

    fn connection_ended(&self, peer: u32, goodbye: bool, why: &str) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        let remaining = {
            let mut reg = lock(&self.reg);
            let open = &mut reg.open[peer as usize];
            *open = open.saturating_sub(1);
            *open
        };
        if !goodbye {
            self.mailbox.mark_dead(peer, why);
        } else if remaining == 0 {
            self.mailbox.mark_closed(peer);
        }
    }

    fn peer_info(&self, peer: u32) -> Result<PeerInfo> {
        self.mailbox
            .peers()
            .and_then(|p| p.get(peer as usize))
            .cloned()
            .ok_or_else(|| Error::Internal(format!("bootstrap: no address known for rank {peer}")))
    }

    /// The connection to send to `peer` on, dialing it if this rank has none yet.
    fn conn_to(self: &Arc<Self>, peer: u32, watch: &Watch<'_>) -> Result<Arc<Conn>> {
        if let Some(c) = &lock(&self.reg).send[peer as usize] {
            return Ok(c.clone());
        }
        let _dial = lock(&self.dialing[peer as usize]);
        if let Some(c) = &lock(&self.reg).send[peer as usize] {
            return Ok(c.clone());
        }
        let info = self.peer_info(peer)?;
        let stream = self.dial(&info, watch)?;
        self.register(peer, &stream, None)
    }

    fn dial(&self, info: &PeerInfo, watch: &Watch<'_>) -> Result<TcpStream> {
        let who = info.describe();
        let addr: SocketAddr = info.addr;
        let fail = |what: &str, e: IoFail| match e {
            IoFail::Aborted => Error::Aborted,
            IoFail::TimedOut => Error::Timeout(format!(
                "rank {}: timed out {what} {who} at {addr} for bootstrap messages",
                self.me
            )),
            e => Error::Remote(format!(
                "rank {}: {what} {who} at {addr} for bootstrap messages failed: {e} (did it exit?)",
                self.me
            )),
        };
        let stream =
            wire::connect_watched(addr, None, watch).map_err(|e| fail("connecting to", e))?;
        wire::tune_stream(&stream, "bootstrap connection")?;
        let hs = Watch {
            deadline: Deadline::after(self.handshake_timeout),
            ..*watch
        };
        wire::write_all_watched(&stream, &[&self.hello()], &hs).map_err(|e| fail("greeting", e))?;
        let mut h = [0u8; HELLO_BYTES];
        wire::read_exact_watched(&stream, &mut h, &hs)
            .map_err(|e| fail("waiting for the answer of", e))?;
        let ack = Hello::decode(&h, ConnKind::Bootstrap, &self.key).map_err(|why| {
            Error::Remote(format!(
                "{who} at {addr} refused as a bootstrap peer: {why}"
            ))
        })?;
        if ack.rank != info.rank {
            return Err(Error::Remote(format!(
                "the listener at {addr} answered as rank {}, expected {who}",
                ack.rank
            )));
        }
        stream
            .set_read_timeout(None)
            .map_err(|e| Error::io("bootstrap connection", e))?;
        Ok(stream)
    }

    /// Sends one message to `peer` (to the own mailbox for `peer == me`).
    pub fn send(
        self: &Arc<Self>,
        peer: u32,
        tag: u64,
        data: &[u8],
        watch: &Watch<'_>,
    ) -> Result<()> {
        if peer == self.me {
            self.mailbox.push(peer, tag, data.to_vec());
            return Ok(());
        }
        if let Some(e) = self.mailbox.dead_error() {
            return Err(e);
        }
        let conn = self.conn_to(peer, watch)?;
        let _g = lock(&conn.write);
        let hdr = wire::frame_header(tag, data.len());
        wire::write_all_watched(&conn.stream, &[&hdr, data], watch).map_err(|e| match e {
            IoFail::Aborted => Error::Aborted,
            e => self.mailbox.dead_error().unwrap_or_else(|| {
                Error::Remote(format!(
                    "rank {}: sending a bootstrap message to {} failed: {e}",
                    self.me,
                    self.mailbox.describe(peer)
                ))
            }),
        })
    }

    /// Receives the next message from `peer` under `tag`.
    pub fn recv(self: &Arc<Self>, peer: u32, tag: u64, spec: &WaitSpec<'_>) -> Result<Vec<u8>> {
        if peer != self.me && !self.mailbox.has(peer, tag) {
            // Holding a connection to the peer is what lets this wait notice that it died.
            if let Err(e) = self.conn_to(peer, &spec.watch) {
                // A peer that sent everything and closed refuses new connections, but what it
                // sent is still being read from the connections it used.
                let open = lock(&self.reg).open[peer as usize];
                if matches!(e, Error::Aborted) || (open == 0 && !self.mailbox.has(peer, tag)) {
                    return Err(e);
                }
                tracing::debug!(target: "oxccl::bootstrap", "rank {}: {e}; reading the open connection instead", self.me);
            }
        }
        self.mailbox.take(peer, tag, spec)
    }

    /// Says goodbye on every connection and shuts them down; reader threads then exit.
    pub fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        self.mailbox.close_local();
        let all = std::mem::take(&mut lock(&self.reg).all);
        for c in all {
            wire::close_with_goodbye(&c.stream, &c.write, &[]);
        }
    }
}
