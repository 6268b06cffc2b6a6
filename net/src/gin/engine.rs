//! The GIN proxy engine of one GIN context on one rank: it consumes the descriptors the
//! device posts for each destination rank, sends them as records of messages (`wire.rs`) over
//! a network connection per peer, and applies the messages peers send it. A descriptor is done
//! locally (its counter bumped, `cis` advanced past it) once every message carrying its records
//! was sent; a destination writes the payloads of the messages it takes in one pass, in the
//! order they arrive on the connection, then applies their signals, which is what NCCL
//! promises: a signal is seen only after its put's payload and every earlier put's to that
//! rank. Each pass writes every moved `cis` once, and applies its signals together: on a
//! device, adding to a signal means reading it back first (a kernel may have reset it).
//!
//! Puts to this rank itself are copied at once. Messages in flight per peer are bounded by the
//! bounce buffers ([`RING`]); a descriptor waits in its queue until one is free.

use super::gfd::Gfd;
use super::rings::{Rings, signal_add};
use super::wire::{CHUNK_BYTES, HEADER_BYTES, Header, MESSAGE_BYTES, SignalAdd, record_bytes};
use super::{DeviceCells, GinMemory};
use crate::{CommRef, MemHandle, Net, PTR_HOST, RecvComm, Request, SendComm};
use oxccl_core::error::{Error, Result};
use std::alloc::Layout;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64};

/// Messages in flight per peer and direction (each with a bounce buffer of the largest
/// message, a header and 256 KiB).
pub const RING: usize = 4;

/// One GIN context's rings and arrays, in memory both the device and this host reach (the
/// layout NVIDIA's `ncclGinProxyGpuCtx_t` points at).
#[derive(Debug, Clone, Copy)]
pub struct ContextMem {
    /// `nranks * queue_size` descriptor slots of 64 bytes, destination rank by rank.
    pub queues: *mut u64,
    /// Slots per destination (a power of two).
    pub queue_size: u32,
    /// Per destination: descriptors done locally (`cis`), moved by the engine only.
    pub cis: *mut u32,
    /// Counters the engine bumps when a put's source was consumed.
    pub counters: *mut u64,
    /// Entries of `counters`.
    pub ncounters: usize,
    /// Signals peers' puts add to.
    pub signals: *mut u64,
    /// Entries of `signals`.
    pub nsignals: usize,
    /// Where the device reads `cis`, `counters` and `signals` instead, when they lie in its own
    /// memory (the host copies above then go unused).
    pub device_cells: Option<DeviceCells>,
}

// SAFETY: memory shared with the device for the engine's whole life; the engine touches the
// counters, signals, indices and slots only atomically, each word from one thread at a time.
unsafe impl Send for ContextMem {}

impl ContextMem {
    pub(crate) fn word64(&self, base: *mut u64, i: usize) -> &AtomicU64 {
        // SAFETY: `base` is one of this context's u64 arrays and the callers bound `i` by its
        // length; the memory outlives the engine and is only accessed atomically.
        unsafe { AtomicU64::from_ptr(base.add(i)) }
    }

    pub(crate) fn ci(&self, peer: usize) -> &AtomicU32 {
        // SAFETY: `cis` holds one u32 per rank; `peer` is a rank.
        unsafe { AtomicU32::from_ptr(self.cis.add(peer)) }
    }

    /// The eight words of slot `index` (free-running) of `peer`'s ring.
    pub(crate) fn slot(&self, peer: usize, index: u32) -> [&AtomicU64; 8] {
        let at = (peer * self.queue_size as usize + (index % self.queue_size) as usize) * 8;
        std::array::from_fn(|w| self.word64(self.queues, at + w))
    }
}

/// A page-aligned host buffer the network is given.
struct Bounce {
    ptr: *mut u8,
    layout: Layout,
}

impl Bounce {
    fn new(bytes: usize) -> Bounce {
        let layout = Layout::from_size_align(bytes, 4096).expect("a valid layout");
        // SAFETY: a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Bounce { ptr, layout }
    }

    fn message(&self, i: usize) -> *mut u8 {
        self.ptr.wrapping_add(i * MESSAGE_BYTES)
    }

    /// Message buffer `i` as bytes.
    ///
    /// # Safety
    /// No network request is using buffer `i`.
    unsafe fn bytes(&mut self, i: usize) -> &mut [u8] {
        // SAFETY: buffer `i` lies inside the allocation; the caller guarantees nobody else uses it.
        unsafe { std::slice::from_raw_parts_mut(self.message(i), MESSAGE_BYTES) }
    }
}

impl Drop for Bounce {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

// SAFETY: owned heap memory, handed to the network by address only while a request uses it.
unsafe impl Send for Bounce {}

/// A descriptor being sent: what is left of it.
struct Outgoing {
    gfd: Gfd,
    /// Payload bytes already put into messages.
    sent: u64,
}

/// A message in flight to a peer.
struct InFlight {
    req: Request,
    buf: usize,
    /// The descriptors whose last record it carries: their counters, bumped once it is sent.
    last: Vec<Option<u16>>,
}

/// A message built in its bounce buffer that the network has yet to take.
struct Staged {
    buf: usize,
    len: usize,
    /// As [`InFlight::last`].
    last: Vec<Option<u16>>,
}

/// The connections to and from one peer and their messages.
struct Peer {
    send: Option<SendComm>,
    recv: Option<RecvComm>,
    send_mh: Option<MemHandle>,
    recv_mh: Option<MemHandle>,
    send_bufs: Bounce,
    recv_bufs: Bounce,
    free: Vec<usize>,
    current: Option<Outgoing>,
    staged: Option<Staged>,
    sends: VecDeque<InFlight>,
    /// Receives posted, oldest first, with their buffers.
    recvs: VecDeque<(usize, Request)>,
    /// Receive buffers not posted (the network was busy).
    idle: Vec<usize>,
}

/// The two connections of a link with one peer.
pub struct PeerLink {
    /// Messages to the peer.
    pub send: SendComm,
    /// Messages from the peer.
    pub recv: RecvComm,
}

/// One GIN context's engine on one rank.
pub struct GinEngine {
    net: Arc<dyn Net>,
    rank: usize,
    rings: Rings,
    windows: Arc<dyn GinMemory>,
    /// By rank; `None` for this rank.
    peers: Vec<Option<Peer>>,
    /// Signals this pass applies once its payloads are written: on the device, adding to a
    /// signal reads it back, and one read-back serves them all.
    signals: Vec<(usize, u64)>,
}

impl GinEngine {
    /// The engine of rank `rank` over `links` (one per other rank, `None` at `rank`), its
    /// context's memory `mem` and its windows.
    pub fn new(
        net: Arc<dyn Net>,
        rank: usize,
        links: Vec<Option<PeerLink>>,
        mem: ContextMem,
        windows: Arc<dyn GinMemory>,
    ) -> Result<GinEngine> {
        let nranks = links.len();
        let mut engine = GinEngine {
            net,
            rank,
            rings: Rings::new(mem, rank, nranks, Some(windows.clone()))?,
            windows,
            peers: Vec::with_capacity(nranks),
            signals: Vec::new(),
        };
        for link in links {
            let peer = match link {
                Some(l) => Some(engine.peer(l)?),
                None => None,
            };
            engine.peers.push(peer);
        }
        Ok(engine)
    }

    /// Registers the bounce buffers of a link.
    fn peer(&self, link: PeerLink) -> Result<Peer> {
        let bytes = RING * MESSAGE_BYTES;
        let mut p = Peer {
            send_mh: None,
            recv_mh: None,
            send_bufs: Bounce::new(bytes),
            recv_bufs: Bounce::new(bytes),
            free: (0..RING).collect(),
            current: None,
            staged: None,
            sends: VecDeque::new(),
            recvs: VecDeque::new(),
            idle: (0..RING).rev().collect(),
            send: Some(link.send),
            recv: Some(link.recv),
        };
        let net = &*self.net;
        let send = p.send.as_ref().expect("set above");
        p.send_mh = Some(net.reg_mr(CommRef::Send(send), p.send_bufs.ptr, bytes, PTR_HOST)?);
        let recv = p.recv.as_ref().expect("set above");
        p.recv_mh = Some(net.reg_mr(CommRef::Recv(recv), p.recv_bufs.ptr, bytes, PTR_HOST)?);
        Ok(p)
    }

    /// Moves everything that can move: new descriptors, sends done, messages received. True
    /// when anything did.
    pub fn progress(&mut self) -> Result<bool> {
        let mut moved = false;
        for peer in 0..self.peers.len() {
            moved |= self.progress_peer(peer)?;
        }
        self.rings.publish()?;
        if !self.signals.is_empty() {
            self.rings.add_signals(&self.signals)?;
            for &(id, v) in &self.signals {
                tracing::trace!(target: "oxccl::net", "GIN rank {}: signal {id} += {v}", self.rank);
            }
            self.signals.clear();
        }
        Ok(moved)
    }

    /// Whether a descriptor is waiting in a ring, or messages to some peer are still being
    /// made or on their way out.
    pub fn sending(&self) -> bool {
        let posted = (0..self.peers.len()).any(|peer| self.rings.posted(peer));
        posted
            || (self.peers.iter().flatten())
                .any(|p| p.current.is_some() || p.staged.is_some() || !p.sends.is_empty())
    }

    fn progress_peer(&mut self, peer: usize) -> Result<bool> {
        let mut moved = false;
        if peer == self.rank {
            while let Some(g) = self.rings.take(peer)? {
                self.local(&g)?;
                self.rings.finish_later(peer, g.counter)?;
                moved = true;
            }
            return Ok(moved);
        }
        moved |= self.send_more(peer)?;
        moved |= self.retire_sends(peer)?;
        moved |= self.receive(peer)?;
        Ok(moved)
    }

    /// A put, inline put or signal to this rank itself.
    fn local(&mut self, g: &Gfd) -> Result<()> {
        if g.size > 0 {
            let dst = (g.dst_handle, g.dst_offset);
            match (g.inline_value, g.src) {
                (Some(v), _) => {
                    let bytes = v.to_le_bytes();
                    self.windows
                        .write(dst.0, dst.1, &bytes[..g.size as usize])?;
                }
                (None, Some(src)) => self.windows.copy_within(src, dst, g.size as usize)?,
                (None, None) => {
                    return Err(Error::Internal("a GIN put without a source".into()));
                }
            }
        }
        self.signal(signal_of(g))
    }

    /// Adds `s` to this pass's signals: applied after every payload write of the pass, so the
    /// device sees each signal after its payload.
    fn signal(&mut self, s: Option<SignalAdd>) -> Result<()> {
        let Some(s) = s else { return Ok(()) };
        let id = self.rings.check_signal(s.id)?;
        self.signals.push((id, s.value));
        Ok(())
    }

    /// Turns `peer`'s descriptors into messages while bounce buffers are free: each message
    /// takes as many records as fit, so a burst of small puts is one send.
    fn send_more(&mut self, peer: usize) -> Result<bool> {
        let mut moved = false;
        loop {
            let p = self.peers[peer].as_mut().expect("a peer");
            if p.staged.is_none() {
                let Some(&buf) = p.free.last() else {
                    return Ok(moved);
                };
                match self.build(peer, buf)? {
                    Some(staged) => {
                        let p = self.peers[peer].as_mut().expect("a peer");
                        p.free.pop();
                        p.staged = Some(staged);
                    }
                    None => return Ok(moved),
                }
            }
            let p = self.peers[peer].as_mut().expect("a peer");
            let staged = p.staged.as_ref().expect("staged above");
            let (send, mh) = (
                p.send.as_mut().expect("open"),
                p.send_mh.as_ref().expect("registered"),
            );
            // SAFETY: the message lies in the registered bounce buffer `staged.buf`, which no
            // other request uses until this one is done.
            let req = unsafe {
                self.net.isend(
                    send,
                    p.send_bufs.message(staged.buf),
                    staged.len,
                    self.rank as i32,
                    mh,
                )
            }?;
            let Some(req) = req else { return Ok(moved) };
            let staged = p.staged.take().expect("staged above");
            tracing::trace!(target: "oxccl::net", "GIN rank {}: sent {} B to rank {peer}", self.rank, staged.len);
            p.sends.push_back(InFlight {
                req,
                buf: staged.buf,
                last: staged.last,
            });
            moved = true;
        }
    }

    /// Fills bounce buffer `buf` with records of `peer`'s descriptors, in order; `None` when
    /// none waits.
    fn build(&mut self, peer: usize, buf: usize) -> Result<Option<Staged>> {
        let GinEngine {
            peers,
            rings,
            windows,
            ..
        } = self;
        let p = peers[peer].as_mut().expect("a peer");
        // SAFETY: `buf` is free: no request uses it.
        let msg = unsafe { p.send_bufs.bytes(buf) };
        let mut len = 0;
        let mut last = Vec::new();
        let mut reads = Vec::new();
        loop {
            if p.current.is_none() {
                match rings.take(peer)? {
                    Some(gfd) => p.current = Some(Outgoing { gfd, sent: 0 }),
                    None => break,
                }
            }
            let out = p.current.as_mut().expect("set above");
            let g = out.gfd;
            let chunk = (g.size - out.sent).min(CHUNK_BYTES as u64) as usize;
            if len + record_bytes(chunk) > MESSAGE_BYTES {
                break;
            }
            let done = out.sent + chunk as u64 == g.size;
            let header = Header {
                window: g.dst_handle,
                offset: g.dst_offset + out.sent,
                bytes: chunk as u64,
                signal: if done { signal_of(&g) } else { None },
            };
            let record = &mut msg[len..len + record_bytes(chunk)];
            header.encode(
                (&mut record[..HEADER_BYTES])
                    .try_into()
                    .expect("header bytes"),
            );
            let payload = &mut record[HEADER_BYTES..HEADER_BYTES + chunk];
            match (g.inline_value, g.src) {
                (Some(v), _) => payload.copy_from_slice(&v.to_le_bytes()[..chunk]),
                (None, Some((handle, offset))) if chunk > 0 => {
                    reads.push((handle, offset + out.sent, len + HEADER_BYTES, chunk));
                }
                _ => {}
            }
            len += record_bytes(chunk);
            if done {
                last.push(g.counter);
                p.current = None;
            } else {
                out.sent += chunk as u64;
            }
        }
        if !reads.is_empty() {
            windows.read_many(&reads, msg)?;
        }
        Ok((len > 0).then_some(Staged { buf, len, last }))
    }

    /// Retires `peer`'s sends the network is done with, in order.
    fn retire_sends(&mut self, peer: usize) -> Result<bool> {
        let mut moved = false;
        loop {
            let p = self.peers[peer].as_mut().expect("a peer");
            let Some(front) = p.sends.front_mut() else {
                return Ok(moved);
            };
            if self.net.test(&mut front.req)?.is_none() {
                return Ok(moved);
            }
            let f = p.sends.pop_front().expect("front");
            p.free.push(f.buf);
            moved = true;
            for counter in f.last {
                tracing::trace!(target: "oxccl::net", "GIN rank {}: a put to rank {peer} left", self.rank);
                self.rings.finish_later(peer, counter)?;
            }
        }
    }

    /// Keeps receives posted from `peer` and applies what landed, in order.
    fn receive(&mut self, peer: usize) -> Result<bool> {
        let mut moved = false;
        let p = self.peers[peer].as_mut().expect("a peer");
        while let Some(&buf) = p.idle.last() {
            let (recv, mh) = (
                p.recv.as_mut().expect("open"),
                p.recv_mh.as_ref().expect("registered"),
            );
            // SAFETY: buffer `buf` is idle and registered; it stays untouched until the request
            // is done.
            let req = unsafe {
                self.net.irecv(
                    recv,
                    p.recv_bufs.message(buf),
                    MESSAGE_BYTES,
                    peer as i32,
                    mh,
                )
            }?;
            let Some(req) = req else { break };
            p.idle.pop();
            p.recvs.push_back((buf, req));
            moved = true;
        }
        loop {
            let p = self.peers[peer].as_mut().expect("a peer");
            let Some((buf, req)) = p.recvs.front_mut() else {
                return Ok(moved);
            };
            let Some(len) = self.net.test(req)? else {
                return Ok(moved);
            };
            let buf = *buf;
            p.recvs.pop_front();
            tracing::trace!(target: "oxccl::net", "GIN rank {}: received {len} B from rank {peer}", self.rank);
            // SAFETY: the receive into `buf` is done and nothing else uses it until it is
            // posted again.
            let msg = unsafe { p.recv_bufs.bytes(buf) };
            let records = Header::records(msg, len)?;
            let writes: Vec<(u64, u64, &[u8])> = records
                .iter()
                .filter(|(_, payload)| !payload.is_empty())
                .map(|(h, payload)| (h.window, h.offset, *payload))
                .collect();
            if !writes.is_empty() {
                self.windows.write_many(&writes)?;
            }
            for (h, _) in &records {
                if let Some(s) = h.signal {
                    let id = self.rings.check_signal(s.id)?;
                    self.signals.push((id, s.value));
                }
            }
            self.peers[peer].as_mut().expect("a peer").idle.push(buf);
            moved = true;
        }
    }
}

/// The signal a descriptor applies at its destination.
fn signal_of(g: &Gfd) -> Option<SignalAdd> {
    signal_add(g).map(|(id, value)| SignalAdd { id, value })
}

impl Drop for GinEngine {
    fn drop(&mut self) {
        let net = &*self.net;
        for p in self.peers.iter_mut().flatten() {
            p.sends.clear();
            p.recvs.clear();
            if let (Some(c), Some(mh)) = (&p.send, p.send_mh.take()) {
                let _ = net.dereg_mr(CommRef::Send(c), mh);
            }
            if let (Some(c), Some(mh)) = (&p.recv, p.recv_mh.take()) {
                let _ = net.dereg_mr(CommRef::Recv(c), mh);
            }
            if let Some(c) = p.send.take() {
                let _ = net.close_send(c);
            }
            if let Some(c) = p.recv.take() {
                let _ = net.close_recv(c);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::gfd::{self, Signal};
    use super::super::testkit::{HostWindows, context, post};
    use super::*;
    use crate::proxy::testkit::{link, socket_net};
    use crate::socket::SocketConfig;
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    fn put(size: u64, src: (u64, u64), dst: (u64, u64)) -> Gfd {
        Gfd {
            op: gfd::PUT,
            size,
            src: Some(src),
            inline_value: None,
            dst_handle: dst.0,
            dst_offset: dst.1,
            counter: None,
            signal: None,
        }
    }

    /// Two ranks over sockets: a put of 3 MiB + 5 bytes (many messages) with a counter and a
    /// signal, an inline put with a 64-bit signal add, a bare signal, and a put to itself.
    /// The destination's signal is never seen before the put's data; the source's counter and
    /// `cis` move once the descriptors are sent; every consumed slot is cleared.
    #[test]
    fn puts_and_signals_cross_two_engines_in_order() {
        let (n0, n1) = (
            socket_net(0, SocketConfig::default()),
            socket_net(1, SocketConfig::default()),
        );
        let ((s01, r01), (s10, r10)) = (link(&n0, &n1), link(&n1, &n0));
        let big = (3 << 20) + 5;
        let w0 = Arc::new(HostWindows::new(&[big + 200, 8192], 1));
        let w1 = Arc::new(HostWindows::new(&[64, big + 8192], 2));
        let ((m0, _keep0), (m1, _keep1)) = (context(2, 4), context(2, 4));
        let mut e0 = GinEngine::new(
            n0.clone(),
            0,
            vec![
                None,
                Some(PeerLink {
                    send: s01,
                    recv: r10,
                }),
            ],
            m0,
            w0.clone(),
        )
        .unwrap();
        let mut e1 = GinEngine::new(
            n1.clone(),
            1,
            vec![
                Some(PeerLink {
                    send: s10,
                    recv: r01,
                }),
                None,
            ],
            m1,
            w1.clone(),
        )
        .unwrap();
        let mut g = put(big as u64, (1, 100), (2, 4096));
        g.op |= gfd::WITH_COUNTER | gfd::WITH_SIGNAL_INC;
        g.counter = Some(3);
        g.signal = Some(Signal::Inc(5));
        post(&m0, 1, 0, &g);
        let inline = Gfd {
            op: gfd::PUT | gfd::WITH_INLINE | gfd::WITH_SIGNAL_ADD,
            size: 4,
            src: None,
            inline_value: Some(0xdead_beef),
            dst_handle: 2,
            dst_offset: 8,
            counter: None,
            signal: Some(Signal::Add(6, 1 << 40)),
        };
        post(&m0, 1, 1, &inline);
        let bare = Gfd {
            op: gfd::PUT | gfd::WITH_SIGNAL_INC,
            size: 0,
            src: None,
            inline_value: None,
            dst_handle: 0,
            dst_offset: 0,
            counter: None,
            signal: Some(Signal::Inc(5)),
        };
        post(&m0, 1, 2, &bare);
        let mut own = put(1000, (1, 0), (2, 0));
        own.op |= gfd::WITH_SIGNAL_ADD;
        own.signal = Some(Signal::Add(7, 3));
        post(&m0, 0, 0, &own);

        let sig = |m: &ContextMem, i| m.word64(m.signals, i).load(Ordering::Acquire);
        let want = w0.get(1, 100, big);
        let t0 = Instant::now();
        while !(sig(&m1, 5) == 2 && sig(&m1, 6) == 1 << 40 && m0.ci(1).load(Ordering::Acquire) == 3)
        {
            e0.progress().unwrap();
            e1.progress().unwrap();
            if sig(&m1, 5) >= 1 {
                assert!(
                    w1.get(2, 4096, big) == want,
                    "signal seen before the put's data"
                );
            }
            assert!(t0.elapsed() < Duration::from_secs(20), "stuck");
        }
        assert_eq!(w1.get(2, 8, 4), 0xdead_beefu32.to_le_bytes());
        assert_eq!(m0.word64(m0.counters, 3).load(Ordering::Acquire), 1);
        assert_eq!(
            m0.ci(0).load(Ordering::Acquire),
            1,
            "the put to itself is done"
        );
        assert_eq!(sig(&m0, 7), 3);
        assert_eq!(w0.get(2, 0, 1000), w0.get(1, 0, 1000));
        for index in 0..3 {
            assert!(
                m0.slot(1, index)
                    .iter()
                    .all(|w| w.load(Ordering::Relaxed) == 0)
            );
        }
        assert_eq!(m1.ci(0).load(Ordering::Acquire), 0, "rank 1 posted nothing");
        drop((e0, e1));
    }

    /// With the words on the device, the engine writes them through its memory only: the
    /// counter then `cis`, and the signal at the end of the pass, after the payload; a signal a
    /// kernel reset to 0 counts from 0 again; the host copies stay untouched.
    #[test]
    fn words_on_the_device_are_written_through_the_memory() {
        use super::super::DeviceCells;
        use super::super::testkit::DeviceWords;
        let n0 = socket_net(0, SocketConfig::default());
        let (mut mem, _keep) = context(1, 4);
        let cells = DeviceCells {
            cis: 0x1000,
            counters: 0x2000,
            signals: 0x3000,
        };
        mem.device_cells = Some(cells);
        let w = Arc::new(DeviceWords::new(HostWindows::new(&[64, 64], 3)));
        let mut e = GinEngine::new(n0, 0, vec![None], mem, w.clone()).unwrap();
        let mut g = put(16, (1, 0), (2, 8));
        g.op |= gfd::WITH_COUNTER | gfd::WITH_SIGNAL_ADD;
        g.counter = Some(2);
        g.signal = Some(Signal::Add(4, 7));
        post(&mem, 0, 0, &g);
        while w.word(cells.cis) < 1 {
            e.progress().unwrap();
        }
        assert_eq!(w.word(cells.signals + 32), 7);
        assert_eq!(w.word(cells.counters + 16), 1);
        assert_eq!(
            *w.log.lock().unwrap(),
            ["write 2 8", "add 0x2010 1", "set 0x1000 1", "add 0x3020 7"]
        );
        w.words.lock().unwrap().insert(cells.signals + 32, 0);
        let inline = Gfd {
            op: gfd::PUT | gfd::WITH_INLINE | gfd::WITH_SIGNAL_ADD,
            size: 4,
            src: None,
            inline_value: Some(0x0102_0304),
            dst_handle: 2,
            dst_offset: 0,
            counter: None,
            signal: Some(Signal::Add(4, 5)),
        };
        post(&mem, 0, 1, &inline);
        while w.word(cells.cis) < 2 {
            e.progress().unwrap();
        }
        assert_eq!(w.word(cells.signals + 32), 5, "counted from the reset");
        assert_eq!(
            w.log.lock().unwrap()[4..],
            ["write 2 0", "set 0x1000 2", "add 0x3020 5"]
        );
        assert_eq!(w.windows.get(2, 0, 4), 0x0102_0304u32.to_le_bytes());
        assert_eq!(mem.ci(0).load(Ordering::Acquire), 0);
        assert_eq!(mem.word64(mem.signals, 4).load(Ordering::Acquire), 0);
        assert_eq!(mem.word64(mem.counters, 2).load(Ordering::Acquire), 0);
    }

    #[test]
    fn a_queue_size_that_is_not_a_power_of_two_is_refused() {
        let n0 = socket_net(0, SocketConfig::default());
        let (mem, _keep) = context(1, 3);
        let w = Arc::new(HostWindows::new(&[8], 0));
        let e = GinEngine::new(n0, 0, vec![None], mem, w);
        assert!(e.err().unwrap().to_string().contains("power of two"));
    }
}
