//! NET peers connected when an operation first reaches them, as NCCL connects send/receive
//! peers (`NCCL_RUNTIME_CONNECT`).
//!
//! Ring and tree plans only reach ring neighbours and tree links (`plan::net_peers`); the other
//! ranks of other hosts are reached by direct plans alone (AlltoAll, send/receive, gather,
//! scatter), which many jobs never run. Init leaves those pairs unconnected. The first launch
//! whose plan reaches one allocates its FIFOs, points the connection table's entries at them,
//! and starts a thread that exchanges handles with the peer over the bootstrap, connects and
//! hands the connections to the running proxy. The launch itself does not wait: its kernels wait
//! on the FIFO counters until the proxy moves data, as they would for a slow peer. The peer runs
//! the same steps when its matching operation is launched, whenever that is; a failure records
//! the error and aborts the communicator, which ends every wait.

use crate::api::DeviceApi;
use crate::net::{ConnSlot, NetFifos};
use oxccl_core::abort::AbortFlag;
use oxccl_core::backend::DevicePtr;
use oxccl_core::bootstrap::Bootstrap;
use oxccl_core::error::{Error, Result};
use oxccl_core::lock::lock;
use oxccl_core::plan::WorkDesc;
use oxccl_kernel_abi::FifoGeometry;
use oxccl_net::connect::{self, NetDevices};
use oxccl_net::gdr::{DmaBufExport, GpuRegistration, NetGdr};
use oxccl_net::proxy::Proxy;
use oxccl_net::proxy_events::ProxyEvents;
use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Whether NET peers that no ring or tree joins are connected on first use: NCCL's
/// `NCCL_RUNTIME_CONNECT` (`0`: all at init), on by default as in NCCL 2.22 and later.
pub(crate) fn runtime_connect_wanted() -> bool {
    oxccl_core::config::get(&oxccl_core::config::vars::NCCL_RUNTIME_CONNECT)
}

/// A communicator's NET side: the proxy, the FIFOs connected at init, and the peers left for
/// their first use.
pub(crate) struct NetSide<A: DeviceApi> {
    // Dropped in this order (after `drop` has joined the connecting threads): the proxy stops
    // before any FIFO it drives is freed.
    proxy: Arc<Proxy>,
    #[expect(dead_code, reason = "held for the proxy, which drives them")]
    fifos: NetFifos<A>,
    later: Option<RuntimeConnect<A>>,
    /// Every peer reached over the network (now or on first use), sorted.
    peers: Vec<u32>,
}

impl<A: DeviceApi> NetSide<A> {
    /// The NET side of a communicator whose init connected `fifos` through `proxy`; `later`
    /// connects the rest on first use.
    /// `peers` are every peer reached over the network.
    pub(crate) fn new(
        proxy: Proxy,
        fifos: NetFifos<A>,
        later: Option<RuntimeConnect<A>>,
        mut peers: Vec<u32>,
    ) -> NetSide<A> {
        peers.sort_unstable();
        NetSide {
            proxy: Arc::new(proxy),
            fifos,
            later,
            peers,
        }
    }

    /// Whether `peer` is reached over the network.
    pub(crate) fn reaches(&self, peer: u32) -> bool {
        self.peers.binary_search(&peer).is_ok()
    }

    /// Where launches post the tasks of the proxy's profiler events.
    pub(crate) fn proxy_events(&self) -> &Arc<ProxyEvents> {
        self.proxy.events()
    }

    /// Wakes the proxy (a launch is coming).
    pub(crate) fn wake(&self) {
        self.proxy.wake();
    }

    /// Connects the peers `work` reaches that are not connected yet (see the module's docs);
    /// `upload` copies the given byte ranges of the new connection table to the device before
    /// this returns.
    pub(crate) fn connect_on_use(
        &self,
        work: &WorkDesc,
        bootstrap: &Arc<Bootstrap>,
        abort: &AbortFlag,
        upload: impl FnOnce(&[u8], &[Range<usize>]) -> Result<()>,
    ) -> Result<()> {
        match &self.later {
            Some(later) => later.connect(work, bootstrap, abort, &self.proxy, upload),
            None => Ok(()),
        }
    }
}

impl<A: DeviceApi> Drop for NetSide<A> {
    fn drop(&mut self) {
        if let Some(later) = &self.later {
            later.stop_connecting();
        }
    }
}

/// The NET peers of a communicator left unconnected at init, and what connecting one takes.
pub(crate) struct RuntimeConnect<A: DeviceApi> {
    api: A,
    device: i32,
    links: LaterLinks,
    /// Raised when the communicator goes: ends the connecting threads' waits for peers.
    stop: AbortFlag,
    /// Some peer is still unconnected: every launch looks at this, and only then at its plan.
    waiting_any: AtomicBool,
    state: Mutex<LaterState<A>>,
}

struct LaterState<A: DeviceApi> {
    waiting: BTreeSet<u32>,
    /// The connection table as on the device.
    table: Vec<u8>,
    /// FIFOs of the peers connected since init.
    fifos: Vec<NetFifos<A>>,
    connecting: Vec<JoinHandle<()>>,
}

/// How the connections made on first use are cut.
pub(crate) struct LaterLinks {
    /// Channels each peer gets (`NCCL_NCHANNELS_PER_NET_PEER`).
    pub channels: u32,
    /// How the FIFOs are cut.
    pub geometry: FifoGeometry,
    /// Ranks of the communicator.
    pub nranks: u32,
    /// Where the slots of their FIFOs go.
    pub gdr: NetGdr,
    /// The network devices their channels use.
    pub devices: NetDevices,
    /// Deadline of connecting once both sides' handles are known.
    pub timeout: Duration,
}

impl<A: DeviceApi> RuntimeConnect<A> {
    /// `peers` of `device`'s communicator to connect on first use as `links` says; `table` is
    /// the connection table as uploaded at init.
    pub(crate) fn new(
        api: A,
        device: i32,
        links: LaterLinks,
        peers: BTreeSet<u32>,
        table: Vec<u8>,
    ) -> RuntimeConnect<A> {
        RuntimeConnect {
            api,
            device,
            links,
            stop: AbortFlag::new(),
            waiting_any: AtomicBool::new(!peers.is_empty()),
            state: Mutex::new(LaterState {
                waiting: peers,
                table,
                fifos: Vec::new(),
                connecting: Vec::new(),
            }),
        }
    }

    fn connect(
        &self,
        work: &WorkDesc,
        bootstrap: &Arc<Bootstrap>,
        abort: &AbortFlag,
        proxy: &Arc<Proxy>,
        upload: impl FnOnce(&[u8], &[Range<usize>]) -> Result<()>,
    ) -> Result<()> {
        if !self.waiting_any.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut st = lock(&self.state);
        let new = reached(work, &st.waiting);
        if new.is_empty() {
            return Ok(());
        }
        // The caller's stream may be capturing a graph: allocating is "unsafe" there in the
        // global mode, and touches nothing the capture records.
        let _relaxed = self.api.relaxed_capture()?;
        let _g = self.api.bind(self.device)?;
        let peers = new.iter().map(|&p| (p, self.links.channels)).collect();
        let fifos = NetFifos::alloc(
            &self.api,
            &self.links.geometry,
            peers,
            self.links.gdr,
            self.links.devices.clone(),
        )?;
        let mut table = st.table.clone();
        fifos.patch_table(&mut table, &self.links.geometry, self.links.nranks);
        let ranges: Vec<Range<usize>> = new
            .iter()
            .flat_map(|&peer| {
                (0..self.links.geometry.channels as u32).flat_map(move |channel| {
                    [false, true].map(|recv| ConnSlot {
                        channel,
                        peer,
                        recv,
                    })
                })
            })
            .map(|slot| slot.range(&self.links.geometry, self.links.nranks))
            .collect();
        upload(&table, &ranges)?;
        st.table = table;
        let thread = self.start_connecting(&fifos, &new, bootstrap, abort, proxy);
        // Held whatever happened: the device table points at them now.
        st.fifos.push(fifos);
        let thread = thread?;
        st.connecting.retain(|t| !t.is_finished());
        st.connecting.push(thread);
        for p in &new {
            st.waiting.remove(p);
        }
        self.waiting_any
            .store(!st.waiting.is_empty(), Ordering::Release);
        tracing::info!(target: "oxccl::init",
            "rank {}: connecting to ranks {new:?} on first use ({} channels each)",
            bootstrap.rank(), self.links.channels);
        Ok(())
    }

    /// A thread that connects `fifos` (for `peers`) and hands them to `proxy`.
    fn start_connecting(
        &self,
        fifos: &NetFifos<A>,
        peers: &[u32],
        bootstrap: &Arc<Bootstrap>,
        abort: &AbortFlag,
        proxy: &Arc<Proxy>,
    ) -> Result<JoinHandle<()>> {
        let peer_fifos = fifos.peer_fifos();
        let (api, device, gdr, timeout) = (
            self.api.clone(),
            self.device,
            self.links.gdr,
            self.links.timeout,
        );
        let (bootstrap, abort, stop, proxy) = (
            bootstrap.clone(),
            abort.clone(),
            self.stop.clone(),
            proxy.clone(),
        );
        let rank = bootstrap.rank();
        let peers = peers.to_vec();
        std::thread::Builder::new()
            .name(format!("oxccl-connect-r{rank}"))
            .spawn(move || {
                // Registering GPU slots may need the device current on this thread.
                let _g = api.bind(device);
                let export = |p: *mut u8, n: usize| -> Option<std::os::fd::OwnedFd> {
                    api.dma_buf_fd(p as DevicePtr, n)
                };
                let gpu = GpuRegistration {
                    flush: gdr.flush,
                    dma_buf: gdr.dma_buf.then_some(&export as DmaBufExport<'_>),
                    // The proxy's threads bound the GPU as they started.
                    bind: None,
                };
                let r = connect::connect_later(
                    &bootstrap, &abort, &stop, &proxy, peer_fifos, timeout, gpu,
                );
                if let Err(e) = r
                    && !stop.is_aborted()
                    && !abort.is_aborted()
                {
                    abort.record(Error::Remote(format!(
                        "rank {rank}: connecting to ranks {peers:?} on first use: {e}"
                    )));
                    abort.abort();
                }
            })
            .map_err(|e| Error::io("spawning a connecting thread", e))
    }

    /// Ends the waits of the connecting threads and joins them.
    fn stop_connecting(&self) {
        self.stop.abort();
        let threads = std::mem::take(&mut lock(&self.state).connecting);
        for t in threads {
            let _ = t.join();
        }
    }
}

/// The peers in `waiting` that `work`'s steps send to or receive from.
fn reached(work: &WorkDesc, waiting: &BTreeSet<u32>) -> Vec<u32> {
    let mut v: Vec<u32> = work
        .channels
        .iter()
        .flat_map(|c| c.steps.iter())
        .flat_map(|s| [s.send, s.recv])
        .flatten()
        .filter(|p| waiting.contains(p))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxccl_core::datatype::{DataType, RedOp, Reduction};
    use oxccl_core::plan::{Algorithm, ChannelWork, CollKind, Protocol, Step};

    fn step(send: Option<u32>, recv: Option<u32>) -> Step {
        let s = Step::new(1, 0);
        let s = send.map_or(s, |p| s.send(p));
        recv.map_or(s, |p| s.recv(p))
    }

    /// Only peers still waiting count, whether the plan sends to them or receives from them,
    /// on any channel, each once.
    #[test]
    fn reached_peers_are_the_waiting_senders_and_receivers_of_every_channel() {
        let work = WorkDesc {
            kind: CollKind::AllToAll,
            algo: Algorithm::Direct,
            proto: Protocol::Simple,
            dtype: DataType::Float32,
            reduction: Reduction::lower(RedOp::Sum, 8),
            scratch_elems: 0,
            exposed: false,
            channels: vec![
                ChannelWork::new(vec![step(Some(3), Some(5)), step(Some(1), None)]),
                ChannelWork::new(vec![step(None, Some(6)), step(Some(3), Some(7))]),
            ],
        };
        let waiting: BTreeSet<u32> = [1, 3, 6, 9].into();
        assert_eq!(reached(&work, &waiting), vec![1, 3, 6]);
        assert!(reached(&work, &BTreeSet::new()).is_empty());
    }
}
