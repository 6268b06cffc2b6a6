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
//! Where both ends allow it (`SocketConfig::duplex`, carried in the handle), the two directions
//! of a link between two ranks share one control socket, the one the lower rank opened
//! ([`Net::pair`]): each small message then carries the TCP acknowledgement of the other
//! direction's, instead of each direction's receiver sending ACKs of its own.
//!
//! A receive never writes past the size it posted: a larger message is an error ("message
//! truncated"), as with NCCL. A connection reset or a peer that closes in the middle of a message
//! fails the request on that side; a peer that closes between messages only marks the
//! connection closed (a clean shutdown), and any later wait is the peer watch's business.

mod config;
mod connection;
mod handle;
mod parts;
mod recv;
mod send;

pub use config::{DEFAULT_WORKERS, MAX_SOCKS, SocketConfig};
#[cfg(test)]
pub(super) use handle::redirect_handle;
#[cfg(any(test, feature = "probes"))]
pub(super) use recv::set_quickack;

use self::connection::{Arrivals, SocketListen, dial};
use self::handle::decode_handle;
use self::parts::parts;
use self::recv::{RecvReq, RecvSide, RecvState, STAGE_BYTES};
use self::send::{SendReq, SendSide, SocketSendComm};
use super::SendComm;
use super::readiness::Readiness;
use super::socket_workers::{Job, Lane, ReqState, SocketWorkers, Span};
use super::{CommRef, Handle, Listen, MemHandle, Net, PTR_HOST, Properties, RecvComm, Request};
use oxccl_core::bootstrap::listener::AuthListener;
use oxccl_core::bootstrap::wire::SessionKey;
use oxccl_core::error::{Error, Result};
use oxccl_core::lock::lock;
use std::collections::VecDeque;
use std::net::{IpAddr, Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

impl SocketNet {
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
}

/// How long a closing connection waits for its helper threads to let go of its parts.
const CLOSE_DRAIN: Duration = Duration::from_secs(10);

/// Waits until no helper thread holds a part of `lanes` (their sockets shut down), so that the
/// caller may free the requests' memory once close returns, as NCCL's net API lets it.
fn drain_lanes(lanes: &[Lane], what: &str) {
    if !lanes.iter().all(|l| l.drain(CLOSE_DRAIN)) {
        tracing::warn!(target: "oxccl::net",
            "closing a {what} connection: a network helper still holds a part after {} s; its memory may still be written",
            CLOSE_DRAIN.as_secs());
    }
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
                let job = Job::new(
                    Span {
                        addr: data as usize + off,
                        len,
                    },
                    state.clone(),
                );
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
            return match r.state.settled() {
                None => Ok(None),
                Some(Ok(())) => Ok(Some(r.size)),
                Some(Err(why)) => Err(Error::Remote(format!("network send failed: {why}"))),
            };
        }
        let r = req
            .0
            .downcast_mut::<RecvReq>()
            .ok_or_else(|| Error::Internal("a request the socket network did not make".into()))?;
        lock(&r.side).progress()?;
        if !r.state.done.load(Ordering::Acquire) {
            return Ok(None);
        }
        match r.state.parts.settled() {
            None => Ok(None),
            Some(Ok(())) => Ok(*lock(&r.state.size)),
            Some(Err(why)) => Err(Error::Remote(format!("network receive failed: {why}"))),
        }
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
        drain_lanes(&side.lanes, "send");
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
        drain_lanes(&side.lanes, "receive");
        Ok(())
    }

    fn close_listen(&self, mut listen: Listen) -> Result<()> {
        let l = downcast::<SocketListen>(&mut listen.0, "listen comm")?;
        lock(&l.arrived).remove(&l.token);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
