//! The rendezvous root: collects one registration per rank, checks them against each other, and
//! answers every rank with the full table or with an error that says what went wrong.
//!
//! The root serves exactly one rendezvous. Afterwards it keeps answering late connections for a
//! while, so that reusing a consumed unique id is an explicit error instead of a hang
//! (NVIDIA/nccl#1038). Its deadline starts at the first arrival and ends a little before the
//! earliest arrived rank would give up, so every waiting rank hears which ranks are missing.

use super::info::PeerInfo;
use super::linger;
use super::listener::AuthListener;
use super::wire::{
    self, ConnKind, Dec, Enc, HELLO_BYTES, Hello, IoFail, MAX_BOOTSTRAP_MSG, SessionKey, Watch,
    rank_list, secs,
};
use crate::abort::{AbortFlag, Deadline};
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const TAG_REGISTER: u64 = 1;
const TAG_TABLE: u64 = 2;
const TAG_ERROR: u64 = 3;
/// Largest registration a root accepts (a few hundred bytes are needed).
const MAX_REGISTRATION: usize = 4096;
/// How long a rank keeps waiting past its own deadline for the root's (more precise) verdict.
const VERDICT_GRACE: Duration = Duration::from_millis(500);

/// How a root is run.
pub(crate) struct RootConfig {
    pub key: SessionKey,
    /// The address the unique id names (for messages).
    pub advertised: SocketAddr,
    pub handshake_timeout: Duration,
    /// How long to answer late connections after the rendezvous (zero: close at once).
    pub linger: Duration,
    /// Give up if nobody registers within this time (`None`: wait for the first rank forever).
    pub idle_limit: Option<Duration>,
}

/// One rank's registration.
struct Registration {
    nranks: u32,
    /// The rank's init timeout, and how much of it was left when it registered (0: none).
    timeout_ms: u64,
    remaining_ms: u64,
    info: PeerInfo,
}

impl Registration {
    fn encode(&self) -> Vec<u8> {
        let mut e = Enc::default();
        e.u32(self.nranks)
            .u64(self.timeout_ms)
            .u64(self.remaining_ms);
        self.info.encode(&mut e);
        e.0
    }

    fn decode(b: &[u8]) -> Result<Registration, String> {
        let mut d = Dec(b);
        let r = Registration {
            nranks: d.u32()?,
            timeout_ms: d.u64()?,
            remaining_ms: d.u64()?,
            info: PeerInfo::decode(&mut d)?,
        };
        d.finish()?;
        Ok(r)
    }
}

/// Decodes a registration, for the fuzz tests.
#[cfg(test)]
pub(super) fn decode_registration_for_tests(b: &[u8]) -> Result<(), String> {
    Registration::decode(b).map(|_| ())
}

struct Arrival {
    reg: Registration,
    stream: TcpStream,
    at: Instant,
}

/// Reads a hello and a registration under the handshake deadline.
fn read_registration(
    stream: &TcpStream,
    key: &SessionKey,
    hs: Duration,
) -> Result<Registration, String> {
    let watch = Watch::new(Deadline::after(hs), None);
    let mut h = [0u8; HELLO_BYTES];
    wire::read_exact_watched(stream, &mut h, &watch).map_err(|e| format!("hello: {e}"))?;
    Hello::decode(&h, ConnKind::Root, key)?;
    let (tag, payload) = wire::read_frame_watched(stream, MAX_REGISTRATION, &watch)
        .map_err(|e| format!("registration: {e}"))?;
    if tag != TAG_REGISTER {
        return Err(format!(
            "unexpected frame tag {tag:#x} instead of a registration"
        ));
    }
    Registration::decode(&payload)
}

/// Binds the root for an `NCCL_COMM_ID` address (falling back to the wildcard address of the same
/// port when the named address is not local, e.g. a NAT'ed host name) and starts it.
pub(crate) fn start_at(addr: SocketAddr, cfg: RootConfig) -> Result<()> {
    let listener = TcpListener::bind(addr).or_else(|e| {
        if e.kind() == std::io::ErrorKind::AddrNotAvailable {
            let any: std::net::IpAddr = if addr.is_ipv4() {
                std::net::Ipv4Addr::UNSPECIFIED.into()
            } else {
                std::net::Ipv6Addr::UNSPECIFIED.into()
            };
            TcpListener::bind((any, addr.port()))
        } else {
            Err(e)
        }
    });
    let listener = listener.map_err(|e| {
        Error::io(
            format!("cannot start the bootstrap root on {addr} (NCCL_COMM_ID)"),
            e,
        )
    })?;
    spawn_root(listener, cfg)
}

/// Starts a root on `listener` in background threads.
pub(crate) fn spawn_root(listener: TcpListener, cfg: RootConfig) -> Result<()> {
    let (tx, rx) = mpsc::channel::<Arrival>();
    let key = cfg.key;
    let hs = cfg.handshake_timeout.max(Duration::from_millis(10));
    let addr = cfg.advertised;
    let svc = AuthListener::spawn(
        listener,
        "root",
        move |stream, peer| match read_registration(&stream, &key, hs) {
            Ok(reg) => {
                let _ = tx.send(Arrival {
                    reg,
                    stream,
                    at: Instant::now(),
                });
            }
            Err(why) => {
                tracing::warn!(target: "oxccl::bootstrap", "bootstrap root {addr}: dropped connection from {peer}: {why}")
            }
        },
    )?;
    tracing::info!(target: "oxccl::bootstrap", "bootstrap root listening on {addr}");
    std::thread::Builder::new()
        .name("oxccl-root".into())
        .spawn(move || coordinate(rx, svc, cfg))
        .map_err(|e| Error::io("spawning the bootstrap root thread", e))?;
    Ok(())
}

/// The root's bookkeeping during one rendezvous.
#[derive(Default)]
struct Book {
    nranks: u32,
    /// Arrivals by rank: memory in proportion to the ranks that came, not to the nranks they
    /// claim (a huge nranks must not allocate a slot per rank up front).
    slots: BTreeMap<u32, Arrival>,
    count: u32,
    /// When the root gives up, and the timeout that deadline belongs to.
    deadline: Option<(Instant, Duration)>,
    started: Option<Instant>,
}

enum Outcome {
    Done,
    Failed(Error),
}

/// Why an arrival was not admitted.
enum Refusal {
    /// Only this rank is wrong (a rank number out of range); the others go on.
    Alone(Error, Box<Arrival>),
    /// The ranks disagree; nobody can complete, so the whole rendezvous fails.
    All(Error, Box<Arrival>),
}

impl Book {
    /// Adds an arrival, or says whom it dooms.
    fn admit(&mut self, a: Arrival) -> Result<(), Refusal> {
        let r = &a.reg;
        let who = r.info.describe();
        tracing::debug!(target: "oxccl::bootstrap", "bootstrap root: {who} arrived (nranks={})", r.nranks);
        if r.nranks == 0 || r.info.rank >= r.nranks || r.nranks > super::MAX_NRANKS {
            return Err(Refusal::Alone(
                Error::arg(format!(
                    "{who} called init as rank {} of nranks={}",
                    r.info.rank, r.nranks
                )),
                Box::new(a),
            ));
        }
        if self.slots.is_empty() {
            self.nranks = r.nranks;
            self.started = Some(a.at);
        } else if r.nranks != self.nranks {
            let first = self
                .slots
                .values()
                .next()
                .map(|f| f.reg.info.describe())
                .unwrap_or_default();
            return Err(Refusal::All(
                Error::arg(format!(
                    "nranks mismatch for one unique id: {first} called init with nranks={}, \
                     but {who} called it with nranks={}",
                    self.nranks, r.nranks
                )),
                Box::new(a),
            ));
        }
        if let Some(prev) = self.slots.get(&r.info.rank) {
            return Err(Refusal::All(
                Error::arg(format!(
                    "rank {} joined twice with one unique id: {} and {who} both called init as \
                     rank {} of {}",
                    r.info.rank,
                    prev.reg.info.describe(),
                    r.info.rank,
                    r.nranks
                )),
                Box::new(a),
            ));
        }
        if r.remaining_ms > 0 {
            let timeout = Duration::from_millis(r.timeout_ms);
            // Answer a little before the rank gives up, so it reports the root's verdict.
            let margin = (timeout / 10).min(Duration::from_millis(250));
            let due = a.at + Duration::from_millis(r.remaining_ms).saturating_sub(margin);
            if self.deadline.is_none_or(|(d, _)| due < d) {
                self.deadline = Some((due, timeout));
            }
        }
        self.slots.insert(r.info.rank, a);
        self.count += 1;
        Ok(())
    }

    fn complete(&self) -> bool {
        !self.slots.is_empty() && self.count == self.nranks
    }

    fn timeout_error(&self, addr: SocketAddr) -> Error {
        let missing: Vec<u32> = (0..self.nranks)
            .filter(|r| !self.slots.contains_key(r))
            .collect();
        let timeout = self.deadline.map_or(Duration::ZERO, |(_, t)| t);
        Error::Timeout(format!(
            "init timed out after {}: {} of {} never connected to the bootstrap root at {addr}",
            secs(timeout),
            rank_list(&missing),
            self.nranks
        ))
    }
}

/// Sends one reply frame; failures only mean that rank already gave up.
fn reply(stream: &TcpStream, tag: u64, payload: &[u8], hs: Duration) {
    let _ = stream.set_write_timeout(Some(crate::abort::POLL_INTERVAL));
    let watch = Watch::new(Deadline::after(hs), None);
    let hdr = wire::frame_header(tag, payload.len());
    if let Err(e) = wire::write_all_watched(stream, &[&hdr, payload], &watch) {
        tracing::debug!(target: "oxccl::bootstrap", "bootstrap root: reply not delivered: {e}");
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

fn error_payload(e: &Error) -> Vec<u8> {
    let (code, msg) = wire::error_to_wire(e);
    let mut enc = Enc::default();
    enc.u8(code).bytes(msg.as_bytes());
    enc.0
}

fn coordinate(rx: mpsc::Receiver<Arrival>, svc: AuthListener, cfg: RootConfig) {
    let addr = cfg.advertised;
    let hs = cfg.handshake_timeout;
    let mut book = Book::default();
    let outcome = loop {
        let next = match (book.deadline, cfg.idle_limit) {
            (Some((d, _)), _) => rx.recv_timeout(d.saturating_duration_since(Instant::now())),
            (None, Some(idle)) if book.slots.is_empty() => match rx.recv_timeout(idle) {
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    // Frees the port of an NCCL_COMM_ID root whose rank 0 gave up early.
                    tracing::info!(target: "oxccl::bootstrap", "bootstrap root {addr}: nobody registered within {}, closing", secs(idle));
                    return;
                }
                other => other,
            },
            (None, _) => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
        };
        match next {
            Ok(a) => match book.admit(a) {
                Ok(()) if book.complete() => break Outcome::Done,
                Ok(()) => {}
                Err(Refusal::Alone(e, a)) => {
                    tracing::warn!(target: "oxccl::bootstrap", "bootstrap root {addr}: refused a rank: {e}");
                    reply(&a.stream, TAG_ERROR, &error_payload(&e), hs);
                }
                Err(Refusal::All(e, a)) => {
                    reply(&a.stream, TAG_ERROR, &error_payload(&e), hs);
                    break Outcome::Failed(e);
                }
            },
            Err(mpsc::RecvTimeoutError::Timeout) => {
                break Outcome::Failed(book.timeout_error(addr));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    };
    match &outcome {
        Outcome::Done => {
            let mut enc = Enc::default();
            enc.u32(book.nranks);
            for a in book.slots.values() {
                a.reg.info.encode(&mut enc);
            }
            for a in book.slots.values() {
                reply(&a.stream, TAG_TABLE, &enc.0, hs);
            }
            let ms = book.started.map_or(0, |s| s.elapsed().as_millis());
            tracing::info!(target: "oxccl::bootstrap", "bootstrap root {addr}: rendezvous of {} ranks complete in {ms} ms", book.nranks);
        }
        Outcome::Failed(e) => {
            tracing::warn!(target: "oxccl::bootstrap", "bootstrap root {addr}: rendezvous failed: {e}");
            let payload = error_payload(e);
            for a in book.slots.values() {
                reply(&a.stream, TAG_ERROR, &payload, hs);
            }
        }
    }
    let late = match &outcome {
        Outcome::Done => Error::usage(format!(
            "unique id already used by a completed communicator (the bootstrap root at {addr} \
             finished its rendezvous of {} ranks); generate a new unique id for every communicator",
            book.nranks
        )),
        Outcome::Failed(e) => Error::Remote(format!(
            "the bootstrap rendezvous for this unique id already failed: {}",
            wire::error_to_wire(e).1
        )),
    };
    let late_payload = error_payload(&late);
    // The ranks' registration sockets are done with: holding them through the linger kept 4
    // descriptors per used unique id open for 10 minutes (reliability suite T5).
    drop(book);
    let end = Instant::now() + cfg.linger;
    let ticket = (!cfg.linger.is_zero()).then(linger::Ticket::take);
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() || ticket.as_ref().is_some_and(linger::Ticket::cut_short) {
            break;
        }
        match rx.recv_timeout(left.min(linger::LOOK)) {
            Ok(a) => {
                tracing::warn!(target: "oxccl::bootstrap", "bootstrap root {addr}: {} arrived late: {late}", a.reg.info.describe());
                reply(&a.stream, TAG_ERROR, &late_payload, hs);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    drop(svc);
}

/// What a rank needs to register with the root.
pub(crate) struct RegisterArgs<'a> {
    pub root: SocketAddr,
    pub key: SessionKey,
    pub me: &'a PeerInfo,
    pub nranks: u32,
    pub init_timeout: Duration,
    pub deadline: Deadline,
    /// The root is started by rank 0's init (`NCCL_COMM_ID`), so "refused" means "not yet".
    pub root_at_init: bool,
    pub abort: &'a AbortFlag,
}

/// Registers with the root and returns the rendezvous table, indexed by rank.
pub(crate) fn register(a: &RegisterArgs<'_>) -> Result<Vec<PeerInfo>> {
    let root = a.root;
    let t = secs(a.init_timeout);
    let watch = Watch::new(a.deadline, Some(a.abort));
    let retry = a.root_at_init.then_some(a.deadline);
    let hint = if a.root_at_init {
        "NCCL_COMM_ID: is rank 0 running?"
    } else {
        "stale unique id or root process exited"
    };
    let stream = wire::connect_watched(root, retry, &watch).map_err(|e| match e {
        IoFail::Aborted => Error::Aborted,
        IoFail::TimedOut => Error::Timeout(format!(
            "init timed out after {t}: cannot reach the bootstrap root at {root} ({hint})"
        )),
        e => Error::Remote(format!(
            "cannot reach the bootstrap root at {root} ({hint}): {e}"
        )),
    })?;
    wire::tune_stream(&stream, "bootstrap root connection")?;
    let hello = Hello {
        kind: ConnKind::Root,
        rank: a.me.rank,
        key: a.key,
    }
    .encode();
    let remaining = if a.init_timeout.is_zero() {
        Duration::ZERO
    } else {
        a.deadline
            .slice(a.init_timeout)
            .max(Duration::from_millis(1))
    };
    let reg = Registration {
        nranks: a.nranks,
        timeout_ms: a.init_timeout.as_millis() as u64,
        remaining_ms: remaining.as_millis() as u64,
        info: a.me.clone(),
    }
    .encode();
    let hdr = wire::frame_header(TAG_REGISTER, reg.len());
    wire::write_all_watched(&stream, &[&hello, &hdr, &reg], &watch).map_err(|e| match e {
        IoFail::Aborted => Error::Aborted,
        e => Error::Remote(format!(
            "lost the connection to the bootstrap root at {root} while registering: {e}"
        )),
    })?;
    tracing::debug!(target: "oxccl::bootstrap", "rank {} registered with the root at {root}", a.me.rank);
    let verdict = if a.init_timeout.is_zero() {
        Deadline::never()
    } else {
        Deadline::after(remaining + VERDICT_GRACE)
    };
    let watch = Watch::new(verdict, Some(a.abort));
    let (tag, payload) =
        wire::read_frame_watched(&stream, MAX_BOOTSTRAP_MSG, &watch).map_err(|e| match e {
            IoFail::Aborted => Error::Aborted,
            IoFail::TimedOut => Error::Timeout(format!(
                "init timed out after {t} waiting for the bootstrap root at {root} (the root did \
                 not report which ranks are missing: is the root process stuck?)"
            )),
            IoFail::Eof => Error::Remote(format!(
                "the bootstrap root at {root} closed the connection without answering (the root \
                 process exited, or it serves another unique id: a stale unique id?)"
            )),
            e => Error::Remote(format!(
                "lost the connection to the bootstrap root at {root}: {e}"
            )),
        })?;
    let bad = |why: String| {
        Error::Remote(format!(
            "malformed answer from the bootstrap root at {root}: {why}"
        ))
    };
    let mut d = Dec(&payload);
    match tag {
        TAG_ERROR => {
            let code = d.u8().map_err(bad)?;
            let msg = d.string().map_err(bad)?;
            Err(wire::error_from_wire(code, msg))
        }
        TAG_TABLE => {
            let n = d.u32().map_err(bad)?;
            if n != a.nranks {
                return Err(bad(format!("table of {n} ranks, expected {}", a.nranks)));
            }
            let mut table = Vec::with_capacity(n as usize);
            for i in 0..n {
                let p = PeerInfo::decode(&mut d).map_err(bad)?;
                if p.rank != i {
                    return Err(bad(format!("entry {i} is for rank {}", p.rank)));
                }
                table.push(p);
            }
            d.finish().map_err(bad)?;
            if table[a.me.rank as usize] != *a.me {
                return Err(bad(
                    "this rank's own entry differs from its registration".into()
                ));
            }
            Ok(table)
        }
        t => Err(bad(format!("unexpected frame tag {t:#x}"))),
    }
}
