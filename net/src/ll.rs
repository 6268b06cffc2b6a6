//! LL slots over the network: the proxy's half of the LL protocol on a NET connection.
//!
//! LL moves small messages as 16-byte packets that carry their own flag (two 4-byte data words,
//! each beside the slot position's flag), so the receiving kernel polls the packets themselves:
//! no counter to poll before the data and no fence after it. Over the network each LL FIFO has
//! its own connection (the proxy cannot tell an LL message from a Simple one as it arrives):
//!
//! - **Send side**: the kernel writes a slot's packets into host memory, then its record
//!   ([`record`]: position and byte count, in the Simple FIFO's sizes area after the Simple
//!   slots' counts). The proxy sends the slot once the record names the position it waits for
//!   and every packet carries the position's flag ([`flag`]), and moves `ll_head` when the
//!   network is done with it, which frees the slot for the kernel.
//! - **Receive side**: the proxy posts a receive into every slot the kernel has consumed
//!   (`ll_head`, moved by the kernel) and does nothing when it lands: the kernel sees the
//!   packets' flags. A packet is one 16-byte unit and each half carries the flag, so a half
//!   written by the network but not yet the other never looks complete.

use super::ll_trace::LlTrace;
use super::proxy_events::{ConnEvents, ConnKey};
use super::{CommRef, MemHandle, Net, PTR_HOST, RecvComm, Request, SendComm};
use oxccl_core::error::{Error, Result};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The flag of LL slot position `pos`: 1 to 2^32 - 1, never the 0 of fresh memory (the kernels'
/// `ll_flag`).
pub fn flag(pos: u64) -> u32 {
    (pos % 0xffff_ffff) as u32 + 1
}

/// What a sending kernel writes for LL slot position `pos` once its `bytes` of packets are
/// written: the position plus one in the upper 32 bits (truncated), the byte count below.
pub fn record(pos: u64, bytes: u32) -> u64 {
    ((pos + 1) << 32) | u64::from(bytes)
}

/// Bytes of one LL packet.
pub const PACKET_BYTES: u64 = 16;

/// One LL FIFO in host memory the proxy and the device both reach.
#[derive(Debug, Clone, Copy)]
pub struct LlFifo {
    /// The consumed-slot counter `ll_head`: moved by the proxy on the send side (slots the
    /// network is done with), by the kernel on the receive side. 8-byte aligned.
    pub head: *mut u8,
    /// The first slot (`nslots * slot_bytes` bytes, 16-byte aligned).
    pub slots: *mut u8,
    /// Send side: the `nslots` records the kernel writes ([`record`]); null on the receive side.
    pub records: *mut u8,
    /// Slots.
    pub nslots: u32,
    /// Bytes per slot (a multiple of [`PACKET_BYTES`]).
    pub slot_bytes: u64,
}

// SAFETY: host memory owned by the transport for the proxy's whole life; the proxy touches the
// counters and flags only atomically and hands slots to the network by address.
unsafe impl Send for LlFifo {}

impl LlFifo {
    fn word(&self, at: *mut u8) -> &AtomicU64 {
        // SAFETY: `at` is one of this FIFO's 8-byte aligned counters or records, alive for the
        // proxy's life; the device writes them atomically too.
        unsafe { AtomicU64::from_ptr(at.cast()) }
    }

    fn head(&self) -> &AtomicU64 {
        self.word(self.head)
    }

    fn slot(&self, pos: u64) -> *mut u8 {
        let at = (pos % u64::from(self.nslots)) * self.slot_bytes;
        self.slots.wrapping_add(at as usize)
    }

    /// The record of position `pos` (send side).
    fn record(&self, pos: u64) -> u64 {
        let at = (pos % u64::from(self.nslots)) as usize * 8;
        self.word(self.records.wrapping_add(at))
            .load(Ordering::Acquire)
    }

    /// Whether the first `bytes` of slot position `pos` are packets carrying its flag.
    fn packets_complete(&self, pos: u64, bytes: u64) -> bool {
        let f = flag(pos);
        let slot = self.slot(pos);
        (0..bytes / PACKET_BYTES).all(|k| {
            [4usize, 12].iter().all(|&o| {
                let p = slot.wrapping_add((k * PACKET_BYTES) as usize + o);
                // SAFETY: inside the slot, 4-byte aligned; the device writes it concurrently,
                // hence the atomic load.
                unsafe { AtomicU32::from_ptr(p.cast()) }.load(Ordering::Acquire) == f
            })
        })
    }
}

/// The network side of an LL FIFO.
pub enum LlSide {
    /// This rank sends the FIFO's slots.
    Send(SendComm),
    /// This rank receives into the FIFO's slots.
    Recv(RecvComm),
}

/// One LL connection to set up: the peer and channel, the FIFO and the network side.
pub struct LlLink {
    /// The peer rank.
    pub peer: u32,
    /// The channel.
    pub channel: u32,
    /// The FIFO.
    pub fifo: LlFifo,
    /// The connection.
    pub side: LlSide,
}

/// One LL connection the proxy drives: its FIFO, connection, registration and requests.
pub struct LlConn {
    /// The peer rank.
    pub peer: u32,
    /// The channel.
    pub channel: u32,
    fifo: LlFifo,
    side: LlSide,
    mh: Option<MemHandle>,
    posted: u64,
    done: u64,
    reqs: VecDeque<Request>,
    trace: LlTrace,
    /// Receive side: the kernel's `ll_head` as last seen (for the trace).
    head_seen: u64,
    /// The connection's profiler events ([`super::proxy_events`]), once the proxy has it.
    events: Option<ConnEvents>,
}

impl LlConn {
    /// Registers the link's slots with `net` (host memory); on failure the connection is
    /// closed.
    pub fn new(net: &dyn Net, link: LlLink) -> Result<Self> {
        let LlLink {
            peer,
            channel,
            fifo,
            side,
        } = link;
        let mut conn = LlConn {
            peer,
            channel,
            fifo,
            side,
            mh: None,
            posted: 0,
            done: 0,
            reqs: VecDeque::new(),
            trace: LlTrace::new(),
            head_seen: 0,
            events: None,
        };
        match conn.register(net) {
            Ok(mh) => {
                conn.mh = Some(mh);
                Ok(conn)
            }
            Err(e) => {
                conn.close(net);
                Err(e)
            }
        }
    }

    fn register(&self, net: &dyn Net) -> Result<MemHandle> {
        let fifo = self.fifo;
        if fifo.nslots == 0 || !fifo.slot_bytes.is_multiple_of(PACKET_BYTES) {
            return Err(Error::Internal(format!(
                "an LL FIFO of {} slots of {} bytes",
                fifo.nslots, fifo.slot_bytes
            )));
        }
        let bytes = fifo.nslots as usize * fifo.slot_bytes as usize;
        let comm = match &self.side {
            LlSide::Send(c) => CommRef::Send(c),
            LlSide::Recv(c) => CommRef::Recv(c),
        };
        net.reg_mr(comm, fifo.slots, bytes, PTR_HOST)
    }

    /// The connection's key among the proxy's profiler events.
    pub(crate) fn events_key(&self) -> ConnKey {
        ConnKey {
            channel: self.channel,
            peer: self.peer,
            send: self.sends(),
            ll: true,
        }
    }

    /// Raises the connection's profiler events through `events`.
    pub(crate) fn set_events(&mut self, events: ConnEvents) {
        self.events = Some(events);
    }

    /// Whether this rank sends on the connection.
    pub fn sends(&self) -> bool {
        matches!(self.side, LlSide::Send(_))
    }

    /// Send side: a slot the kernel recorded that is not handed to the network yet, or a send
    /// not finished.
    pub fn unsent(&self) -> bool {
        match self.side {
            LlSide::Send(_) => {
                !self.reqs.is_empty()
                    || self.fifo.record(self.posted) >> 32 == record(self.posted, 0) >> 32
            }
            LlSide::Recv(_) => false,
        }
    }

    /// Hands complete slots to the network (send) or freed slots to it (receive), and retires
    /// finished requests; true when anything moved.
    pub fn progress(&mut self, net: &dyn Net, rank: u32) -> Result<bool> {
        let fifo = self.fifo;
        let nslots = u64::from(fifo.nslots);
        let mh = self.mh.as_ref().expect("registered while alive");
        let mut moved = false;
        // One load per pass while no profiler asks for proxy events.
        let mut events = self.events.as_mut().filter(|e| e.active());
        match &mut self.side {
            LlSide::Send(comm) => {
                while self.posted - self.done < nslots {
                    let rec = fifo.record(self.posted);
                    if rec >> 32 != record(self.posted, 0) >> 32 {
                        break;
                    }
                    let bytes = rec & 0xffff_ffff;
                    if bytes > fifo.slot_bytes || !bytes.is_multiple_of(PACKET_BYTES) {
                        return Err(Error::Internal(format!(
                            "an LL slot record claims {bytes} bytes of {}",
                            fifo.slot_bytes
                        )));
                    }
                    if !fifo.packets_complete(self.posted, bytes) {
                        break;
                    }
                    self.trace.mark(self.posted, 1);
                    let ph = events.as_mut().map(|e| e.before_post(self.posted));
                    // SAFETY: the slot's packets are complete and the kernel does not rewrite
                    // the slot until `ll_head` passes it, after the request is done; `ph`
                    // lives in `events` until then.
                    let req = unsafe {
                        net.isend_profiled(
                            comm,
                            fifo.slot(self.posted),
                            bytes as usize,
                            rank as i32,
                            mh,
                            ph.unwrap_or(std::ptr::null_mut()),
                        )
                    }?;
                    let Some(req) = req else { break };
                    if let Some(e) = events.as_mut() {
                        e.posted(self.posted, Some(bytes));
                    }
                    self.trace.mark(self.posted, 2);
                    self.reqs.push_back(req);
                    self.posted += 1;
                    moved = true;
                }
            }
            LlSide::Recv(comm) => {
                let head = fifo.head().load(Ordering::Acquire);
                while self.head_seen < head {
                    self.trace.mark(self.head_seen, 2);
                    self.head_seen += 1;
                }
                while self.posted < head + nslots {
                    let ph = events.as_mut().map(|e| e.before_post(self.posted));
                    // SAFETY: the kernel consumed this slot's previous contents (`ll_head`);
                    // it reads the slot again only through the packets' flags; `ph` lives in
                    // `events` until the request is done.
                    let req = unsafe {
                        net.irecv_profiled(
                            comm,
                            fifo.slot(self.posted),
                            fifo.slot_bytes as usize,
                            self.peer as i32,
                            mh,
                            ph.unwrap_or(std::ptr::null_mut()),
                        )
                    }?;
                    let Some(req) = req else { break };
                    if let Some(e) = events.as_mut() {
                        e.posted(self.posted, None);
                    }
                    self.reqs.push_back(req);
                    self.posted += 1;
                    moved = true;
                }
            }
        }
        while let Some(front) = self.reqs.front_mut() {
            let Some(bytes) = net.test(front)? else {
                break;
            };
            self.reqs.pop_front();
            if let Some(e) = events.as_mut() {
                e.completed(self.done, bytes as u64);
            }
            match self.side {
                LlSide::Send(_) => {
                    self.trace.mark(self.done, 3);
                    fifo.head().store(self.done + 1, Ordering::Release);
                }
                LlSide::Recv(_) => self.trace.mark(self.done, 1),
            }
            self.done += 1;
            moved = true;
        }
        Ok(moved)
    }

    /// Closes the connection of a link that never became an [`LlConn`] (set-up failed elsewhere).
    pub fn discard(net: &dyn Net, link: LlLink) {
        close_side(net, link.side);
    }

    /// "rank R: network LL connection to rank P (channel C)", for errors.
    pub fn describe(&self, rank: u32) -> String {
        let dir = match self.side {
            LlSide::Send(_) => "to",
            LlSide::Recv(_) => "from",
        };
        format!(
            "rank {rank}: network LL connection {dir} rank {} (channel {})",
            self.peer, self.channel
        )
    }

    /// Deregisters and closes the connection.
    pub fn close(mut self, net: &dyn Net) {
        if let Some(mh) = self.mh.take() {
            let r = match &self.side {
                LlSide::Send(c) => net.dereg_mr(CommRef::Send(c), mh),
                LlSide::Recv(c) => net.dereg_mr(CommRef::Recv(c), mh),
            };
            if let Err(e) = r {
                tracing::debug!(target: "oxccl::net", "deregistering an LL FIFO: {e}");
            }
        }
        self.reqs.clear();
        let dir = match self.side {
            LlSide::Send(_) => "send",
            LlSide::Recv(_) => "recv",
        };
        self.trace.write(&format!(
            "ll-{dir}-pid{}-p{}-c{}",
            std::process::id(),
            self.peer,
            self.channel
        ));
        close_side(net, self.side);
    }
}

/// Closes the network side of an LL connection (errors are only logged: it is going anyway).
fn close_side(net: &dyn Net, side: LlSide) {
    let r = match side {
        LlSide::Send(c) => net.close_send(c),
        LlSide::Recv(c) => net.close_recv(c),
    };
    if let Err(e) = r {
        tracing::debug!(target: "oxccl::net", "closing an LL connection: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::testkit::{Mem, link, socket_net};
    use crate::socket::SocketConfig;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use std::time::{Duration, Instant};

    /// An LL FIFO in `mem`: head at 0, records at 64, slots from 4096.
    fn fifo(mem: &Mem, nslots: u32, slot_bytes: u64) -> LlFifo {
        LlFifo {
            head: mem.ptr,
            records: mem.ptr.wrapping_add(64),
            slots: mem.ptr.wrapping_add(4096),
            nslots,
            slot_bytes,
        }
    }

    fn word32(p: usize) -> &'static AtomicU32 {
        // SAFETY: test memory (`Mem`), 4-byte aligned, alive until every thread using it joined.
        unsafe { AtomicU32::from_ptr(p as *mut u32) }
    }

    fn word64(p: usize) -> &'static AtomicU64 {
        // SAFETY: as for `word32`, 8-byte aligned.
        unsafe { AtomicU64::from_ptr(p as *mut u64) }
    }

    const POISON: u32 = 0xDEAD_BEEF;

    /// The LL send side on `n0` (to rank 1) and the receive side on `n1` (from rank 0) of
    /// connection `s`/`r`, over FIFOs `f0` and `f1`.
    fn ll_pair(
        (n0, n1): (&Arc<dyn Net>, &Arc<dyn Net>),
        (s, r): (SendComm, RecvComm),
        (f0, f1): (LlFifo, LlFifo),
    ) -> (LlConn, LlConn) {
        let link = |peer, fifo, side| LlLink {
            peer,
            channel: 0,
            fifo,
            side,
        };
        let tx = LlConn::new(&**n0, link(1, f0, LlSide::Send(s))).unwrap();
        let rx = LlConn::new(&**n1, link(0, f1, LlSide::Recv(r))).unwrap();
        (tx, rx)
    }

    #[test]
    fn flags_and_records_match_the_kernels_rules() {
        assert_eq!(flag(0), 1);
        assert_eq!(flag(0xffff_fffe), 0xffff_ffff);
        assert_eq!(flag(0xffff_ffff), 1, "wraps without ever reaching 0");
        assert_eq!(record(0, 16), (1 << 32) | 16);
        assert_eq!(record(u64::from(u32::MAX), 32) >> 32 & 0xffff_ffff, 0);
    }

    /// A slot the kernel recorded counts as unsent (a stopping proxy keeps driving it) until
    /// the network is done with it; a receive side never has anything to send.
    #[test]
    fn a_recorded_slot_is_unsent_until_its_send_is_done() {
        let (n0, n1) = (
            socket_net(0, SocketConfig::default()),
            socket_net(1, SocketConfig::default()),
        );
        let (s, r) = link(&n0, &n1);
        let (m0, m1) = (Mem::new(8192), Mem::new(8192));
        let (f0, f1) = (fifo(&m0, 4, 64), fifo(&m1, 4, 64));
        let (mut tx, mut rx) = ll_pair((&n0, &n1), (s, r), (f0, f1));
        assert!(!tx.unsent(), "nothing recorded yet");
        let p = f0.slots as usize;
        word32(p).store(7, Ordering::Relaxed);
        word32(p + 8).store(8, Ordering::Relaxed);
        word32(p + 4).store(flag(0), Ordering::Release);
        word32(p + 12).store(flag(0), Ordering::Release);
        word64(f0.records as usize).store(record(0, 16), Ordering::Release);
        assert!(tx.unsent());
        let t0 = Instant::now();
        while tx.unsent() {
            tx.progress(&*n0, 0).unwrap();
            rx.progress(&*n1, 1).unwrap();
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the send never finished"
            );
        }
        assert!(!rx.unsent());
        tx.close(&*n0);
        rx.close(&*n1);
        drop((m0, m1));
    }

    /// With proxy events posted, an LL slot raises its op and step on both sides, the sender's
    /// with the packet bytes it sent, the receiver's with those that landed.
    #[test]
    fn an_ll_slot_raises_its_proxy_events_on_both_sides() {
        use crate::proxy_events::{ProxyEventSink, ProxyEvents, ProxyTask, Recorder};
        use oxccl_core::profiler_plugin::abi::state;
        let (n0, n1) = (
            socket_net(0, SocketConfig::default()),
            socket_net(1, SocketConfig::default()),
        );
        let (s, r) = link(&n0, &n1);
        let (m0, m1) = (Mem::new(8192), Mem::new(8192));
        let (f0, f1) = (fifo(&m0, 4, 64), fifo(&m1, 4, 64));
        let (mut tx, mut rx) = ll_pair((&n0, &n1), (s, r), (f0, f1));
        let (rec0, rec1) = (Arc::new(Recorder::default()), Arc::new(Recorder::default()));
        for (conn, rec, parent) in [(&mut tx, &rec0, 10), (&mut rx, &rec1, 20)] {
            let shared = Arc::new(ProxyEvents::default());
            let key = conn.events_key();
            assert!(key.ll);
            conn.set_events(ConnEvents::new(key, shared.clone()));
            let sink: Arc<dyn ProxyEventSink> = rec.clone();
            let task = ProxyTask {
                conn: key,
                parent,
                slots: 1,
                chunk_bytes: 32,
            };
            shared.post(&sink, &[task]);
        }
        let p = f0.slots as usize;
        word32(p).store(7, Ordering::Relaxed);
        word32(p + 8).store(8, Ordering::Relaxed);
        word32(p + 4).store(flag(0), Ordering::Release);
        word32(p + 12).store(flag(0), Ordering::Release);
        word64(f0.records as usize).store(record(0, 16), Ordering::Release);
        let t0 = Instant::now();
        let stopped = |r: &Recorder| lock_log(r).iter().filter(|l| l.starts_with("stop")).count();
        while stopped(&rec0) < 2 || stopped(&rec1) < 2 {
            tx.progress(&*n0, 0).unwrap();
            rx.progress(&*n1, 1).unwrap();
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the slot never moved"
            );
        }
        let (l0, l1) = (lock_log(&rec0).clone(), lock_log(&rec1).clone());
        assert_eq!(
            l0[0],
            "start#1 op ch0 peer1 steps1 chunk32 sendtrue under#10"
        );
        let (sent, landed) = (
            format!(" {} Some(16)", state::PROXY_STEP_SEND_WAIT),
            format!(" {} Some(16)", state::PROXY_STEP_RECV_GPU_WAIT),
        );
        assert!(l0.iter().any(|l| l.ends_with(&sent)), "{l0:#?}");
        assert_eq!(
            l1[0],
            "start#1 op ch0 peer0 steps1 chunk32 sendfalse under#20"
        );
        assert!(l1.iter().any(|l| l.ends_with(&landed)), "{l1:#?}");
        tx.close(&*n0);
        rx.close(&*n1);
        drop((m0, m1));
    }

    fn lock_log(r: &crate::proxy_events::Recorder) -> std::sync::MutexGuard<'_, Vec<String>> {
        oxccl_core::lock::lock(&r.log)
    }

    /// Messages of 1 to 40 packets through 4 slots and two proxies' LL halves, with CPU threads
    /// playing the kernels. The sender writes a slot's packets in reverse order with the record
    /// in the middle, so the proxy must wait for the flags as well as the record; the receiver
    /// polls the flags, checks every data word, and finds the poison it left in the rest of the
    /// slot untouched (only the record's bytes travel), then poisons the slot again and frees it.
    #[test]
    fn ll_slots_cross_the_network_in_order_and_whole() {
        let (nslots, slot_bytes) = (4u64, 640u64);
        let packets = slot_bytes / PACKET_BYTES;
        let config = SocketConfig {
            nsocks: 1,
            inline_max: 256,
            min_task: 64,
            ..SocketConfig::default()
        };
        let (n0, n1) = (socket_net(0, config), socket_net(1, config));
        let (s, r) = link(&n0, &n1);
        let (m0, m1) = (Mem::new(8192), Mem::new(8192));
        let (f0, f1) = (
            fifo(&m0, nslots as u32, slot_bytes),
            fifo(&m1, nslots as u32, slot_bytes),
        );
        let (sa, sb) = (f0.slots as usize, f1.slots as usize);
        let (ha, hb, ra) = (f0.head as usize, f1.head as usize, f0.records as usize);
        let packet =
            move |base: usize, i: u64, k: u64| base + ((i % nslots) * slot_bytes + k * 16) as usize;
        for i in 0..nslots {
            for k in 0..packets {
                for w in 0..4 {
                    word32(packet(sb, i, k) + w * 4).store(POISON, Ordering::Relaxed);
                }
            }
        }
        let (mut tx, mut rx) = ll_pair((&n0, &n1), (s, r), (f0, f1));
        let stop = Arc::new(AtomicBool::new(false));
        let proxy = {
            let stop = stop.clone();
            let (n0, n1) = (n0.clone(), n1.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    tx.progress(&*n0, 0).unwrap();
                    rx.progress(&*n1, 1).unwrap();
                }
                tx.close(&*n0);
                rx.close(&*n1);
            })
        };
        let sizes: Vec<u64> = (0..60).map(|i| 1 + (i * 7) % packets).collect();
        let data = |i: u64, k: u64, half: u64| (i * 1000 + k * 2 + half) as u32;
        let wait = move |what: &str, done: &dyn Fn() -> bool| {
            let t0 = Instant::now();
            while !done() {
                assert!(t0.elapsed() < Duration::from_secs(20), "waiting for {what}");
            }
        };
        let sent = sizes.clone();
        let sender = std::thread::spawn(move || {
            for (i, &npk) in sent.iter().enumerate() {
                let i = i as u64;
                if i >= nslots {
                    wait("space", &|| word64(ha).load(Ordering::Acquire) > i - nslots);
                }
                for k in (0..npk).rev() {
                    let p = packet(sa, i, k);
                    word32(p).store(data(i, k, 0), Ordering::Relaxed);
                    word32(p + 8).store(data(i, k, 1), Ordering::Relaxed);
                    word32(p + 12).store(flag(i), Ordering::Release);
                    if k == npk / 2 {
                        let rec = word64(ra + ((i % nslots) * 8) as usize);
                        rec.store(record(i, (npk * PACKET_BYTES) as u32), Ordering::Release);
                    }
                    word32(p + 4).store(flag(i), Ordering::Release);
                }
            }
        });
        let receiver = std::thread::spawn(move || {
            for (i, &npk) in sizes.iter().enumerate() {
                let i = i as u64;
                for k in 0..npk {
                    let p = packet(sb, i, k);
                    wait("a packet", &|| {
                        word32(p + 4).load(Ordering::Acquire) == flag(i)
                            && word32(p + 12).load(Ordering::Acquire) == flag(i)
                    });
                    assert_eq!(word32(p).load(Ordering::Relaxed), data(i, k, 0), "{i}/{k}");
                    assert_eq!(word32(p + 8).load(Ordering::Relaxed), data(i, k, 1));
                }
                for k in 0..packets {
                    for w in 0..4 {
                        let at = packet(sb, i, k) + w * 4;
                        if k >= npk {
                            let v = word32(at).load(Ordering::Relaxed);
                            assert_eq!(v, POISON, "message {i} wrote past its {npk} packets");
                        }
                        word32(at).store(POISON, Ordering::Relaxed);
                    }
                }
                word64(hb).store(i + 1, Ordering::Release);
            }
        });
        sender.join().unwrap();
        receiver.join().unwrap();
        stop.store(true, Ordering::Release);
        proxy.join().unwrap();
        drop((m0, m1));
    }
}
