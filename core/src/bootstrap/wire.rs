//! What goes on the wire: the authenticating hello, length-bounded frames, and waits on sockets
//! that give up on a deadline or an abort instead of blocking forever.
//!
//! Every connection starts with a fixed 32-byte [`Hello`] carrying the unique id's secret and
//! nonce; the acceptor checks it under a short deadline before anything else is read, so stray or
//! hostile connections cost one short-lived thread and never reach the data path. After the hello
//! a connection carries frames `(tag: u64, len: u64, payload)` with `len` bounded by the reader.

use crate::abort::{AbortFlag, Deadline, POLL_INTERVAL};
use crate::error::{Error, Result};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, TryLockError, mpsc};
use std::time::{Duration, Instant};

/// First bytes of every oxccl connection.
pub(crate) const HELLO_MAGIC: [u8; 8] = *b"OXCCL-HS";
/// Bumped on any incompatible change of the bootstrap or socket protocol (2: `PeerInfo` carries
/// the machine hash).
pub(crate) const PROTOCOL_VERSION: u16 = 2;
/// Size of [`Hello`] on the wire.
pub const HELLO_BYTES: usize = 32;
/// Size of a frame header on the wire.
pub(crate) const FRAME_HEADER_BYTES: usize = 16;
/// Largest bootstrap message (a frame announcing more is a protocol error).
pub const MAX_BOOTSTRAP_MSG: usize = 16 << 20;
/// Tag of the frame a rank sends before closing a connection on purpose.
pub(crate) const GOODBYE_TAG: u64 = u64::MAX;
/// Longest reason a goodbye frame carries (why a rank left after a failure).
pub(crate) const MAX_GOODBYE_REASON: usize = 1024;

/// The shared secret of one communicator, taken from its unique id.
///
/// Every connection between the ranks of a communicator starts by presenting it, so transports
/// built on top of the bootstrap can reject connections that do not belong to the communicator.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SessionKey {
    /// Random secret of the unique id.
    pub secret: u64,
    /// Random nonce of the unique id (tells apart ids whose roots share an address).
    pub nonce: u64,
}

impl std::fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SessionKey(nonce={:#x})", self.nonce)
    }
}

/// Which service a connection is for (a hello for one service is refused by the others).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnKind {
    /// A rank registering with the rendezvous root.
    Root = 1,
    /// Bootstrap messages between two ranks.
    Bootstrap = 2,
    /// The socket transport's data connections.
    Data = 3,
    /// The socket network's connections (GPU communicators across hosts).
    Net = 4,
}

/// The first message on every connection, in both directions for rank-to-rank connections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hello {
    pub kind: ConnKind,
    pub rank: u32,
    pub key: SessionKey,
}

impl Hello {
    /// Wire form: magic, version, kind, pad, rank, secret, nonce (little endian).
    pub fn encode(&self) -> [u8; HELLO_BYTES] {
        let mut b = [0u8; HELLO_BYTES];
        b[0..8].copy_from_slice(&HELLO_MAGIC);
        b[8..10].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
        b[10] = self.kind as u8;
        b[12..16].copy_from_slice(&self.rank.to_le_bytes());
        b[16..24].copy_from_slice(&self.key.secret.to_le_bytes());
        b[24..32].copy_from_slice(&self.key.nonce.to_le_bytes());
        b
    }

    /// Parses and checks a hello; `Err` says why it was refused (for the log, never the peer).
    pub fn decode(
        b: &[u8; HELLO_BYTES],
        want: ConnKind,
        key: &SessionKey,
    ) -> Result<Hello, String> {
        if b[0..8] != HELLO_MAGIC {
            return Err("bad magic (not an oxccl peer)".into());
        }
        let version = u16::from_le_bytes([b[8], b[9]]);
        if version != PROTOCOL_VERSION {
            return Err(format!(
                "protocol version {version}, expected {PROTOCOL_VERSION} (mixed oxccl versions?)"
            ));
        }
        let kind = match b[10] {
            1 => ConnKind::Root,
            2 => ConnKind::Bootstrap,
            3 => ConnKind::Data,
            4 => ConnKind::Net,
            k => return Err(format!("unknown connection kind {k}")),
        };
        if kind != want {
            return Err(format!("a {kind:?} connection on the {want:?} listener"));
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let got = SessionKey {
            secret: u64_at(16),
            nonce: u64_at(24),
        };
        if got.secret != key.secret {
            return Err(
                "wrong secret (a stale unique id, or a connection from another job)".into(),
            );
        }
        if got.nonce != key.nonce {
            return Err("wrong unique id nonce (a stale unique id)".into());
        }
        Ok(Hello {
            kind,
            rank: u32::from_le_bytes(b[12..16].try_into().expect("4 bytes")),
            key: got,
        })
    }
}

/// Frame header bytes.
pub(crate) fn frame_header(tag: u64, len: usize) -> [u8; FRAME_HEADER_BYTES] {
    let mut h = [0u8; FRAME_HEADER_BYTES];
    h[0..8].copy_from_slice(&tag.to_le_bytes());
    h[8..16].copy_from_slice(&(len as u64).to_le_bytes());
    h
}

/// `(tag, len)` of a frame header.
pub(crate) fn parse_header(h: &[u8; FRAME_HEADER_BYTES]) -> (u64, u64) {
    (
        u64::from_le_bytes(h[0..8].try_into().expect("8 bytes")),
        u64::from_le_bytes(h[8..16].try_into().expect("8 bytes")),
    )
}

/// What a socket wait watches besides the socket: a deadline and up to two abort flags.
#[derive(Clone, Copy)]
pub struct Watch<'a> {
    pub deadline: Deadline,
    pub aborts: [Option<&'a AbortFlag>; 2],
}

impl<'a> Watch<'a> {
    /// Watches `deadline` and, if given, `abort`.
    pub fn new(deadline: Deadline, abort: Option<&'a AbortFlag>) -> Watch<'a> {
        Watch {
            deadline,
            aborts: [abort, None],
        }
    }

    /// Also watches `other`.
    pub fn and(mut self, other: &'a AbortFlag) -> Watch<'a> {
        self.aborts[1] = Some(other);
        self
    }

    /// True once any watched flag is set.
    pub fn aborted(&self) -> bool {
        self.aborts.iter().flatten().any(|a| a.is_aborted())
    }

    /// `Err` once aborted or past the deadline.
    fn check(&self) -> Result<(), IoFail> {
        if self.aborted() {
            Err(IoFail::Aborted)
        } else if self.deadline.expired() {
            Err(IoFail::TimedOut)
        } else {
            Ok(())
        }
    }
}

/// Why a watched socket operation stopped.
#[derive(Debug)]
pub enum IoFail {
    /// The peer closed the connection (or the read side was shut down).
    Eof,
    /// The deadline passed.
    TimedOut,
    /// An abort flag was set.
    Aborted,
    /// The peer broke the protocol (bad length, bad magic).
    Protocol(String),
    /// Any other socket error.
    Io(io::Error),
}

impl std::fmt::Display for IoFail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IoFail::Eof => f.write_str("connection closed by the peer"),
            IoFail::TimedOut => f.write_str("timed out"),
            IoFail::Aborted => f.write_str("aborted"),
            IoFail::Protocol(s) => write!(f, "protocol error: {s}"),
            IoFail::Io(e) => write!(f, "{e}"),
        }
    }
}

fn is_retry(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Fills `buf`, waking every [`POLL_INTERVAL`] to look at the watch; keeps partial progress
/// across wake-ups (unlike `read_exact` with a timeout, which loses it).
pub fn read_exact_watched(
    stream: &TcpStream,
    buf: &mut [u8],
    watch: &Watch<'_>,
) -> Result<(), IoFail> {
    let mut off = 0;
    while off < buf.len() {
        watch.check()?;
        let slice = watch
            .deadline
            .slice(POLL_INTERVAL)
            .max(Duration::from_millis(1));
        stream.set_read_timeout(Some(slice)).map_err(IoFail::Io)?;
        match (&*stream).read(&mut buf[off..]) {
            Ok(0) => return Err(IoFail::Eof),
            Ok(n) => off += n,
            Err(e) if is_retry(&e) => {}
            Err(e) => return Err(IoFail::Io(e)),
        }
    }
    Ok(())
}

/// Reads one frame whose payload is at most `max` bytes.
pub(crate) fn read_frame_watched(
    stream: &TcpStream,
    max: usize,
    watch: &Watch<'_>,
) -> Result<(u64, Vec<u8>), IoFail> {
    let mut h = [0u8; FRAME_HEADER_BYTES];
    read_exact_watched(stream, &mut h, watch)?;
    let (tag, len) = parse_header(&h);
    if len > max as u64 {
        return Err(IoFail::Protocol(format!(
            "frame of {len} bytes exceeds the limit of {max}"
        )));
    }
    let mut payload = vec![0u8; len as usize];
    read_exact_watched(stream, &mut payload, watch)?;
    Ok((tag, payload))
}

/// Writes all of `parts` with plain `send`s: `write_vectored` is `writev`, which raises SIGPIPE
/// on a reset connection and kills a C host process that does not ignore it, while std's
/// `write` passes `MSG_NOSIGNAL`. The leading bytes (a frame header and up to 64 KiB of payload)
/// are coalesced into one send so small messages cost one syscall.
///
/// The socket must have a write timeout (set at connection time) so a peer that stops reading
/// cannot block this past an abort: each timeout wake-up calls `check`, which may give up.
pub(crate) fn write_all_checked(
    stream: &TcpStream,
    parts: &[&[u8]],
    check: &dyn Fn() -> Result<(), IoFail>,
) -> Result<(), IoFail> {
    const COALESCE: usize = 64 << 10;
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let mut head = Vec::with_capacity(total.min(COALESCE));
    let (mut idx, mut off) = (0, 0);
    while idx < parts.len() && head.len() < COALESCE {
        let take = (COALESCE - head.len()).min(parts[idx].len() - off);
        head.extend_from_slice(&parts[idx][off..off + take]);
        off += take;
        if off == parts[idx].len() {
            idx += 1;
            off = 0;
        }
    }
    send_all(stream, &head, check)?;
    if idx < parts.len() {
        send_all(stream, &parts[idx][off..], check)?;
        for p in &parts[idx + 1..] {
            send_all(stream, p, check)?;
        }
    }
    Ok(())
}

fn send_all(
    stream: &TcpStream,
    mut buf: &[u8],
    check: &dyn Fn() -> Result<(), IoFail>,
) -> Result<(), IoFail> {
    while !buf.is_empty() {
        match (&*stream).write(buf) {
            Ok(0) => return Err(IoFail::Io(io::ErrorKind::WriteZero.into())),
            Ok(n) => buf = &buf[n..],
            Err(e) if is_retry(&e) => check()?,
            Err(e) => return Err(IoFail::Io(e)),
        }
    }
    Ok(())
}

/// Writes all of `parts`, giving up on the watch's deadline or abort.
pub fn write_all_watched(
    stream: &TcpStream,
    parts: &[&[u8]],
    watch: &Watch<'_>,
) -> Result<(), IoFail> {
    write_all_checked(stream, parts, &|| watch.check())
}

/// Connects to `addr`, retrying refused connections for `retry_refused` (a root that is not up
/// yet), until the watch's deadline or abort.
///
/// The connect runs on a helper thread so that an abort returns at once even while the kernel
/// still waits for a SYN-ACK; the helper gives up on its own after its current attempt.
pub fn connect_watched(
    addr: SocketAddr,
    retry_refused: Option<Deadline>,
    watch: &Watch<'_>,
) -> Result<TcpStream, IoFail> {
    let (tx, rx) = mpsc::channel();
    let cancel = Arc::new(AtomicBool::new(false));
    let cancel2 = cancel.clone();
    let deadline = watch.deadline;
    std::thread::Builder::new()
        .name("oxccl-connect".into())
        .spawn(move || {
            loop {
                if cancel2.load(Ordering::Acquire) {
                    return;
                }
                let attempt = deadline.slice(Duration::from_secs(2));
                if attempt.is_zero() {
                    let _ = tx.send(Err(IoFail::TimedOut));
                    return;
                }
                match TcpStream::connect_timeout(&addr, attempt) {
                    Ok(s) => {
                        let _ = tx.send(Ok(s));
                        return;
                    }
                    Err(e) if is_retry(&e) => {}
                    Err(e)
                        if e.kind() == io::ErrorKind::ConnectionRefused
                            && retry_refused.is_some_and(|d| !d.expired()) =>
                    {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    Err(e) => {
                        let _ = tx.send(Err(IoFail::Io(e)));
                        return;
                    }
                }
            }
        })
        .map_err(IoFail::Io)?;
    loop {
        if watch.aborted() {
            cancel.store(true, Ordering::Release);
            return Err(IoFail::Aborted);
        }
        match rx.recv_timeout(POLL_INTERVAL) {
            Ok(r) => return r,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(IoFail::Io(io::Error::other(
                    "connect helper thread vanished",
                )));
            }
        }
    }
}

/// Longest a closing rank tries to deliver its goodbye before shutting the socket anyway.
const GOODBYE_BUDGET: Duration = Duration::from_secs(1);

/// Sends a goodbye frame (bounded in time) and shuts the socket down, so the peer can tell a
/// deliberate close from a crash.
pub(crate) fn close_with_goodbye(stream: &TcpStream, write: &Mutex<()>, reason: &[u8]) {
    let until = Instant::now() + GOODBYE_BUDGET;
    // A sender stuck on a dead peer may hold the lock; skip the goodbye then.
    let guard = loop {
        match write.try_lock() {
            Ok(g) => break Some(g),
            Err(TryLockError::Poisoned(p)) => break Some(p.into_inner()),
            Err(TryLockError::WouldBlock) if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(TryLockError::WouldBlock) => break None,
        }
    };
    if guard.is_some() {
        let reason = &reason[..reason.len().min(MAX_GOODBYE_REASON)];
        let hdr = frame_header(GOODBYE_TAG, reason.len());
        let _ = write_all_checked(stream, &[&hdr, reason], &|| {
            if Instant::now() < until {
                Ok(())
            } else {
                Err(IoFail::TimedOut)
            }
        });
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// Sets the socket options every oxccl connection uses after its handshake.
pub(crate) fn tune_stream(stream: &TcpStream, context: &str) -> Result<()> {
    stream
        .set_nodelay(true)
        .and_then(|()| stream.set_read_timeout(None))
        // Writes wake up this often so a sender stuck on a full buffer can see an abort.
        .and_then(|()| stream.set_write_timeout(Some(POLL_INTERVAL)))
        .map_err(|e| Error::io(context, e))
}

/// Little-endian payload builder.
#[derive(Default)]
pub(crate) struct Enc(pub Vec<u8>);

impl Enc {
    /// Appends a byte.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    /// Appends a u16.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends a u32.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends a u64.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Length-prefixed (u32) bytes.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
        self
    }
    /// Family byte (4 or 6), 16 address bytes, port.
    pub fn addr(&mut self, a: SocketAddr) -> &mut Self {
        let mut ip = [0u8; 16];
        match a.ip() {
            IpAddr::V4(v4) => {
                self.u8(4);
                ip[..4].copy_from_slice(&v4.octets());
            }
            IpAddr::V6(v6) => {
                self.u8(6);
                ip = v6.octets();
            }
        }
        self.0.extend_from_slice(&ip);
        self.u16(a.port())
    }
}

/// Bounds-checked little-endian payload reader; every error means "malformed payload".
pub(crate) struct Dec<'a>(pub &'a [u8]);

impl<'a> Dec<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err(format!(
                "payload truncated: needed {n} more bytes, {} left",
                self.0.len()
            ));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    /// Reads a byte.
    pub fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    /// Reads a u16.
    pub fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2")))
    }
    /// Reads a u32.
    pub fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4")))
    }
    /// Reads a u64.
    pub fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8")))
    }
    /// Reads length-prefixed bytes.
    pub fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    /// Reads length-prefixed text (lossy UTF-8: it only ends up in messages).
    pub fn string(&mut self) -> Result<String, String> {
        Ok(String::from_utf8_lossy(self.bytes()?).into_owned())
    }
    /// Reads an address written by [`Enc::addr`].
    pub fn addr(&mut self) -> Result<SocketAddr, String> {
        let family = self.u8()?;
        let ip: [u8; 16] = self.take(16)?.try_into().expect("16");
        let port = self.u16()?;
        let ip = match family {
            4 => IpAddr::from([ip[0], ip[1], ip[2], ip[3]]),
            6 => IpAddr::from(ip),
            f => return Err(format!("bad address family {f}")),
        };
        Ok(SocketAddr::new(ip, port))
    }
    /// `Err` if bytes are left over (a sign of a mismatched encoder).
    pub fn finish(&self) -> Result<(), String> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(format!("{} unexpected trailing bytes", self.0.len()))
        }
    }
}

/// Error kinds that cross the wire (root verdicts), so each rank reports the right category.
pub(crate) fn error_to_wire(e: &Error) -> (u8, String) {
    let code = match e {
        Error::InvalidArgument(_) => 1,
        Error::InvalidUsage(_) => 2,
        Error::Timeout(_) => 4,
        Error::Internal(_) => 5,
        _ => 3,
    };
    let msg = match e {
        Error::InvalidArgument(m)
        | Error::InvalidUsage(m)
        | Error::Remote(m)
        | Error::Timeout(m)
        | Error::Internal(m) => m.clone(),
        other => other.to_string(),
    };
    (code, msg)
}

/// Inverse of [`error_to_wire`].
pub(crate) fn error_from_wire(code: u8, msg: String) -> Error {
    match code {
        1 => Error::InvalidArgument(msg),
        2 => Error::InvalidUsage(msg),
        4 => Error::Timeout(msg),
        5 => Error::Internal(msg),
        _ => Error::Remote(msg),
    }
}

/// "ranks 2, 3" / "rank 5" / "ranks 0-9, 12": compact for big jobs, capped for huge lists.
pub(crate) fn rank_list(ranks: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        if j >= i + 2 {
            parts.push(format!("{}-{}", ranks[i], ranks[j]));
        } else {
            parts.extend(ranks[i..=j].iter().map(u32::to_string));
        }
        i = j + 1;
    }
    const CAP: usize = 32;
    let more = parts.len().saturating_sub(CAP);
    parts.truncate(CAP);
    let mut s = format!(
        "{} {}",
        if ranks.len() == 1 { "rank" } else { "ranks" },
        parts.join(", ")
    );
    if more > 0 {
        s.push_str(&format!(" and {more} more groups"));
    }
    s
}

/// A duration for messages: "5 s", "1.5 s", "250 ms".
pub(crate) fn secs(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_wire_hello_roundtrip_and_rejects() {
        let key = SessionKey {
            secret: 0x1234,
            nonce: 0x5678,
        };
        let h = Hello {
            kind: ConnKind::Data,
            rank: 7,
            key,
        };
        let b = h.encode();
        assert_eq!(Hello::decode(&b, ConnKind::Data, &key).unwrap(), h);
        assert!(Hello::decode(&b, ConnKind::Root, &key).is_err());
        let other = SessionKey { secret: 1, ..key };
        assert!(
            Hello::decode(&b, ConnKind::Data, &other)
                .unwrap_err()
                .contains("secret")
        );
        let mut bad = b;
        bad[0] = b'X';
        assert!(
            Hello::decode(&bad, ConnKind::Data, &key)
                .unwrap_err()
                .contains("magic")
        );
    }

    #[test]
    fn bootstrap_wire_codec_and_formatting() {
        let mut e = Enc::default();
        let a4: SocketAddr = "10.1.2.3:4242".parse().unwrap();
        let a6: SocketAddr = "[fd00::2]:7".parse().unwrap();
        e.u8(1).u32(2).u64(3).bytes(b"xy").addr(a4).addr(a6);
        let mut d = Dec(&e.0);
        assert_eq!(d.u8().unwrap(), 1);
        assert_eq!(d.u32().unwrap(), 2);
        assert_eq!(d.u64().unwrap(), 3);
        assert_eq!(d.string().unwrap(), "xy");
        assert_eq!(d.addr().unwrap(), a4);
        assert_eq!(d.addr().unwrap(), a6);
        d.finish().unwrap();
        assert!(d.u8().is_err());
        assert_eq!(rank_list(&[2, 3]), "ranks 2, 3");
        assert_eq!(rank_list(&[5]), "rank 5");
        assert_eq!(rank_list(&[0, 1, 2, 3, 7, 9, 10]), "ranks 0-3, 7, 9, 10");
        assert_eq!(secs(Duration::from_secs(5)), "5 s");
        assert_eq!(secs(Duration::from_millis(1500)), "1.5 s");
    }
}
