//! The device side of NET connections: FIFOs in mapped pinned host memory (their slots in GPU
//! memory with GPUDirect RDMA), and their entries in the kernels' connection table (both
//! vendors: the memory comes from [`DeviceApi`]).
//!
//! The kernels use a NET FIFO exactly like a peer's P2P FIFO (Simple protocol): the send side
//! also writes each slot's byte count (`DevConn::sizes`), which the proxy (`oxccl_net`)
//! reads to send only what a slot holds. Without GPUDirect RDMA every FIFO lives in host memory
//! the GPU reaches over PCIe, as NCCL stages it; with it ([`net_gdr`]), the slots of each side
//! that uses it move to device memory, which the network reads and writes itself, while the
//! counters and sizes stay in host memory for the proxy to poll. The kernels see no difference:
//! `DevConn::buff` points wherever the slots are. Each FIFO also has an LL area in host memory
//! (`ll_area`), which the proxy drives over a connection of its own (`oxccl_net::ll`).

use crate::api::DeviceApi;
use crate::ll_area::{LlArea, ll_counters, point_ll_at};
use oxccl_core::abort::AbortFlag;
use oxccl_core::backend::DevicePtr;
use oxccl_core::bootstrap::Bootstrap;
use oxccl_core::error::Result;
use oxccl_kernel_abi::{DevConn, FifoGeometry};
use oxccl_net::connect::{self, NetDevices, PeerFifos};
use oxccl_net::gdr::{self, DmaBufExport, GdrEnv, GpuBinding, GpuCaps, GpuRegistration, NetGdr};
use oxccl_net::ll::LlFifo;
use oxccl_net::nic_affinity::{self, PathKind};
use oxccl_net::proxy::{FifoLayout, HostFifo, Proxy};
use oxccl_net::{Net, PTR_CUDA, PTR_DMABUF};
use std::any::Any;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

/// Channels a communicator with NET peers (and no SHM pair) uses by default
/// (`OXCCL_NET_CHANNELS` changes it): each is a connection with its own sockets and helper
/// threads per peer and direction; busbw grew up to 8 (docs/perf/defaults.md, "NET channels";
/// the tuner keeps small messages on fewer channels).
const NET_CHANNELS: u32 = 8;
/// The default when some pair meets through SHM: every channel is a FIFO in `/dev/shm` per SHM
/// pair, and 8 or 16 channels moved no more than 4 there (`docs/transports.md`, SHM).
const SHM_CHANNELS: u32 = 4;
/// The default when some rank's machine is crowded (`proxy_cpus::crowded`: fewer than 3 CPUs
/// per rank), where its one proxy thread drives every connection without data sockets
/// (docs/perf/defaults.md, "Crowded machines").
const CROWDED_NET_CHANNELS: u32 = 2;

/// The channels NET and SHM connections are made for: `OXCCL_NET_CHANNELS` (1 to the FIFO
/// channels), else `SHM_CHANNELS` when some pair of the communicator uses SHM, else
/// `CROWDED_NET_CHANNELS` when some rank's machine is crowded, else `NET_CHANNELS`.
pub fn net_channels(geometry: &FifoGeometry, any_shm: bool, any_crowded: bool) -> u32 {
    let max = geometry.channels as u32;
    let default = match (any_shm, any_crowded) {
        (true, _) => SHM_CHANNELS,
        (false, true) => CROWDED_NET_CHANNELS,
        (false, false) => NET_CHANNELS,
    };
    oxccl_core::config::get(&oxccl_core::config::vars::OXCCL_NET_CHANNELS)
        .unwrap_or(default)
        .clamp(1, max)
}

/// How every FIFO in host memory (NET and SHM) is cut: the P2P geometry's Simple slots.
pub(crate) fn fifo_layout(geometry: &FifoGeometry) -> FifoLayout {
    FifoLayout {
        nslots: geometry.nslots,
        slot_bytes: geometry.slot_bytes,
    }
}

/// The `/sys/devices/...` path of GPU `device`, when the runtime gives its PCI bus id and
/// `/sys` has it.
pub(crate) fn gpu_pci_path<A: DeviceApi>(api: &A, device: i32) -> Option<String> {
    let id = api.pci_bus_id(device)?;
    let path = nic_affinity::sysfs_path_of_bus_id(&id)?;
    Some(path.to_string_lossy().into_owned())
}

/// Decides GPUDirect RDMA for the NET FIFOs of a communicator on `device` over `net`, whose
/// connections use `devices`, from the network's properties, the GPU and NCCL's variables
/// ([`gdr::decide`]), the same for every device; logs the outcome.
pub(crate) fn net_gdr<A: DeviceApi>(
    api: &A,
    device: i32,
    net: &dyn Net,
    devices: &NetDevices,
) -> Result<NetGdr> {
    // Sides use GPU slots only where every device of theirs takes GPU memory; the devices'
    // distance from the GPU (the one they were chosen by) decides against NCCL_NET_GDR_LEVEL.
    let dev = devices.for_channel(0);
    let mut props = net.properties(dev)?;
    let mut force_flush = net.force_flush(dev)?;
    for &d in &devices.all()[1..] {
        props.ptr_support &= net.properties(d)?.ptr_support;
        force_flush |= net.force_flush(d)?;
    }
    let gpu = GpuCaps {
        rdma: api.gpu_direct_rdma(device),
        dma_buf: api.dma_buf_supported(device),
        compute_capability: api.compute_capability(device),
        path: devices.path(),
    };
    let env = GdrEnv::from_env();
    let gdr = gdr::decide(&props, force_flush, gpu, env);
    if gpu.rdma && props.ptr_support & (PTR_CUDA | PTR_DMABUF) != 0 && !gdr.recv && !env.disabled {
        tracing::info!(target: "oxccl::init",
            "NET/{}: GPU Direct RDMA off for GPU {device}: its devices are {} from it, \
             beyond NCCL_NET_GDR_LEVEL ({})", net.name(),
            devices.path().map_or("unknown", PathKind::name), env.max_path.name());
    }
    if gdr.recv || gdr.send {
        tracing::info!(target: "oxccl::init",
            "NET/{}: GPU Direct RDMA on for GPU {device} with device {dev} ({}): sends {}, \
             registration {}, receives flushed: {}",
            net.name(), props.name, if gdr.send { "on" } else { "off (NCCL_NET_GDR_READ=0)" },
            if gdr.dma_buf { "dma-buf" } else { "regMr" }, gdr.flush);
    }
    Ok(gdr)
}

/// Where the FIFOs of [`NetFifos`] are: each pair (send, receive) of a peer's channel takes
/// `host_pair` bytes of host memory (and `dev_pair` of device memory for GPU slots), the send
/// FIFO first. Without GPUDirect RDMA this is exactly one whole FIFO after another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Placement {
    layout: FifoLayout,
    gdr: NetGdr,
}

/// Bytes of device memory per GPU slot area: whole 64 KiB GPU pages, so that no two
/// registrations share one and a dma-buf export starts and ends on a page.
const GPU_SLOTS_ALIGN: u64 = 64 << 10;

impl Placement {
    fn gpu(&self, recv: bool) -> bool {
        if recv { self.gdr.recv } else { self.gdr.send }
    }

    /// Host bytes of one FIFO: counters and sizes, plus the slots when they stay in host memory.
    fn host_bytes(&self, recv: bool) -> u64 {
        if self.gpu(recv) {
            self.layout.slots_offset()
        } else {
            self.layout.bytes()
        }
    }

    /// Device bytes of one FIFO's slots (0 when they are in host memory).
    fn dev_bytes(&self, recv: bool) -> u64 {
        if self.gpu(recv) {
            (u64::from(self.layout.nslots) * self.layout.slot_bytes)
                .next_multiple_of(GPU_SLOTS_ALIGN)
        } else {
            0
        }
    }

    /// (host offset, device offset) of FIFO `recv` of pair `pair`.
    fn offsets(&self, pair: u64, recv: bool) -> (u64, u64) {
        let host = pair * (self.host_bytes(false) + self.host_bytes(true));
        let dev = pair * (self.dev_bytes(false) + self.dev_bytes(true));
        if recv {
            (host + self.host_bytes(false), dev + self.dev_bytes(false))
        } else {
            (host, dev)
        }
    }

    /// (host bytes, device bytes) of `pairs` pairs.
    fn total(&self, pairs: u64) -> (u64, u64) {
        self.offsets(pairs, false)
    }
}

/// Mapped pinned host memory holding every NET FIFO of one communicator (and device memory for
/// the slots of the sides that use GPUDirect RDMA), then every LL area: LL FIFOs always live in
/// host memory, where the proxy checks their packets' flags.
pub(crate) struct NetFifos<A: DeviceApi> {
    api: A,
    host: *mut u8,
    dev: DevicePtr,
    /// Device memory of the GPU slots (0: none).
    slots: DevicePtr,
    at: Placement,
    /// Host offset of the first LL area (after the Simple FIFOs).
    ll_at: u64,
    ll: LlArea,
    /// NET peers and their channels, in the order of the FIFOs.
    peers: Vec<(u32, u32)>,
    /// Pair index of each peer's first channel.
    first: Vec<u64>,
    /// The network devices the connections use.
    devices: NetDevices,
}

impl<A: DeviceApi> NetFifos<A> {
    /// Allocates and zeroes a send and a receive FIFO per channel for each of `peers` (peer,
    /// channels), with the slots of each side in device memory where `gdr` says.
    /// Their connections will use `devices`.
    pub(crate) fn alloc(
        api: &A,
        geometry: &FifoGeometry,
        peers: Vec<(u32, u32)>,
        gdr: NetGdr,
        devices: NetDevices,
    ) -> Result<NetFifos<A>> {
        let at = Placement {
            layout: fifo_layout(geometry),
            gdr,
        };
        let first: Vec<u64> = peers
            .iter()
            .scan(0u64, |next, &(_, ch)| {
                let at = *next;
                *next += u64::from(ch);
                Some(at)
            })
            .collect();
        let pairs: u64 = peers.iter().map(|&(_, ch)| u64::from(ch)).sum();
        let (host_bytes, dev_bytes) = at.total(pairs);
        let ll = LlArea::of(geometry);
        // The LL slots' records follow the Simple slots' sizes (`DevConn::sizes`).
        let records_end = FifoLayout::SIZES + 8 * u64::from(geometry.nslots + geometry.ll_nslots);
        if records_end > at.layout.slots_offset() {
            return Err(oxccl_core::error::Error::usage(format!(
                "{} FIFO slots and {} LL slots leave no room for their counts in a NET FIFO's \
                 first {} bytes: lower OXCCL_FIFO_SLOTS or OXCCL_FIFO_LL_SLOTS",
                geometry.nslots,
                geometry.ll_nslots,
                at.layout.slots_offset()
            )));
        }
        let ll_at = host_bytes.next_multiple_of(4096);
        let host_bytes = ll_at + pairs * 2 * ll.bytes();
        let bytes = (host_bytes as usize).max(4096);
        let (p, dev) = api.host_alloc(bytes)?;
        // SAFETY: `p` holds `bytes` writable bytes; counters and sizes must start at zero.
        unsafe { std::ptr::write_bytes(p, 0, bytes) };
        let mut fifos = NetFifos {
            api: api.clone(),
            host: p,
            dev,
            slots: 0,
            at,
            ll_at,
            ll,
            peers,
            first,
            devices,
        };
        if dev_bytes > 0 {
            // Kernels write every slot before a receiver reads it: no zeroing needed.
            fifos.slots = api.dev_alloc(dev_bytes as usize)?;
        }
        Ok(fifos)
    }

    /// (host offset, device offset) of FIFO `(peer index, channel, receive?)`.
    fn offsets(&self, i: usize, c: u32, recv: bool) -> (u64, u64) {
        let pair = self.first[i] + u64::from(c);
        self.at.offsets(pair, recv)
    }

    fn fifo(&self, i: usize, c: u32, recv: bool) -> HostFifo {
        let (h, d) = self.offsets(i, c, recv);
        // SAFETY: the offset lies inside the allocation.
        let base = unsafe { self.host.add(h as usize) };
        if self.at.gpu(recv) {
            HostFifo::with_gpu_slots(base, (self.slots + d) as *mut u8, self.at.layout)
        } else {
            HostFifo::in_host(base, self.at.layout)
        }
    }

    /// Host offset of the LL area of FIFO `(peer index, channel, receive?)`.
    fn ll_offset(&self, i: usize, c: u32, recv: bool) -> u64 {
        let pair = self.first[i] + u64::from(c);
        self.ll_at + (pair * 2 + u64::from(recv)) * self.ll.bytes()
    }

    fn ll_fifo(&self, i: usize, c: u32, recv: bool) -> LlFifo {
        // SAFETY: the offsets lie inside the allocation (`alloc` sized it for every area).
        let head = unsafe { self.host.add(self.ll_offset(i, c, recv) as usize) };
        let records = if recv {
            std::ptr::null_mut()
        } else {
            let at = FifoLayout::SIZES + 8 * u64::from(self.at.layout.nslots);
            // SAFETY: inside the send FIFO's counters (checked against its size in `alloc`).
            unsafe { self.host.add((self.offsets(i, c, false).0 + at) as usize) }
        };
        LlFifo {
            head,
            // Address arithmetic: the slots follow the counter's page inside the area.
            slots: head.wrapping_add(LlArea::SLOTS as usize),
            records,
            nslots: self.ll.nslots,
            slot_bytes: self.ll.slot_bytes,
        }
    }

    /// The FIFOs the proxy drives, per peer.
    pub(crate) fn peer_fifos(&self) -> Vec<PeerFifos> {
        self.peers
            .iter()
            .enumerate()
            .map(|(i, &(peer, channels))| PeerFifos {
                peer,
                devices: self.devices.clone(),
                channels: (0..channels)
                    .map(|c| (self.fifo(i, c, false), self.fifo(i, c, true)))
                    .collect(),
                ll: (0..channels)
                    .map(|c| (self.ll_fifo(i, c, false), self.ll_fifo(i, c, true)))
                    .collect(),
            })
            .collect()
    }

    /// Device addresses of FIFO `(peer index, channel, receive?)`.
    fn dev_fifo(&self, i: usize, c: u32, recv: bool) -> DevFifo {
        let (h, d) = self.offsets(i, c, recv);
        if self.at.gpu(recv) {
            DevFifo {
                counters: self.dev + h,
                slots: self.slots + d,
            }
        } else {
            DevFifo::contiguous(self.dev + h, &self.at.layout)
        }
    }

    /// Points the connection table's entries of every NET peer at its FIFOs.
    pub(crate) fn patch_table(&self, table: &mut [u8], geometry: &FifoGeometry, nranks: u32) {
        for (i, &(peer, channels)) in self.peers.iter().enumerate() {
            for c in 0..channels {
                for recv in [false, true] {
                    let slot = ConnSlot {
                        channel: c,
                        peer,
                        recv,
                    };
                    let fifo = self.dev_fifo(i, c, recv);
                    let keep = ll_counters(table, geometry, nranks, slot);
                    point_conn_at(table, geometry, nranks, slot, fifo, self.at.layout, !recv);
                    let area = self.dev + self.ll_offset(i, c, recv);
                    point_ll_at(table, geometry, nranks, slot, area, self.ll, keep);
                }
            }
            alias_channels(table, geometry, nranks, peer, channels);
        }
    }

    /// Connects every peer over `net` and starts the proxy ([`connect::connect`]), registering
    /// GPU slots through a dma-buf or as `PTR_CUDA` and flushing receives as decided.
    /// Its proxy threads make `device` current as they start.
    pub(crate) fn connect(
        &self,
        bootstrap: &Bootstrap,
        abort: &AbortFlag,
        net: Arc<dyn Net>,
        device: i32,
        timeout: Duration,
    ) -> Result<Proxy> {
        let export =
            |p: *mut u8, n: usize| -> Option<OwnedFd> { self.api.dma_buf_fd(p as DevicePtr, n) };
        let api = self.api.clone();
        let bind: GpuBinding = Arc::new(move || Ok(Box::new(api.bind(device)?) as Box<dyn Any>));
        let gpu = GpuRegistration {
            flush: self.at.gdr.flush,
            dma_buf: self.at.gdr.dma_buf.then_some(&export as DmaBufExport<'_>),
            bind: Some(&bind),
        };
        connect::connect(bootstrap, abort, net, self.peer_fifos(), timeout, gpu)
    }
}

/// Device addresses of one FIFO: its counters and sizes, and its slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DevFifo {
    /// `head`, `tail` and the sizes, laid out as [`FifoLayout`] says.
    pub counters: DevicePtr,
    /// The first slot.
    pub slots: DevicePtr,
}

impl DevFifo {
    /// A FIFO wholly at `fifo` (its slots after the sizes).
    pub(crate) fn contiguous(fifo: DevicePtr, layout: &FifoLayout) -> DevFifo {
        DevFifo {
            counters: fifo,
            slots: fifo + layout.slots_offset(),
        }
    }
}

/// One entry of the connection table: a channel's send or receive connection to a peer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnSlot {
    /// The channel (kernel block).
    pub channel: u32,
    /// The peer rank.
    pub peer: u32,
    /// The receive side (else the send side).
    pub recv: bool,
}

impl ConnSlot {
    /// Byte range of this entry in a connection table of `nranks` ranks (`channels * nranks`
    /// send connections, then as many receive connections: `FifoGeometry::conn_table`).
    pub(crate) fn range(&self, geometry: &FifoGeometry, nranks: u32) -> std::ops::Range<usize> {
        let one = size_of::<DevConn>();
        let half = geometry.recv_table_offset(nranks) as usize;
        let at = (self.channel as usize * nranks as usize + self.peer as usize) * one;
        let pos = at + if self.recv { half } else { 0 };
        pos..pos + one
    }
}

/// Points one entry of the connection table at a FIFO laid out as [`FifoLayout`] at device
/// addresses `fifo` (counters in host memory: NET and SHM). `table` holds `channels * nranks` send then as
/// many receive connections (`FifoGeometry::conn_table`). Send sides keep their sender-local
/// counter copies; `sizes` makes the sending kernel write each slot's byte count (for a proxy).
/// LL fields are zeroed: the callers point them at LL areas of their own (`ll_area`).
pub(crate) fn point_conn_at(
    table: &mut [u8],
    geometry: &FifoGeometry,
    nranks: u32,
    slot: ConnSlot,
    fifo: DevFifo,
    layout: FifoLayout,
    sizes: bool,
) {
    let range = slot.range(geometry, nranks);
    let old = read_conn(&table[range.clone()]);
    let conn = DevConn {
        buff: fifo.slots,
        head: fifo.counters + FifoLayout::HEAD,
        tail: fifo.counters + FifoLayout::TAIL,
        slot_bytes: layout.slot_bytes,
        nslots: layout.nslots,
        tail_mirror: if slot.recv { 0 } else { old.0 },
        head_seen: if slot.recv { 0 } else { old.1 },
        sizes: if sizes {
            fifo.counters + FifoLayout::SIZES
        } else {
            0
        },
        ..DevConn::default()
    };
    table[range].copy_from_slice(&conn.to_bytes());
}

/// Makes the entries of `peer` on channels `have..` copies of those on `channel % have`, both
/// ways, once its `have` host-memory connections are in place.
///
/// Send/receive plans give each rank distance a channel of its own (`plan::build_p2p`), so with
/// more than `have + 1` ranks a message may use a channel beyond the pair's connections; such an
/// entry then drives connection `channel % have` with that connection's own counters. No plan
/// uses two of those copies at once: a send/receive plan with one channel per distance uses one
/// entry per pair and direction, and every other plan keeps below `have` channels for the pair
/// (`max_channels`, `max_direct_channels`).
pub(crate) fn alias_channels(
    table: &mut [u8],
    geometry: &FifoGeometry,
    nranks: u32,
    peer: u32,
    have: u32,
) {
    for c in have..geometry.channels as u32 {
        for recv in [false, true] {
            let from = ConnSlot {
                channel: c % have,
                peer,
                recv,
            }
            .range(geometry, nranks);
            let to = ConnSlot {
                channel: c,
                peer,
                recv,
            }
            .range(geometry, nranks);
            table.copy_within(from, to.start);
        }
    }
}

/// `(tail_mirror, head_seen)` of an encoded connection.
fn read_conn(b: &[u8]) -> (u64, u64) {
    let at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
    (
        at(std::mem::offset_of!(DevConn, tail_mirror)),
        at(std::mem::offset_of!(DevConn, head_seen)),
    )
}

impl<A: DeviceApi> Drop for NetFifos<A> {
    fn drop(&mut self) {
        // SAFETY: ours; the transport dropped the proxy (which deregistered the slots) and
        // waited for its kernels first.
        unsafe {
            self.api.dev_free(self.slots);
            self.api.host_free(self.host);
        }
    }
}

// SAFETY: pinned memory owned by this value; the proxy and the kernels touch it only through
// the counters' protocol.
unsafe impl<A: DeviceApi> Send for NetFifos<A> {}
// SAFETY: as above; nothing here mutates through `&self`.
unsafe impl<A: DeviceApi> Sync for NetFifos<A> {}

#[cfg(test)]
mod tests {
    use super::*;
    use oxccl_kernel_abi::SlotPeers;
    use std::mem::offset_of;

    fn field(table: &[u8], pos: usize, off: usize) -> u64 {
        u64::from_le_bytes(table[pos + off..pos + off + 8].try_into().unwrap())
    }

    /// SHM pairs take their channels first, then a crowded machine, else the NET default
    /// (unless `OXCCL_NET_CHANNELS`, which the test environment leaves unset, says otherwise).
    #[test]
    fn channels_follow_shm_then_a_crowded_machine() {
        if oxccl_core::config::is_set(&oxccl_core::config::vars::OXCCL_NET_CHANNELS) {
            return;
        }
        let g = FifoGeometry::default();
        assert_eq!(net_channels(&g, false, false), NET_CHANNELS);
        assert_eq!(net_channels(&g, false, true), CROWDED_NET_CHANNELS);
        assert_eq!(net_channels(&g, true, true), SHM_CHANNELS);
        assert_eq!(net_channels(&g, true, false), SHM_CHANNELS);
    }

    /// Without GPUDirect RDMA the FIFOs follow each other whole, as before; with it, the GPU
    /// sides keep only counters and sizes in host memory and get 64 KiB-aligned slot areas in
    /// device memory, each side independently.
    #[test]
    fn placement_without_gdr_is_whole_fifos_and_with_gdr_moves_only_slots() {
        let layout = fifo_layout(&FifoGeometry::default());
        let whole = layout.bytes();
        let host = Placement {
            layout,
            gdr: NetGdr::default(),
        };
        for pair in 0..5u64 {
            for recv in [false, true] {
                let k = pair * 2 + u64::from(recv);
                assert_eq!(host.offsets(pair, recv), (k * whole, 0));
            }
        }
        assert_eq!(host.total(3), (6 * whole, 0));

        let slots = u64::from(layout.nslots) * layout.slot_bytes;
        let area = slots.next_multiple_of(GPU_SLOTS_ALIGN);
        let both = Placement {
            layout,
            gdr: NetGdr {
                send: true,
                recv: true,
                ..NetGdr::default()
            },
        };
        let counters = layout.slots_offset();
        assert_eq!(both.offsets(1, false), (2 * counters, 2 * area));
        assert_eq!(both.offsets(1, true), (3 * counters, 3 * area));
        assert_eq!(both.total(2), (4 * counters, 4 * area));

        let recv_only = Placement {
            layout,
            gdr: NetGdr {
                recv: true,
                ..NetGdr::default()
            },
        };
        assert_eq!(recv_only.offsets(1, false), (whole + counters, area));
        assert_eq!(recv_only.offsets(1, true), (2 * whole + counters, area));
        assert_eq!(recv_only.total(2), (2 * (whole + counters), 2 * area));
        assert_eq!(recv_only.offsets(2, false).1 % GPU_SLOTS_ALIGN, 0);
    }

    /// Entries beyond a pair's connections become copies of the connection they share; other
    /// peers' entries stay as they were.
    #[test]
    fn channels_beyond_a_pairs_connections_alias_them() {
        let g = FifoGeometry::default();
        let nranks = 3u32;
        let peers: Vec<DevicePtr> = vec![0x10_0000, 0x20_0000, 0x30_0000];
        let table = g.conn_table(
            0,
            &SlotPeers::one_host(nranks),
            peers[0],
            &peers,
            0x9000_0000,
            true,
        );
        let mut aliased = table.clone();
        alias_channels(&mut aliased, &g, nranks, 2, 3);
        let entry = |t: &[u8], channel: u32, peer: u32, recv: bool| {
            t[ConnSlot {
                channel,
                peer,
                recv,
            }
            .range(&g, nranks)]
            .to_vec()
        };
        for recv in [false, true] {
            for c in 0..g.channels as u32 {
                let want = entry(&table, c % 3, 2, recv);
                assert_eq!(entry(&aliased, c, 2, recv), want, "channel {c}");
                assert_eq!(entry(&aliased, c, 1, recv), entry(&table, c, 1, recv));
            }
            assert_ne!(entry(&table, 4, 2, recv), entry(&table, 1, 2, recv));
        }
    }

    /// A FIFO with GPU slots points `buff` at them and everything else at the host counters.
    #[test]
    fn gpu_slots_move_only_buff() {
        let g = FifoGeometry::default();
        let nranks = 2u32;
        let peers: Vec<DevicePtr> = vec![0x10_0000, 0x20_0000];
        let mut table = g.conn_table(
            0,
            &SlotPeers::one_host(nranks),
            peers[0],
            &peers,
            0x9000_0000,
            true,
        );
        let layout = fifo_layout(&g);
        let one = size_of::<DevConn>();
        let half = g.recv_table_offset(nranks) as usize;
        let fifo = DevFifo {
            counters: 0x7000,
            slots: 0x5_0000_0000,
        };
        let slot = ConnSlot {
            channel: 0,
            peer: 1,
            recv: true,
        };
        point_conn_at(&mut table, &g, nranks, slot, fifo, layout, false);
        let pos = one + half;
        assert_eq!(field(&table, pos, offset_of!(DevConn, buff)), 0x5_0000_0000);
        assert_eq!(
            field(&table, pos, offset_of!(DevConn, head)),
            0x7000 + FifoLayout::HEAD
        );
        assert_eq!(
            field(&table, pos, offset_of!(DevConn, tail)),
            0x7000 + FifoLayout::TAIL
        );
    }

    /// A host-memory FIFO replaces one entry: the send side keeps its sender-local counter
    /// copies and gets byte counts when asked; the receive side keeps nothing of P2P's; LL stays
    /// off; every other entry is untouched.
    #[test]
    fn patching_one_entry_keeps_sender_counters_and_nothing_else() {
        let g = FifoGeometry::default();
        let (rank, nranks) = (0u32, 3u32);
        let peers: Vec<DevicePtr> = vec![0x10_0000, 0x20_0000, 0x30_0000];
        let table = g.conn_table(
            rank,
            &SlotPeers::one_host(nranks),
            peers[0],
            &peers,
            0x9000_0000,
            true,
        );
        let layout = fifo_layout(&g);
        let one = size_of::<DevConn>();
        let half = g.recv_table_offset(nranks) as usize;
        let at = |c: usize, p: usize, recv: bool| {
            (c * nranks as usize + p) * one + if recv { half } else { 0 }
        };
        let mut patched = table.clone();
        for recv in [false, true] {
            let slot = ConnSlot {
                channel: 1,
                peer: 2,
                recv,
            };
            let fifo = DevFifo::contiguous(0x7000, &layout);
            point_conn_at(&mut patched, &g, nranks, slot, fifo, layout, !recv);
        }
        let (send, recv) = (at(1, 2, false), at(1, 2, true));
        assert_eq!(
            field(&patched, send, offset_of!(DevConn, buff)),
            0x7000 + layout.slots_offset()
        );
        assert_eq!(
            field(&patched, send, offset_of!(DevConn, tail)),
            0x7000 + FifoLayout::TAIL
        );
        assert_eq!(
            read_conn(&patched[send..send + one]),
            read_conn(&table[send..send + one])
        );
        assert_ne!(read_conn(&patched[send..send + one]).0, 0);
        assert_eq!(
            field(&patched, send, offset_of!(DevConn, sizes)),
            0x7000 + FifoLayout::SIZES
        );
        assert_eq!(read_conn(&patched[recv..recv + one]), (0, 0));
        assert_eq!(field(&patched, recv, offset_of!(DevConn, sizes)), 0);
        for pos in [send, recv] {
            assert_eq!(field(&patched, pos, offset_of!(DevConn, ll_pos)), 0);
        }
        for (i, (a, b)) in table.chunks(one).zip(patched.chunks(one)).enumerate() {
            if i * one != send && i * one != recv {
                assert_eq!(a, b, "entry {i} changed");
            }
        }
    }
}
