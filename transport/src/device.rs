//! Per-communicator connections and the launch of plan executors, for both GPU vendors.
//!
//! Every rank allocates, on its own device, one receive FIFO per (channel, peer) for the
//! channels of its [`FifoGeometry`]: slots plus a head and a tail counter, each on its own
//! 64-byte line. The allocation is published through the bootstrap; peers of the same
//! process use its address directly (access was granted to every peer-capable device), peers in
//! other processes of the same host import its exported descriptor. Pairs of one host without
//! P2P meet through shared host memory ([`crate::shm`]), ranks on other hosts over the network
//! ([`crate::net`], `docs/transports.md`).

use crate::api::{CaptureStatus, DeviceApi, Handle};
use crate::net::{NetFifos, net_channels};
use crate::runtime_connect::{LaterLinks, NetSide, RuntimeConnect, runtime_connect_wanted};
use crate::shm::ShmFifos;
use oxccl_core::abort::{AbortFlag, AbortWatcher};
use oxccl_core::backend::{ConnectContext, DevicePtr, ShareableHandle};
use oxccl_core::bootstrap::Bootstrap;
use oxccl_core::config::{self, vars};
use oxccl_core::error::{Error, Result};
use oxccl_core::plan::net_peers::{per_net_peer_channels, plan_peers, some_pair_unplanned};
use oxccl_core::plan::one_shot::OneShot;
use oxccl_core::plan::tuner::link_summary;
use oxccl_core::plan::{BufId, HostLayout, NetLink, Protocol, Topology, WorkDesc};
use oxccl_kernel_abi::{
    self as abi, ArgsLayout, FifoGeometry, LaunchArgs, OneShotParams, PeerRecord, SlotPeers,
    kernel_params, one_shot_grid, one_shot_max_bytes, placements, publish,
    shared_device_max_blocks,
};
use oxccl_net::Net;
use oxccl_net::connect::{NetDevices, choose_net};
use oxccl_net::proxy_cpus;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

/// Fewest threads a launch gets when its steps are small (see [`launch_threads`]).
const MIN_SMALL_THREADS: u32 = 128;

/// Steps of at most this many bytes make a launch small.
const SMALL_STEP_BYTES: u64 = 4096;

/// The block size for `work`, at most `max`: one thread per 8 bytes of its largest step (an LL
/// packet's payload), at least `MIN_SMALL_THREADS`.
///
/// A small step costs its instructions, issued by every warp of the block: on an H200 a graph
/// launch of four 8-byte steps took 3.04 us with 128 threads and 3.81 with 512, and a two-rank
/// LL exchange of 8 bytes 5.53 against 6.22 us (`kernels/tests/gpu_exec_test.cu`). Large steps
/// need every thread for bandwidth.
pub fn launch_threads(work: &WorkDesc, max: u32) -> u32 {
    let esize = work.dtype.size() as u64;
    let largest = work
        .channels
        .iter()
        .flat_map(|c| &c.steps)
        .map(|st| st.count * esize)
        .max()
        .unwrap_or(0);
    if largest > SMALL_STEP_BYTES {
        return max;
    }
    let threads = largest.div_ceil(8).next_multiple_of(32) as u32;
    threads.clamp(MIN_SMALL_THREADS.min(max), max)
}

/// The block size a valid `OXCCL_BLOCK_THREADS` (a multiple of 32 up to
/// [`abi::MAX_THREADS_PER_BLOCK`]) fixes for every launch; `None` without it ([`launch_threads`]
/// then sizes each launch).
fn fixed_block_threads() -> Option<u32> {
    config::get(&vars::OXCCL_BLOCK_THREADS)
}

/// Launch-argument arenas per transport, reused round-robin once their launch has completed.
const ARENAS: usize = 16;

/// One launch-argument arena: pinned host staging and its device copy.
struct Arena {
    host: *mut u8,
    dev: DevicePtr,
    cap: usize,
    event: Handle,
}

/// What launches of one transport share; guarded by the transport's mutex. Starts empty: every
/// buffer is allocated by the first launch that needs it.
#[derive(Default)]
struct LaunchState {
    epoch: u64,
    scratch: (DevicePtr, usize),
    loopback: (DevicePtr, usize),
    flags: (DevicePtr, usize),
    arenas: Vec<Arena>,
    next: usize,
    /// Recorded after every eager launch: this communicator's tail (0 until the first).
    tail: Handle,
    /// The stream of the latest launch.
    last_stream: Option<Handle>,
    /// Shared buffers and arenas replaced by larger ones, freed with the transport.
    retired: Vec<DevicePtr>,
    /// Pinned staging of arenas replaced by larger ones, freed with the transport.
    retired_host: Vec<*mut u8>,
    /// Argument blocks and loopback flags of launches captured into graphs, freed with the
    /// transport (a graph may be replayed as long as its communicator lives).
    captured: Vec<DevicePtr>,
}

/// One communicator's connections on a GPU backend (`A`: the vendor's runtime calls).
pub struct DeviceTransport<A: DeviceApi> {
    api: A,
    device: i32,
    rank: u32,
    nranks: u32,
    fifo: DevicePtr,
    imported: Vec<DevicePtr>,
    /// How the FIFOs are cut (the same on every rank).
    geometry: FifoGeometry,
    /// `send_conns` then `recv_conns`, `geometry.channels * nranks` each.
    conns: DevicePtr,
    /// Sender-local counter copies of the send connections (0: not used), then the one-shot
    /// epochs.
    send_state: DevicePtr,
    /// Every rank's one-shot inbox as mapped here; empty when the communicator has none (one
    /// rank, or more than the one-shot kernels take).
    one_shot_inbox: Vec<DevicePtr>,
    /// Most blocks one launch may use, the same on every rank: ranks of one process that share
    /// a device wait for each other's blocks, which must all be resident at once
    /// ([`shared_device_max_blocks`]). `u32::MAX` when every rank has a device to itself.
    max_blocks: u32,
    /// Most channels a direct plan may use: the channels of the NET pairs that no ring or
    /// tree joins ([`net_peer_channels`]), the same on every rank; `None`: any.
    direct_channels: Option<u32>,
    abort_host: *mut u32,
    abort_dev: DevicePtr,
    watcher: Option<AbortWatcher>,
    /// Our own non-blocking stream for set-up copies, never captured.
    setup: Handle,
    /// Threads per block of every launch when fixed (`OXCCL_BLOCK_THREADS`, or a vendor
    /// without [`DeviceApi::SIZED_LAUNCHES`]), else sized per launch ([`launch_threads`]).
    fixed_threads: Option<u32>,
    state: Mutex<LaunchState>,
    /// The proxy driving the NET connections, their FIFOs, and the peers connected on first
    /// use (`None`: no NET peer). Dropped before anything else is freed: the proxy stops first.
    net: Option<NetSide<A>>,
    /// The shared-memory FIFOs of the SHM peers (`None`: no rank of the communicator has any).
    /// Dropped with the other fields, after `drop` has waited for the last kernel.
    shm: Option<ShmFifos<A>>,
    /// `Some` when a pair of this communicator meets through host memory (NET or SHM): plans
    /// stay on the channels those connections exist for, and the one-shot kernels (which write
    /// into every peer's memory) are off. It holds the network the tuner weighs: the slowest of
    /// the ranks' NET devices, or with SHM pairs only the link the limits were measured on
    /// ([`NetLink::SOCKETS_ON_LOOPBACK`]: unchanged behaviour). The same on every rank.
    net_link: Option<NetLink>,
}

impl<A: DeviceApi> std::fmt::Debug for DeviceTransport<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceTransport")
            .field("backend", &A::NAME)
            .field("device", &self.device)
            .field("rank", &self.rank)
            .field("nranks", &self.nranks)
            .finish_non_exhaustive()
    }
}

// SAFETY: the raw pointers are pinned host memory and device addresses owned by the transport,
// written only under its mutex (arenas) or with single volatile stores (abort flag).
unsafe impl<A: DeviceApi> Send for DeviceTransport<A> {}
// SAFETY: as above.
unsafe impl<A: DeviceApi> Sync for DeviceTransport<A> {}

/// P2P is off for every pair: `NCCL_P2P_DISABLE=1`, or `NCCL_P2P_LEVEL=LOC` (or `0`), NCCL's
/// "never use P2P". Other levels name PCI distances this backend does not measure: they leave
/// P2P wherever peer access works.
fn p2p_disabled() -> bool {
    config::get(&vars::NCCL_P2P_DISABLE)
        || config::get(&vars::NCCL_P2P_LEVEL)
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("LOC") || v.trim() == "0")
}

/// The link of the devices this rank's NET connections over `net` use, as the tuner weighs
/// it: the first one's (they are equally near and equally fast, [`NetDevices::choose`]).
fn device_link(net: &dyn Net, devices: &NetDevices) -> Result<NetLink> {
    Ok(net.properties(devices.for_channel(0))?.link())
}

/// The slowest link among the ranks' records of the all-gather in `connect` (a flag byte, bit 0:
/// the rank has NET peers, then its [`NetLink::to_bytes`]); `None` when no rank has NET peers.
fn slowest_link(records: &[Vec<u8>]) -> Option<NetLink> {
    records
        .iter()
        .filter(|r| r.first().is_some_and(|flags| flags & 1 != 0))
        .filter_map(|r| NetLink::from_bytes(&r[1..]))
        .reduce(NetLink::slower)
}

/// The channels of each NET peer in `net_peers`: all `channels` for ring neighbours and tree
/// links, [`per_net_peer_channels`] for the peers of other hosts that only direct plans reach
/// (`plan::net_peers`); and the cap on direct plans that follows, when some pair has fewer.
fn net_peer_channels(
    rank: u32,
    hosts: Option<&HostLayout>,
    net_peers: &[u32],
    channels: u32,
) -> (Vec<(u32, u32)>, Option<u32>) {
    let per_peer = per_net_peer_channels(channels);
    let layout = hosts.filter(|&h| per_peer < channels && some_pair_unplanned(h));
    let Some(h) = layout else {
        return (net_peers.iter().map(|&p| (p, channels)).collect(), None);
    };
    let direct_only = direct_only_peers(h, rank, net_peers);
    let peers: Vec<(u32, u32)> = net_peers
        .iter()
        .map(|&p| {
            let fewer = direct_only.contains(&p);
            (p, if fewer { per_peer } else { channels })
        })
        .collect();
    let fewer = direct_only.len();
    tracing::info!(target: "oxccl::init",
        "rank {rank}: {} NET peers on {channels} channels (rings and trees), {fewer} on {per_peer} \
         (direct plans only; NCCL_NCHANNELS_PER_NET_PEER)", peers.len() - fewer);
    (peers, Some(per_peer))
}

/// The peers in `net_peers` on other hosts that no ring or tree of `rank` joins: only direct
/// plans reach them, so they can wait for their first use.
fn direct_only_peers(h: &HostLayout, rank: u32, net_peers: &[u32]) -> BTreeSet<u32> {
    let planned = plan_peers(h, rank);
    net_peers
        .iter()
        .copied()
        .filter(|&p| h.host_of(p) != h.host_of(rank) && !planned.contains(&p))
        .collect()
}

/// How this rank reaches each peer, as [`DeviceTransport::map_p2p_peers`] sorts them.
struct PeerRoutes {
    /// Every rank's FIFO as mapped here: this rank's and its P2P peers' (0 for the others).
    fifo: Vec<DevicePtr>,
    /// Peers reached over the network.
    net: Vec<u32>,
    /// Peers of this host reached through shared host memory.
    shm: Vec<u32>,
}

/// What every rank agreed on in [`DeviceTransport::agree_on_host_links`].
struct Agreed {
    /// Some rank has SHM peers.
    shm: bool,
    /// Every rank connects the NET peers that only direct plans reach on first use.
    runtime_connect: bool,
    /// Channels of the NET and SHM connections.
    channels: u32,
}

impl<A: DeviceApi> DeviceTransport<A> {
    /// Connects this rank to every peer (`Backend::connect`).
    pub fn connect(
        api: A,
        geometry: FifoGeometry,
        ctx: &ConnectContext<'_>,
    ) -> Result<DeviceTransport<A>> {
        let bs = ctx.bootstrap;
        let (rank, nranks, device) = (bs.rank(), bs.nranks(), ctx.device);
        let _g = api.bind(device)?;
        let fixed_threads = if A::SIZED_LAUNCHES {
            fixed_block_threads()
        } else {
            Some(A::BLOCK_THREADS)
        };
        let slot_peers = SlotPeers::new(nranks, ctx.hosts);
        let bytes = geometry.fifo_bytes(&slot_peers, rank);
        let fifo = api.shared_alloc(device, bytes as usize)?;
        // From here on Drop frees what the transport holds.
        let mut t = DeviceTransport::unconnected(
            api.clone(),
            geometry,
            device,
            rank,
            nranks,
            fifo,
            fixed_threads,
        );
        t.setup = api.stream_create()?;
        let inbox_bytes = t.zero_fifo(&slot_peers)?;

        let all = t.publish_fifo(bs)?;
        let records = all
            .iter()
            .enumerate()
            .map(|(p, b)| geometry.peer_record(p, b))
            .collect::<Result<Vec<_>>>()?;
        let routes = t.map_p2p_peers(bs, &records, bytes)?;

        t.max_blocks = shared_device_max_blocks(&placements(bs.peers(), &records));
        if t.max_blocks != u32::MAX {
            tracing::info!(
                "rank {rank}: ranks share GPUs; at most {} blocks per launch",
                t.max_blocks
            );
        }

        let mut table = t.build_conn_table(&slot_peers, &routes.fifo)?;
        if inbox_bytes > 0 && nranks > 1 {
            // One host: every rank's allocation is cut alike.
            let off = geometry.inbox_offset(&slot_peers, rank);
            t.one_shot_inbox = routes.fifo.iter().map(|&f| f + off).collect();
        }
        let net = t.net_for_peers(bs, &routes.net)?;
        let agreed = t.agree_on_host_links(bs, net.as_ref(), &routes.shm)?;
        if agreed.shm {
            t.connect_shm(bs, routes.shm, agreed.channels, &records, &mut table)?;
        }
        if let Some(net) = net {
            t.connect_net(ctx, net, &routes.net, &agreed, &mut table)?;
        }
        t.conns = api.dev_alloc(table.len())?;
        // SAFETY: `conns` holds `table.len()` bytes.
        unsafe { api.copy_h2d(t.conns, &table) }?;
        t.watch_abort(ctx.abort)?;
        Ok(t)
    }

    /// A transport holding only its FIFO allocation `fifo`, so that Drop frees what `connect`
    /// adds as it goes.
    fn unconnected(
        api: A,
        geometry: FifoGeometry,
        device: i32,
        rank: u32,
        nranks: u32,
        fifo: DevicePtr,
        fixed_threads: Option<u32>,
    ) -> DeviceTransport<A> {
        DeviceTransport {
            api,
            device,
            rank,
            nranks,
            fifo,
            imported: Vec::new(),
            geometry,
            conns: 0,
            send_state: 0,
            one_shot_inbox: Vec::new(),
            max_blocks: u32::MAX,
            direct_channels: None,
            abort_host: std::ptr::null_mut(),
            abort_dev: 0,
            watcher: None,
            setup: 0,
            fixed_threads,
            state: Mutex::new(LaunchState::default()),
            net: None,
            shm: None,
            net_link: None,
        }
    }

    /// Zeroes the FIFO's counters and its one-shot inbox on the setup stream; returns the
    /// inbox's size in bytes.
    fn zero_fifo(&self, slot_peers: &SlotPeers) -> Result<usize> {
        let (api, fifo, setup) = (&self.api, self.fifo, self.setup);
        // Zero the counters (slots need no initialisation).
        let zeros = vec![0u8; self.geometry.counter_bytes(self.nranks)];
        // SAFETY: the FIFO allocation holds at least `zeros.len()` bytes at its start.
        unsafe { api.copy_h2d(fifo, &zeros) }?;
        let inbox = fifo + self.geometry.inbox_offset(slot_peers, self.rank);
        let inbox_bytes = slot_peers.inbox_bytes() as usize;
        if inbox_bytes > 0 {
            // Before the peers learn the address: none of them may write to it yet.
            // SAFETY: the inbox is the last `inbox_bytes` of the FIFO allocation.
            unsafe { api.memset_zero_async(inbox, inbox_bytes, setup) }?;
            api.stream_sync(setup)?;
        }
        Ok(inbox_bytes)
    }

    /// Publishes this rank's FIFO (its address, and an export handle for peers in other
    /// processes) to every rank; returns every rank's record.
    fn publish_fifo(&self, bs: &Bootstrap) -> Result<Vec<Vec<u8>>> {
        let (api, rank, device, fifo) = (&self.api, self.rank, self.device, self.fifo);
        let handle = if self.nranks > 1 {
            match api.export(fifo) {
                Ok(h) => h.0,
                Err(e) => {
                    // Peers of this process need no handle; others fail in `map_p2p_peers`,
                    // naming us.
                    tracing::debug!(target: "oxccl::init", "rank {rank}: FIFO not exportable: {e}");
                    Vec::new()
                }
            }
        } else {
            Vec::new()
        };
        bs.all_gather(&publish(
            std::process::id(),
            device,
            api.multiprocessors(device)?,
            fifo,
            &self.geometry,
            &handle,
        ))
    }

    /// Maps the FIFO of every P2P peer (its address in this process, else its imported export)
    /// and sorts the other peers into SHM and NET peers.
    fn map_p2p_peers(
        &mut self,
        bs: &Bootstrap,
        records: &[PeerRecord<'_>],
        bytes: u64,
    ) -> Result<PeerRoutes> {
        let (rank, nranks, device, fifo) = (self.rank, self.nranks, self.device, self.fifo);
        let (api, geometry) = (&self.api, self.geometry);
        let me = &bs.peers()[rank as usize];
        let p2p_disabled = p2p_disabled();
        let shm_disabled = config::get(&vars::NCCL_SHM_DISABLE);
        let mut peer_fifo = vec![0u64; nranks as usize];
        let mut net_peers = Vec::new();
        let mut shm_peers = Vec::new();
        for (p, rec) in records.iter().enumerate() {
            if p == rank as usize {
                peer_fifo[p] = fifo;
                continue;
            }
            let (pdev, pfifo) = (rec.device, rec.fifo);
            let info = &bs.peers()[p];
            let same_process = info.pid == std::process::id() && info.shares_proc_with_caller();
            // Decided from what both ends see alike, so the pair agrees.
            let p2p = info.same_host(me)
                && !p2p_disabled
                && (!same_process || pdev == device || api.can_access_peer(device, pdev));
            if !p2p {
                if info.same_host(me) && !shm_disabled {
                    shm_peers.push(p as u32);
                } else {
                    net_peers.push(p as u32);
                }
                continue;
            }
            tracing::info!(target: "oxccl::init",
                "Channels 00-{:02} : {rank}[{device}] -> {p}[{pdev}] via P2P",
                geometry.channels - 1);
            if same_process {
                if pdev != device {
                    // Zero-copy plans read and write the peer's own buffers, not only ours.
                    api.enable_peer_access(device, pdev)?;
                }
                peer_fifo[p] = pfifo;
            } else {
                if rec.handle.is_empty() {
                    return Err(Error::usage(format!(
                        "{} could not export its FIFO memory for other processes",
                        info.describe()
                    )));
                }
                let h = ShareableHandle(rec.handle.to_vec());
                // SAFETY: the handle is the peer's export of its FIFO allocation of this size.
                let va = unsafe { api.import(&h, device, bytes as usize) }?;
                self.imported.push(va);
                peer_fifo[p] = va;
            }
        }
        Ok(PeerRoutes {
            fifo: peer_fifo,
            net: net_peers,
            shm: shm_peers,
        })
    }

    /// Allocates the sender-local counters and builds the connection table on the FIFOs of
    /// `peer_fifo`.
    fn build_conn_table(
        &mut self,
        slot_peers: &SlotPeers,
        peer_fifo: &[DevicePtr],
    ) -> Result<Vec<u8>> {
        let (api, geometry, nranks) = (&self.api, self.geometry, self.nranks);
        // Sender-local counters: the LL positions, and copies of the Simple counters that save
        // the sender reads across the link (1-1.5 us per small message measured on 2x H200).
        let n = geometry.send_state_bytes(nranks);
        self.send_state = api.dev_alloc(n)?;
        // SAFETY: `send_state` holds `n` bytes.
        unsafe { api.copy_h2d(self.send_state, &vec![0u8; n]) }?;
        Ok(geometry.conn_table(
            self.rank,
            slot_peers,
            self.fifo,
            peer_fifo,
            self.send_state,
            true,
        ))
    }

    /// The network and its devices for the NET peers `net_peers`; `None` without any.
    fn net_for_peers(
        &self,
        bs: &Bootstrap,
        net_peers: &[u32],
    ) -> Result<Option<(Arc<dyn Net>, NetDevices)>> {
        Ok(if net_peers.is_empty() {
            None
        } else {
            let net = choose_net(bs)?;
            let gpu_pci = crate::net::gpu_pci_path(&self.api, self.device);
            let devices = NetDevices::choose(net.as_ref(), gpu_pci.as_deref(), bs)?;
            Some((net, devices))
        })
    }

    /// Agrees with every rank (collective) on the limits of the pairs that meet through host
    /// memory and on the network link the tuner weighs.
    fn agree_on_host_links(
        &mut self,
        bs: &Bootstrap,
        net: Option<&(Arc<dyn Net>, NetDevices)>,
        shm_peers: &[u32],
    ) -> Result<Agreed> {
        let (rank, geometry) = (self.rank, self.geometry);
        // Plans must be cut alike on every rank: if any pair meets through host memory (NET or
        // SHM), every rank keeps to their limits (channels, no one-shot kernels), and every
        // rank's tuner weighs the same network link.
        let link = net.map(|(n, d)| device_link(n.as_ref(), d)).transpose()?;
        let mut mine = vec![
            u8::from(link.is_some())
                | u8::from(!shm_peers.is_empty()) << 1
                | u8::from(runtime_connect_wanted()) << 2
                | u8::from(proxy_cpus::crowded_here(bs)) << 3,
        ];
        mine.extend(link.map_or([0; 8], NetLink::to_bytes));
        let all = bs.all_gather(&mine)?;
        let any = all
            .iter()
            .fold(0u8, |acc, v| acc | v.first().copied().unwrap_or(0))
            & 3;
        // Connecting on first use only where every rank does, or a pair could wait for ever.
        let runtime_connect = all.iter().all(|v| v.first().is_some_and(|f| f & 4 != 0));
        let crowded = all.iter().any(|v| v.first().is_some_and(|f| f & 8 != 0));
        let channels = net_channels(&geometry, any & 2 != 0, crowded);
        if any != 0 {
            self.max_blocks = self.max_blocks.min(channels);
            self.one_shot_inbox.clear();
            let agreed = slowest_link(&all);
            if let Some(link) = agreed.filter(|_| rank == 0) {
                tracing::info!(target: "oxccl::init", "{}", link_summary(link));
            }
            self.net_link = Some(agreed.unwrap_or(NetLink::SOCKETS_ON_LOOPBACK));
        }
        Ok(Agreed {
            shm: any & 2 != 0,
            runtime_connect,
            channels,
        })
    }

    /// Connects the SHM peers `shm_peers` on `channels` channels and enters their FIFOs in
    /// `table`.
    fn connect_shm(
        &mut self,
        bs: &Bootstrap,
        shm_peers: Vec<u32>,
        channels: u32,
        records: &[PeerRecord<'_>],
        table: &mut [u8],
    ) -> Result<()> {
        let (rank, nranks, device, geometry) = (self.rank, self.nranks, self.device, self.geometry);
        // Collective: every rank takes part, with or without SHM peers of its own.
        let shm = ShmFifos::connect(&self.api, bs, &geometry, shm_peers, channels)?;
        shm.patch_table(table, &geometry, nranks);
        for &p in shm.peers() {
            tracing::info!(target: "oxccl::init",
                "Channels 00-{:02} : {rank}[{device}] -> {p}[{}] via SHM",
                channels - 1, records[p as usize].device);
        }
        self.shm = Some(shm);
        Ok(())
    }

    /// Connects the NET peers `net_peers` over `net` (those that only direct plans reach on
    /// first use, where every rank agreed to), enters their FIFOs in `table` and starts the
    /// proxy.
    fn connect_net(
        &mut self,
        ctx: &ConnectContext<'_>,
        (net, devices): (Arc<dyn Net>, NetDevices),
        net_peers: &[u32],
        agreed: &Agreed,
        table: &mut [u8],
    ) -> Result<()> {
        let (rank, nranks, device, geometry) = (self.rank, self.nranks, self.device, self.geometry);
        let (api, bs, channels) = (&self.api, ctx.bootstrap, agreed.channels);
        let gdr = crate::net::net_gdr(api, device, net.as_ref(), &devices)?;
        let later = match ctx.hosts {
            Some(h) if agreed.runtime_connect => direct_only_peers(h, rank, net_peers),
            _ => BTreeSet::new(),
        };
        let (net_peers, direct) = net_peer_channels(rank, ctx.hosts, net_peers, channels);
        self.direct_channels = direct;
        let (later_peers, now): (Vec<_>, Vec<_>) =
            net_peers.into_iter().partition(|(p, _)| later.contains(p));
        let fifos = NetFifos::alloc(api, &geometry, now, gdr, devices.clone())?;
        fifos.patch_table(table, &geometry, nranks);
        let proxy = fifos.connect(bs, ctx.abort, net, device, ctx.timeout)?;
        let later = later_peers.first().map(|&(_, channels)| {
            tracing::info!(target: "oxccl::init",
                "rank {rank}: {} NET peers reached by direct plans only connect on first use \
                 (NCCL_RUNTIME_CONNECT=0: at init)", later.len());
            let links = LaterLinks {
                channels,
                geometry,
                nranks,
                gdr,
                devices,
                timeout: ctx.timeout,
            };
            RuntimeConnect::new(api.clone(), device, links, later, table.to_vec())
        });
        self.net = Some(NetSide::new(proxy, fifos, later));
        Ok(())
    }

    /// Mirrors the communicator's flag `abort` into the transport's abort word, which the
    /// kernels read.
    fn watch_abort(&mut self, abort: &AbortFlag) -> Result<()> {
        let rank = self.rank;
        // Abort flag in mapped pinned memory, mirrored from the communicator's flag.
        let (host, dev) = self.api.host_alloc(64)?;
        self.abort_host = host.cast();
        self.abort_dev = dev;
        // SAFETY: `abort_host` points to at least 4 writable bytes of pinned memory.
        unsafe { std::ptr::write_volatile(self.abort_host, 0) };
        let flag = self.abort_host as usize;
        self.watcher = Some(abort.watch(format!("oxccl-abort-r{rank}"), move || {
            // SAFETY: `flag` is the transport's pinned abort word, freed only after the watcher
            // has been dropped (and so joined).
            unsafe { std::ptr::write_volatile(flag as *mut u32, 1) };
        })?);
        Ok(())
    }

    /// Queues `work` on `stream` (`Backend::launch`).
    ///
    /// While `stream` is capturing a graph the launch becomes graph nodes that replay
    /// correctly: its argument block travels in the captured parameters or in device memory of
    /// its own (never reused), its loopback flags are reset by a memset node at every replay,
    /// and it does not join the eager launches' cross-stream ordering (a captured stream may
    /// not wait on outside events).
    ///
    /// # Safety
    /// `buffers` are valid for the plan's regions until the kernel has run; `stream` is live.
    pub unsafe fn launch(
        &self,
        stream: Handle,
        work: &WorkDesc,
        buffers: &[DevicePtr],
        abort: &AbortFlag,
    ) -> Result<()> {
        abort.check()?;
        if let Some(e) = self.api.kernels_missing() {
            return Err(e);
        }
        let nch = work.channels.len();
        if nch == 0 || work.step_count() == 0 {
            return Ok(());
        }
        if let Some(net) = &self.net {
            net.wake();
        }

        let s = stream;
        let capturing = self.capture_status(s)?;
        // Allocations and host waits below are "unsafe during capture" in global mode; they
        // touch only our own memory and our setup stream, never the captured stream.
        let _relaxed = capturing.then(|| self.api.relaxed_capture()).transpose()?;
        let _g = self.api.bind(self.device)?;
        let enc = abi::encode(work, self.rank)?;
        self.geometry.check_plan(&enc)?;
        let red = abi::reduction_args(&work.reduction);
        let esize = work.dtype.size();

        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let st = &mut *st;
        let scratch_need = (work.scratch_elems as usize).saturating_mul(esize);
        let flags_need = enc.loopback_offsets.len() * 8;
        st.grow(
            &self.api,
            self.setup,
            scratch_need,
            enc.loopback_bytes as usize,
            flags_need,
        )?;

        let layout = ArgsLayout::new(
            nch,
            enc.steps.len(),
            buffers.len(),
            enc.loopback_offsets.len(),
        );
        let mut table: Vec<u64> = buffers.to_vec();
        if let Some(slot) = table.get_mut(BufId::SCRATCH.0 as usize) {
            *slot = st.scratch.0;
        }
        let mut args = LaunchArgs {
            send_conns: self.conns,
            recv_conns: self.conns + self.geometry.recv_table_offset(self.nranks),
            loopback: st.loopback.0,
            loopback_flags: st.flags.0,
            pre_scale_ptr: red.pre_scale_ptr,
            abort_flag: self.abort_dev,
            pre_scale_bytes: red.pre_scale_bytes,
            nchannels: nch as u32,
            nranks: self.nranks,
            rank: self.rank,
            post_div: red.post_div,
            dtype: work.dtype as u8,
            redop: red.redop,
            flags: abi::launch_flags(work, &red),
            ..LaunchArgs::default()
        };
        // The vendor picks the entry point: inline in the smallest parameters that hold the
        // block, else by address.
        let exec = self.api.executor(self.device, work.dtype, layout.total)?;
        let threads = self
            .fixed_threads
            .unwrap_or_else(|| launch_threads(work, A::BLOCK_THREADS));

        if capturing {
            // Captured parameters are copied into the graph. A block too large for them gets
            // device memory of its own (never reused), and loopback flags of their own that a
            // memset node clears before every replay (so epoch 1 is always new).
            if flags_need > 0 {
                let f = self.api.dev_alloc(flags_need)?;
                st.captured.push(f);
                args.loopback_flags = f;
                // SAFETY: `f` holds `flags_need` bytes; captured as a node before the kernel.
                unsafe { self.api.memset_zero_async(f, flags_need, s) }?;
            }
            args.epoch = 1;
            let image = layout.image(&args, &enc, &table);
            let mut params = match exec.inline_cap {
                Some(cap) => kernel_params(cap, Some(&image), 0),
                None => {
                    let dev = self.api.dev_alloc(image.len())?;
                    st.captured.push(dev);
                    self.upload_now(dev, &image)?;
                    kernel_params(exec.address_cap, None, dev)
                }
            };
            // SAFETY: as for the eager launch below; nothing the parameters reach is reused.
            return unsafe {
                self.api
                    .launch(exec.func, nch as u32, threads, &mut params, s)
            };
        }

        // Only blocks passed by address need an arena (and a wait for its previous launch).
        let idx = match exec.inline_cap {
            Some(_) => None,
            None => Some(st.take_arena(&self.api, layout.total)?),
        };
        st.epoch += 1;
        args.epoch = st.epoch;
        let image = layout.image(&args, &enc, &table);
        let mut params = match (idx, exec.inline_cap) {
            (Some(idx), _) => {
                let arena = &st.arenas[idx];
                // SAFETY: the arena's host half holds `cap >= total` bytes, and its previous
                // launch has completed (`take_arena`).
                unsafe { std::ptr::copy_nonoverlapping(image.as_ptr(), arena.host, image.len()) };
                // SAFETY: pinned staging to the arena's device copy, ordered on the launch
                // stream.
                unsafe {
                    self.api
                        .copy_h2d_async(arena.dev, arena.host, image.len(), s)
                }?;
                kernel_params(exec.address_cap, None, arena.dev)
            }
            (None, cap) => kernel_params(cap.unwrap_or(exec.address_cap), Some(&image), 0),
        };
        let arena_event = idx.map(|i| st.arenas[i].event);
        let api = &self.api;
        st.in_order(api, s, || {
            // SAFETY: the kernel takes one `OxcclKernelParams`; everything it reaches stays
            // valid until it has run (caller for user buffers, this transport for the rest).
            unsafe { api.launch(exec.func, nch as u32, threads, &mut params, s) }?;
            if let Some(ev) = arena_event {
                // Records the arena's event after the kernel on the same stream.
                api.event_record(ev, s)?;
            }
            Ok(())
        })
    }

    /// Connects the NET peers `work` reaches that init left for their first use
    /// (`Backend::connect_on_use`): their connection table entries are on the device when this
    /// returns, the connections complete in the background.
    pub fn connect_on_use(
        &self,
        work: &WorkDesc,
        bootstrap: &Arc<Bootstrap>,
        abort: &AbortFlag,
    ) -> Result<()> {
        let Some(net) = &self.net else {
            return Ok(());
        };
        net.connect_on_use(work, bootstrap, abort, |table, ranges| {
            for r in ranges {
                // SAFETY: `conns` holds the whole table; no kernel reads these entries yet
                // (their peer was never reached), and the copy completes before we return.
                unsafe {
                    self.api.copy_h2d_async(
                        self.conns + r.start as u64,
                        table[r.clone()].as_ptr(),
                        r.len(),
                        self.setup,
                    )
                }?;
            }
            self.api.stream_sync(self.setup)
        })
    }

    /// Largest per-peer message the one-shot kernels take with `proto` on this communicator
    /// (0: none).
    pub fn one_shot_bytes(&self, proto: Protocol) -> u64 {
        if self.one_shot_inbox.is_empty() || !self.api.has_one_shot() {
            0
        } else {
            one_shot_max_bytes(proto, self.max_blocks)
        }
    }

    /// What joins the ranks, for the tuner: several nodes over the agreed network link when
    /// some pair meets through host memory, NET or SHM (see `net_link`); `None` otherwise.
    pub fn topology(&self) -> Option<Topology> {
        self.net_link.map(|link| Topology::MultiNode { link })
    }

    /// Most blocks (channels) one launch may use on this communicator.
    pub fn max_blocks(&self) -> u32 {
        self.max_blocks
    }

    /// Most channels one direct plan may use on this communicator (`None`: any).
    pub fn direct_channels(&self) -> Option<u32> {
        self.direct_channels
    }

    /// Queues a one-shot collective on `stream` (`Backend::launch_one_shot`): one kernel, its
    /// parameters by value, nothing allocated or uploaded, so a captured launch replays as is
    /// (the kernel keeps its epochs in device memory).
    ///
    /// # Safety
    /// `op`'s buffers are valid for the operation until the kernel has run; `stream` is live;
    /// [`DeviceTransport::one_shot_bytes`] admits `op`.
    pub unsafe fn launch_one_shot(
        &self,
        stream: Handle,
        op: &OneShot,
        abort: &AbortFlag,
    ) -> Result<()> {
        abort.check()?;
        let s = stream;
        let capturing = self.capture_status(s)?;
        let _g = self.api.bind(self.device)?;
        let func = self.api.one_shot(self.device, op.dtype)?;
        let epochs = self.send_state + self.geometry.epochs_offset(self.nranks);
        let params =
            OneShotParams::new(op, self.rank, &self.one_shot_inbox, epochs, self.abort_dev)
                .to_bytes()
                .to_vec();
        let (blocks, threads) = one_shot_grid(op);
        let api = &self.api;
        let launch = move || {
            let mut params = params;
            // SAFETY: the kernel takes one `OxcclOneShotParams`; the caller keeps the user
            // buffers valid, this transport its inboxes and epochs.
            unsafe { api.launch(func, blocks, threads, &mut params, s) }
        };
        if capturing {
            return launch();
        }
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.in_order(api, s, launch)
    }

    /// True while `s` is capturing a graph (an invalidated capture is an error: NCCL fails too).
    fn capture_status(&self, s: Handle) -> Result<bool> {
        match self.api.capture_status(s)? {
            CaptureStatus::None => Ok(false),
            CaptureStatus::Active => Ok(true),
            CaptureStatus::Invalidated => Err(Error::usage(
                "the stream's graph capture was invalidated before this operation",
            )),
        }
    }

    /// Copies `bytes` to `dev` through the transport's private stream and waits for it.
    fn upload_now(&self, dev: DevicePtr, bytes: &[u8]) -> Result<()> {
        // SAFETY: `dev` holds at least `bytes.len()` bytes; the copy completes before we return.
        unsafe {
            self.api
                .copy_h2d_async(dev, bytes.as_ptr(), bytes.len(), self.setup)
        }?;
        self.api.stream_sync(self.setup)
    }
}

impl LaunchState {
    /// Makes the shared buffers large enough. A replaced buffer is retired, not freed: captured
    /// graphs may still reference it, and in-flight launches still use it.
    fn grow<A: DeviceApi>(
        &mut self,
        api: &A,
        setup: Handle,
        scratch: usize,
        loopback: usize,
        flags: usize,
    ) -> Result<()> {
        if scratch > self.scratch.1 {
            let n = scratch.next_power_of_two();
            let p = api.dev_alloc(n)?;
            self.retired
                .push(std::mem::replace(&mut self.scratch, (p, n)).0);
        }
        if loopback > self.loopback.1 {
            let n = loopback.next_power_of_two();
            let p = api.dev_alloc(n)?;
            self.retired
                .push(std::mem::replace(&mut self.loopback, (p, n)).0);
        }
        if flags > self.flags.1 {
            let n = flags.next_power_of_two().max(256);
            let p = api.dev_alloc(n)?;
            // Zero before first use; no launch can reference the new memory yet.
            // SAFETY: `p` holds `n` bytes; `setup` is the transport's live stream.
            unsafe { api.memset_zero_async(p, n, setup) }?;
            api.stream_sync(setup)?;
            self.retired
                .push(std::mem::replace(&mut self.flags, (p, n)).0);
        }
        Ok(())
    }

    /// Queues an eager launch on `s` after every earlier launch of this communicator, whatever
    /// stream they used, and makes it the new tail.
    fn in_order<A: DeviceApi>(
        &mut self,
        api: &A,
        s: Handle,
        launch: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        // Launches on the stream of the previous one are ordered already.
        let last_event = self
            .last_stream
            .filter(|&last| last != s)
            .map(|_| self.tail);
        let tail = self.tail_event(api)?;
        if let Some(ev) = last_event {
            api.stream_wait_event(s, ev)?;
        }
        launch()?;
        api.event_record(tail, s)?;
        self.last_stream = Some(s);
        Ok(())
    }

    /// The tail event, created on first use on the bound device.
    fn tail_event<A: DeviceApi>(&mut self, api: &A) -> Result<Handle> {
        if self.tail == 0 {
            self.tail = api.event_create()?;
        }
        Ok(self.tail)
    }

    /// The next launch-argument arena, at least `need` bytes, once its previous launch is done.
    fn take_arena<A: DeviceApi>(&mut self, api: &A, need: usize) -> Result<usize> {
        if self.arenas.len() < ARENAS {
            let ev = api.event_create()?;
            self.arenas.push(Arena {
                host: std::ptr::null_mut(),
                dev: 0,
                cap: 0,
                event: ev,
            });
            self.next = self.arenas.len() - 1;
        }
        let idx = self.next;
        self.next = (self.next + 1) % ARENAS;
        let arena = &mut self.arenas[idx];
        // The arena's previous launch must have read its arguments before they are rewritten.
        api.event_sync(arena.event)?;
        if arena.cap < need {
            // Retired, not freed: freeing device or pinned memory waits for the whole device,
            // where another rank's kernel may be waiting for the very launch being prepared
            // (ranks sharing a GPU, launched one after another by one thread).
            if !arena.host.is_null() {
                self.retired_host.push(arena.host);
            }
            if arena.dev != 0 {
                self.retired.push(arena.dev);
            }
            arena.host = std::ptr::null_mut();
            arena.dev = 0;
            arena.cap = 0;
            let cap = arena_capacity(need);
            arena.host = api.host_alloc(cap)?.0;
            arena.dev = match api.dev_alloc(cap) {
                Ok(d) => d,
                Err(e) => {
                    // SAFETY: allocated just above, never used.
                    unsafe { api.host_free(arena.host) };
                    arena.host = std::ptr::null_mut();
                    return Err(e);
                }
            };
            arena.cap = cap;
        }
        Ok(idx)
    }
}

/// Bytes of an arena that must hold `need`: the next power of two, at least 4 KiB, so a
/// communicator replaces an arena only a few times.
fn arena_capacity(need: usize) -> usize {
    need.next_power_of_two().max(4096)
}

impl<A: DeviceApi> Drop for DeviceTransport<A> {
    fn drop(&mut self) {
        // Joins the watcher before the abort word it writes is freed.
        drop(self.watcher.take());
        let api = self.api.clone();
        let Ok(_g) = api.bind(self.device) else {
            return;
        };
        let net = self.net.take();
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        // Nothing may run on our memory any more: wait for the last launch.
        if st.tail != 0 {
            let _ = api.event_sync(st.tail);
            // SAFETY: ours and complete.
            unsafe { api.event_destroy(st.tail) };
        }
        for a in st.arenas.drain(..) {
            // SAFETY: the arena's launches are complete (the tail waited for them).
            unsafe {
                api.host_free(a.host);
                api.dev_free(a.dev);
                api.event_destroy(a.event);
            }
        }
        // The proxy stops before its FIFOs are freed (after the last kernel that used them).
        drop(net);
        // SAFETY: every launch that used these buffers is complete; captured graphs cannot
        // outlive their communicator.
        unsafe {
            api.dev_free(st.scratch.0);
            api.dev_free(st.loopback.0);
            api.dev_free(st.flags.0);
            for p in st.retired_host.drain(..) {
                api.host_free(p);
            }
            for p in st.retired.drain(..).chain(st.captured.drain(..)) {
                api.dev_free(p);
            }
        }
        if self.setup != 0 {
            // SAFETY: our stream; everything queued on it was waited for.
            unsafe { api.stream_destroy(self.setup) };
        }
        // SAFETY: used only by this transport's kernels, all complete; the watcher is joined.
        unsafe {
            api.dev_free(self.conns);
            api.dev_free(self.send_state);
            api.host_free(self.abort_host.cast());
        }
        for &va in &self.imported {
            // SAFETY: imported mappings are used only by this transport's kernels, all complete.
            unsafe { api.shared_free(va) };
        }
        // SAFETY: our FIFOs; peers' kernels that wrote to them belong to operations that
        // completed before the communicator was destroyed.
        unsafe { api.shared_free(self.fifo) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Executor;

    /// The registry's range for `OXCCL_BLOCK_THREADS` is the kernels' (a bad value is warned
    /// about and the launches are sized as without it).
    #[test]
    fn block_threads_range_is_the_kernels() {
        let read = |t: u32| {
            let v = t.to_string();
            vars::OXCCL_BLOCK_THREADS.read(Some(std::ffi::OsStr::new(&v)))
        };
        assert_eq!(read(32), Some(Some(32)));
        let max = abi::MAX_THREADS_PER_BLOCK;
        assert_eq!(read(max), Some(Some(max)));
        assert_eq!(read(max + 32), None);
        assert_eq!(read(48), None);
    }
    use oxccl_core::datatype::{DataType, Reduction};
    use oxccl_core::plan::{Algorithm, ChannelWork, CollKind, Protocol, Step};

    fn work(dtype: DataType, counts: &[&[u64]]) -> WorkDesc {
        WorkDesc {
            kind: CollKind::AllReduce,
            algo: Algorithm::Direct,
            proto: Protocol::Ll,
            dtype,
            reduction: Reduction::none(),
            scratch_elems: 0,
            exposed: false,
            channels: counts
                .iter()
                .map(|c| ChannelWork::new(c.iter().map(|&n| Step::new(n, 0)).collect()))
                .collect(),
        }
    }

    #[test]
    fn ranks_agree_on_the_slowest_network_link() {
        let record = |flags: u8, link: NetLink| {
            let mut r = vec![flags];
            r.extend(link.to_bytes());
            r
        };
        let fast = NetLink::reported(400_000, 2.0);
        let slow = NetLink::reported(25_000, 8.0);
        // Ranks without NET peers send zeros, which must not count as a link.
        let none = NetLink::from_bytes(&[0; 8]).expect("eight bytes");
        let all = vec![record(1, fast), record(2, none), record(3, slow), vec![0]];
        assert_eq!(slowest_link(&all), Some(slow));
        assert_eq!(slowest_link(&[record(2, none), vec![]]), None);
        assert_eq!(slowest_link(&[record(1, fast)]), Some(fast));
    }

    #[test]
    fn small_launches_get_one_thread_per_packet_of_their_largest_step() {
        let f32 = DataType::Float32;
        // 8 B: the floor. 2 KiB: 256 packets. 4 KiB: 512. The largest step of any channel counts.
        assert_eq!(launch_threads(&work(f32, &[&[2, 2]]), 512), 128);
        assert_eq!(launch_threads(&work(f32, &[&[2], &[512]]), 512), 256);
        assert_eq!(launch_threads(&work(f32, &[&[1024]]), 512), 512);
        assert_eq!(launch_threads(&work(DataType::Int8, &[&[1000]]), 512), 128);
        // Larger steps, or an empty plan's 0 bytes: never above the maximum, never below 32.
        assert_eq!(launch_threads(&work(f32, &[&[1025]]), 512), 512);
        assert_eq!(launch_threads(&work(f32, &[&[1 << 20]]), 256), 256);
        assert_eq!(launch_threads(&work(f32, &[&[2]]), 64), 64);
        assert_eq!(launch_threads(&work(f32, &[]), 512), 128);
    }

    #[test]
    fn arenas_grow_to_powers_of_two_of_at_least_a_page() {
        assert_eq!(arena_capacity(1), 4096);
        assert_eq!(arena_capacity(4096), 4096);
        assert_eq!(arena_capacity(4097), 8192);
        assert_eq!(arena_capacity(100_000), 131_072);
    }

    /// A runtime that only records what the transport asks of it (no device): addresses and
    /// handles count up from 0x1000, calls are logged in order.
    #[derive(Clone, Default)]
    struct Fake(std::sync::Arc<Mutex<(u64, Vec<String>)>>);

    impl Fake {
        fn next(&self, what: String) -> u64 {
            let mut g = self.0.lock().unwrap();
            g.0 += 0x1000;
            g.1.push(what);
            g.0
        }
        fn log(&self, what: String) {
            self.0.lock().unwrap().1.push(what);
        }
        fn calls(&self) -> Vec<String> {
            std::mem::take(&mut self.0.lock().unwrap().1)
        }
    }

    impl DeviceApi for Fake {
        type Bound = ();
        type Relaxed = ();
        const BLOCK_THREADS: u32 = 256;
        const SIZED_LAUNCHES: bool = false;
        const NAME: &'static str = "fake";
        fn bind(&self, _: i32) -> Result<()> {
            Ok(())
        }
        fn kernels_missing(&self) -> Option<Error> {
            None
        }
        fn has_one_shot(&self) -> bool {
            false
        }
        fn multiprocessors(&self, _: i32) -> Result<u32> {
            Ok(0)
        }
        fn pci_bus_id(&self, _: i32) -> Option<String> {
            None
        }
        fn can_access_peer(&self, _: i32, _: i32) -> bool {
            true
        }
        fn enable_peer_access(&self, _: i32, _: i32) -> Result<()> {
            Ok(())
        }
        fn shared_alloc(&self, _: i32, n: usize) -> Result<DevicePtr> {
            Ok(self.next(format!("shared_alloc {n}")))
        }
        unsafe fn shared_free(&self, p: DevicePtr) {
            self.log(format!("shared_free {p:#x}"));
        }
        fn export(&self, _: DevicePtr) -> Result<ShareableHandle> {
            Ok(ShareableHandle(Vec::new()))
        }
        unsafe fn import(&self, _: &ShareableHandle, _: i32, _: usize) -> Result<DevicePtr> {
            Ok(self.next("import".into()))
        }
        fn dev_alloc(&self, n: usize) -> Result<DevicePtr> {
            Ok(self.next(format!("dev_alloc {n}")))
        }
        unsafe fn dev_free(&self, p: DevicePtr) {
            self.log(format!("dev_free {p:#x}"));
        }
        fn host_alloc(&self, n: usize) -> Result<(*mut u8, DevicePtr)> {
            let a = self.next(format!("host_alloc {n}"));
            Ok((a as *mut u8, a))
        }
        unsafe fn host_free(&self, p: *mut u8) {
            self.log(format!("host_free {:#x}", p as usize));
        }
        unsafe fn host_register(&self, p: *mut u8, _: usize) -> Result<DevicePtr> {
            Ok(p as DevicePtr)
        }
        unsafe fn host_unregister(&self, _: *mut u8) {}
        unsafe fn copy_h2d(&self, d: DevicePtr, s: &[u8]) -> Result<()> {
            self.log(format!("copy_h2d {d:#x} {}", s.len()));
            Ok(())
        }
        unsafe fn copy_h2d_async(
            &self,
            d: DevicePtr,
            _: *const u8,
            n: usize,
            s: Handle,
        ) -> Result<()> {
            self.log(format!("copy_h2d_async {d:#x} {n} on {s}"));
            Ok(())
        }
        unsafe fn memset_zero_async(&self, d: DevicePtr, n: usize, s: Handle) -> Result<()> {
            self.log(format!("memset {d:#x} {n} on {s}"));
            Ok(())
        }
        fn stream_create(&self) -> Result<Handle> {
            Ok(self.next("stream_create".into()) as Handle)
        }
        unsafe fn stream_destroy(&self, _: Handle) {}
        fn stream_sync(&self, s: Handle) -> Result<()> {
            self.log(format!("stream_sync {s}"));
            Ok(())
        }
        fn event_create(&self) -> Result<Handle> {
            Ok(self.next("event_create".into()) as Handle)
        }
        fn event_record(&self, e: Handle, s: Handle) -> Result<()> {
            self.log(format!("event_record {e:#x} on {s}"));
            Ok(())
        }
        fn event_sync(&self, e: Handle) -> Result<()> {
            self.log(format!("event_sync {e:#x}"));
            Ok(())
        }
        unsafe fn event_destroy(&self, _: Handle) {}
        fn stream_wait_event(&self, s: Handle, e: Handle) -> Result<()> {
            self.log(format!("wait {s} on {e:#x}"));
            Ok(())
        }
        fn capture_status(&self, _: Handle) -> Result<CaptureStatus> {
            Ok(CaptureStatus::None)
        }
        fn relaxed_capture(&self) -> Result<()> {
            Ok(())
        }
        fn executor(&self, _: i32, _: DataType, _: usize) -> Result<Executor> {
            Ok(Executor {
                func: 1,
                inline_cap: None,
                address_cap: 16,
            })
        }
        fn one_shot(&self, _: i32, _: DataType) -> Result<Handle> {
            Ok(2)
        }
        unsafe fn launch(&self, _: Handle, g: u32, t: u32, _: &mut [u8], s: Handle) -> Result<()> {
            self.log(format!("launch {g}x{t} on {s}"));
            Ok(())
        }
    }

    fn state() -> LaunchState {
        LaunchState::default()
    }

    /// Shared buffers grow to powers of two and the replaced ones are retired, never freed
    /// (captured graphs and in-flight launches may still use them); flags are zeroed on the
    /// transport's own stream before anyone can see them.
    #[test]
    fn growth_retires_what_it_replaces() {
        let api = Fake::default();
        let mut st = state();
        st.grow(&api, 7, 100, 0, 8).unwrap();
        assert_eq!(st.scratch.1, 128);
        assert_eq!(st.flags.1, 256);
        assert_eq!(
            st.retired,
            [0, 0],
            "nothing to retire the first time but nulls"
        );
        let calls = api.calls();
        assert!(
            calls
                .iter()
                .any(|c| c.starts_with("memset") && c.ends_with("on 7"))
        );
        assert!(calls.contains(&"stream_sync 7".to_string()));
        let old = st.scratch.0;
        st.grow(&api, 7, 100, 0, 8).unwrap();
        assert!(api.calls().is_empty(), "large enough: nothing allocated");
        st.grow(&api, 7, 129, 0, 8).unwrap();
        assert_eq!(st.scratch.1, 256);
        assert_eq!(st.retired.last(), Some(&old));
        assert!(!api.calls().iter().any(|c| c.contains("free")));
    }

    /// Arenas are reused round-robin after their previous launch is waited for, and an arena
    /// that must grow retires both halves instead of freeing them.
    #[test]
    fn arenas_wait_for_their_previous_launch_and_retire_when_they_grow() {
        let api = Fake::default();
        let mut st = state();
        for i in 0..ARENAS {
            assert_eq!(st.take_arena(&api, 100).unwrap(), i);
        }
        assert_eq!(st.arenas.len(), ARENAS);
        api.calls();
        let (host, dev, ev) = (st.arenas[0].host, st.arenas[0].dev, st.arenas[0].event);
        assert_eq!(st.take_arena(&api, 100).unwrap(), 0, "round-robin");
        assert_eq!(api.calls(), [format!("event_sync {ev:#x}")]);
        assert_eq!(st.take_arena(&api, 5000).unwrap(), 1);
        assert_eq!(st.take_arena(&api, 5000).unwrap(), 2);
        assert_eq!(st.take_arena(&api, 5000).unwrap(), 3);
        assert_eq!(st.arenas[1].cap, 8192);
        assert!(st.retired_host.len() == 3 && st.retired.len() == 3);
        assert!(!api.calls().iter().any(|c| c.contains("free")));
        assert_eq!((st.arenas[0].host, st.arenas[0].dev), (host, dev));
    }

    /// Eager launches of one communicator run in issue order: a launch on another stream than
    /// the previous one waits for the tail event; one on the same stream does not.
    #[test]
    fn launches_wait_for_the_tail_only_across_streams() {
        let api = Fake::default();
        let mut st = state();
        st.in_order(&api, 5, || Ok(())).unwrap();
        let tail = st.tail;
        let c = api.calls();
        assert!(!c.iter().any(|c| c.starts_with("wait")), "{c:?}");
        assert_eq!(c.last().unwrap(), &format!("event_record {tail:#x} on 5"));
        st.in_order(&api, 5, || Ok(())).unwrap();
        assert!(!api.calls().iter().any(|c| c.starts_with("wait")));
        st.in_order(&api, 6, || Ok(())).unwrap();
        let c = api.calls();
        assert_eq!(c[0], format!("wait 6 on {tail:#x}"));
        assert_eq!(c[1], format!("event_record {tail:#x} on 6"));
        assert_eq!(st.last_stream, Some(6));
    }
}
