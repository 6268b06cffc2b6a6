//! Bootstrap: the unique id, TCP rendezvous of the ranks, and small authenticated messages.
//!
//! Flow: [`UniqueId::generate`] starts a root listener (`root.rs`) and encodes its address with a
//! random secret. Every rank's [`Bootstrap::init`] opens its own listener, registers with the
//! root, and receives the table of all ranks ([`PeerInfo`]). From then on ranks talk directly
//! over lazily opened, authenticated connections (`peers.rs`).
//!
//! Failure policy (NCCL's bootstrap hangs in each of these cases):
//! - every wait has a deadline and watches the [`AbortFlag`];
//! - an init timeout names the ranks that never arrived;
//! - a reused or stale unique id, a wrong rank count or a duplicate rank is an explicit error;
//! - untrusted connections are handshaken off the accept path and dropped with a warning;
//! - a peer that exits while others wait on it makes their waits fail and name it.

#[cfg(test)]
mod fuzz;
mod handshakes;
#[doc(hidden)]
pub mod iface;
mod info;
mod linger;
#[doc(hidden)]
pub mod listener;
pub(crate) mod mailbox;
mod peers;
pub(crate) mod process;
mod root;
pub(crate) mod side;
mod unique_id;
#[doc(hidden)]
pub mod wire;

pub use info::PeerInfo;
pub use process::fnv1a as stable_hash;
pub use unique_id::UniqueId;
pub use wire::{MAX_BOOTSTRAP_MSG, SessionKey};

use crate::abort::{AbortFlag, Deadline};
use crate::config::{Env, vars};
use crate::error::{Error, Result};
use listener::AuthListener;
use mailbox::WaitSpec;
use peers::PeerNet;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wire::Watch;

/// Bytes in an `ncclUniqueId`.
pub const UNIQUE_ID_BYTES: usize = 128;
/// Most ranks a communicator may have (2^24, far above any real job). A larger nranks is refused
/// at init as an invalid argument instead of sizing per-rank tables for it: `nranks = INT_MAX`
/// used to abort the process on a failed allocation.
pub const MAX_NRANKS: u32 = 1 << 24;

/// Tags with this bit set are reserved for oxccl's own bootstrap collectives.
pub const RESERVED_TAG_BIT: u64 = 1 << 63;
const TAG_ALL_GATHER: u64 = RESERVED_TAG_BIT | 1;
const TAG_BARRIER: u64 = RESERVED_TAG_BIT | 2;

/// Timeouts and addresses of the bootstrap network.
#[derive(Debug, Clone)]
pub struct BootstrapOptions {
    /// How long init waits for every rank to arrive (zero: no limit); also bounds each bootstrap
    /// message wait after init.
    pub init_timeout: Duration,
    /// `NCCL_COMM_ID` ("host:port"): a fixed root address; rank 0's init starts the root there.
    pub comm_id: Option<String>,
    /// `NCCL_SOCKET_IFNAME`: which interfaces listeners bind to (NCCL syntax: `eth`, `^docker`,
    /// `=eth0`).
    pub socket_ifname: Option<String>,
    /// How long an accepted connection may take to authenticate before it is dropped.
    pub handshake_timeout: Duration,
    /// How long a root keeps answering late connections with an explicit "already used" error.
    pub root_linger: Duration,
}

impl Default for BootstrapOptions {
    fn default() -> BootstrapOptions {
        BootstrapOptions {
            init_timeout: Duration::from_secs(300),
            comm_id: None,
            socket_ifname: None,
            handshake_timeout: Duration::from_secs(5),
            root_linger: Duration::from_secs(600),
        }
    }
}

impl BootstrapOptions {
    /// Defaults, overridden by the environment.
    pub fn from_env() -> BootstrapOptions {
        BootstrapOptions::from(Env::PROCESS)
    }

    /// Defaults overridden by `lookup` (the environment, or a map in tests):
    /// `OXCCL_INIT_TIMEOUT` (seconds), `NCCL_COMM_ID`, `NCCL_SOCKET_IFNAME`.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> BootstrapOptions {
        BootstrapOptions::from(Env::from_fn(&lookup))
    }

    fn from(env: Env<'_>) -> BootstrapOptions {
        BootstrapOptions {
            init_timeout: env.get(&vars::OXCCL_INIT_TIMEOUT),
            comm_id: env
                .get(&vars::NCCL_COMM_ID)
                .filter(|s| !s.trim().is_empty()),
            socket_ifname: env
                .get(&vars::NCCL_SOCKET_IFNAME)
                .filter(|s| !s.trim().is_empty()),
            ..BootstrapOptions::default()
        }
    }
}

/// One rank's connection to the bootstrap network of a communicator.
pub struct Bootstrap {
    rank: u32,
    nranks: u32,
    local_ip: IpAddr,
    key: SessionKey,
    root: SocketAddr,
    peers: Arc<[PeerInfo]>,
    net: Arc<PeerNet>,
    listener: AuthListener,
    abort: AbortFlag,
    timeout: Duration,
    handshake_timeout: Duration,
    /// Serialises this rank's internal collectives (their messages share tags).
    coll: Mutex<()>,
}

/// A handle that tells whether a bootstrap's peers are alive, usable from another thread and
/// after the [`Bootstrap`] itself is gone (it then reports nothing new).
#[derive(Clone)]
pub struct PeerLiveness {
    net: Arc<PeerNet>,
}

impl PeerLiveness {
    /// The first peer found dead (its connection dropped without a goodbye or, on this host,
    /// its process gone), as the error to report; `None` while every peer lives or left cleanly.
    pub fn failure(&self) -> Option<Error> {
        self.net.mailbox.probe()
    }
}

impl std::fmt::Debug for Bootstrap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bootstrap")
            .field("rank", &self.rank)
            .field("nranks", &self.nranks)
            .field("listen", &self.listener.local_addr())
            .field("root", &self.root)
            .finish()
    }
}

impl Bootstrap {
    /// Rendezvous with the other ranks through the root named in `id`.
    pub fn init(
        id: &UniqueId,
        rank: u32,
        nranks: u32,
        opts: &BootstrapOptions,
        abort: &AbortFlag,
    ) -> Result<Bootstrap> {
        if nranks == 0 {
            return Err(Error::arg("nranks must be at least 1"));
        }
        if rank >= nranks {
            return Err(Error::arg(format!(
                "rank {rank} is out of range for nranks={nranks}"
            )));
        }
        let fields = id.fields()?;
        let start = Instant::now();
        let deadline = Deadline::after(opts.init_timeout);
        if fields.root_at_init && rank == 0 {
            root::start_at(
                fields.root,
                root::RootConfig {
                    key: fields.key,
                    advertised: fields.root,
                    handshake_timeout: opts.handshake_timeout,
                    // Every communicator of an NCCL_COMM_ID job reuses the port: free it at once.
                    linger: Duration::ZERO,
                    idle_limit: Some(opts.init_timeout).filter(|t| !t.is_zero()),
                },
            )?;
        }
        let local_ip = iface::rank_ip(opts.socket_ifname.as_deref(), fields.root)?;
        let tcp = TcpListener::bind((local_ip, 0))
            .map_err(|e| Error::io(format!("binding the bootstrap listener on {local_ip}"), e))?;
        let net = Arc::new(PeerNet::new(
            rank,
            nranks,
            fields.key,
            opts.handshake_timeout,
        ));
        // Listen before registering: peers may dial as soon as the root answers them.
        let listener = net.listen(tcp)?;
        let me = PeerInfo::local(rank, listener.local_addr());
        let registered = root::register(&root::RegisterArgs {
            root: fields.root,
            key: fields.key,
            me: &me,
            nranks,
            init_timeout: opts.init_timeout,
            deadline,
            root_at_init: fields.root_at_init,
            abort,
        });
        let table = match registered {
            Ok(t) => t,
            Err(e) => {
                listener.stop();
                net.close();
                return Err(e);
            }
        };
        let peers: Arc<[PeerInfo]> = table.into();
        net.mailbox.set_peers(peers.clone());
        tracing::info!(
            target: "oxccl::bootstrap",
            "rank {rank}/{nranks}: bootstrap ready in {} ms (root {}, listening on {})",
            start.elapsed().as_millis(),
            fields.root,
            listener.local_addr()
        );
        Ok(Bootstrap {
            rank,
            nranks,
            local_ip,
            key: fields.key,
            root: fields.root,
            peers,
            net,
            listener,
            abort: abort.clone(),
            timeout: opts.init_timeout,
            handshake_timeout: opts.handshake_timeout,
            coll: Mutex::new(()),
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

    /// The rendezvous table: every rank's address, pid and host, indexed by rank.
    pub fn peers(&self) -> &[PeerInfo] {
        &self.peers
    }

    /// A handle that watches the peers' liveness (see [`PeerLiveness`]).
    pub fn liveness(&self) -> PeerLiveness {
        PeerLiveness {
            net: self.net.clone(),
        }
    }

    /// The secret of this communicator, for transports that authenticate their own connections.
    pub fn session_key(&self) -> SessionKey {
        self.key
    }

    /// How long a connection may take to authenticate.
    pub fn handshake_timeout(&self) -> Duration {
        self.handshake_timeout
    }

    /// The local address other ranks reach this rank on (for data listeners).
    pub fn local_ip(&self) -> IpAddr {
        self.local_ip
    }

    fn wait_spec(&self) -> WaitSpec<'_> {
        WaitSpec {
            watch: Watch::new(Deadline::after(self.timeout), Some(&self.abort)),
            timeout: self.timeout,
            timeout_source: "bootstrap timeout, OXCCL_INIT_TIMEOUT",
        }
    }

    fn check_peer(&self, peer: u32) -> Result<()> {
        if peer >= self.nranks {
            return Err(Error::arg(format!(
                "bootstrap peer {peer} is out of range for nranks={}",
                self.nranks
            )));
        }
        Ok(())
    }

    fn check_user_tag(tag: u64) -> Result<()> {
        if tag & RESERVED_TAG_BIT != 0 {
            return Err(Error::arg(format!(
                "bootstrap tag {tag:#x} has the top bit set, which is reserved for oxccl"
            )));
        }
        Ok(())
    }

    fn send_raw(&self, peer: u32, tag: u64, data: &[u8]) -> Result<()> {
        if data.len() > MAX_BOOTSTRAP_MSG {
            return Err(Error::arg(format!(
                "bootstrap message of {} bytes exceeds the limit of {MAX_BOOTSTRAP_MSG}",
                data.len()
            )));
        }
        let watch = Watch::new(Deadline::after(self.timeout), Some(&self.abort));
        self.net.send(peer, tag, data, &watch)
    }

    /// Every rank's `mine`, indexed by rank.
    ///
    /// A ring: each rank only ever talks to its two neighbours, so a job opens 2 connections per
    /// rank instead of a full mesh. Every rank must call it, in the same order as other internal
    /// collectives.
    pub fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.ring_all_gather(TAG_ALL_GATHER, mine)
    }

    /// [`Bootstrap::all_gather`] of one `u64` per rank.
    pub fn all_gather_u64(&self, mine: u64) -> Result<Vec<u64>> {
        (self.all_gather(&mine.to_le_bytes())?.iter())
            .map(|b| {
                let bytes = b.as_slice().try_into().map_err(|_| {
                    Error::Internal(format!("a peer sent {} bytes for a u64", b.len()))
                })?;
                Ok(u64::from_le_bytes(bytes))
            })
            .collect()
    }

    fn ring_all_gather(&self, tag: u64, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let n = self.nranks;
        let r = self.rank;
        let mut out: Vec<Vec<u8>> = vec![Vec::new(); n as usize];
        out[r as usize] = mine.to_vec();
        if n == 1 {
            return Ok(out);
        }
        let _g = self.coll.lock().unwrap_or_else(|p| p.into_inner());
        let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
        for step in 0..n - 1 {
            let send_idx = ((r + n - step) % n) as usize;
            let recv_idx = ((r + n - step - 1) % n) as usize;
            self.send_raw(next, tag, &out[send_idx])?;
            out[recv_idx] = self.net.recv(prev, tag, &self.wait_spec())?;
        }
        Ok(out)
    }

    /// Returns once every rank has entered the barrier.
    pub fn barrier(&self) -> Result<()> {
        self.ring_all_gather(TAG_BARRIER, &[]).map(|_| ())
    }

    /// Sends a message to `peer` under `tag` (top bit reserved); never waits for the receiver.
    pub fn send(&self, peer: u32, tag: u64, data: &[u8]) -> Result<()> {
        self.check_peer(peer)?;
        Self::check_user_tag(tag)?;
        self.send_raw(peer, tag, data)
    }

    /// Receives the next message from `peer` under `tag`.
    pub fn recv(&self, peer: u32, tag: u64) -> Result<Vec<u8>> {
        self.check_peer(peer)?;
        Self::check_user_tag(tag)?;
        self.net.recv(peer, tag, &self.wait_spec())
    }

    /// As [`Bootstrap::recv`] without a deadline: waits until the message comes, the
    /// communicator aborts, `stop` is raised or the peer dies (NET peers connected on first use,
    /// whose matching operation may come at any time).
    pub fn recv_until_stopped(&self, peer: u32, tag: u64, stop: &AbortFlag) -> Result<Vec<u8>> {
        self.check_peer(peer)?;
        Self::check_user_tag(tag)?;
        let spec = WaitSpec {
            watch: Watch::new(Deadline::never(), Some(&self.abort)).and(stop),
            timeout: Duration::MAX,
            timeout_source: "no timeout",
        };
        self.net.recv(peer, tag, &spec)
    }
}

impl Drop for Bootstrap {
    fn drop(&mut self) {
        self.listener.stop();
        self.net.close();
    }
}

/// Helpers shared by the bootstrap and transport tests: ranks as threads of one process.
#[cfg(test)]
pub(crate) mod test_util {
    use super::*;

    // In `testing` (public) because the network's tests, in oxccl-net, run ranks too.
    pub(crate) use crate::testing::{bootstrap_opts as opts, run_ranks};

    /// Starts `init` of each `(rank, nranks)` on its own thread and returns every result.
    pub(crate) fn init_each(
        id: UniqueId,
        o: &BootstrapOptions,
        ranks: &[(u32, u32)],
        stagger: Duration,
    ) -> Vec<Result<Bootstrap>> {
        let handles: Vec<_> = ranks
            .iter()
            .map(|&(r, n)| {
                let o = o.clone();
                let h =
                    std::thread::spawn(move || Bootstrap::init(&id, r, n, &o, &AbortFlag::new()));
                std::thread::sleep(stagger);
                h
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::test_util::{init_each, opts, run_ranks};
    use super::wire::{ConnKind, Hello};
    use super::*;
    use std::io::Write;
    use std::net::TcpStream;
    use std::thread;

    fn payload(rank: u32, len: usize) -> Vec<u8> {
        (0..len).map(|i| (rank as usize * 37 + i) as u8).collect()
    }

    #[test]
    fn bootstrap_collectives_and_p2p_for_1_2_3_8_ranks() {
        for n in [1u32, 2, 3, 8] {
            let ok = run_ranks(n, move |b| {
                let r = b.rank();
                assert_eq!(b.nranks(), n);
                assert_eq!(b.peers().len(), n as usize);
                let all = b.all_gather(&payload(r, r as usize * 3 + 1)).unwrap();
                for (q, got) in all.iter().enumerate() {
                    assert_eq!(
                        *got,
                        payload(q as u32, q * 3 + 1),
                        "n={n} rank {r} slot {q}"
                    );
                }
                b.barrier().unwrap();
                // Tags sent 1, 2, 1, 3 and received 3, 1, 2, 1: FIFO per (peer, tag) only.
                let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
                for (i, tag) in [1u64, 2, 1, 3].into_iter().enumerate() {
                    b.send(next, tag, &[r as u8, i as u8]).unwrap();
                }
                assert_eq!(b.recv(prev, 3).unwrap(), vec![prev as u8, 3]);
                assert_eq!(b.recv(prev, 1).unwrap(), vec![prev as u8, 0]);
                assert_eq!(b.recv(prev, 2).unwrap(), vec![prev as u8, 1]);
                assert_eq!(b.recv(prev, 1).unwrap(), vec![prev as u8, 2]);
                let again = b.all_gather(&[r as u8]).unwrap();
                assert_eq!(again, (0..n).map(|q| vec![q as u8]).collect::<Vec<_>>());
                b.barrier().unwrap();
                true
            });
            assert!(ok.into_iter().all(|x| x));
        }
    }

    #[test]
    fn bootstrap_rejects_reserved_tags_and_bad_peers() {
        run_ranks(1, |b| {
            assert!(matches!(
                b.send(0, RESERVED_TAG_BIT | 5, b"x"),
                Err(Error::InvalidArgument(_))
            ));
            assert!(matches!(b.recv(3, 1), Err(Error::InvalidArgument(_))));
            let big = vec![0u8; MAX_BOOTSTRAP_MSG + 1];
            assert!(matches!(b.send(0, 1, &big), Err(Error::InvalidArgument(_))));
            b.send(0, 9, b"self").unwrap();
            assert_eq!(b.recv(0, 9).unwrap(), b"self");
        });
        let id = UniqueId::generate(&opts(Duration::from_secs(1))).unwrap();
        let e = Bootstrap::init(&id, 2, 2, &opts(Duration::from_secs(1)), &AbortFlag::new());
        assert!(matches!(e, Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn bootstrap_hostile_connections_do_not_stall_init() {
        let mut o = opts(Duration::from_secs(10));
        // Long enough that a listener blocked by the silent client would visibly stall init.
        o.handshake_timeout = Duration::from_secs(5);
        let id = UniqueId::generate(&o).unwrap();
        let root = id.root_addr().unwrap();
        let hostile = |addr| {
            let mut conns = Vec::new();
            let wrong = Hello {
                kind: ConnKind::Root,
                rank: 0,
                key: SessionKey {
                    secret: 1,
                    nonce: 2,
                },
            };
            let mut c = TcpStream::connect(addr).unwrap();
            c.write_all(&wrong.encode()).unwrap();
            conns.push(c);
            let mut c = TcpStream::connect(addr).unwrap();
            c.write_all(&[0xAB; 300]).unwrap();
            conns.push(c);
            let mut c = TcpStream::connect(addr).unwrap();
            c.write_all(b"OXC").unwrap();
            conns.push(c);
            conns.push(TcpStream::connect(addr).unwrap()); // silent
            drop(TcpStream::connect(addr).unwrap()); // port-scanner style
            conns
        };
        // An authenticated client announcing an absurd frame length is dropped too.
        let right = Hello {
            kind: ConnKind::Root,
            rank: 0,
            key: id.fields().unwrap().key,
        };
        let mut huge = TcpStream::connect(root).unwrap();
        huge.write_all(&right.encode()).unwrap();
        huge.write_all(&wire::frame_header(1, 1 << 40)).unwrap();
        let _held = (hostile(root), huge);
        let start = std::time::Instant::now();
        let res = init_each(id, &o, &[(0, 3), (1, 3), (2, 3)], Duration::ZERO);
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "{:?}",
            start.elapsed()
        );
        let bs: Vec<Bootstrap> = res.into_iter().map(|r| r.unwrap()).collect();
        // The same against a rank's own listener, then a collective.
        let _held2 = hostile(bs[1].peers()[1].addr);
        let start = std::time::Instant::now();
        let hs: Vec<_> = bs
            .into_iter()
            .map(|b| thread::spawn(move || b.all_gather(&[b.rank() as u8]).unwrap()))
            .collect();
        for h in hs {
            assert_eq!(h.join().unwrap(), vec![vec![0], vec![1], vec![2]]);
        }
        assert!(start.elapsed() < Duration::from_secs(3));
    }

    #[test]
    fn bootstrap_init_timeout_lists_missing_ranks() {
        let o = opts(Duration::from_secs(1));
        let id = UniqueId::generate(&o).unwrap();
        let start = std::time::Instant::now();
        let res = init_each(id, &o, &[(0, 4), (1, 4)], Duration::ZERO);
        assert!(start.elapsed() < Duration::from_secs(3));
        for r in res {
            match r {
                Err(Error::Timeout(m)) => {
                    assert!(m.contains("ranks 2, 3 of 4 never connected"), "{m}");
                    assert!(m.contains(&id.root_addr().unwrap().to_string()), "{m}");
                }
                other => panic!("expected a timeout, got {other:?}"),
            }
        }
        // A latecomer hears why the rendezvous failed instead of waiting.
        let late = Bootstrap::init(&id, 2, 4, &o, &AbortFlag::new()).unwrap_err();
        assert!(late.to_string().contains("already failed"), "{late}");
    }

    #[test]
    fn bootstrap_reused_or_gone_unique_id_is_an_explicit_error() {
        let o = opts(Duration::from_secs(5));
        let id = UniqueId::generate(&o).unwrap();
        let first = init_each(id, &o, &[(0, 2), (1, 2)], Duration::ZERO);
        assert!(first.iter().all(|r| r.is_ok()));
        let again = Bootstrap::init(&id, 0, 2, &o, &AbortFlag::new()).unwrap_err();
        assert!(matches!(again, Error::InvalidUsage(_)), "{again:?}");
        assert!(
            again
                .to_string()
                .contains("unique id already used by a completed communicator")
        );

        let gone = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let mut f = id.fields().unwrap();
        f.root = gone;
        let stale = UniqueId::encode(&f);
        let start = std::time::Instant::now();
        let e = Bootstrap::init(&stale, 0, 2, &o, &AbortFlag::new()).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(2));
        assert!(matches!(e, Error::Remote(_)), "{e:?}");
        assert!(
            e.to_string().contains("cannot reach the bootstrap root at"),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains("stale unique id or root process exited"),
            "{e}"
        );
    }

    #[test]
    fn bootstrap_wrong_nranks_or_duplicate_rank_fails_every_rank() {
        let o = opts(Duration::from_secs(5));
        let id = UniqueId::generate(&o).unwrap();
        let res = init_each(id, &o, &[(0, 2), (1, 3)], Duration::from_millis(100));
        for r in res {
            let e = r.unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
            assert!(e.to_string().contains("nranks mismatch"), "{e}");
        }
        let id = UniqueId::generate(&o).unwrap();
        let res = init_each(id, &o, &[(1, 3), (1, 3)], Duration::from_millis(100));
        for r in res {
            let e = r.unwrap_err();
            assert!(e.to_string().contains("rank 1 joined twice"), "{e}");
        }
    }

    #[test]
    fn bootstrap_abort_interrupts_init() {
        let o = opts(Duration::from_secs(30));
        let id = UniqueId::generate(&o).unwrap();
        let abort = AbortFlag::new();
        let a2 = abort.clone();
        let h = thread::spawn(move || {
            let r = Bootstrap::init(&id, 0, 2, &o, &a2);
            (r, std::time::Instant::now())
        });
        thread::sleep(Duration::from_millis(300));
        let t = std::time::Instant::now();
        abort.abort();
        let (r, done) = h.join().unwrap();
        assert!(matches!(r, Err(Error::Aborted)), "{r:?}");
        assert!(done.duration_since(t) < Duration::from_millis(500));
    }

    #[test]
    fn bootstrap_recv_from_a_departed_rank_fails() {
        let res = run_ranks(3, |b| {
            b.barrier().unwrap();
            match b.rank() {
                0 => {
                    let e = b.recv(2, 77).unwrap_err();
                    assert!(e.to_string().contains("rank 2"), "{e}");
                    true
                }
                2 => {
                    thread::sleep(Duration::from_millis(200));
                    drop(b);
                    true
                }
                _ => {
                    thread::sleep(Duration::from_millis(400));
                    true
                }
            }
        });
        assert!(res.into_iter().all(|x| x));
    }

    #[test]
    fn bootstrap_nccl_comm_id_mode() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let mut o = opts(Duration::from_secs(10));
        o.comm_id = Some(format!("127.0.0.1:{port}"));
        for _ in 0..2 {
            // The root is free again after each communicator, so the port is reusable.
            let id = UniqueId::generate(&o).unwrap();
            // Rank 2 and 1 start before rank 0 has started the root: they must retry.
            let res = init_each(
                id,
                &o,
                &[(2, 3), (1, 3), (0, 3)],
                Duration::from_millis(150),
            );
            let bs: Vec<Bootstrap> = res.into_iter().map(|r| r.unwrap()).collect();
            let hs: Vec<_> = bs
                .into_iter()
                .map(|b| thread::spawn(move || b.all_gather(&[b.rank() as u8]).unwrap().len()))
                .collect();
            assert!(hs.into_iter().all(|h| h.join().unwrap() == 3));
        }
    }

    #[test]
    fn bootstrap_options_from_lookup() {
        let o = BootstrapOptions::from_lookup(|k| match k {
            "OXCCL_INIT_TIMEOUT" => Some("2.5".into()),
            "NCCL_SOCKET_IFNAME" => Some("=lo".into()),
            _ => None,
        });
        assert_eq!(o.init_timeout, Duration::from_millis(2500));
        assert_eq!(o.socket_ifname.as_deref(), Some("=lo"));
        assert!(o.comm_id.is_none());
        let o =
            BootstrapOptions::from_lookup(|k| (k == "OXCCL_INIT_TIMEOUT").then(|| "soon".into()));
        assert_eq!(o.init_timeout, Duration::from_secs(300));
    }

    #[test]
    fn bootstrap_loopback_interface_filter() {
        let mut o = opts(Duration::from_secs(5));
        o.socket_ifname = Some("=lo".into());
        let id = UniqueId::generate(&o).unwrap();
        assert!(id.root_addr().unwrap().ip().is_loopback());
        let res = init_each(id, &o, &[(0, 2), (1, 2)], Duration::ZERO);
        for b in res {
            assert!(b.unwrap().local_ip().is_loopback());
        }
    }
}
