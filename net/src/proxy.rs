//! The host proxy: the threads of a communicator that move FIFO slots between memory the device
//! reaches and a [`Net`]: one for every connection but LL sends, which have their own where
//! the machine has CPUs to spare ([`ProxyCpus`]).
//!
//! A NET connection has a FIFO on each side, laid out as [`FifoLayout`] says. On the sending
//! rank the kernel fills slots, writes each slot's byte count and advances `tail`, exactly as it
//! would into a peer's P2P FIFO; the proxy sends every slot the kernel published and, once the
//! network is done with it, advances `head`, which frees the slot for the kernel. On the
//! receiving rank the proxy posts a receive into every slot the kernel has freed (`head`) and
//! advances `tail` as messages land. The proxy follows counters, not host calls, so operations
//! captured into CUDA graphs run like eager ones.
//!
//! The counters and sizes are always in mapped host memory; the slots are too, or, with
//! GPUDirect RDMA ([`super::gdr`]), in GPU memory the network reads and writes itself. Such
//! slots are registered as GPU memory (`PTR_CUDA`, or through a dma-buf), and a receive into
//! them may need a flush before `tail` lets the kernel read it.
//!
//! A network error records `ncclRemoteError` naming the peer and aborts the communicator, which
//! ends every kernel wait; abort stops the proxy.

use super::gdr::{GpuBinding, GpuRegistration};
use super::ll::{LlConn, LlLink};
use super::proxy_cpus::ProxyCpus;
use super::proxy_drain::Drain;
use super::proxy_events::{ConnEvents, ConnKey, ProxyEvents};
use super::{CommRef, MemHandle, Net, PTR_CUDA, PTR_HOST, RecvComm, Request, SendComm};
use oxccl_core::abort::AbortFlag;
use oxccl_core::config::CommConfig;
use oxccl_core::error::{Error, Result};
use oxccl_core::lock::lock;
use std::collections::VecDeque;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How one NET FIFO is laid out: counters, per-slot sizes, then the slots (page aligned).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FifoLayout {
    /// Slots.
    pub nslots: u32,
    /// Bytes per slot.
    pub slot_bytes: u64,
}

impl FifoLayout {
    /// Offset of `head` (slots freed: by the proxy on the send side, by the kernel on the receive
    /// side), on its own 64-byte line.
    pub const HEAD: u64 = 0;
    /// Offset of `tail` (slots filled: by the kernel on the send side, by the proxy on the
    /// receive side).
    pub const TAIL: u64 = 64;
    /// Offset of the `u64` byte count of each slot (written by the sending kernel).
    pub const SIZES: u64 = 128;

    /// Offset of the slots.
    pub fn slots_offset(&self) -> u64 {
        (Self::SIZES + 8 * u64::from(self.nslots)).next_multiple_of(4096)
    }

    /// Bytes of one FIFO.
    pub fn bytes(&self) -> u64 {
        self.slots_offset() + u64::from(self.nslots) * self.slot_bytes
    }
}

/// Where a FIFO's slots are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotMemory {
    /// In the FIFO's host memory, after the sizes.
    Host,
    /// In GPU memory (GPUDirect RDMA): the network reads and writes them itself.
    Gpu,
}

impl SlotMemory {
    /// The `PTR_*` type the slots are registered as.
    pub fn ptr_type(self) -> u32 {
        match self {
            SlotMemory::Host => PTR_HOST,
            SlotMemory::Gpu => PTR_CUDA,
        }
    }
}

/// A FIFO whose counters are in host memory the proxy and the device both reach; its slots are
/// there too or in GPU memory ([`SlotMemory`]).
#[derive(Debug, Clone, Copy)]
pub struct HostFifo {
    /// Host address of the counters and sizes (`layout.slots_offset()` bytes, 64-byte aligned,
    /// zeroed), followed by the slots when they are in host memory.
    pub base: *mut u8,
    /// Address of the first slot (`nslots * slot_bytes` bytes): inside `base`'s memory, or a
    /// GPU address, which only the network dereferences.
    pub slots: *mut u8,
    /// Where the slots are.
    pub mem: SlotMemory,
    /// Its layout.
    pub layout: FifoLayout,
}

// SAFETY: the memory is owned by the transport for the proxy's whole life; the proxy thread is
// its only host user, and it touches the counters only atomically.
unsafe impl Send for HostFifo {}

impl HostFifo {
    /// A FIFO wholly in host memory at `base` (`layout.bytes()` bytes).
    pub fn in_host(base: *mut u8, layout: FifoLayout) -> HostFifo {
        HostFifo {
            base,
            // Address arithmetic only: the slots lie inside the FIFO's `layout.bytes()` bytes.
            slots: base.wrapping_add(layout.slots_offset() as usize),
            mem: SlotMemory::Host,
            layout,
        }
    }

    /// A FIFO with its counters at `base` in host memory and its slots at `slots` in GPU memory.
    pub fn with_gpu_slots(base: *mut u8, slots: *mut u8, layout: FifoLayout) -> HostFifo {
        HostFifo {
            base,
            slots,
            mem: SlotMemory::Gpu,
            layout,
        }
    }

    /// Bytes of all slots.
    pub fn slots_bytes(&self) -> usize {
        self.layout.nslots as usize * self.layout.slot_bytes as usize
    }

    fn counter(&self, off: u64) -> &AtomicU64 {
        // SAFETY: `base` is 64-byte aligned and `off` is one of the layout's counters, inside
        // the FIFO, which outlives the proxy; the device writes it atomically too.
        unsafe { AtomicU64::from_ptr(self.base.add(off as usize).cast()) }
    }

    fn slot(&self, pos: u64) -> *mut u8 {
        let l = self.layout;
        let at = (pos % u64::from(l.nslots)) * l.slot_bytes;
        // Address arithmetic only (GPU slots are never dereferenced here): the slot lies inside
        // the slots' range.
        self.slots.wrapping_add(at as usize)
    }

    fn size(&self, pos: u64) -> u64 {
        let at = FifoLayout::SIZES + (pos % u64::from(self.layout.nslots)) * 8;
        self.counter(at).load(Ordering::Acquire)
    }
}

/// The network side of one FIFO.
pub enum Side {
    /// This rank sends the FIFO's slots to the peer.
    Send(SendComm),
    /// This rank receives the peer's messages into the FIFO's slots.
    Recv(RecvComm),
}

impl From<SendComm> for Side {
    fn from(c: SendComm) -> Side {
        Side::Send(c)
    }
}

impl From<RecvComm> for Side {
    fn from(c: RecvComm) -> Side {
        Side::Recv(c)
    }
}

/// One NET connection the proxy drives.
pub struct ProxyConn {
    /// The peer rank.
    pub peer: u32,
    /// The channel.
    pub channel: u32,
    /// The FIFO.
    pub fifo: HostFifo,
    /// The connection.
    pub side: Side,
}

/// A request of a connection, oldest first.
enum InFlight {
    /// An `isend` or `irecv`.
    Transfer(Request),
    /// The flush of a completed receive into GPU memory; `tail` waits for it.
    Flush(Request),
}

/// A connection in flight: its registration, positions and requests.
struct Active {
    conn: ProxyConn,
    mh: Option<MemHandle>,
    /// Flush every receive with bytes before advancing `tail` (receive side, GPU slots).
    flush: bool,
    /// Slots handed to the network.
    posted: u64,
    /// Slots the network is done with.
    done: u64,
    reqs: VecDeque<InFlight>,
    /// The connection's profiler events ([`super::proxy_events`]).
    events: ConnEvents,
}

impl Active {
    /// Hands new slots to the network and retires finished ones; true when anything moved.
    fn progress(&mut self, net: &dyn Net, rank: u32) -> Result<bool> {
        let fifo = self.conn.fifo;
        let nslots = u64::from(fifo.layout.nslots);
        let mh = self.mh.as_ref().expect("registered while active");
        let mut moved = false;
        // One load per pass while no profiler asks for proxy events.
        let profiling = self.events.active();
        match &mut self.conn.side {
            Side::Send(comm) => {
                let tail = fifo.counter(FifoLayout::TAIL).load(Ordering::Acquire);
                while self.posted < tail && self.posted - self.done < nslots {
                    let size = fifo.size(self.posted);
                    if size > fifo.layout.slot_bytes {
                        return Err(Error::Internal(format!(
                            "a FIFO slot claims {size} bytes of {}",
                            fifo.layout.slot_bytes
                        )));
                    }
                    let ph = profiling.then(|| self.events.before_post(self.posted));
                    // SAFETY: the slot holds `size` published bytes that the kernel does not
                    // touch again until `head` passes it, after the request is done; `ph`
                    // lives in `events` until then.
                    let req = unsafe {
                        net.isend_profiled(
                            comm,
                            fifo.slot(self.posted),
                            size as usize,
                            rank as i32,
                            mh,
                            ph.unwrap_or(std::ptr::null_mut()),
                        )
                    }?;
                    let Some(req) = req else { break };
                    self.reqs.push_back(InFlight::Transfer(req));
                    if profiling {
                        self.events.posted(self.posted, Some(size));
                    }
                    self.posted += 1;
                    moved = true;
                }
            }
            Side::Recv(comm) => {
                let head = fifo.counter(FifoLayout::HEAD).load(Ordering::Acquire);
                while self.posted < head + nslots && self.posted - self.done < nslots {
                    let ph = profiling.then(|| self.events.before_post(self.posted));
                    // SAFETY: the kernel freed this slot (`head`) and reads it again only after
                    // `tail` passes it, after the request is done; `ph` lives in `events`
                    // until then.
                    let req = unsafe {
                        net.irecv_profiled(
                            comm,
                            fifo.slot(self.posted),
                            fifo.layout.slot_bytes as usize,
                            self.conn.peer as i32,
                            mh,
                            ph.unwrap_or(std::ptr::null_mut()),
                        )
                    }?;
                    let Some(req) = req else { break };
                    self.reqs.push_back(InFlight::Transfer(req));
                    if profiling {
                        self.events.posted(self.posted, None);
                    }
                    self.posted += 1;
                    moved = true;
                }
            }
        }
        let mut landed = 0;
        while let Some(front) = self.reqs.front_mut() {
            match front {
                InFlight::Transfer(req) => {
                    let Some(bytes) = net.test(req)? else { break };
                    landed = bytes as u64;
                    moved = true;
                    if let (true, Side::Recv(comm)) = (self.flush && bytes > 0, &mut self.conn.side)
                    {
                        // SAFETY: the slot the receive just filled, inside the registration;
                        // the kernel does not touch it before `tail` passes it.
                        let flush = unsafe { net.iflush(comm, fifo.slot(self.done), bytes, mh) }?;
                        if let Some(f) = flush {
                            *front = InFlight::Flush(f);
                            if profiling {
                                self.events.flushing(self.done);
                            }
                            continue;
                        }
                    }
                }
                InFlight::Flush(req) => {
                    if net.test(req)?.is_none() {
                        break;
                    }
                }
            }
            self.reqs.pop_front();
            if profiling {
                let bytes = match self.conn.side {
                    Side::Send(_) => fifo.size(self.done),
                    Side::Recv(_) => landed,
                };
                self.events.completed(self.done, bytes);
            }
            self.done += 1;
            moved = true;
            let counter = match self.conn.side {
                Side::Send(_) => FifoLayout::HEAD,
                Side::Recv(_) => FifoLayout::TAIL,
            };
            fifo.counter(counter).store(self.done, Ordering::Release);
        }
        Ok(moved)
    }

    /// Send side: slots the kernel published that the network has not finished sending.
    fn unsent(&self) -> bool {
        matches!(self.conn.side, Side::Send(_))
            && self
                .conn
                .fifo
                .counter(FifoLayout::TAIL)
                .load(Ordering::Acquire)
                > self.done
    }

    fn describe(&self, rank: u32) -> String {
        let (dir, peer) = match self.conn.side {
            Side::Send(_) => ("to", self.conn.peer),
            Side::Recv(_) => ("from", self.conn.peer),
        };
        format!(
            "rank {rank}: network connection {dir} rank {peer} (channel {})",
            self.conn.channel
        )
    }

    /// Deregisters and closes the connection.
    fn close(mut self, net: &dyn Net) {
        if let Some(mh) = self.mh.take() {
            let r = match &self.conn.side {
                Side::Send(c) => net.dereg_mr(CommRef::Send(c), mh),
                Side::Recv(c) => net.dereg_mr(CommRef::Recv(c), mh),
            };
            if let Err(e) = r {
                tracing::debug!(target: "oxccl::net", "deregistering a FIFO: {e}");
            }
        }
        self.reqs.clear();
        let r = match self.conn.side {
            Side::Send(c) => net.close_send(c),
            Side::Recv(c) => net.close_recv(c),
        };
        if let Err(e) = r {
            tracing::debug!(target: "oxccl::net", "closing a network connection: {e}");
        }
    }
}

/// Registers the slots of `conn`'s FIFO: host memory as `PTR_HOST`; GPU memory through a
/// dma-buf when `gpu` exports one (the descriptor is closed once registered, as the network
/// keeps its own reference), else as `PTR_CUDA`.
fn register(net: &dyn Net, conn: &ProxyConn, gpu: GpuRegistration<'_>) -> Result<MemHandle> {
    let f = conn.fifo;
    let comm = || match &conn.side {
        Side::Send(c) => CommRef::Send(c),
        Side::Recv(c) => CommRef::Recv(c),
    };
    let ty = f.mem.ptr_type();
    if f.mem == SlotMemory::Gpu
        && let Some(fd) = gpu
            .dma_buf
            .and_then(|export| export(f.slots, f.slots_bytes()))
    {
        return net.reg_mr_dma_buf(comm(), f.slots, f.slots_bytes(), ty, 0, fd.as_fd());
    }
    net.reg_mr(comm(), f.slots, f.slots_bytes(), ty)
}

/// Busy polling lasts this long after the last progress (unless idle passes yield at once:
/// [`ProxyCpus::yield_when_idle`]), then the proxy yields...
const SPIN: Duration = Duration::from_micros(200);
/// ...until this much idle time, then sleeps [`PARK`] at a time (woken early by each launch).
const YIELD: Duration = Duration::from_millis(5);
/// Longest sleep of an idle proxy: what an operation replayed from a graph after a long idle
/// period may wait before the proxy looks again.
const PARK: Duration = Duration::from_micros(500);

/// The connections a proxy starts with: Simple FIFOs and LL links.
pub struct ProxyLinks {
    /// Simple FIFOs.
    pub conns: Vec<ProxyConn>,
    /// LL links (`super::ll`).
    pub ll: Vec<LlLink>,
}

/// The proxy threads of one communicator. On drop they send what the kernels published
/// (unless the communicator aborted), then stop and close their connections.
pub struct Proxy {
    net: Arc<dyn Net>,
    rank: u32,
    cpus: ProxyCpus,
    /// How long a stopping thread keeps sending what its kernels published.
    drain_limit: Duration,
    /// Makes the GPU current on each thread as it starts.
    bind: Option<GpuBinding>,
    abort: AbortFlag,
    stop: Arc<AtomicBool>,
    /// The inbox of the thread driving every connection but the LL sends that have their own.
    main: Arc<Inbox>,
    /// The inbox of the LL sends' own thread, where `cpus` allow one; started with the first
    /// LL send.
    ll_sends: Mutex<Option<Arc<Inbox>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// What launches tell the threads for the profiler's proxy events.
    events: Arc<ProxyEvents>,
}

/// Connections handed to a running proxy thread, which takes them at its next pass: the flag
/// keeps that check to one load.
#[derive(Default)]
struct Inbox {
    pending: AtomicBool,
    conns: Mutex<(Vec<Active>, Vec<LlConn>)>,
}

impl Inbox {
    fn push(&self, conns: Vec<Active>, ll: Vec<LlConn>) {
        let mut q = lock(&self.conns);
        q.0.extend(conns);
        q.1.extend(ll);
        self.pending.store(true, Ordering::Release);
    }

    /// Moves what was pushed into `conns` and `ll`.
    fn take_into(&self, conns: &mut Vec<Active>, ll: &mut Vec<LlConn>) {
        // A load first: the proxy asks on every pass, and a swap would write the line each time.
        if self.pending.load(Ordering::Acquire) && self.pending.swap(false, Ordering::AcqRel) {
            let mut q = lock(&self.conns);
            conns.append(&mut q.0);
            ll.append(&mut q.1);
        }
    }
}

impl Proxy {
    /// Registers every FIFO with `net` and starts driving `conns` for rank `rank` (FIFOs whose
    /// slots are all in host memory).
    pub fn start(
        net: Arc<dyn Net>,
        rank: u32,
        conns: Vec<ProxyConn>,
        abort: AbortFlag,
    ) -> Result<Proxy> {
        Proxy::start_one_thread(net, rank, conns, abort, GpuRegistration::default())
    }

    /// As [`Proxy::start`], registering and flushing FIFOs with GPU slots as `gpu` says.
    pub(crate) fn start_one_thread(
        net: Arc<dyn Net>,
        rank: u32,
        conns: Vec<ProxyConn>,
        abort: AbortFlag,
        gpu: GpuRegistration<'_>,
    ) -> Result<Proxy> {
        let cpus = ProxyCpus::ONE_SPINNING_THREAD;
        let links = ProxyLinks {
            conns,
            ll: Vec::new(),
        };
        // A stopping proxy sends what its kernels published ([`Drain`]) for as long as init
        // waits for a peer by default.
        let drain_limit = CommConfig::default().init_timeout;
        Proxy::start_with(net, rank, links, cpus, drain_limit, abort, gpu)
    }

    /// As [`Proxy::start`], registering and flushing FIFOs with GPU slots as `gpu` says.
    /// `links.ll` are the LL connections it drives too (`super::ll`); `cpus` says whether their
    /// sends have a thread of their own and whether idle threads yield. Dropped without an
    /// abort, it first sends what the kernels published, for at most `drain_limit`.
    pub fn start_with(
        net: Arc<dyn Net>,
        rank: u32,
        links: ProxyLinks,
        cpus: ProxyCpus,
        drain_limit: Duration,
        abort: AbortFlag,
        gpu: GpuRegistration<'_>,
    ) -> Result<Proxy> {
        let events = Arc::new(ProxyEvents::default());
        let (active, lls) = prepare(&*net, links.conns, links.ll, gpu, &events)?;
        let proxy = Proxy {
            events,
            net,
            rank,
            cpus,
            drain_limit,
            bind: gpu.bind.cloned(),
            abort,
            stop: Arc::new(AtomicBool::new(false)),
            main: Arc::new(Inbox::default()),
            ll_sends: Mutex::new(None),
            threads: Mutex::new(Vec::new()),
        };
        // Handed over before the thread starts, so it begins with them.
        let main = proxy.main.clone();
        let (ll_sends, ll_rest) = proxy.split_ll(lls);
        main.push(active, ll_rest);
        if let Err(e) = proxy.spawn(main, format!("oxccl-proxy-r{rank}")) {
            ll_sends.into_iter().for_each(|c| c.close(&*proxy.net));
            return Err(e);
        }
        proxy.to_ll_thread(ll_sends)?;
        Ok(proxy)
    }

    /// Registers and starts driving more connections for peers connected after the proxy
    /// started (on first use), on the threads their kinds belong to.
    pub fn add(
        &self,
        conns: Vec<ProxyConn>,
        ll: Vec<LlLink>,
        gpu: GpuRegistration<'_>,
    ) -> Result<()> {
        let (active, lls) = prepare(&*self.net, conns, ll, gpu, &self.events)?;
        let (ll_sends, ll_rest) = self.split_ll(lls);
        self.main.push(active, ll_rest);
        self.to_ll_thread(ll_sends)?;
        self.wake();
        Ok(())
    }

    /// (LL sends for a thread of their own, the rest): all to the rest unless `cpus` allow it.
    fn split_ll(&self, lls: Vec<LlConn>) -> (Vec<LlConn>, Vec<LlConn>) {
        if self.cpus.ll_send_thread {
            lls.into_iter().partition(LlConn::sends)
        } else {
            (Vec::new(), lls)
        }
    }

    /// Hands LL sends to their own thread, starting it the first time.
    fn to_ll_thread(&self, ll_sends: Vec<LlConn>) -> Result<()> {
        if ll_sends.is_empty() {
            return Ok(());
        }
        let mut own = lock(&self.ll_sends);
        if let Some(inbox) = own.as_ref() {
            inbox.push(Vec::new(), ll_sends);
            return Ok(());
        }
        let inbox = Arc::new(Inbox::default());
        inbox.push(Vec::new(), ll_sends);
        self.spawn(inbox.clone(), format!("oxccl-llsend-r{}", self.rank))?;
        *own = Some(inbox);
        Ok(())
    }

    /// Starts a proxy thread driving what `inbox` receives. On an error the inbox's
    /// connections are closed.
    fn spawn(&self, inbox: Arc<Inbox>, name: String) -> Result<()> {
        let (net, abort, stop, mine) = (
            self.net.clone(),
            self.abort.clone(),
            self.stop.clone(),
            inbox.clone(),
        );
        let how = RunAs {
            rank: self.rank,
            idle_yields: self.cpus.yield_when_idle,
            drain_limit: self.drain_limit,
        };
        let bind = self.bind.clone();
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            let _bound = bind.as_ref().and_then(|b| match b() {
                Ok(g) => Some(g),
                Err(e) => {
                    // The built-in sockets and host-memory plugins never need it; a plugin that
                    // does fails its own calls, which the proxy reports.
                    tracing::warn!(target: "oxccl::net",
                        "rank {}: the proxy thread could not make the GPU current: {e}", how.rank);
                    None
                }
            });
            run(&*net, how, &mine, &abort, &stop)
        });
        match spawned {
            Ok(t) => {
                lock(&self.threads).push(t);
                Ok(())
            }
            Err(e) => {
                close_inbox(&*self.net, &inbox);
                Err(Error::io("spawning the network proxy thread", e))
            }
        }
    }

    /// Where launches post the tasks of the profiler's proxy events.
    pub fn events(&self) -> &Arc<ProxyEvents> {
        &self.events
    }

    /// The network the proxy drives.
    pub fn net(&self) -> &Arc<dyn Net> {
        &self.net
    }

    /// Wakes an idle proxy at once (a launch is coming).
    pub fn wake(&self) {
        for t in lock(&self.threads).iter() {
            t.thread().unpark();
        }
    }
}

/// Registers the FIFOs of `conns` and sets up `ll`; on an error closes all of them.
fn prepare(
    net: &dyn Net,
    conns: Vec<ProxyConn>,
    ll: Vec<LlLink>,
    gpu: GpuRegistration<'_>,
    events: &Arc<ProxyEvents>,
) -> Result<(Vec<Active>, Vec<LlConn>)> {
    let mut active = Vec::with_capacity(conns.len());
    for conn in conns {
        let mh = register(net, &conn, gpu);
        let key = ConnKey {
            channel: conn.channel,
            peer: conn.peer,
            send: matches!(conn.side, Side::Send(_)),
            ll: false,
        };
        let a = Active {
            events: ConnEvents::new(key, events.clone()),
            flush: gpu.flush
                && conn.fifo.mem == SlotMemory::Gpu
                && matches!(conn.side, Side::Recv(_)),
            conn,
            mh: None,
            posted: 0,
            done: 0,
            reqs: VecDeque::new(),
        };
        match mh {
            Ok(mh) => active.push(Active { mh: Some(mh), ..a }),
            Err(e) => {
                a.close(net);
                for a in active {
                    a.close(net);
                }
                for l in ll {
                    LlConn::discard(net, l);
                }
                return Err(e);
            }
        }
    }
    let mut lls = Vec::with_capacity(ll.len());
    let mut links = ll.into_iter();
    while let Some(link) = links.next() {
        match LlConn::new(net, link) {
            Ok(mut c) => {
                c.set_events(ConnEvents::new(c.events_key(), events.clone()));
                lls.push(c);
            }
            Err(e) => {
                active.into_iter().for_each(|a| a.close(net));
                lls.into_iter().for_each(|c| c.close(net));
                links.for_each(|l| LlConn::discard(net, l));
                return Err(e);
            }
        }
    }
    Ok((active, lls))
}

/// Closes whatever `inbox` still holds.
fn close_inbox(net: &dyn Net, inbox: &Inbox) {
    let (mut conns, mut ll) = (Vec::new(), Vec::new());
    inbox.take_into(&mut conns, &mut ll);
    conns.into_iter().for_each(|c| c.close(net));
    ll.into_iter().for_each(|c| c.close(net));
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for t in lock(&self.threads).drain(..) {
            t.thread().unpark();
            let _ = t.join();
        }
        // Connections handed over after their thread's last pass.
        close_inbox(&*self.net, &self.main);
        if let Some(inbox) = lock(&self.ll_sends).take() {
            close_inbox(&*self.net, &inbox);
        }
    }
}

/// A connection the proxy thread drives: Simple ([`Active`]) or LL ([`LlConn`]).
trait Driven {
    /// Moves what can move now; true when anything did.
    fn progress(&mut self, net: &dyn Net, rank: u32) -> Result<bool>;
    /// The connection, for errors.
    fn describe(&self, rank: u32) -> String;
}

impl Driven for Active {
    fn progress(&mut self, net: &dyn Net, rank: u32) -> Result<bool> {
        Active::progress(self, net, rank)
    }
    fn describe(&self, rank: u32) -> String {
        Active::describe(self, rank)
    }
}

impl Driven for LlConn {
    fn progress(&mut self, net: &dyn Net, rank: u32) -> Result<bool> {
        LlConn::progress(self, net, rank)
    }
    fn describe(&self, rank: u32) -> String {
        LlConn::describe(self, rank)
    }
}

/// One pass over `conns`: whether anything moved, or the first error as `ncclRemoteError`
/// naming its connection.
fn drive<C: Driven>(conns: &mut [C], net: &dyn Net, rank: u32) -> Result<bool> {
    let mut moved = false;
    for c in conns {
        moved |= c
            .progress(net, rank)
            .map_err(|e| Error::Remote(format!("{}: {e}", c.describe(rank))))?;
    }
    Ok(moved)
}

/// What a proxy thread is: its rank, and how it idles and stops.
#[derive(Clone, Copy)]
struct RunAs {
    rank: u32,
    idle_yields: bool,
    drain_limit: Duration,
}

/// The proxy thread's loop.
fn run(net: &dyn Net, how: RunAs, inbox: &Inbox, abort: &AbortFlag, stop: &AtomicBool) {
    let rank = how.rank;
    let (mut conns, mut ll) = (Vec::new(), Vec::new());
    let mut last = Instant::now();
    let mut passes = super::ll_trace::PassCount::new();
    let mut drain: Option<Drain> = None;
    while !abort.is_aborted() {
        inbox.take_into(&mut conns, &mut ll);
        if stop.load(Ordering::Acquire) {
            // The communicator is going and its kernels are done, but what they published may
            // still be here: closing now would leave a peer waiting for it until it saw us die.
            let d = drain.get_or_insert_with(|| Drain::new(rank, how.drain_limit));
            let unsent = || {
                let (a, b) = (
                    conns.iter().filter(|c| c.unsent()),
                    ll.iter().filter(|c| c.unsent()),
                );
                a.map(|c| c.describe(rank))
                    .chain(b.map(|c| c.describe(rank)))
                    .collect()
            };
            let any = conns.iter().any(Active::unsent) || ll.iter().any(LlConn::unsent);
            if !d.goes_on(any, unsent) {
                break;
            }
        }
        passes.begin();
        let moved = match (drive(&mut conns, net, rank), drive(&mut ll, net, rank)) {
            (Ok(a), Ok(b)) => a | b,
            (Err(e), _) | (_, Err(e)) => {
                abort.record(e);
                abort.abort();
                break;
            }
        };
        passes.end(moved);
        if moved {
            last = Instant::now();
            continue;
        }
        let idle = last.elapsed();
        if drain.is_some() {
            std::thread::yield_now();
        } else if idle < SPIN && !how.idle_yields {
            std::hint::spin_loop();
        } else if idle < YIELD {
            std::thread::yield_now();
        } else {
            std::thread::park_timeout(PARK);
        }
    }
    // What reached the inbox after the last pass is closed by `Proxy::drop` (`close_inbox`).
    for c in conns {
        c.close(net);
    }
    for c in ll {
        c.close(net);
    }
}

/// What the proxy tests, the network-plugin tests and the latency probes share: memory standing
/// in for pinned host FIFOs, CPU threads playing the kernels, and a whole transfer through two
/// proxies.
#[cfg(any(test, feature = "probes"))]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) mod testkit {
    use super::*;
    use crate::RecvComm;
    use std::alloc::Layout;

    /// A socket network for rank `rank` on the loopback interface.
    pub(crate) fn socket_net(rank: u32, config: crate::socket::SocketConfig) -> Arc<dyn Net> {
        Arc::new(crate::socket::SocketNet::new(
            std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            "lo",
            rank,
            oxccl_core::bootstrap::wire::SessionKey {
                secret: 11,
                nonce: 12,
            },
            Duration::from_secs(5),
            config,
        ))
    }

    /// Completes a connection from `a` to `b` through the (possibly rewritten) listen handle
    /// `listen` made on `b`.
    pub(crate) fn complete(
        a: &Arc<dyn Net>,
        b: &Arc<dyn Net>,
        listen: &mut crate::Listen,
        handle: &mut crate::Handle,
    ) -> (SendComm, RecvComm) {
        let s = loop {
            if let Some(s) = a.connect(0, handle).unwrap() {
                break s;
            }
        };
        let r = loop {
            if let Some(r) = b.accept(listen).unwrap() {
                break r;
            }
            std::thread::yield_now();
        };
        (s, r)
    }

    /// A connection from `a` to `b`.
    pub(crate) fn link(a: &Arc<dyn Net>, b: &Arc<dyn Net>) -> (SendComm, RecvComm) {
        let mut h = [0u8; crate::HANDLE_BYTES];
        let mut l = b.listen(0, &mut h).unwrap();
        complete(a, b, &mut l, &mut h)
    }

    /// The proxy connection to or from `peer` on channel 0.
    pub(crate) fn conn(peer: u32, fifo: HostFifo, side: Side) -> ProxyConn {
        ProxyConn {
            peer,
            channel: 0,
            fifo,
            side,
        }
    }

    /// Zeroed, 4 KiB-aligned memory standing in for pinned host memory.
    pub(crate) struct Mem {
        pub(crate) ptr: *mut u8,
        layout: Layout,
    }

    impl Mem {
        pub(crate) fn new(bytes: usize) -> Mem {
            let layout = Layout::from_size_align(bytes, 4096).unwrap();
            // SAFETY: a non-zero size.
            let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
            assert!(!ptr.is_null());
            Mem { ptr, layout }
        }
    }

    impl Drop for Mem {
        fn drop(&mut self) {
            // SAFETY: allocated above with this layout.
            unsafe { std::alloc::dealloc(self.ptr, self.layout) };
        }
    }

    /// The device's side of a FIFO, played by a CPU thread.
    pub(crate) struct Kernel(pub(crate) HostFifo);

    // SAFETY: as HostFifo; the test keeps the memory alive until the threads end.
    unsafe impl Send for Kernel {}

    impl Kernel {
        pub(crate) fn ctr(&self, off: u64) -> &AtomicU64 {
            self.0.counter(off)
        }

        pub(crate) fn wait_geq(&self, off: u64, v: u64, abort: &AbortFlag) -> bool {
            let t0 = Instant::now();
            while self.ctr(off).load(Ordering::Acquire) < v {
                if abort.is_aborted() || t0.elapsed() > Duration::from_secs(20) {
                    return false;
                }
                std::thread::yield_now();
            }
            true
        }
    }

    /// Sends `messages` from `s` (on `n0`, rank 0) to `r` (on `n1`, rank 1) through a FIFO of
    /// `layout` on each side and a proxy per rank, with two threads playing the kernels, and
    /// checks that every message arrives intact and in order.
    pub(crate) fn transfer(
        n0: Arc<dyn Net>,
        n1: Arc<dyn Net>,
        s: SendComm,
        r: RecvComm,
        layout: FifoLayout,
        messages: Vec<Vec<u8>>,
    ) {
        let host = Placement {
            mem: SlotMemory::Host,
            gpu: GpuRegistration::default(),
        };
        transfer_with(n0, n1, s, r, layout, messages, [host, host]);
    }

    /// Where one side's slots are and how its proxy treats GPU slots.
    #[derive(Clone, Copy)]
    pub(crate) struct Placement<'a> {
        /// [`SlotMemory::Gpu`]: slots in memory of their own standing in for GPU memory (a
        /// network in a test mode that treats GPU registrations as host memory reads it).
        pub(crate) mem: SlotMemory,
        pub(crate) gpu: GpuRegistration<'a>,
    }

    /// A FIFO placed as `p` says, and the memory behind it.
    fn fifo_at(layout: FifoLayout, p: Placement<'_>) -> (HostFifo, Vec<Mem>) {
        match p.mem {
            SlotMemory::Host => {
                let m = Mem::new(layout.bytes() as usize);
                (HostFifo::in_host(m.ptr, layout), vec![m])
            }
            SlotMemory::Gpu => {
                let counters = Mem::new(layout.slots_offset() as usize);
                let slots = Mem::new(layout.nslots as usize * layout.slot_bytes as usize);
                let f = HostFifo::with_gpu_slots(counters.ptr, slots.ptr, layout);
                (f, vec![counters, slots])
            }
        }
    }

    /// [`transfer`] with the sending side's and the receiving side's slots placed as `sides`
    /// say.
    pub(crate) fn transfer_with(
        n0: Arc<dyn Net>,
        n1: Arc<dyn Net>,
        s: SendComm,
        r: RecvComm,
        layout: FifoLayout,
        messages: Vec<Vec<u8>>,
        sides: [Placement<'_>; 2],
    ) {
        transfer_when(n0, n1, [s.into(), r.into()], layout, messages, sides, false);
    }

    /// [`transfer_with`]; with `late`, both proxies start without the connection and get it
    /// ([`Proxy::add`]) only after the threads playing the kernels have begun.
    pub(crate) fn transfer_when(
        n0: Arc<dyn Net>,
        n1: Arc<dyn Net>,
        [s, r]: [Side; 2],
        layout: FifoLayout,
        messages: Vec<Vec<u8>>,
        sides: [Placement<'_>; 2],
        late: bool,
    ) {
        let ((f0, m0), (f1, m1)) = (fifo_at(layout, sides[0]), fifo_at(layout, sides[1]));
        let (a0, a1) = (AbortFlag::new(), AbortFlag::new());
        let (c0, c1) = (conn(1, f0, s), conn(0, f1, r));
        let start = |net, rank, conns, abort, gpu| {
            Proxy::start_one_thread(net, rank, conns, abort, gpu).unwrap()
        };
        let (p0, p1, later) = if late {
            let p0 = start(n0, 0, Vec::new(), a0.clone(), sides[0].gpu);
            let p1 = start(n1, 1, Vec::new(), a1.clone(), sides[1].gpu);
            (p0, p1, Some((c0, c1)))
        } else {
            let p0 = start(n0, 0, vec![c0], a0.clone(), sides[0].gpu);
            let p1 = start(n1, 1, vec![c1], a1.clone(), sides[1].gpu);
            (p0, p1, None)
        };
        let n = layout.nslots as u64;
        let messages = Arc::new(messages);
        let (k0, k1) = (Kernel(f0), Kernel(f1));
        let (abort, msgs) = (a0.clone(), messages.clone());
        let sender = std::thread::spawn(move || {
            for (i, m) in msgs.iter().enumerate() {
                let i = i as u64;
                if i >= n {
                    assert!(
                        k0.wait_geq(FifoLayout::HEAD, i + 1 - n, &abort),
                        "slot for {i}"
                    );
                }
                assert!(m.len() as u64 <= layout.slot_bytes);
                // SAFETY: the slot is free (head) and inside the FIFO.
                unsafe { std::ptr::copy_nonoverlapping(m.as_ptr(), k0.0.slot(i), m.len()) };
                k0.ctr(FifoLayout::SIZES + (i % n) * 8)
                    .store(m.len() as u64, Ordering::Release);
                k0.ctr(FifoLayout::TAIL).store(i + 1, Ordering::Release);
            }
        });
        let (abort, msgs) = (a1.clone(), messages.clone());
        let receiver = std::thread::spawn(move || {
            for (i, m) in msgs.iter().enumerate() {
                let i = i as u64;
                assert!(k1.wait_geq(FifoLayout::TAIL, i + 1, &abort), "message {i}");
                // SAFETY: the proxy filled the slot (tail) and waits for head before reusing it.
                let got = unsafe { std::slice::from_raw_parts(k1.0.slot(i), m.len()) };
                assert!(got == &m[..], "message {i} ({} bytes) differs", m.len());
                k1.ctr(FifoLayout::HEAD).store(i + 1, Ordering::Release);
            }
        });
        if let Some((c0, c1)) = later {
            // The sender has filled its slots by now and waits for the network.
            std::thread::sleep(Duration::from_millis(50));
            p1.add(vec![c1], Vec::new(), sides[1].gpu).unwrap();
            p0.add(vec![c0], Vec::new(), sides[0].gpu).unwrap();
        }
        let (rs, rr) = (sender.join(), receiver.join());
        assert!(a0.error().is_none(), "sender: {:?}", a0.error());
        assert!(a1.error().is_none(), "receiver: {:?}", a1.error());
        rs.unwrap();
        rr.unwrap();
        drop((p0, p1));
        drop((m0, m1));
    }
}

#[cfg(test)]
mod tests {
    use super::super::Net;
    use super::super::socket::SocketConfig;
    use super::testkit::{Kernel, Mem, conn, link, socket_net, transfer};
    use super::*;

    /// Two networks (ranks 0 and 1) and a connection from 0 to 1.
    fn pair(config: SocketConfig) -> (Arc<dyn Net>, Arc<dyn Net>, SendComm, RecvComm) {
        let (n0, n1) = (socket_net(0, config), socket_net(1, config));
        let (s, r) = link(&n0, &n1);
        (n0, n1, s, r)
    }

    fn message(i: usize, slot_bytes: usize) -> Vec<u8> {
        let n = [1, 8, 1000, slot_bytes, 4097, slot_bytes - 1, 0][i % 7].max(1);
        (0..n).map(|k| (k * 31 + i * 7) as u8).collect()
    }

    /// Through real proxies and sockets: each side raises a ProxyOp event per task under the
    /// task's event and a ProxyStep event per slot under it, all stopped, the receiving side's
    /// steps with the size that landed.
    #[test]
    fn net_proxies_raise_an_op_per_task_and_a_step_per_slot() {
        use super::super::proxy_events::{ProxyEventSink, ProxyTask, Recorder};
        let layout = FifoLayout {
            nslots: 4,
            slot_bytes: 4096,
        };
        let (n0, n1, s, r) = pair(SocketConfig::default());
        let (m0, m1) = (
            Mem::new(layout.bytes() as usize),
            Mem::new(layout.bytes() as usize),
        );
        let (f0, f1) = (
            HostFifo::in_host(m0.ptr, layout),
            HostFifo::in_host(m1.ptr, layout),
        );
        let (a0, a1) = (AbortFlag::new(), AbortFlag::new());
        let p0 = Proxy::start(n0, 0, vec![conn(1, f0, s.into())], a0.clone()).unwrap();
        let p1 = Proxy::start(n1, 1, vec![conn(0, f1, r.into())], a1.clone()).unwrap();
        let (rec0, rec1) = (Arc::new(Recorder::default()), Arc::new(Recorder::default()));
        let (sink0, sink1): (Arc<dyn ProxyEventSink>, Arc<dyn ProxyEventSink>) =
            (rec0.clone(), rec1.clone());
        let key = |peer, send| ConnKey {
            channel: 0,
            peer,
            send,
            ll: false,
        };
        let task = |conn, parent, slots| ProxyTask {
            conn,
            parent,
            slots,
            chunk_bytes: layout.slot_bytes,
        };
        p0.events().post(
            &sink0,
            &[task(key(1, true), 11, 6), task(key(1, true), 12, 4)],
        );
        p1.events().post(&sink1, &[task(key(0, false), 21, 10)]);
        let sizes: Vec<u64> = (0..10).map(|i| 100 + 300 * i).collect();
        let (k0, k1) = (Kernel(f0), Kernel(f1));
        let (abort, sz) = (a0.clone(), sizes.clone());
        let sender = std::thread::spawn(move || {
            for (i, &n) in sz.iter().enumerate() {
                let i = i as u64;
                if i >= 4 {
                    assert!(k0.wait_geq(FifoLayout::HEAD, i - 3, &abort));
                }
                k0.ctr(FifoLayout::SIZES + (i % 4) * 8)
                    .store(n, Ordering::Release);
                k0.ctr(FifoLayout::TAIL).store(i + 1, Ordering::Release);
            }
        });
        let abort = a1.clone();
        let receiver = std::thread::spawn(move || {
            for i in 0..10 {
                assert!(k1.wait_geq(FifoLayout::TAIL, i + 1, &abort));
                k1.ctr(FifoLayout::HEAD).store(i + 1, Ordering::Release);
            }
        });
        sender.join().unwrap();
        receiver.join().unwrap();
        // The last steps stop once the network is done with them.
        let t0 = Instant::now();
        let stops = |r: &Recorder| {
            lock(&r.log)
                .iter()
                .filter(|l| l.starts_with("stop"))
                .count()
        };
        while (stops(&rec0) < 12 || stops(&rec1) < 11) && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        drop((p0, p1));
        let log0 = lock(&rec0.log).clone();
        let log1 = lock(&rec1.log).clone();
        let starts = |log: &[String], what: &str| {
            log.iter()
                .filter(|l| l.starts_with("start") && l.contains(what))
                .count()
        };
        let steps = |log: &[String]| {
            (log.iter())
                .filter(|l| l.split(' ').nth(1).is_some_and(|w| w.starts_with("step")))
                .count()
        };
        assert_eq!(
            starts(&log0, "op ch0 peer1 steps6 chunk4096 sendtrue under#11"),
            1,
            "{log0:#?}"
        );
        assert_eq!(
            starts(&log0, "op ch0 peer1 steps4 chunk4096 sendtrue under#12"),
            1,
            "{log0:#?}"
        );
        assert_eq!(steps(&log0), 10, "{log0:#?}");
        assert_eq!(stops(&rec0), 12, "{log0:#?}");
        assert_eq!(
            starts(&log1, "op ch0 peer0 steps10 chunk4096 sendfalse under#21"),
            1,
            "{log1:#?}"
        );
        assert_eq!(steps(&log1), 10, "{log1:#?}");
        assert_eq!(stops(&rec1), 11, "{log1:#?}");
        let gpu_wait = oxccl_core::profiler_plugin::abi::state::PROXY_STEP_RECV_GPU_WAIT;
        for n in &sizes {
            let want = format!(" {gpu_wait} Some({n})");
            assert!(
                log1.iter().any(|l| l.ends_with(&want)),
                "no receive of {n} bytes: {log1:#?}"
            );
        }
        drop((m0, m1));
    }

    #[test]
    fn net_proxy_moves_slots_between_two_fifos_in_order() {
        let layout = FifoLayout {
            nslots: 4,
            slot_bytes: 64 << 10,
        };
        let config = SocketConfig {
            nsocks: 2,
            inline_max: 1024,
            min_task: 4096,
            ..SocketConfig::default()
        };
        let (n0, n1, s, r) = pair(config);
        let messages = (0..60)
            .map(|i| message(i, layout.slot_bytes as usize))
            .collect();
        transfer(n0, n1, s, r, layout, messages);
    }

    /// Connections handed to proxies that started without them (peers connected on first use)
    /// move the slots the kernel published before they came, and every later one, in order.
    #[test]
    fn connections_added_to_running_proxies_move_slots() {
        let layout = FifoLayout {
            nslots: 4,
            slot_bytes: 16 << 10,
        };
        let (n0, n1, s, r) = pair(SocketConfig::default());
        let messages = (0..40)
            .map(|i| message(i, layout.slot_bytes as usize))
            .collect();
        let host = super::testkit::Placement {
            mem: SlotMemory::Host,
            gpu: GpuRegistration::default(),
        };
        super::testkit::transfer_when(
            n0,
            n1,
            [s.into(), r.into()],
            layout,
            messages,
            [host, host],
            true,
        );
    }

    /// Every proxy thread runs the GPU binding as it starts and holds what it returns until it
    /// ends (NCCL's proxy threads make the communicator's device current); a binding that fails
    /// leaves the proxy running.
    #[test]
    fn proxy_threads_hold_the_gpu_binding_for_their_life() {
        struct Bound(Arc<AtomicUsize>);
        impl Drop for Bound {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        use std::sync::atomic::AtomicUsize;
        let (threads, released) = (
            Arc::new(Mutex::new(Vec::new())),
            Arc::new(AtomicUsize::new(0)),
        );
        let (t, r) = (threads.clone(), released.clone());
        let bind: GpuBinding = Arc::new(move || {
            let name = std::thread::current().name().unwrap_or("").to_string();
            lock(&t).push(name);
            Ok(Box::new(Bound(r.clone())) as Box<dyn std::any::Any>)
        });
        let gpu = GpuRegistration {
            bind: Some(&bind),
            ..GpuRegistration::default()
        };
        let net = socket_net(0, SocketConfig::default());
        let proxy = Proxy::start_one_thread(net, 0, Vec::new(), AbortFlag::new(), gpu).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while lock(&threads).is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(*lock(&threads), ["oxccl-proxy-r0"]);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            released.load(Ordering::SeqCst),
            0,
            "released before the thread ended"
        );
        drop(proxy);
        assert_eq!(released.load(Ordering::SeqCst), 1);

        let failing: GpuBinding = Arc::new(|| Err(Error::Internal("no GPU here".into())));
        let gpu = GpuRegistration {
            bind: Some(&failing),
            ..GpuRegistration::default()
        };
        let (n0, n1, s, r) = pair(SocketConfig::default());
        let layout = FifoLayout {
            nslots: 2,
            slot_bytes: 4096,
        };
        let side = super::testkit::Placement {
            mem: SlotMemory::Host,
            gpu,
        };
        let messages = (0..4).map(|i| message(i, 4096)).collect();
        super::testkit::transfer_with(n0, n1, s, r, layout, messages, [side, side]);
    }

    /// A communicator destroyed right after its last kernel: the proxy still sends the slots
    /// that kernel published, which a slower peer has not taken yet, before it closes.
    #[test]
    fn a_dropped_proxy_first_sends_what_its_kernel_published() {
        let layout = FifoLayout {
            nslots: 4,
            slot_bytes: 1 << 20,
        };
        let (n0, n1, s, r) = pair(SocketConfig::default());
        let (m0, m1) = (
            Mem::new(layout.bytes() as usize),
            Mem::new(layout.bytes() as usize),
        );
        let (f0, f1) = (
            HostFifo::in_host(m0.ptr, layout),
            HostFifo::in_host(m1.ptr, layout),
        );
        let (a0, a1) = (AbortFlag::new(), AbortFlag::new());
        let p0 = Proxy::start(n0, 0, vec![conn(1, f0, Side::Send(s))], a0.clone()).unwrap();
        let p1 = Proxy::start(n1, 1, vec![conn(0, f1, Side::Recv(r))], a1.clone()).unwrap();
        let total = 16u64;
        let byte = |i: u64, k: usize| (i as usize * 131 + k) as u8;
        let (k0, k1) = (Kernel(f0), Kernel(f1));
        let abort = a0.clone();
        let sender = std::thread::spawn(move || {
            for i in 0..total {
                if i >= 4 {
                    assert!(k0.wait_geq(FifoLayout::HEAD, i - 3, &abort), "slot for {i}");
                }
                // SAFETY: the slot is free (head) and inside the FIFO.
                let slot = unsafe { std::slice::from_raw_parts_mut(k0.0.slot(i), 1 << 20) };
                slot.iter_mut()
                    .enumerate()
                    .for_each(|(k, b)| *b = byte(i, k));
                k0.ctr(FifoLayout::SIZES + (i % 4) * 8)
                    .store(1 << 20, Ordering::Release);
                k0.ctr(FifoLayout::TAIL).store(i + 1, Ordering::Release);
            }
        });
        let abort = a1.clone();
        let receiver = std::thread::spawn(move || {
            // Late, so that the sender's last slots are still in its FIFO when it is done.
            std::thread::sleep(Duration::from_millis(300));
            for i in 0..total {
                assert!(k1.wait_geq(FifoLayout::TAIL, i + 1, &abort), "message {i}");
                // SAFETY: the proxy filled the slot (tail) and waits for head before reusing it.
                let got = unsafe { std::slice::from_raw_parts(k1.0.slot(i), 1 << 20) };
                assert!(
                    got.iter().enumerate().all(|(k, &b)| b == byte(i, k)),
                    "message {i}"
                );
                k1.ctr(FifoLayout::HEAD).store(i + 1, Ordering::Release);
            }
        });
        sender.join().unwrap();
        // The "kernel" is done; the communicator goes at once.
        drop(p0);
        receiver.join().unwrap();
        assert!(a0.error().is_none() && a1.error().is_none());
        drop(p1);
        drop((m0, m1));
    }

    #[test]
    fn net_proxy_records_a_lost_peer_and_aborts() {
        let layout = FifoLayout {
            nslots: 2,
            slot_bytes: 4096,
        };
        let (n0, n1, s, r) = pair(SocketConfig::default());
        let m1 = Mem::new(layout.bytes() as usize);
        let a1 = AbortFlag::new();
        let p1 = Proxy::start(
            n1,
            1,
            vec![ProxyConn {
                peer: 0,
                channel: 3,
                fifo: HostFifo::in_host(m1.ptr, layout),
                side: Side::Recv(r),
            }],
            a1.clone(),
        )
        .unwrap();
        // Half a message header, then the sender vanishes.
        let mut s = s;
        let mh = n0.reg_mr(CommRef::Send(&s), m1.ptr, 1, PTR_HOST).unwrap();
        let big = vec![3u8; 100_000];
        // SAFETY: `big` outlives the request; the connection closes right after.
        let _ = unsafe { n0.isend(&mut s, big.as_ptr(), big.len(), 0, &mh) };
        n0.close_send(s).unwrap();
        let t0 = Instant::now();
        while !a1.is_aborted() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let err = a1.error().expect("an error").to_string();
        assert!(err.contains("from rank 0 (channel 3)"), "{err}");
        drop(p1);
    }
}
