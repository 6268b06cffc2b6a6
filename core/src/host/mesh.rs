//! The host backend's data transport: a full mesh of authenticated TCP connections.
//!
//! One reader thread per connection drains frames `(tag, len, payload)` into a per-(peer, tag)
//! mailbox as they arrive, so [`SocketMesh::send`] never waits for the peer to call `recv`:
//! executors send before they receive and must not deadlock. A connection that ends without a
//! goodbye marks its rank dead for the whole mesh, and every pending or later `recv` fails naming
//! it, including waits on healthy peers that may be stuck behind the dead rank.
//! Its throughput is what `oxccl-bench --mem host --op alltoall` measures.

use crate::abort::{AbortFlag, Deadline, POLL_INTERVAL};
use crate::bootstrap::listener::AuthListener;
use crate::bootstrap::mailbox::{Mailbox, Service, WaitSpec};
use crate::bootstrap::wire::{
    self, ConnKind, Dec, Enc, FRAME_HEADER_BYTES, GOODBYE_TAG, HELLO_BYTES, Hello, IoFail,
    SessionKey, Watch, rank_list, secs,
};
use crate::bootstrap::{Bootstrap, PeerInfo};
use crate::error::{Error, Result};
use std::io::Read;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// Largest single message (a frame announcing more is treated as a corrupt stream).
pub const MAX_DATA_MSG: u64 = 1 << 36;

/// The sending half of one connection.
struct Link {
    stream: TcpStream,
    write: Mutex<()>,
}

struct Shared {
    rank: u32,
    mailbox: Mailbox,
    closed: AtomicBool,
}

/// Full mesh of TCP connections between the ranks of one communicator.
pub struct SocketMesh {
    rank: u32,
    nranks: u32,
    shared: Arc<Shared>,
    /// Indexed by rank; `None` for this rank.
    links: Vec<Option<Link>>,
    abort: AbortFlag,
    op_timeout_ms: AtomicU64,
}

impl std::fmt::Debug for SocketMesh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SocketMesh")
            .field("rank", &self.rank)
            .field("nranks", &self.nranks)
            .finish()
    }
}

fn data_hello(rank: u32, key: SessionKey) -> [u8; HELLO_BYTES] {
    Hello {
        kind: ConnKind::Data,
        rank,
        key,
    }
    .encode()
}

/// Accept side of a data connection: only lower ranks dial us.
fn accept_data(stream: &TcpStream, me: u32, key: &SessionKey, hs: Duration) -> Result<u32, String> {
    let watch = Watch::new(Deadline::after(hs), None);
    let mut h = [0u8; HELLO_BYTES];
    wire::read_exact_watched(stream, &mut h, &watch).map_err(|e| format!("hello: {e}"))?;
    let hello = Hello::decode(&h, ConnKind::Data, key)?;
    if hello.rank >= me {
        return Err(format!(
            "hello claims rank {}, but only ranks below {me} connect here",
            hello.rank
        ));
    }
    wire::tune_stream(stream, "data connection").map_err(|e| e.to_string())?;
    wire::write_all_watched(stream, &[&data_hello(me, *key)], &watch)
        .map_err(|e| format!("ack: {e}"))?;
    Ok(hello.rank)
}

impl SocketMesh {
    /// Connects to every peer: rank i dials every j > i and accepts every j < i. Accepting runs
    /// on the listener's threads while this thread dials, so no order of arrival can deadlock.
    pub fn connect(b: &Bootstrap, abort: &AbortFlag, timeout: Duration) -> Result<SocketMesh> {
        let start = Instant::now();
        let (me, n, key) = (b.rank(), b.nranks(), b.session_key());
        let hs = b.handshake_timeout().max(Duration::from_millis(10));
        let watch = Watch::new(Deadline::after(timeout), Some(abort));
        let ip = b.local_ip();
        let tcp = TcpListener::bind((ip, 0))
            .map_err(|e| Error::io(format!("binding the data listener on {ip}"), e))?;
        let (tx, rx) = mpsc::channel::<(u32, TcpStream)>();
        let listener = AuthListener::spawn(tcp, "net", move |stream, peer| {
            match accept_data(&stream, me, &key, hs) {
                Ok(r) => {
                    let _ = tx.send((r, stream));
                }
                Err(why) => {
                    tracing::warn!(target: "oxccl::net", "rank {me}: dropped data connection from {peer}: {why}")
                }
            }
        })?;
        let mut enc = Enc::default();
        enc.addr(listener.local_addr());
        let gathered = b.all_gather(&enc.0)?;
        let mut addrs = Vec::with_capacity(n as usize);
        for (r, bytes) in gathered.iter().enumerate() {
            let mut d = Dec(bytes);
            let a = d
                .addr()
                .and_then(|a| d.finish().map(|()| a))
                .map_err(|why| {
                    Error::Remote(format!(
                        "rank {r} published a malformed data address: {why}"
                    ))
                })?;
            addrs.push(a);
        }
        let peers = b.peers();
        let mut streams: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
        for j in me + 1..n {
            streams[j as usize] = Some(dial(
                me,
                &peers[j as usize],
                addrs[j as usize],
                key,
                hs,
                &watch,
            )?);
        }
        let mut missing: Vec<u32> = (0..me).collect();
        while !missing.is_empty() {
            if watch.aborted() {
                return Err(Error::Aborted);
            }
            if watch.deadline.expired() {
                return Err(Error::Timeout(format!(
                    "rank {me}: socket transport setup timed out after {}: no data connection \
                     from {}",
                    secs(timeout),
                    rank_list(&missing)
                )));
            }
            match rx.recv_timeout(POLL_INTERVAL) {
                Ok((r, s)) if streams[r as usize].is_none() => {
                    streams[r as usize] = Some(s);
                    missing.retain(|&m| m != r);
                }
                Ok((r, _)) => {
                    tracing::warn!(target: "oxccl::net", "rank {me}: dropped a second data connection claiming rank {r}")
                }
                Err(_) => {}
            }
        }
        // Every peer is connected: nothing legitimate can arrive on the listener any more.
        listener.stop();
        let shared = Arc::new(Shared {
            rank: me,
            mailbox: Mailbox::new(me, Service::Net),
            closed: AtomicBool::new(false),
        });
        shared.mailbox.set_peers(peers.into());
        let mut links: Vec<Option<Link>> = (0..n).map(|_| None).collect();
        for (j, s) in streams.into_iter().enumerate() {
            let Some(s) = s else { continue };
            let reader = s
                .try_clone()
                .map_err(|e| Error::io("cloning a data socket", e))?;
            let sh = shared.clone();
            std::thread::Builder::new()
                .name(format!("oxccl-net-{me}-{j}"))
                .spawn(move || read_loop(sh, j as u32, reader))
                .map_err(|e| Error::io("spawning a socket reader thread", e))?;
            links[j] = Some(Link {
                stream: s,
                write: Mutex::new(()),
            });
        }
        let op_timeout = crate::config::get(&crate::config::vars::OXCCL_OP_TIMEOUT);
        tracing::info!(target: "oxccl::net", "rank {me}/{n}: socket mesh connected in {} ms", start.elapsed().as_millis());
        Ok(SocketMesh {
            rank: me,
            nranks: n,
            shared,
            links,
            abort: abort.clone(),
            op_timeout_ms: AtomicU64::new(op_timeout.as_millis() as u64),
        })
    }

    /// This rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Number of ranks.
    pub fn nranks(&self) -> u32 {
        self.nranks
    }

    /// Bounds every later `send`/`recv` wait (zero: no bound; default from `OXCCL_OP_TIMEOUT`).
    pub fn set_op_timeout(&self, timeout: Duration) {
        self.op_timeout_ms
            .store(timeout.as_millis() as u64, Ordering::Relaxed);
    }

    fn op_timeout(&self) -> Duration {
        Duration::from_millis(self.op_timeout_ms.load(Ordering::Relaxed))
    }

    /// `Err(Remote)` naming the first rank that died, if any did.
    pub fn check_health(&self) -> Result<()> {
        match self.shared.mailbox.dead_error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn check_args(&self, peer: u32, tag: u64) -> Result<()> {
        if peer >= self.nranks {
            return Err(Error::arg(format!(
                "peer {peer} is out of range for nranks={}",
                self.nranks
            )));
        }
        if tag == GOODBYE_TAG {
            return Err(Error::arg(format!(
                "tag {tag:#x} is reserved by the socket transport"
            )));
        }
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(Error::usage("the socket transport was closed"));
        }
        Ok(())
    }

    /// Sends `data` to `peer` under `tag`; never waits for the peer to receive.
    ///
    /// Blocks only while the kernel's socket buffer is full, which the peer's reader thread
    /// drains; gives up on abort, on a dead rank and on the operation timeout.
    pub fn send(&self, peer: u32, tag: u64, data: &[u8]) -> Result<()> {
        self.check_args(peer, tag)?;
        if data.len() as u64 > MAX_DATA_MSG {
            return Err(Error::arg(format!(
                "message of {} bytes exceeds the socket transport's limit of {MAX_DATA_MSG}",
                data.len()
            )));
        }
        self.check_health()?;
        if peer == self.rank {
            self.shared.mailbox.push(peer, tag, data.to_vec());
            return Ok(());
        }
        let link = self.links[peer as usize]
            .as_ref()
            .ok_or_else(|| Error::Internal(format!("no connection to rank {peer}")))?;
        let deadline = Deadline::after(self.op_timeout());
        let _g = link.write.lock().unwrap_or_else(|p| p.into_inner());
        let hdr = wire::frame_header(tag, data.len());
        let mailbox = &self.shared.mailbox;
        let sent = wire::write_all_checked(&link.stream, &[&hdr, data], &|| {
            if self.abort.is_aborted() {
                Err(IoFail::Aborted)
            } else if mailbox.dead_error().is_some() {
                Err(IoFail::Eof)
            } else if deadline.expired() {
                Err(IoFail::TimedOut)
            } else {
                Ok(())
            }
        });
        sent.map_err(|e| match e {
            IoFail::Aborted => Error::Aborted,
            IoFail::TimedOut => Error::Timeout(format!(
                "rank {}: sending {} bytes with tag {tag:#x} to {} timed out after {} \
                 (OXCCL_OP_TIMEOUT)",
                self.rank,
                data.len(),
                mailbox.describe(peer),
                secs(self.op_timeout())
            )),
            e => mailbox.dead_error().unwrap_or_else(|| {
                Error::Remote(format!(
                    "rank {}: sending to {} failed: {e}",
                    self.rank,
                    mailbox.describe(peer)
                ))
            }),
        })
    }

    /// Receives the next message from `peer` under `tag` into `out` (exact length).
    pub fn recv(&self, peer: u32, tag: u64, out: &mut [u8], abort: &AbortFlag) -> Result<()> {
        match self.recv_sized(peer, tag, out, abort)? {
            None => Ok(()),
            Some(got) => Err(Error::InvalidUsage(format!(
                "the message from rank {peer} with tag {tag:#x} has {got} bytes, but rank {} \
                 expected {} (mismatched operations across ranks?)",
                self.rank,
                out.len()
            ))),
        }
    }

    /// Receives the next message from `peer` under `tag` into `out`; when its length differs,
    /// drops it and returns that length (the caller knows which operation it belonged to).
    pub fn recv_sized(
        &self,
        peer: u32,
        tag: u64,
        out: &mut [u8],
        abort: &AbortFlag,
    ) -> Result<Option<usize>> {
        self.check_args(peer, tag)?;
        let timeout = self.op_timeout();
        let spec = WaitSpec {
            watch: Watch::new(Deadline::after(timeout), Some(&self.abort)).and(abort),
            timeout,
            timeout_source: "OXCCL_OP_TIMEOUT",
        };
        let msg = self.shared.mailbox.take(peer, tag, &spec)?;
        if msg.len() != out.len() {
            return Ok(Some(msg.len()));
        }
        out.copy_from_slice(&msg);
        Ok(None)
    }

    /// Says goodbye to every peer and shuts the sockets down; reader threads then exit. Peers do
    /// not treat this rank as dead afterwards. Idempotent; also run on drop.
    pub fn close(&self) {
        self.close_after(None);
    }

    /// Like [`SocketMesh::close`], but when this rank leaves because of a failure (`reason`),
    /// peers still waiting on it fail with that reason, so they name the rank that really died
    /// rather than this one.
    pub fn close_after(&self, reason: Option<&str>) {
        if self.shared.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        self.shared.mailbox.close_local();
        let reason = reason.unwrap_or_default().as_bytes();
        for l in self.links.iter().flatten() {
            wire::close_with_goodbye(&l.stream, &l.write, reason);
        }
        tracing::debug!(target: "oxccl::net", "rank {}: socket mesh closed", self.rank);
    }

    /// Simulates a crash for tests: shuts every socket down without a goodbye, so peers see
    /// this rank die.
    #[doc(hidden)]
    pub fn kill_for_test(&self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.mailbox.close_local();
        for l in self.links.iter().flatten() {
            let _ = l.stream.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for SocketMesh {
    fn drop(&mut self) {
        self.close();
    }
}

/// Dials rank `peer` and authenticates both ways.
fn dial(
    me: u32,
    info: &PeerInfo,
    addr: SocketAddr,
    key: SessionKey,
    hs: Duration,
    watch: &Watch<'_>,
) -> Result<TcpStream> {
    let who = info.describe();
    let fail = |what: &str, e: IoFail| match e {
        IoFail::Aborted => Error::Aborted,
        IoFail::TimedOut => Error::Timeout(format!(
            "rank {me}: timed out {what} {who} at {addr} (socket transport)"
        )),
        e => Error::Remote(format!(
            "rank {me}: {what} {who} at {addr} (socket transport) failed: {e}"
        )),
    };
    let stream = wire::connect_watched(addr, None, watch).map_err(|e| fail("connecting to", e))?;
    wire::tune_stream(&stream, "data connection")?;
    let hsw = Watch {
        deadline: Deadline::after(hs),
        ..*watch
    };
    wire::write_all_watched(&stream, &[&data_hello(me, key)], &hsw)
        .map_err(|e| fail("greeting", e))?;
    let mut h = [0u8; HELLO_BYTES];
    wire::read_exact_watched(&stream, &mut h, &hsw)
        .map_err(|e| fail("waiting for the answer of", e))?;
    let ack = Hello::decode(&h, ConnKind::Data, &key).map_err(|why| {
        Error::Remote(format!(
            "{who} at {addr} refused the data connection: {why}"
        ))
    })?;
    if ack.rank != info.rank {
        return Err(Error::Remote(format!(
            "the data listener at {addr} answered as rank {}, expected {who}",
            ack.rank
        )));
    }
    stream
        .set_read_timeout(None)
        .map_err(|e| Error::io("data connection", e))?;
    Ok(stream)
}

fn read_loop(shared: Arc<Shared>, peer: u32, mut stream: TcpStream) {
    let mut goodbye = None;
    let why = loop {
        let mut h = [0u8; FRAME_HEADER_BYTES];
        if let Err(e) = stream.read_exact(&mut h) {
            break format!(
                "its connection closed without a goodbye (process exited or crashed): {e}"
            );
        }
        let (tag, len) = wire::parse_header(&h);
        if tag == GOODBYE_TAG {
            let mut reason = vec![0u8; (len as usize).min(wire::MAX_GOODBYE_REASON)];
            if stream.read_exact(&mut reason).is_err() {
                reason.clear();
            }
            goodbye = Some(String::from_utf8_lossy(&reason).into_owned());
            continue;
        }
        if len > MAX_DATA_MSG {
            break format!("it sent a corrupt frame header announcing {len} bytes");
        }
        // Zeroed allocations of this size come from fresh pages: no memset before the read.
        let mut payload = vec![0u8; len as usize];
        if let Err(e) = stream.read_exact(&mut payload) {
            break format!("its connection broke in the middle of a {len}-byte message: {e}");
        }
        shared.mailbox.push(peer, tag, payload);
    };
    let _ = stream.shutdown(Shutdown::Both);
    if shared.closed.load(Ordering::Acquire) {
        return;
    }
    match goodbye {
        Some(reason) if reason.is_empty() => {
            tracing::debug!(target: "oxccl::net", "rank {}: rank {peer} closed its data connection", shared.rank);
            shared.mailbox.mark_closed(peer);
        }
        // It left because of a failure elsewhere: everyone waiting must fail, and say why.
        Some(reason) => shared
            .mailbox
            .mark_dead(peer, &format!("it left after: {reason}")),
        None => shared.mailbox.mark_dead(peer, &why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bootstrap::test_util::run_ranks;
    use std::sync::Barrier;
    use std::thread;

    fn mesh(b: &Bootstrap) -> SocketMesh {
        SocketMesh::connect(b, &AbortFlag::new(), Duration::from_secs(10)).unwrap()
    }

    /// Recognisable content: the length and both ranks in the first bytes, a fill byte after.
    fn msg(src: u32, dst: u32, len: usize) -> Vec<u8> {
        let mut v = vec![(src * 31 + dst * 7 + 1) as u8; len];
        let head = [
            src as u8,
            dst as u8,
            len as u8,
            (len >> 8) as u8,
            (len >> 16) as u8,
        ];
        let k = head.len().min(len);
        v[..k].copy_from_slice(&head[..k]);
        v
    }

    #[test]
    fn socket_mesh_all_pairs_for_1_2_3_8_ranks() {
        for n in [1u32, 2, 3, 8] {
            // 4 MiB messages for 3 ranks (self included); small ones for the others.
            let big = if n == 3 { 4 << 20 } else { 1000 };
            let ok = run_ranks(n, move |b| {
                let m = mesh(&b);
                let r = m.rank();
                assert_eq!(m.nranks(), n);
                for p in 0..n {
                    m.send(p, 7, &msg(r, p, big)).unwrap();
                    m.send(p, 3, &msg(r, p, 10)).unwrap();
                    m.send(p, 0, &[]).unwrap();
                }
                let a = AbortFlag::new();
                for p in (0..n).rev() {
                    // Tags read in a different order than sent.
                    let mut small = vec![0u8; 10];
                    m.recv(p, 3, &mut small, &a).unwrap();
                    assert_eq!(small, msg(p, r, 10));
                    let mut out = vec![0u8; big];
                    m.recv(p, 7, &mut out, &a).unwrap();
                    assert!(
                        out == msg(p, r, big),
                        "n={n}: rank {r} got a bad message from {p}"
                    );
                    m.recv(p, 0, &mut [], &a).unwrap();
                }
                // Everyone is done before anyone closes, so no close races a receive.
                b.barrier().unwrap();
                m.check_health().unwrap();
                true
            });
            assert!(ok.into_iter().all(|x| x));
        }
    }

    #[test]
    fn socket_mesh_simultaneous_64mib_sends_do_not_deadlock() {
        let len = 64 << 20;
        let ok = run_ranks(2, move |b| {
            let m = mesh(&b);
            let (r, p) = (m.rank(), 1 - m.rank());
            // Both ranks send first: only works because readers drain into the mailbox.
            m.send(p, 1, &msg(r, p, len)).unwrap();
            m.send(p, 2, &msg(r, p, len)).unwrap();
            let mut out = vec![0u8; len];
            m.recv(p, 2, &mut out, &AbortFlag::new()).unwrap();
            assert!(out == msg(p, r, len));
            m.recv(p, 1, &mut out, &AbortFlag::new()).unwrap();
            assert!(out == msg(p, r, len));
            b.barrier().unwrap();
            true
        });
        assert!(ok.into_iter().all(|x| x));
    }

    #[test]
    fn socket_mesh_size_mismatch_and_bad_arguments() {
        run_ranks(2, |b| {
            let m = mesh(&b);
            let p = 1 - m.rank();
            m.send(p, 5, &[1, 2, 3]).unwrap();
            let mut out = [0u8; 4];
            let e = m.recv(p, 5, &mut out, &AbortFlag::new()).unwrap_err();
            assert!(matches!(e, Error::InvalidUsage(_)), "{e:?}");
            assert!(e.to_string().contains("tag 0x5") && e.to_string().contains("3 bytes"));
            assert!(matches!(m.send(9, 1, &[]), Err(Error::InvalidArgument(_))));
            assert!(matches!(
                m.send(p, GOODBYE_TAG, &[]),
                Err(Error::InvalidArgument(_))
            ));
            m.set_op_timeout(Duration::from_millis(200));
            let t = Instant::now();
            let e = m.recv(p, 6, &mut out, &AbortFlag::new()).unwrap_err();
            assert!(matches!(e, Error::Timeout(_)), "{e:?}");
            assert!(t.elapsed() < Duration::from_secs(1));
            b.barrier().unwrap();
        });
    }

    #[test]
    fn socket_mesh_abort_interrupts_recv() {
        run_ranks(2, |b| {
            let m = mesh(&b);
            if m.rank() == 0 {
                let abort = AbortFlag::new();
                let a2 = abort.clone();
                let aborter = thread::spawn(move || {
                    thread::sleep(Duration::from_millis(200));
                    a2.abort();
                    Instant::now()
                });
                let mut out = [0u8; 8];
                let e = m.recv(1, 1, &mut out, &abort).unwrap_err();
                let late = aborter.join().unwrap().elapsed();
                assert!(matches!(e, Error::Aborted), "{e:?}");
                assert!(late < Duration::from_secs(1), "{late:?}");
            }
            b.barrier().unwrap();
        });
    }

    #[test]
    fn socket_mesh_dead_rank_fails_waits_on_every_peer() {
        let sync = Arc::new(Barrier::new(3));
        run_ranks(3, move |b| {
            let m = mesh(&b);
            sync.wait();
            match m.rank() {
                0 | 1 => {
                    // Rank 0 waits on rank 1 and rank 1 on rank 0: both healthy, neither sends.
                    let t = Instant::now();
                    let peer = 1 - m.rank();
                    let e = m
                        .recv(peer, 9, &mut [0u8; 4], &AbortFlag::new())
                        .unwrap_err();
                    assert!(matches!(e, Error::Remote(_)), "{e:?}");
                    assert!(e.to_string().starts_with("rank 2 "), "{e}");
                    assert!(e.to_string().contains("died"), "{e}");
                    assert!(t.elapsed() < Duration::from_secs(2));
                    // Later operations fail the same way, sends included.
                    assert!(m.recv(peer, 10, &mut [], &AbortFlag::new()).is_err());
                    assert!(matches!(m.send(peer, 1, &[1]), Err(Error::Remote(_))));
                    assert!(m.check_health().is_err());
                }
                _ => {
                    thread::sleep(Duration::from_millis(200));
                    m.kill_for_test();
                }
            }
            // Nobody closes before everyone checked, or a clean close could be seen first.
            sync.wait();
        });
    }

    /// A rank leaving because of a failure elsewhere passes the reason on: a peer waiting on
    /// it fails naming the rank that really died, not the one that left.
    #[test]
    fn leaving_after_a_failure_passes_the_reason_on() {
        let sync = Arc::new(Barrier::new(2));
        run_ranks(2, move |b| {
            let m = mesh(&b);
            sync.wait();
            if m.rank() == 0 {
                let e = m.recv(1, 9, &mut [0u8; 4], &AbortFlag::new()).unwrap_err();
                assert!(matches!(e, Error::Remote(_)), "{e:?}");
                assert!(e.to_string().contains("rank 7 died: test"), "{e}");
            } else {
                thread::sleep(Duration::from_millis(100));
                m.close_after(Some("rank 7 died: test"));
            }
            sync.wait();
        });
    }

    #[test]
    fn socket_mesh_is_send_and_sync() {
        fn check<T: Send + Sync + 'static>() {}
        check::<SocketMesh>();
        check::<Bootstrap>();
    }

    #[test]
    fn socket_mesh_clean_close_is_not_a_death() {
        let sync = Arc::new(Barrier::new(3));
        run_ranks(3, move |b| {
            let m = mesh(&b);
            if m.rank() == 2 {
                m.close();
                sync.wait();
                return;
            }
            sync.wait();
            thread::sleep(Duration::from_millis(100));
            let p = 1 - m.rank();
            m.send(p, 4, &msg(m.rank(), p, 100)).unwrap();
            let mut out = vec![0u8; 100];
            m.recv(p, 4, &mut out, &AbortFlag::new()).unwrap();
            assert_eq!(out, msg(p, m.rank(), 100));
            m.check_health().unwrap();
            // Waiting on the rank that left is an error naming it, not a hang.
            let e = m.recv(2, 4, &mut out, &AbortFlag::new()).unwrap_err();
            assert!(e.to_string().contains("rank 2"), "{e}");
            m.check_health().unwrap();
        });
    }
}
