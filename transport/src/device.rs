//! Per-communicator connections for both GPU vendors; their launches are in [`launch`].
//!
//! Every rank allocates, on its own device, one receive FIFO per (channel, peer) for the
//! channels of its [`FifoGeometry`]: slots plus a head and a tail counter, each on its own
//! 64-byte line. The allocation is published through the bootstrap; peers of the same
//! process use its address directly (access was granted to every peer-capable device), peers in
//! other processes of the same host import its exported descriptor. Pairs of one host without
//! P2P meet through shared host memory ([`crate::shm`]), ranks on other hosts over the network
//! ([`crate::net`], `docs/transports.md`).

use crate::api::{DeviceApi, Handle};
use crate::net::{NetFifos, net_channels};
use crate::runtime_connect::{LaterLinks, NetSide, RuntimeConnect, runtime_connect_wanted};
use crate::shm::ShmFifos;
use oxccl_core::abort::{AbortFlag, AbortWatcher};
use oxccl_core::backend::{ConnectContext, DevicePtr, ShareableHandle};
use oxccl_core::bootstrap::{Bootstrap, stable_hash};
use oxccl_core::config::{self, vars};
use oxccl_core::error::{Error, Result};
use oxccl_core::plan::net_peers::{per_net_peer_channels, plan_peers, some_pair_unplanned};
use oxccl_core::plan::one_shot::Variant;
use oxccl_core::plan::tuner::link_summary;
use oxccl_core::plan::{HostLayout, NetLink, Topology, WorkDesc};
use oxccl_kernel_abi::{
    FifoGeometry, PeerRecord, SlotPeers, one_shot_max_bytes, placements, process_shares_device,
    publish, shared_device_max_blocks,
};
use oxccl_net::Net;
use oxccl_net::connect::{NetDevices, choose_net};
use oxccl_net::proxy_cpus;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

mod launch;
mod proxy_tasks;
pub use launch::launch_threads;
use launch::{LaunchState, fixed_block_threads};

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

/// Says once per process that its ranks sharing a GPU need more hardware queues than CUDA's
/// default: each rank's kernels wait for the others', and a kernel queued behind a waiting one
/// in the same queue never starts (seen with 4 ranks on one H200 under MPS).
fn warn_about_shared_queues(device: i32) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    crate::hardware_queues::warn_if_few_hardware_queues(&ONCE, |queues| {
        format!(
            "ranks of this process share GPU {device}, and with CUDA_DEVICE_MAX_CONNECTIONS={queues} their streams share {queues} hardware queues: a kernel queued behind a peer's kernel that waits for it can hang"
        )
    });
}

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

        let placed = placements(bs.peers(), &records);
        t.max_blocks = shared_device_max_blocks(&placed);
        if t.max_blocks != u32::MAX {
            tracing::info!(
                "rank {rank}: ranks share GPUs; at most {} blocks per launch",
                t.max_blocks
            );
        }
        if process_shares_device(&placed, rank as usize) {
            warn_about_shared_queues(device);
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
        // Processes name GPUs by their own ordinals; the bus id names the same GPU in all.
        let bus = api
            .pci_bus_id(device)
            .map_or(0, |id| stable_hash(&[id.to_ascii_lowercase().as_bytes()]));
        bs.all_gather(&publish(
            std::process::id(),
            device,
            api.multiprocessors(device)?,
            bus,
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
        let all_net_peers = net_peers.to_vec();
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
        self.net = Some(NetSide::new(proxy, fifos, later, all_net_peers));
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

    /// Largest message the one-shot kernels take in `variant` on this communicator (0: none).
    pub fn one_shot_bytes(&self, variant: Variant) -> u64 {
        if self.one_shot_inbox.is_empty() || !self.api.has_one_shot() {
            0
        } else {
            one_shot_max_bytes(variant, self.nranks, self.max_blocks)
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

    /// Channels a plan may use on this communicator: its FIFOs', and where a launch's blocks
    /// are bounded (`max_blocks`: ranks sharing a device, or the NET channels) no more than the
    /// default geometry's 32 and the bound. On a shared device every block must be resident at
    /// once, and a split send/receive plan runs two blocks per channel, which 32 keep within a
    /// shared H100's or H200's SMs at two ranks.
    pub fn plan_channels(&self) -> u32 {
        let fifo = self.geometry.channels as u32;
        if self.max_blocks == u32::MAX {
            fifo
        } else {
            fifo.min(FifoGeometry::default().channels as u32)
                .min(self.max_blocks)
        }
    }

    /// Most channels one direct plan may use on this communicator (`None`: any).
    pub fn direct_channels(&self) -> Option<u32> {
        self.direct_channels
    }
}

impl<A: DeviceApi> Drop for DeviceTransport<A> {
    fn drop(&mut self) {
        // Joins the watcher before the abort word it writes is freed.
        drop(self.watcher.take());
        let api = self.api.clone();
        let Ok(_g) = api.bind(self.device) else {
            return;
        };
        // The waits and frees below are "unsafe during capture" in global mode, also while
        // another thread of the process captures: relaxed, they leave its capture intact.
        let _relaxed = api.relaxed_capture().ok();
        let net = self.net.take();
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        // Nothing may run on our memory any more: wait for the last launch.
        st.finish_launches(&api);
        // The proxy stops before its FIFOs are freed (after the last kernel that used them).
        drop(net);
        // SAFETY: every launch that used these buffers is complete; captured graphs cannot
        // outlive their communicator.
        unsafe { st.free_buffers(&api) };
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
            let _ = unsafe { api.shared_free(va) };
        }
        // SAFETY: our FIFOs; peers' kernels that wrote to them belong to operations that
        // completed before the communicator was destroyed.
        let _ = unsafe { api.shared_free(self.fifo) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// Two ranks' 64 FIFO channels are all plannable on devices of their own; ranks sharing a
    /// device keep the default's 32 at most (a split plan's two blocks per channel must all be
    /// resident), and never more than their share of blocks.
    #[test]
    fn shared_devices_keep_the_default_channels() {
        use crate::fake_api::FakeApi;
        let wide = FifoGeometry::default().for_ranks(2);
        let mut t = DeviceTransport::unconnected(FakeApi::default(), wide, 0, 0, 2, 0, None);
        let own = t.plan_channels();
        t.max_blocks = 66;
        let shared = t.plan_channels();
        t.max_blocks = 20;
        assert_eq!(
            (own, shared, t.plan_channels()),
            (wide.channels as u32, 32, 20)
        );
    }
}
