//! The built-in socket network ("Socket"): TCP between hosts, behind the plugin-shaped [`Net`].
//!
//! A connection is one control socket and `nsocks` data sockets, all opened by the sending side
//! to the listener named in the handle. Every connection starts with the communicator's hello
//! (its secret: a stranger who knows the port is refused, as on the bootstrap), then the
//! listen token and the socket's index. Each message sends its 8-byte size on the control socket;
//! up to [`SocketConfig::inline_max`] bytes follow inline there, driven by the proxy thread
//! itself (no hand-off: lowest latency). Larger messages are cut into `nsocks` parts of at least
//! [`SocketConfig::min_task`] bytes, each written (and read) by the helper thread of one data
//! socket, so a large transfer runs on several cores and TCP streams at once.
//!
//! Where both ends allow it (`OXCCL_SOCKET_DUPLEX`, carried in the handle), the two directions
//! of a link between two ranks share one control socket, the one the lower rank opened
//! ([`Net::pair`]): each small message then carries the TCP acknowledgement of the other
//! direction's, instead of each direction's receiver sending ACKs of its own.
//!
//! A receive never writes past the size it posted: a larger message is an error ("message
//! truncated"), as with NCCL. A connection reset or a peer that closes in the middle of a message
//! fails the request on that side; a peer that closes between messages only marks the
//! connection closed (a clean shutdown), and any later wait is the peer watch's business.

use super::ll_trace::{Syscall, time_syscall};
use super::readiness::Readiness;
use super::socket_workers::{Job, Lane, MAX_WORKERS, ReqState, SocketWorkers, Span};
use super::{CommRef, Handle, Listen, MemHandle, Net, PTR_HOST, Properties, RecvComm, Request};
use super::{HANDLE_BYTES, SendComm};
use crate::abort::Deadline;
use crate::bootstrap::listener::AuthListener;
use crate::bootstrap::wire::{self, ConnKind, HELLO_BYTES, Hello, SessionKey, Watch};
use crate::error::{Error, Result};
use crate::lock::lock;
use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// First bytes of a socket handle (tells a socket handle from another network's).
const HANDLE_MAGIC: [u8; 8] = *b"OXSOCKH1";
/// Bytes that follow the hello on every connection: listen token, socket index.
const PREAMBLE_BYTES: usize = 12;
/// Largest data socket count (`NCCL_SOCKET_NTHREADS` x `NCCL_NSOCKS_PERTHREAD`, as NCCL caps it).
pub const MAX_SOCKS: usize = 64;

/// How the socket network cuts and carries messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketConfig {
    /// Data sockets per connection; 0 sends everything on the control socket.
    pub nsocks: usize,
    /// Messages up to this size travel inline on the control socket.
    pub inline_max: usize,
    /// Smallest part a data socket carries.
    pub min_task: usize,
    /// Control sockets ask for delayed ACKs after each read with data (`set_quickack`);
    /// local to each side, unlike the fields above, which the connecting side adopts.
    pub delay_acks: bool,
    /// Both directions of a link may share one control socket ([`Net::pair`]); they do where
    /// both ends allow it (each handle says whether its side does).
    pub duplex: bool,
    /// Most helper threads serving the network's data sockets (local to each side).
    pub workers: usize,
}

impl SocketConfig {
    /// Defaults, changed by `NCCL_SOCKET_NTHREADS` x `NCCL_NSOCKS_PERTHREAD` (data sockets; at
    /// most 64), `NCCL_SOCKET_INLINE`, `NCCL_SOCKET_MIN_TASKSIZE`, `OXCCL_SOCKET_QUICKACK=1`
    /// (ACKs as the kernel decides), `OXCCL_SOCKET_DUPLEX=0` (a control socket per direction)
    /// and `OXCCL_SOCKET_WORKERS` (most helper threads).
    pub fn from_env() -> SocketConfig {
        SocketConfig::from_env_on(false)
    }

    /// [`SocketConfig::from_env`] on a machine whose ranks have few CPUs each (`crowded`):
    /// there no data sockets by default, as NCCL on a NIC it does not know: the proxy thread
    /// moves everything on the control socket, and no helper thread takes CPU time from the
    /// other ranks' (docs/perf/defaults.md, "Crowded machines").
    pub fn from_env_on(crowded: bool) -> SocketConfig {
        use crate::config::{get, vars};
        let d = SocketConfig {
            nsocks: if crowded { 0 } else { DEFAULT_NSOCKS },
            ..SocketConfig::default()
        };
        let threads = get(&vars::NCCL_SOCKET_NTHREADS);
        let per = get(&vars::NCCL_NSOCKS_PERTHREAD);
        let nsocks = match (threads, per) {
            (None, None) => d.nsocks,
            (t, p) => t.unwrap_or(1).min(16) * p.unwrap_or(1),
        };
        SocketConfig {
            nsocks: nsocks.min(MAX_SOCKS),
            inline_max: get(&vars::NCCL_SOCKET_INLINE).unwrap_or(d.inline_max),
            min_task: get(&vars::NCCL_SOCKET_MIN_TASKSIZE)
                .unwrap_or(d.min_task)
                .max(1),
            delay_acks: !get(&vars::OXCCL_SOCKET_QUICKACK),
            duplex: get(&vars::OXCCL_SOCKET_DUPLEX),
            workers: get(&vars::OXCCL_SOCKET_WORKERS)
                .filter(|&n| n > 0)
                .unwrap_or(d.workers)
                .min(MAX_WORKERS),
        }
    }
}

/// Most helper threads by default: the data sockets a rank keeps busy in a ring collective (8
/// channels x 2 sockets, to the next rank and from the previous one), so that up to that many
/// every data socket has a thread of its own, blocking in its reads and writes as a thread per
/// socket did. Beyond it sockets share threads, with non-blocking calls, which moved less
/// through loopback TCP, whose copies are the CPU work (docs/perf/defaults.md, "Socket helper
/// threads").
pub const DEFAULT_WORKERS: usize = 32;

/// Data sockets per connection by default (see [`SocketConfig::default`]).
const DEFAULT_NSOCKS: usize = 2;

impl Default for SocketConfig {
    /// Two data sockets: with 4 channels, 8 streams each way per peer, which measured best
    /// (`transport/src/net.rs`, NET_CHANNELS); more sockets only added threads. Parts of at
    /// least 128 KiB (NCCL: 64 KiB): each part wakes a helper thread on both sides, and with
    /// NCCL's tuned 4 threads x 4 sockets, 64 KiB parts made ours slower than NCCL between 512 KiB
    /// and 2 MiB (docs/perf/defaults.md, "Socket parts"). With 2 sockets and 256 KiB slots the
    /// parts are 128 KiB either way.
    fn default() -> SocketConfig {
        SocketConfig {
            nsocks: DEFAULT_NSOCKS,
            inline_max: 64 << 10,
            min_task: 128 << 10,
            delay_acks: true,
            duplex: true,
            workers: DEFAULT_WORKERS,
        }
    }
}

/// The built-in socket network of one communicator (a v11 plugin's per-communicator context).
/// Its devices are interfaces: one per address it listens on.
pub struct SocketNet {
    /// (address, interface name) of each device.
    devices: Vec<(IpAddr, String)>,
    rank: u32,
    key: SessionKey,
    handshake_timeout: Duration,
    config: SocketConfig,
    /// Each device's listener, started on its first `listen`.
    listeners: Mutex<Vec<Option<AuthListener>>>,
    /// Connections that arrived at any of them, by listen token.
    arrived: Arrivals,
    /// The epoll set of the receive sides' control sockets, made on first accept.
    readiness: Mutex<Option<Arc<Readiness>>>,
    /// The data sockets' helper threads, started with the first data socket.
    workers: Mutex<Option<Arc<SocketWorkers>>>,
}

/// Connections that arrived at a listener, by listen token: (socket index, socket).
type Arrivals = Arc<Mutex<HashMap<u64, Vec<(u32, TcpStream)>>>>;

impl SocketNet {
    /// A listen whose connections have `nsocks` data sockets.
    fn listen_with(&self, dev: usize, handle: &mut Handle, nsocks: usize) -> Result<Listen> {
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

    /// The network of rank `rank`, listening on `ip` (interface `ifname`), admitting only
    /// connections that present `key`.
    pub fn new(
        ip: IpAddr,
        ifname: &str,
        rank: u32,
        key: SessionKey,
        handshake_timeout: Duration,
        config: SocketConfig,
    ) -> SocketNet {
        let devices = vec![(ip, ifname.to_string())];
        SocketNet::on_devices(devices, rank, key, handshake_timeout, config)
    }

    /// [`SocketNet::new`] with a device per (address, interface name) of `devices` (not
    /// empty).
    pub fn on_devices(
        devices: Vec<(IpAddr, String)>,
        rank: u32,
        key: SessionKey,
        handshake_timeout: Duration,
        config: SocketConfig,
    ) -> SocketNet {
        assert!(!devices.is_empty(), "a socket network needs an interface");
        SocketNet {
            listeners: Mutex::new(devices.iter().map(|_| None).collect()),
            arrived: Arrivals::default(),
            devices,
            rank,
            key,
            handshake_timeout,
            config,
            readiness: Mutex::new(None),
            workers: Mutex::new(None),
        }
    }

    /// A data socket served by the helper threads (a thread per data socket up to
    /// [`SocketConfig::workers`], then shared).
    fn lane(&self, stream: TcpStream, sending: bool) -> Result<Lane> {
        let mut slot = lock(&self.workers);
        let workers = slot
            .get_or_insert_with(|| {
                tracing::info!(target: "oxccl::net",
                    "rank {}: a socket helper thread per data socket, at most {}",
                    self.rank, self.config.workers.max(1));
                SocketWorkers::new(self.config.workers)
            })
            .clone();
        drop(slot);
        workers.lane(stream, sending)
    }

    /// The receive sides' epoll set, made on first use.
    fn readiness(&self) -> Result<Arc<Readiness>> {
        let mut slot = lock(&self.readiness);
        if let Some(r) = &*slot {
            return Ok(r.clone());
        }
        let r = Arc::new(Readiness::new()?);
        *slot = Some(r.clone());
        Ok(r)
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

/// What a handle says: where to connect, the listen token, and how the listener cuts messages
/// (its data socket count, inline limit and smallest part), which the connecting side adopts:
/// both sides must cut every message alike, whatever each one's environment says.
struct HandleInfo {
    addr: SocketAddr,
    token: u64,
    nsocks: usize,
    inline_max: usize,
    min_task: usize,
    /// The listening side allows both directions on one control socket.
    duplex: bool,
}

fn encode_handle(h: &mut Handle, info: &HandleInfo) {
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

fn decode_handle(h: &Handle) -> Result<HandleInfo> {
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
pub(super) fn redirect_handle(h: &mut Handle, to: SocketAddr) -> Result<SocketAddr> {
    let mut info = decode_handle(h)?;
    let was = std::mem::replace(&mut info.addr, to);
    encode_handle(h, &info);
    Ok(was)
}

/// A listen: the token its connections present, and how many sockets make one.
struct SocketListen {
    token: u64,
    nsocks: usize,
    arrived: Arrivals,
}

/// The parts of a `size`-byte message: `(offset, length, lane)`, from lane 0.
///
/// Every message starts on lane 0, so the lanes a message needs stay busy and their TCP windows
/// open. Spreading consecutive messages over idle lanes measured worse with NCCL's tuned 16
/// sockets (docs/perf/defaults.md, "Socket parts").
fn parts(size: usize, nlanes: usize, min_task: usize) -> Vec<(usize, usize, usize)> {
    let n = nlanes.max(1);
    let per = size.div_ceil(n).max(min_task);
    (0..size)
        .step_by(per.max(1))
        .enumerate()
        .map(|(i, off)| (off, per.min(size - off), i % n))
        .collect()
}

/// Asks the kernel to ACK what `s` receives at once (`on`) or to delay the ACKs.
///
/// Each direction of a connection is a TCP connection of its own, so a receiving control
/// socket never sends data an ACK could ride on, and the kernel ACKs small messages at once,
/// inside the `read` that takes them. Delayed, the ACK rides along every few messages (Linux
/// acknowledges once more than a segment's worth is unacknowledged) or on the delayed-ACK
/// timer. The kernel leaves delayed-ACK mode on its own (that timer, an idle period), hence the
/// call after every read; small reads and 2-rank AllReduce at 512 B-2 KiB got faster with it
/// (docs/perf/defaults.md, "Delayed ACKs"). Errors are ignored: the ACKs are then merely
/// early.
pub(super) fn set_quickack(s: &TcpStream, on: bool) {
    let v = libc::c_int::from(on);
    // SAFETY: a valid socket, and an option value of the size given, for the call's duration.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_QUICKACK,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// The sending side of a socket connection.
struct SendSide {
    peer: SocketAddr,
    ctrl: TcpStream,
    /// Control bytes not written yet (sizes and inline payloads).
    out: VecDeque<u8>,
    lanes: Vec<Lane>,
    config: SocketConfig,
    failed: Option<String>,
    /// The receiving end allows a shared control socket (its handle said so).
    peer_duplex: bool,
    /// `ctrl` also carries the other direction ([`Net::pair`]): closing shuts down writes only.
    shared: bool,
}

impl SendSide {
    /// Writes as much of `out` as the socket takes now.
    fn flush(&mut self) -> Result<()> {
        if let Some(why) = &self.failed {
            return Err(Error::Remote(why.clone()));
        }
        while !self.out.is_empty() {
            // One write for a header and its inline payload, even where the queue wraps.
            let a = self.out.make_contiguous();
            let wrote = time_syscall(|| (&self.ctrl).write(a), |_| Syscall::Write);
            match wrote {
                Ok(0) => {
                    return Err(self.fail("the connection closed".into()));
                }
                Ok(n) => {
                    self.out.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.fail(e.to_string())),
            }
        }
        Ok(())
    }

    fn fail(&mut self, why: String) -> Error {
        let msg = format!("network send to {} failed: {why}", self.peer);
        self.failed = Some(msg.clone());
        Error::Remote(msg)
    }
}

/// A send request: done once its control bytes are written and its parts are through.
struct SendReq {
    side: Arc<Mutex<SendSide>>,
    state: Arc<ReqState>,
    size: usize,
}

/// What a [`SendComm`] of the socket network holds.
struct SocketSendComm {
    side: Arc<Mutex<SendSide>>,
}

/// The receiving side of a socket connection.
struct RecvSide {
    peer: SocketAddr,
    ctrl: TcpStream,
    lanes: Vec<Lane>,
    config: SocketConfig,
    /// Receives posted and not yet matched with a message's size.
    posted: VecDeque<Arc<RecvState>>,
    /// The message being read inline on the control socket.
    inline: Option<(Arc<RecvState>, usize)>,
    /// Size-header bytes read so far.
    hdr: [u8; 8],
    hdr_got: usize,
    /// The peer closed between messages.
    closed: bool,
    failed: Option<String>,
    /// Set when the control socket may have data (see [`Readiness`]).
    ready: Arc<AtomicBool>,
    readiness: Arc<Readiness>,
    /// The readiness generation this side last looked at.
    seen: u64,
    /// Control bytes read ahead: one read takes a size header with the inline payload behind
    /// it (and whatever follows), instead of a read for each. `STAGE_BYTES` long.
    stage: Box<[u8]>,
    /// The unconsumed bytes of `stage`: `stage_at..stage_len`.
    stage_at: usize,
    stage_len: usize,
    /// A read took data since delayed ACKs were last asked for (`set_quickack`).
    ack_mode_due: bool,
    /// `ctrl` also carries the other direction ([`Net::pair`]): closing shuts down reads only.
    shared: bool,
}

/// Bytes one read-ahead of the control socket takes at most.
const STAGE_BYTES: usize = 16 << 10;

/// One posted receive.
struct RecvState {
    span: Span,
    /// The message's size once known.
    size: Mutex<Option<usize>>,
    /// Set once every byte is in place.
    done: AtomicBool,
    parts: Arc<ReqState>,
}

struct RecvReq {
    side: Arc<Mutex<RecvSide>>,
    state: Arc<RecvState>,
}

impl RecvSide {
    fn fail(&mut self, why: String) -> Error {
        let msg = format!("network receive from {} failed: {why}", self.peer);
        self.failed = Some(msg.clone());
        Error::Remote(msg)
    }

    /// Reads into `buf` what the control socket has now: `Ok(n)`, 0 at a clean EOF. Bytes read
    /// ahead come first; a short `buf` (a size header) is filled through the read-ahead buffer,
    /// a long one (an inline payload) straight from the socket.
    fn read_ctrl(&mut self, buf: &mut [u8]) -> Result<Option<usize>> {
        if self.stage_at < self.stage_len {
            let n = buf.len().min(self.stage_len - self.stage_at);
            buf[..n].copy_from_slice(&self.stage[self.stage_at..self.stage_at + n]);
            self.stage_at += n;
            return Ok(Some(n));
        }
        if buf.len() >= STAGE_BYTES / 4 {
            return self.read_socket(buf);
        }
        let mut stage = std::mem::take(&mut self.stage);
        let got = self.read_socket(&mut stage);
        self.stage = stage;
        match got? {
            Some(0) => Ok(Some(0)),
            Some(n) => {
                (self.stage_at, self.stage_len) = (0, n);
                self.read_ctrl(buf)
            }
            None => Ok(None),
        }
    }

    /// One non-blocking read of the control socket, if the readiness set says it may have data.
    fn read_socket(&mut self, buf: &mut [u8]) -> Result<Option<usize>> {
        if !self.ready.load(Ordering::Acquire) {
            // One epoll_wait per proxy pass: the first side to look again after its last look
            // asks the kernel; the others of the same pass take what that call found.
            if self.readiness.generation() == self.seen {
                time_syscall(|| self.readiness.refresh(), |_| Syscall::Refresh);
            }
            self.seen = self.readiness.generation();
            if !self.ready.load(Ordering::Acquire) {
                return Ok(None);
            }
        }
        loop {
            let got = time_syscall(
                || (&self.ctrl).read(buf),
                |r| match r {
                    Ok(_) => Syscall::Read,
                    Err(_) => Syscall::ReadNothing,
                },
            );
            if matches!(got, Ok(n) if n > 0) && self.config.delay_acks {
                self.ack_mode_due = true;
            }
            match got {
                Ok(n) if n < buf.len() => {
                    // A short read drained the socket: without this, the next look would read
                    // again only to learn that, a system call on every message's path.
                    self.ready.store(false, Ordering::Release);
                    return Ok(Some(n));
                }
                Ok(n) => return Ok(Some(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Bytes arriving after this read are reported by a later refresh (the set
                    // is level triggered), so clearing the flag loses nothing.
                    self.ready.store(false, Ordering::Release);
                    return Ok(None);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.fail(e.to_string())),
            }
        }
    }

    /// Matches arriving messages with posted receives, in order, as far as the data allows.
    fn progress(&mut self) -> Result<()> {
        let placed = self.place();
        // After the data is in place, not between the read and the copy: the system call would
        // delay the message it follows by its own cost, and only later reads need the mode.
        if std::mem::take(&mut self.ack_mode_due) {
            time_syscall(|| set_quickack(&self.ctrl, false), |_| Syscall::AckMode);
        }
        placed
    }

    /// [`RecvSide::progress`]'s matching, reading and copying.
    fn place(&mut self) -> Result<()> {
        if let Some(why) = &self.failed {
            return Err(Error::Remote(why.clone()));
        }
        loop {
            if let Some((st, got)) = self.inline.take() {
                let size = lock(&st.size).unwrap_or(0);
                // SAFETY: irecv's contract: the posted span is ours until the request is done;
                // `size` was checked against it.
                let buf = unsafe {
                    std::slice::from_raw_parts_mut((st.span.addr + got) as *mut u8, size - got)
                };
                match self.read_ctrl(buf)? {
                    Some(0) => {
                        return Err(self.fail("the peer closed the connection mid-message".into()));
                    }
                    Some(n) if got + n == size => st.done.store(true, Ordering::Release),
                    Some(n) => {
                        self.inline = Some((st, got + n));
                        continue;
                    }
                    None => {
                        self.inline = Some((st, got));
                        return Ok(());
                    }
                }
                continue;
            }
            if self.closed || self.posted.is_empty() {
                return Ok(());
            }
            let mut hdr = self.hdr;
            let at = self.hdr_got;
            match self.read_ctrl(&mut hdr[at..])? {
                Some(0) if at == 0 => {
                    self.closed = true;
                    return Ok(());
                }
                Some(0) => {
                    return Err(self.fail("the peer closed the connection mid-message".into()));
                }
                Some(n) => {
                    self.hdr = hdr;
                    self.hdr_got += n;
                }
                None => return Ok(()),
            }
            if self.hdr_got < 8 {
                continue;
            }
            self.hdr_got = 0;
            let size = u64::from_le_bytes(self.hdr) as usize;
            let st = self.posted.pop_front().expect("a posted receive");
            if size > st.span.len {
                return Err(self.fail(format!(
                    "message truncated: {size} bytes sent, {} posted",
                    st.span.len
                )));
            }
            *lock(&st.size) = Some(size);
            if size == 0 {
                st.done.store(true, Ordering::Release);
            } else if size <= self.config.inline_max || self.lanes.is_empty() {
                self.inline = Some((st, 0));
            } else {
                let ps = parts(size, self.lanes.len(), self.config.min_task);
                st.parts.parts.store(ps.len(), Ordering::Release);
                for (off, len, lane) in ps {
                    let job = Job {
                        span: Span {
                            addr: st.span.addr + off,
                            len,
                        },
                        state: st.parts.clone(),
                    };
                    self.lanes[lane].submit(job);
                }
                st.done.store(true, Ordering::Release);
            }
        }
    }
}

/// Opens one socket of a connection and presents the hello and preamble.
fn dial(
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

fn downcast<'a, T: 'static>(
    b: &'a mut Box<dyn std::any::Any + Send>,
    what: &str,
) -> Result<&'a mut T> {
    b.downcast_mut::<T>()
        .ok_or_else(|| Error::Internal(format!("a {what} the socket network did not make")))
}

impl Net for SocketNet {
    fn name(&self) -> &str {
        "Socket"
    }

    fn devices(&self) -> Result<usize> {
        Ok(self.devices.len())
    }

    fn properties(&self, dev: usize) -> Result<Properties> {
        let Some((_, ifname)) = self.devices.get(dev) else {
            return Err(Error::arg(format!(
                "socket network device {dev} does not exist ({} devices)",
                self.devices.len()
            )));
        };
        let speed = std::fs::read_to_string(format!("/sys/class/net/{ifname}/speed"))
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
            .filter(|&s| s > 0)
            .unwrap_or(10_000);
        Ok(Properties {
            name: ifname.clone(),
            pci_path: std::fs::canonicalize(format!("/sys/class/net/{ifname}/device"))
                .ok()
                .map(|p| p.to_string_lossy().into_owned()),
            // The device's index, as NCCL's socket network reports it.
            guid: dev as u64,
            ptr_support: PTR_HOST,
            speed_mbps: speed,
            port: 0,
            latency_us: 0.0,
            max_comms: 65536,
            max_recvs: 1,
            max_p2p_bytes: 1 << 40,
        })
    }

    fn listen(&self, dev: usize, handle: &mut Handle) -> Result<Listen> {
        self.listen_with(dev, handle, self.config.nsocks)
    }

    /// No data sockets: LL messages are a few KiB, and their data sockets' helper threads and
    /// descriptors would stay idle (half of every NET channel's threads before).
    fn listen_small(&self, dev: usize, handle: &mut Handle) -> Result<Listen> {
        self.listen_with(dev, handle, 0)
    }

    fn connect(&self, _dev: usize, handle: &mut Handle) -> Result<Option<SendComm>> {
        let info = decode_handle(handle)?;
        let t = self.handshake_timeout;
        let mut lanes = Vec::with_capacity(info.nsocks);
        for i in 0..info.nsocks {
            let s = dial(info.addr, self.rank, self.key, info.token, i as u32, t)?;
            lanes.push(self.lane(s, true)?);
        }
        // The control socket last: its arrival tells the listener the set is complete.
        let ctrl = dial(
            info.addr,
            self.rank,
            self.key,
            info.token,
            info.nsocks as u32,
            t,
        )?;
        ctrl.set_nonblocking(true)
            .map_err(|e| Error::io("setting up a network socket", e))?;
        let side = SendSide {
            peer: info.addr,
            ctrl,
            out: VecDeque::new(),
            lanes,
            config: SocketConfig {
                nsocks: info.nsocks,
                inline_max: info.inline_max,
                min_task: info.min_task,
                ..self.config
            },
            failed: None,
            peer_duplex: info.duplex,
            shared: false,
        };
        Ok(Some(SendComm(Box::new(SocketSendComm {
            side: Arc::new(Mutex::new(side)),
        }))))
    }

    fn accept(&self, listen: &mut Listen) -> Result<Option<RecvComm>> {
        let l = downcast::<SocketListen>(&mut listen.0, "listen comm")?;
        let mut socks = {
            let mut t = lock(&l.arrived);
            match t.get(&l.token) {
                Some(v) if v.len() > l.nsocks => t.remove(&l.token).expect("present"),
                _ => return Ok(None),
            }
        };
        socks.sort_by_key(|(i, _)| *i);
        let indices: Vec<u32> = socks.iter().map(|(i, _)| *i).collect();
        if indices != (0..=l.nsocks as u32).collect::<Vec<_>>() {
            return Err(Error::Remote(format!(
                "a network connection arrived with sockets {indices:?}"
            )));
        }
        let (_, ctrl) = socks.pop().expect("control socket");
        let peer = ctrl
            .peer_addr()
            .map_err(|e| Error::io("network peer address", e))?;
        ctrl.set_nonblocking(true)
            .map_err(|e| Error::io("setting up a network socket", e))?;
        let mut lanes = Vec::with_capacity(socks.len());
        for (_, s) in socks {
            lanes.push(self.lane(s, false)?);
        }
        let readiness = self.readiness()?;
        let ready = readiness.add(&ctrl)?;
        Ok(Some(RecvComm(Box::new(Arc::new(Mutex::new(RecvSide {
            peer,
            ctrl,
            lanes,
            config: SocketConfig {
                nsocks: l.nsocks,
                ..self.config
            },
            posted: VecDeque::new(),
            inline: None,
            hdr: [0; 8],
            hdr_got: 0,
            closed: false,
            failed: None,
            ready,
            readiness,
            seen: u64::MAX,
            stage: vec![0; STAGE_BYTES].into_boxed_slice(),
            stage_at: 0,
            stage_len: 0,
            ack_mode_due: false,
            shared: false,
        }))))))
    }

    fn reg_mr(
        &self,
        _comm: CommRef<'_>,
        _data: *mut u8,
        _size: usize,
        ptr_type: u32,
    ) -> Result<MemHandle> {
        if ptr_type != PTR_HOST {
            return Err(Error::Internal(format!(
                "the socket network registers host memory only (type {ptr_type:#x})"
            )));
        }
        Ok(MemHandle(Box::new(())))
    }

    fn dereg_mr(&self, _comm: CommRef<'_>, _mh: MemHandle) -> Result<()> {
        Ok(())
    }

    unsafe fn isend(
        &self,
        comm: &mut SendComm,
        data: *const u8,
        size: usize,
        _tag: i32,
        _mh: &MemHandle,
    ) -> Result<Option<Request>> {
        let c = downcast::<SocketSendComm>(&mut comm.0, "send comm")?;
        let mut side = lock(&c.side);
        side.flush()?;
        let state = Arc::new(ReqState::default());
        side.out.extend(&(size as u64).to_le_bytes());
        if size <= side.config.inline_max || side.lanes.is_empty() {
            // SAFETY: isend's contract: `data` is readable for `size` bytes now.
            let bytes = unsafe { std::slice::from_raw_parts(data, size) };
            side.out.extend(bytes);
        } else {
            let ps = parts(size, side.lanes.len(), side.config.min_task);
            state.parts.store(ps.len(), Ordering::Release);
            for (off, len, lane) in ps {
                let job = Job {
                    span: Span {
                        addr: data as usize + off,
                        len,
                    },
                    state: state.clone(),
                };
                side.lanes[lane].submit(job);
            }
        }
        side.flush()?;
        drop(side);
        Ok(Some(Request(Box::new(SendReq {
            side: c.side.clone(),
            state,
            size,
        }))))
    }

    unsafe fn irecv(
        &self,
        comm: &mut RecvComm,
        data: *mut u8,
        size: usize,
        _tag: i32,
        _mh: &MemHandle,
    ) -> Result<Option<Request>> {
        let side = downcast::<Arc<Mutex<RecvSide>>>(&mut comm.0, "recv comm")?.clone();
        let state = Arc::new(RecvState {
            span: Span {
                addr: data as usize,
                len: size,
            },
            size: Mutex::new(None),
            done: AtomicBool::new(false),
            parts: Arc::new(ReqState::default()),
        });
        {
            let mut s = lock(&side);
            if let Some(why) = &s.failed {
                return Err(Error::Remote(why.clone()));
            }
            s.posted.push_back(state.clone());
            s.progress()?;
        }
        Ok(Some(Request(Box::new(RecvReq { side, state }))))
    }

    fn test(&self, req: &mut Request) -> Result<Option<usize>> {
        if let Some(r) = req.0.downcast_mut::<SendReq>() {
            let mut side = lock(&r.side);
            side.flush()?;
            if !side.out.is_empty() {
                // Control bytes are written in order: once `out` is empty every request's are.
                return Ok(None);
            }
            drop(side);
            if let Some(why) = lock(&r.state.failed).clone() {
                return Err(Error::Remote(format!("network send failed: {why}")));
            }
            return Ok((r.state.parts.load(Ordering::Acquire) == 0).then_some(r.size));
        }
        let r = req
            .0
            .downcast_mut::<RecvReq>()
            .ok_or_else(|| Error::Internal("a request the socket network did not make".into()))?;
        lock(&r.side).progress()?;
        if !r.state.done.load(Ordering::Acquire) {
            return Ok(None);
        }
        if let Some(why) = lock(&r.state.parts.failed).clone() {
            return Err(Error::Remote(format!("network receive failed: {why}")));
        }
        if r.state.parts.parts.load(Ordering::Acquire) != 0 {
            return Ok(None);
        }
        Ok(*lock(&r.state.size))
    }

    fn pair(&self, peer: u32, send: &mut SendComm, recv: &mut RecvComm) -> Result<()> {
        let s = downcast::<SocketSendComm>(&mut send.0, "send comm")?;
        let r = downcast::<Arc<Mutex<RecvSide>>>(&mut recv.0, "recv comm")?;
        let (mut s, mut r) = (lock(&s.side), lock(r));
        // Both ends decide alike: each knows its own setting and the peer's (from its handle).
        if !(self.config.duplex && s.peer_duplex) || peer == self.rank {
            return Ok(());
        }
        // The socket the lower rank opened carries both directions; the other one falls idle
        // and is closed here, before anything was written on it.
        let clone = |c: &TcpStream| {
            c.try_clone()
                .map_err(|e| Error::io("sharing a network socket", e))
        };
        if self.rank < peer {
            let ctrl = clone(&s.ctrl)?;
            r.readiness.remove(&r.ctrl);
            r.ready = r.readiness.add(&ctrl)?;
            if let Ok(a) = ctrl.peer_addr() {
                r.peer = a;
            }
            r.ctrl = ctrl;
        } else {
            s.ctrl = clone(&r.ctrl)?;
        }
        (s.shared, r.shared) = (true, true);
        tracing::debug!(target: "oxccl::net",
            "link with rank {peer}: both directions on one control socket ({})", s.peer);
        Ok(())
    }

    fn close_send(&self, mut comm: SendComm) -> Result<()> {
        let c = downcast::<SocketSendComm>(&mut comm.0, "send comm")?;
        let side = lock(&c.side);
        let how = if side.shared {
            Shutdown::Write
        } else {
            Shutdown::Both
        };
        let _ = side.ctrl.shutdown(how);
        for l in &side.lanes {
            let _ = l.stream.shutdown(Shutdown::Both);
        }
        Ok(())
    }

    fn close_recv(&self, mut comm: RecvComm) -> Result<()> {
        let side = downcast::<Arc<Mutex<RecvSide>>>(&mut comm.0, "recv comm")?;
        let side = lock(side);
        side.readiness.remove(&side.ctrl);
        let how = if side.shared {
            Shutdown::Read
        } else {
            Shutdown::Both
        };
        let _ = side.ctrl.shutdown(how);
        for l in &side.lanes {
            let _ = l.stream.shutdown(Shutdown::Both);
        }
        Ok(())
    }

    fn close_listen(&self, mut listen: Listen) -> Result<()> {
        let l = downcast::<SocketListen>(&mut listen.0, "listen comm")?;
        lock(&l.arrived).remove(&l.token);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::MutexGuard;

    fn net(rank: u32, config: SocketConfig) -> SocketNet {
        SocketNet::new(
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            "lo",
            rank,
            SessionKey {
                secret: 0x1234_5679,
                nonce: 7,
            },
            Duration::from_secs(5),
            config,
        )
    }

    fn connect_pair(config: SocketConfig) -> (SocketNet, SocketNet, SendComm, RecvComm) {
        connect_pair_as(config, config)
    }

    /// A connection from a network configured as `sender` to one configured as `listener`.
    fn connect_pair_as(
        sender: SocketConfig,
        listener: SocketConfig,
    ) -> (SocketNet, SocketNet, SendComm, RecvComm) {
        let (a, b) = (net(0, sender), net(1, listener));
        let mut h = [0u8; HANDLE_BYTES];
        let mut l = b.listen(0, &mut h).unwrap();
        let s = a.connect(0, &mut h).unwrap().unwrap();
        let r = loop {
            if let Some(r) = b.accept(&mut l).unwrap() {
                break r;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        b.close_listen(l).unwrap();
        (a, b, s, r)
    }

    fn wait(n: &SocketNet, req: &mut Request) -> Result<usize> {
        loop {
            if let Some(bytes) = n.test(req)? {
                return Ok(bytes);
            }
            std::thread::yield_now();
        }
    }

    /// Accepts on `l` until the connection is there.
    fn accept_now(n: &SocketNet, l: &mut Listen) -> RecvComm {
        loop {
            if let Some(r) = n.accept(l).unwrap() {
                return r;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn send_side(c: &SendComm) -> MutexGuard<'_, SendSide> {
        lock(&c.0.downcast_ref::<SocketSendComm>().unwrap().side)
    }

    fn recv_side(c: &RecvComm) -> MutexGuard<'_, RecvSide> {
        lock(c.0.downcast_ref::<Arc<Mutex<RecvSide>>>().unwrap())
    }

    /// Both sides send a `size`-byte message at once and receive the other's; checks that each
    /// arrives whole.
    fn exchange(
        a: (&SocketNet, &mut SendComm, &mut RecvComm),
        b: (&SocketNet, &mut SendComm, &mut RecvComm),
        size: usize,
    ) {
        let mh = MemHandle(Box::new(()));
        let msg = |seed: u8| {
            (0..size)
                .map(|i| (i as u8).wrapping_mul(seed))
                .collect::<Vec<u8>>()
        };
        let (ma, mb) = (msg(3), msg(5));
        let (mut ga, mut gb) = (vec![0xeeu8; size], vec![0xeeu8; size]);
        // SAFETY: the buffers outlive the requests, which are waited for below.
        let mut reqs = unsafe {
            [
                (a.0, a.2.irecv_on(a.0, &mut ga, &mh)),
                (b.0, b.2.irecv_on(b.0, &mut gb, &mh)),
                (
                    a.0,
                    a.0.isend(a.1, ma.as_ptr(), size, 0, &mh).unwrap().unwrap(),
                ),
                (
                    b.0,
                    b.0.isend(b.1, mb.as_ptr(), size, 0, &mh).unwrap().unwrap(),
                ),
            ]
        };
        for (n, req) in &mut reqs {
            assert_eq!(wait(n, req).unwrap(), size);
        }
        assert!(ga == mb && gb == ma, "{size}-byte messages crossed wrongly");
    }

    impl RecvComm {
        /// A receive of all of `buf` on this comm of `n`.
        ///
        /// # Safety
        /// `buf` must outlive the request.
        unsafe fn irecv_on(&mut self, n: &SocketNet, buf: &mut [u8], mh: &MemHandle) -> Request {
            // SAFETY: the caller keeps `buf` alive until the request is done.
            unsafe { n.irecv(self, buf.as_mut_ptr(), buf.len(), 0, mh) }
                .unwrap()
                .unwrap()
        }
    }

    #[test]
    fn net_socket_pair_shares_a_control_socket_only_where_both_ends_allow() {
        for (da, db) in [(true, true), (true, false), (false, true), (false, false)] {
            let config = |duplex| SocketConfig {
                nsocks: 2,
                inline_max: 4096,
                min_task: 1024,
                duplex,
                ..SocketConfig::default()
            };
            let (a, b) = (net(0, config(da)), net(1, config(db)));
            let (mut ha, mut hb) = ([0u8; HANDLE_BYTES], [0u8; HANDLE_BYTES]);
            let (mut la, mut lb) = (a.listen(0, &mut ha).unwrap(), b.listen(0, &mut hb).unwrap());
            let mut s_ab = a.connect(0, &mut hb).unwrap().unwrap();
            let mut s_ba = b.connect(0, &mut ha).unwrap().unwrap();
            let mut r_at_a = accept_now(&a, &mut la);
            let mut r_at_b = accept_now(&b, &mut lb);
            a.pair(1, &mut s_ab, &mut r_at_a).unwrap();
            b.pair(0, &mut s_ba, &mut r_at_b).unwrap();
            let both = da && db;
            for shared in [
                send_side(&s_ab).shared,
                send_side(&s_ba).shared,
                recv_side(&r_at_a).shared,
                recv_side(&r_at_b).shared,
            ] {
                assert_eq!(shared, both, "duplex {da}/{db}");
            }
            let local = |c: &TcpStream| c.local_addr().unwrap();
            // Rank 0's connection carries both directions; rank 1 accepted it.
            let a_same = local(&send_side(&s_ab).ctrl) == local(&recv_side(&r_at_a).ctrl);
            let b_same = local(&send_side(&s_ba).ctrl) == local(&recv_side(&r_at_b).ctrl);
            assert_eq!((a_same, b_same), (both, both), "duplex {da}/{db}");
            // Inline, in parts on the data sockets, empty; both ways at once.
            for size in [8, 24, 4097, 100_003, 0] {
                exchange(
                    (&a, &mut s_ab, &mut r_at_a),
                    (&b, &mut s_ba, &mut r_at_b),
                    size,
                );
            }
            // Rank 0 stops sending; its receive side must keep working.
            a.close_send(s_ab).unwrap();
            let mh = MemHandle(Box::new(()));
            let mut got = [0u8; 24];
            let msg = [9u8; 24];
            // SAFETY: `got` and `msg` outlive both requests, waited for here.
            unsafe {
                let mut rq = r_at_a.irecv_on(&a, &mut got, &mh);
                let mut sq = b
                    .isend(&mut s_ba, msg.as_ptr(), 24, 0, &mh)
                    .unwrap()
                    .unwrap();
                assert_eq!(wait(&b, &mut sq).unwrap(), 24);
                assert_eq!(wait(&a, &mut rq).unwrap(), 24);
            }
            assert_eq!(got, msg);
            a.close_recv(r_at_a).unwrap();
            b.close_send(s_ba).unwrap();
            b.close_recv(r_at_b).unwrap();
            a.close_listen(la).unwrap();
            b.close_listen(lb).unwrap();
        }
    }

    /// A crowded machine's default is no data sockets, NCCL's on a NIC it does not know;
    /// elsewhere two (unless the variables, which the test environment leaves unset, say).
    #[test]
    fn a_crowded_machine_defaults_to_no_data_sockets() {
        use crate::config::{is_set, vars};
        if is_set(&vars::NCCL_SOCKET_NTHREADS) || is_set(&vars::NCCL_NSOCKS_PERTHREAD) {
            return;
        }
        assert_eq!(SocketConfig::from_env_on(true).nsocks, 0);
        assert_eq!(SocketConfig::from_env_on(false).nsocks, DEFAULT_NSOCKS);
        assert_eq!(SocketConfig::from_env(), SocketConfig::from_env_on(false));
    }

    #[test]
    fn net_socket_parts_cover_the_message() {
        for (size, lanes, min) in [(1, 4, 64), (1000, 4, 64), (1 << 20, 4, 1 << 16), (7, 0, 1)] {
            let ps = parts(size, lanes, min);
            let mut at = 0;
            for (i, (off, len, lane)) in ps.iter().enumerate() {
                assert_eq!(*off, at);
                assert_eq!(*lane, i % lanes.max(1));
                at += len;
            }
            assert_eq!(at, size);
            assert!(ps.len() <= lanes.max(1));
        }
    }

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

    #[test]
    fn net_socket_messages_arrive_in_order_inline_and_in_parts() {
        // Parts of at least 64 bytes on 3 lanes (101 and 130 bytes take 2). The sender's own
        // settings differ (as two ranks' environments may): it must cut messages as the
        // listener's handle says, or the lanes' byte streams would not match.
        let config = SocketConfig {
            nsocks: 3,
            inline_max: 100,
            min_task: 64,
            ..SocketConfig::default()
        };
        let own = SocketConfig {
            nsocks: 5,
            inline_max: 4096,
            min_task: 1,
            ..SocketConfig::default()
        };
        let (a, b, mut s, mut r) = connect_pair_as(own, config);
        let mh = MemHandle(Box::new(()));
        let sizes = [0usize, 1, 100, 101, 4096, 130, 100_003, 101, 7, 4097];
        let msgs: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| (0..n).map(|k| (k * 7 + i) as u8).collect())
            .collect();
        let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0xEEu8; n + 5]).collect();
        let mut rreqs = Vec::new();
        for buf in &mut bufs {
            // SAFETY: `buf` outlives the request, which is waited for below.
            let req = unsafe { b.irecv(&mut r, buf.as_mut_ptr(), buf.len(), 0, &mh) };
            rreqs.push(req.unwrap().unwrap());
        }
        let mut sreqs = Vec::new();
        for m in &msgs {
            // SAFETY: `m` outlives the request, which is waited for below.
            let req = unsafe { a.isend(&mut s, m.as_ptr(), m.len(), 0, &mh) };
            sreqs.push(req.unwrap().unwrap());
        }
        for (i, req) in rreqs.iter_mut().enumerate() {
            assert_eq!(wait(&b, req).unwrap(), sizes[i]);
            assert_eq!(&bufs[i][..sizes[i]], &msgs[i][..]);
            assert!(
                bufs[i][sizes[i]..].iter().all(|&x| x == 0xEE),
                "no byte past the message"
            );
        }
        for (i, req) in sreqs.iter_mut().enumerate() {
            assert_eq!(wait(&a, req).unwrap(), sizes[i]);
        }
        a.close_send(s).unwrap();
        b.close_recv(r).unwrap();
    }

    /// A link made by `listen_small` has no data sockets (and no helper threads), and carries
    /// messages of any size on its control socket.
    #[test]
    fn net_socket_small_links_carry_everything_on_the_control_socket() {
        let (a, b) = (
            net(0, SocketConfig::default()),
            net(1, SocketConfig::default()),
        );
        let mut h = [0u8; HANDLE_BYTES];
        let mut l = b.listen_small(0, &mut h).unwrap();
        let mut s = a.connect(0, &mut h).unwrap().unwrap();
        let mut r = accept_now(&b, &mut l);
        b.close_listen(l).unwrap();
        assert!(send_side(&s).lanes.is_empty() && recv_side(&r).lanes.is_empty());
        let mh = MemHandle(Box::new(()));
        for size in [0usize, 24, 16 << 10, (1 << 20) + 3] {
            let m: Vec<u8> = (0..size).map(|k| (k * 13 + 1) as u8).collect();
            let mut got = vec![0xEEu8; size + 1];
            // SAFETY: both buffers outlive their requests, waited for below.
            let (mut rq, mut sq) = unsafe {
                (
                    b.irecv(&mut r, got.as_mut_ptr(), got.len(), 0, &mh)
                        .unwrap()
                        .unwrap(),
                    a.isend(&mut s, m.as_ptr(), size, 0, &mh).unwrap().unwrap(),
                )
            };
            assert_eq!(wait(&b, &mut rq).unwrap(), size);
            assert_eq!(wait(&a, &mut sq).unwrap(), size);
            assert_eq!(&got[..size], &m[..]);
            assert_eq!(got[size], 0xEE, "no byte past the message");
        }
        a.close_send(s).unwrap();
        b.close_recv(r).unwrap();
    }

    /// A network of two interfaces (two loopback addresses here) has two devices: each listens
    /// on its own address, and its connections arrive there.
    #[test]
    fn net_socket_devices_are_interfaces_each_listening_on_its_address() {
        let two = |rank| {
            SocketNet::on_devices(
                vec![
                    (IpAddr::V4(Ipv4Addr::LOCALHOST), "lo".to_string()),
                    (IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)), "lo:2".to_string()),
                ],
                rank,
                SessionKey {
                    secret: 0x1234_5679,
                    nonce: 7,
                },
                Duration::from_secs(5),
                SocketConfig::default(),
            )
        };
        let (a, b) = (two(0), two(1));
        assert_eq!(b.devices().unwrap(), 2);
        let p = b.properties(1).unwrap();
        assert_eq!((p.name.as_str(), p.guid), ("lo:2", 1));
        assert!(b.properties(2).is_err());
        let mh = MemHandle(Box::new(()));
        for dev in [1, 0] {
            let mut h = [0u8; HANDLE_BYTES];
            let mut l = b.listen(dev, &mut h).unwrap();
            assert_eq!(decode_handle(&h).unwrap().addr.ip(), b.devices[dev].0);
            let mut s = a.connect(dev, &mut h).unwrap().unwrap();
            let mut r = accept_now(&b, &mut l);
            b.close_listen(l).unwrap();
            let local = recv_side(&r).ctrl.local_addr().unwrap().ip();
            assert_eq!(local, b.devices[dev].0);
            let m = [dev as u8 + 1; 100];
            let mut got = [0u8; 100];
            // SAFETY: both buffers outlive their requests, waited for below.
            let (mut rq, mut sq) = unsafe {
                (
                    b.irecv(&mut r, got.as_mut_ptr(), got.len(), 0, &mh)
                        .unwrap()
                        .unwrap(),
                    a.isend(&mut s, m.as_ptr(), m.len(), 0, &mh)
                        .unwrap()
                        .unwrap(),
                )
            };
            assert_eq!(wait(&b, &mut rq).unwrap(), 100);
            assert_eq!(wait(&a, &mut sq).unwrap(), 100);
            assert_eq!(got, m);
            a.close_send(s).unwrap();
            b.close_recv(r).unwrap();
        }
    }

    #[test]
    fn net_socket_too_large_a_message_is_an_error_not_an_overrun() {
        let (a, b, mut s, mut r) = connect_pair(SocketConfig::default());
        let mh = MemHandle(Box::new(()));
        let mut small = vec![0u8; 4];
        // SAFETY: `small` outlives the request.
        let mut rq = unsafe { b.irecv(&mut r, small.as_mut_ptr(), 4, 0, &mh) }
            .unwrap()
            .unwrap();
        let big = [1u8; 64];
        // SAFETY: `big` outlives the request.
        let mut sq = unsafe { a.isend(&mut s, big.as_ptr(), 64, 0, &mh) }
            .unwrap()
            .unwrap();
        let err = wait(&b, &mut rq).unwrap_err().to_string();
        assert!(err.contains("truncated"), "{err}");
        assert_eq!(small, [0u8; 4]);
        let _ = wait(&a, &mut sq);
    }

    #[test]
    fn net_socket_reset_mid_message_fails_the_receive() {
        let config = SocketConfig {
            nsocks: 2,
            inline_max: 8,
            min_task: 16,
            ..SocketConfig::default()
        };
        let (a, b, mut s, mut r) = connect_pair(config);
        let mh = MemHandle(Box::new(()));
        let mut buf = vec![0u8; 1 << 20];
        // SAFETY: `buf` outlives the request.
        let mut rq = unsafe { b.irecv(&mut r, buf.as_mut_ptr(), buf.len(), 0, &mh) }
            .unwrap()
            .unwrap();
        // Announce a large message, send only its header, then drop the connection.
        {
            let c = downcast::<SocketSendComm>(&mut s.0, "send comm").unwrap();
            let mut side = lock(&c.side);
            side.out.extend(&(1u64 << 20).to_le_bytes());
            side.flush().unwrap();
        }
        a.close_send(s).unwrap();
        let err = wait(&b, &mut rq).unwrap_err().to_string();
        assert!(err.contains("network receive"), "{err}");
    }

    #[test]
    fn net_socket_refuses_a_stranger_without_the_secret() {
        let b = net(1, SocketConfig::default());
        let mut h = [0u8; HANDLE_BYTES];
        let mut l = b.listen(0, &mut h).unwrap();
        let info = decode_handle(&h).unwrap();
        let stranger = SessionKey {
            secret: 1,
            nonce: 7,
        };
        for i in 0..=info.nsocks as u32 {
            let _ = dial(
                info.addr,
                0,
                stranger,
                info.token,
                i,
                Duration::from_secs(2),
            );
        }
        std::thread::sleep(Duration::from_millis(200));
        assert!(b.accept(&mut l).unwrap().is_none());
    }
}
