// The device FIFO layout both GPU backends build their connections from, shared like
// `work.rs` (this crate, which backend-cuda and backend-hip depend on and whose items their
// `kernels` module re-exports) and that the one device transport (`oxccl-device-transport`)
// builds connections from.
//
// One rank's FIFO allocation holds, for every (channel, sending peer), the counters (head, tail
// and LL head; page-aligned block first), then for every (channel, sender of its own host:
// `SlotPeers`) the Simple slots, then the LL packet slots, then the one-shot kernels' inbox
// (`one_shot.rs`, only where every rank shares one host). A separate sender-local allocation
// holds each send connection's own counters, then the one-shot kernels' epochs. At connect every
// rank publishes a record (pid, device, its multiprocessors, FIFO address, geometry, export
// handle) through the bootstrap network.

use super::{DevConn, EncodedWork, ONE_SHOT_EPOCH_BYTES, one_shot_inbox_bytes};
use oxccl_core::backend::DevicePtr;
use oxccl_core::bootstrap::PeerInfo;
use oxccl_core::config::{self, vars};
use oxccl_core::error::{Error, Result};
use oxccl_core::plan::{HostLayout, Protocol};

/// Most channels a transport can be built with (`OXCCL_FIFO_CHANNELS`).
pub const MAX_CHANNELS: usize = 64;
/// Channels of a two-rank communicator's FIFOs unless `OXCCL_FIFO_CHANNELS` is set: on 2x H200
/// a pair moves 352 GB/s each way with 32 blocks storing into the peer and 362-367 with 64, so
/// send/receive and the zero-copy plans gain from a block per channel more (docs/perf/defaults.md).
pub const TWO_RANK_CHANNELS: usize = 64;
/// Bytes of counters per FIFO, one 64-byte line each: head at 0, tail at 64, LL head at 128.
pub const CTR_BYTES: u64 = 192;
/// Bytes of sender-local counters per send connection, one line each: tail mirror at 0, head
/// seen at 64, LL position at 128, LL head seen at 192.
pub const SEND_STATE_BYTES: u64 = 256;
/// Bytes of the fixed part of a published record: pid, device, FIFO address, geometry,
/// multiprocessors, PCI bus id hash.
pub const RECORD_HEADER: usize = 52;

/// How one rank's FIFOs are cut: channels, slots per FIFO, bytes per slot. Every rank of a
/// communicator must use the same geometry (checked at connect).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FifoGeometry {
    /// Channels with FIFOs; plans with more channels are refused.
    pub channels: usize,
    /// Slots per FIFO.
    pub nslots: u32,
    /// Bytes per slot (a multiple of 16 and so of every element size).
    pub slot_bytes: u64,
    /// Slots per LL (packet) FIFO.
    pub ll_nslots: u32,
    /// Bytes of packets per LL slot (a multiple of 16; half of them carry data).
    pub ll_slot_bytes: u64,
}

impl Default for FifoGeometry {
    fn default() -> FifoGeometry {
        // Measured on 2x H200 at 256 MiB (docs/perf/h200x2.md): 32 channels of 256 KiB slots
        // moved 2.6-3.3x what 16 of 64 KiB did; 1 MiB slots added about 10% for 4x the memory.
        FifoGeometry {
            channels: 32,
            nslots: 8,
            slot_bytes: 256 << 10,
            // LL moves small messages: 8 slots of 8 KiB of data cover the tuner's LL range
            // (up to 64 KiB per operation, spread over channels) in one round.
            ll_nslots: 8,
            ll_slot_bytes: 16 << 10,
        }
    }
}

impl FifoGeometry {
    /// The default, changed by `OXCCL_FIFO_CHANNELS` (1-64; see [`FifoGeometry::for_ranks`]),
    /// `OXCCL_FIFO_SLOTS` (2-64), `OXCCL_FIFO_SLOT_BYTES` (4 KiB-16 MiB), `OXCCL_FIFO_LL_SLOTS`
    /// (2-64) and `OXCCL_FIFO_LL_SLOT_BYTES` (1 KiB-1 MiB); slot sizes are multiples of 16.
    /// Knobs for tuning runs; a bad value is warned about and the default used.
    pub fn from_env() -> Result<FifoGeometry> {
        Ok(FifoGeometry {
            channels: config::get(&vars::OXCCL_FIFO_CHANNELS)
                .unwrap_or(FifoGeometry::default().channels),
            nslots: config::get(&vars::OXCCL_FIFO_SLOTS),
            slot_bytes: config::get(&vars::OXCCL_FIFO_SLOT_BYTES),
            ll_nslots: config::get(&vars::OXCCL_FIFO_LL_SLOTS),
            ll_slot_bytes: config::get(&vars::OXCCL_FIFO_LL_SLOT_BYTES),
        })
    }

    /// The geometry of a communicator of `nranks` ranks: [`TWO_RANK_CHANNELS`] channels for
    /// two unless `OXCCL_FIFO_CHANNELS` is set. With more ranks the FIFO memory grows with the
    /// peers, and wider channels are not measured there.
    pub fn for_ranks(self, nranks: u32) -> FifoGeometry {
        match config::get(&vars::OXCCL_FIFO_CHANNELS) {
            None if nranks == 2 => FifoGeometry {
                channels: TWO_RANK_CHANNELS,
                ..self
            },
            _ => self,
        }
    }

    /// Largest message a step of `proto` may send before its peer receives: the sender can fill
    /// every slot but one (see `docs/kernels.md`), and plans send a chunk before receiving.
    pub fn message_bytes(&self, proto: Protocol) -> u64 {
        match proto {
            Protocol::Ll => (u64::from(self.ll_nslots) - 1) * (self.ll_slot_bytes / 2),
            Protocol::Ll128 | Protocol::Simple => (u64::from(self.nslots) - 1) * self.slot_bytes,
        }
    }

    fn simple_fifo_bytes(&self) -> u64 {
        self.slot_bytes * u64::from(self.nslots)
    }

    fn ll_fifo_bytes(&self) -> u64 {
        self.ll_slot_bytes * u64::from(self.ll_nslots)
    }

    /// Bytes of rank `owner`'s FIFO allocation: the counters (page-aligned), the Simple slots
    /// and LL slots of the senders `peers` gives it, the one-shot inbox.
    pub fn fifo_bytes(&self, peers: &SlotPeers, owner: u32) -> u64 {
        self.inbox_offset(peers, owner) + peers.inbox_bytes()
    }

    /// Byte offset of the one-shot inbox in rank `owner`'s FIFO allocation (zeroed at connect,
    /// like the counters: its packets' flags must not match by accident).
    pub fn inbox_offset(&self, peers: &SlotPeers, owner: u32) -> u64 {
        let senders = self.channels as u64 * u64::from(peers.count(owner));
        self.slots_offset(peers) + senders * (self.simple_fifo_bytes() + self.ll_fifo_bytes())
    }

    /// Byte offset of the Simple slots: after a counter block for every (channel, rank).
    fn slots_offset(&self, peers: &SlotPeers) -> u64 {
        (self.channels as u64 * u64::from(peers.nranks()) * CTR_BYTES).next_multiple_of(4096)
    }

    /// Bytes at the start of a FIFO allocation that hold counters (zeroed at connect).
    pub fn counter_bytes(&self, nranks: u32) -> usize {
        (self.channels as u64 * u64::from(nranks) * CTR_BYTES) as usize
    }

    /// The receive FIFO of `(channel, from)` inside rank `owner`'s allocation at `base`, as its
    /// receiver sees it (its LL position is the LL head it owns). A sender without slots there
    /// ([`SlotPeers`]) gets null `buff` and `ll_buff`: its transport points them at its own.
    pub fn conn(
        &self,
        base: DevicePtr,
        peers: &SlotPeers,
        owner: u32,
        channel: usize,
        from: u32,
    ) -> DevConn {
        let nranks = u64::from(peers.nranks());
        let ctr = base + (channel as u64 * nranks + u64::from(from)) * CTR_BYTES;
        let (buff, ll_buff) = match peers.slot(owner, from) {
            Some(i) => {
                let senders = self.channels as u64 * u64::from(peers.count(owner));
                let k = channel as u64 * u64::from(peers.count(owner)) + u64::from(i);
                let slots = base + self.slots_offset(peers);
                let ll_slots = slots + senders * self.simple_fifo_bytes();
                (
                    slots + k * self.simple_fifo_bytes(),
                    ll_slots + k * self.ll_fifo_bytes(),
                )
            }
            None => (0, 0),
        };
        DevConn {
            buff,
            head: ctr,
            tail: ctr + 64,
            slot_bytes: self.slot_bytes,
            nslots: self.nslots,
            pad: 0,
            tail_mirror: 0,
            head_seen: 0,
            ll_buff,
            ll_head: ctr + 128,
            ll_pos: ctr + 128,
            ll_head_seen: 0,
            ll_slot_bytes: self.ll_slot_bytes as u32,
            ll_nslots: self.ll_nslots,
            sizes: 0,
        }
    }

    /// Byte offset of the receive connections in the table of [`FifoGeometry::conn_table`].
    pub fn recv_table_offset(&self, nranks: u32) -> u64 {
        self.channels as u64 * u64::from(nranks) * size_of::<DevConn>() as u64
    }

    /// Fails unless this geometry has FIFOs for every channel of `enc` that moves data between
    /// ranks.
    pub fn check_plan(&self, enc: &EncodedWork) -> Result<()> {
        let used = enc.fifo_channels();
        if used > self.channels {
            return Err(Error::usage(format!(
                "the plan moves data on {used} channels; this communicator has FIFOs for {} (lower OXCCL_NCHANNELS or raise OXCCL_FIFO_CHANNELS)",
                self.channels
            )));
        }
        Ok(())
    }

    /// Rank `p`'s record from `bytes`, checked to cut its FIFOs as this rank does.
    pub fn peer_record<'a>(&self, p: usize, bytes: &'a [u8]) -> Result<PeerRecord<'a>> {
        let rec = parse_record(bytes)
            .ok_or_else(|| Error::Internal(format!("rank {p} published a short FIFO record")))?;
        if rec.geometry != *self {
            return Err(Error::usage(format!(
                "rank {p} cut its FIFOs as {:?}, this rank as {self:?}: set OXCCL_FIFO_* alike on every rank",
                rec.geometry
            )));
        }
        Ok(rec)
    }

    /// Bytes of sender-local counters (`tail_mirror`, `head_seen`, `ll_pos`, `ll_head_seen`)
    /// for every send connection of a rank, then the one-shot epochs; zeroed at connect.
    pub fn send_state_bytes(&self, nranks: u32) -> usize {
        (self.epochs_offset(nranks) + ONE_SHOT_EPOCH_BYTES) as usize
    }

    /// Byte offset of the one-shot kernels' per-block epochs in the sender-local allocation.
    pub fn epochs_offset(&self, nranks: u32) -> u64 {
        self.channels as u64 * u64::from(nranks) * SEND_STATE_BYTES
    }

    /// The connection table: `channels * nranks` send connections (to p: p's FIFO for
    /// `(c, rank)`), then as many receive connections (from p: ours for `(c, p)`); self is empty.
    /// `send_state` is an allocation of [`FifoGeometry::send_state_bytes`] on this rank: send
    /// connections keep their LL position there and, with `local_counters`, copies of the
    /// Simple counters too.
    pub fn conn_table(
        &self,
        rank: u32,
        peers: &SlotPeers,
        own: DevicePtr,
        peer_fifo: &[DevicePtr],
        send_state: DevicePtr,
        local_counters: bool,
    ) -> Vec<u8> {
        let nranks = peers.nranks();
        let mut table =
            Vec::with_capacity(2 * self.channels * nranks as usize * size_of::<DevConn>());
        for send in [true, false] {
            for c in 0..self.channels {
                for p in 0..nranks {
                    let conn = if p == rank {
                        DevConn::default()
                    } else if send {
                        let mut conn = self.conn(peer_fifo[p as usize], peers, p, c, rank);
                        let k = c as u64 * u64::from(nranks) + u64::from(p);
                        let mine = send_state + k * SEND_STATE_BYTES;
                        if local_counters {
                            conn.tail_mirror = mine;
                            conn.head_seen = mine + 64;
                        }
                        conn.ll_pos = mine + 128;
                        conn.ll_head_seen = mine + 192;
                        conn
                    } else {
                        self.conn(own, peers, rank, c, p)
                    };
                    table.extend_from_slice(&conn.to_bytes());
                }
            }
        }
        table
    }
}

/// Which senders have slots in each rank's FIFO allocation: the ranks of the owner's host (as
/// NCCL's host identity says, `NCCL_HOSTID` included). Only they may reach its device memory
/// (P2P); a rank of another host meets it through host memory (NET), so slots for it would be
/// device memory never touched: with the default geometry 68 MiB per rank of the communicator,
/// 4.3 GiB per GPU at 64 ranks. Every rank derives the same mapping from the same layout.
#[derive(Debug, Clone, Copy)]
pub struct SlotPeers<'a> {
    nranks: u32,
    /// The host of every rank (`None`: one host).
    hosts: Option<&'a HostLayout>,
}

impl<'a> SlotPeers<'a> {
    /// The mapping for `nranks` ranks placed on hosts as `hosts` says (`None`: one host).
    pub fn new(nranks: u32, hosts: Option<&'a HostLayout>) -> SlotPeers<'a> {
        SlotPeers { nranks, hosts }
    }

    /// `nranks` ranks on one host: every sender has slots everywhere.
    pub fn one_host(nranks: u32) -> SlotPeers<'static> {
        SlotPeers::new(nranks, None)
    }

    /// Ranks of the communicator.
    pub fn nranks(&self) -> u32 {
        self.nranks
    }

    /// Senders with slots in `owner`'s allocation (itself included, whose slots stay unused).
    pub fn count(&self, owner: u32) -> u32 {
        self.hosts
            .map_or(self.nranks, |h| h.members(h.host_of(owner)).len() as u32)
    }

    /// Where `from`'s slots are among `owner`'s senders, if it has any there.
    pub fn slot(&self, owner: u32, from: u32) -> Option<u32> {
        match self.hosts {
            None => Some(from),
            Some(h) => (h.host_of(owner) == h.host_of(from)).then(|| h.index_in_host(from)),
        }
    }

    /// Bytes of the one-shot kernels' inbox: only where every rank shares one host, since they
    /// run only when no pair meets through host memory.
    pub fn inbox_bytes(&self) -> u64 {
        if self.hosts.is_none() {
            one_shot_inbox_bytes(self.nranks)
        } else {
            0
        }
    }
}

/// What a rank publishes at connect: pid, device, FIFO address, geometry, then its export
/// handle (empty when it could not export, or for a single rank).
pub fn publish(
    pid: u32,
    device: i32,
    sms: u32,
    bus: u64,
    fifo: DevicePtr,
    geom: &FifoGeometry,
    handle: &[u8],
) -> Vec<u8> {
    let mut v = Vec::with_capacity(RECORD_HEADER + handle.len());
    v.extend_from_slice(&pid.to_le_bytes());
    v.extend_from_slice(&device.to_le_bytes());
    v.extend_from_slice(&fifo.to_le_bytes());
    v.extend_from_slice(&(geom.channels as u32).to_le_bytes());
    v.extend_from_slice(&geom.nslots.to_le_bytes());
    v.extend_from_slice(&geom.slot_bytes.to_le_bytes());
    v.extend_from_slice(&geom.ll_nslots.to_le_bytes());
    v.extend_from_slice(&(geom.ll_slot_bytes as u32).to_le_bytes());
    v.extend_from_slice(&sms.to_le_bytes());
    v.extend_from_slice(&bus.to_le_bytes());
    v.extend_from_slice(handle);
    v
}

/// A peer's published record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerRecord<'a> {
    /// The peer's device ordinal.
    pub device: i32,
    /// That device's multiprocessors (0: unknown).
    pub sms: u32,
    /// A hash of that device's PCI bus id (0: unknown): equal on one machine means one GPU,
    /// whatever each process numbers it.
    pub bus: u64,
    /// Its FIFO allocation's address in its own process.
    pub fifo: DevicePtr,
    /// How its FIFOs are cut.
    pub geometry: FifoGeometry,
    /// Its export handle (empty when it could not export).
    pub handle: &'a [u8],
}

/// Parses a record from [`publish`]; `None` when it is too short.
pub fn parse_record(b: &[u8]) -> Option<PeerRecord<'_>> {
    let device = i32::from_le_bytes(b.get(4..8)?.try_into().ok()?);
    let fifo = u64::from_le_bytes(b.get(8..16)?.try_into().ok()?);
    let geometry = FifoGeometry {
        channels: u32::from_le_bytes(b.get(16..20)?.try_into().ok()?) as usize,
        nslots: u32::from_le_bytes(b.get(20..24)?.try_into().ok()?),
        slot_bytes: u64::from_le_bytes(b.get(24..32)?.try_into().ok()?),
        ll_nslots: u32::from_le_bytes(b.get(32..36)?.try_into().ok()?),
        ll_slot_bytes: u64::from(u32::from_le_bytes(b.get(36..40)?.try_into().ok()?)),
    };
    let sms = u32::from_le_bytes(b.get(40..44)?.try_into().ok()?);
    let bus = u64::from_le_bytes(b.get(44..52)?.try_into().ok()?);
    Some(PeerRecord {
        device,
        sms,
        bus,
        fifo,
        geometry,
        handle: &b[RECORD_HEADER..],
    })
}

/// Where a rank runs, as far as sharing a device goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Its process: host hash, pid namespace hash, pid.
    pub process: (u64, u64, u32),
    /// Its device ordinal in that process.
    pub device: i32,
    /// That device's multiprocessors (0: unknown).
    pub sms: u32,
    /// Its machine (whatever `NCCL_HOSTID` says) and its device's PCI bus id hash (0: unknown).
    pub gpu: (u64, u64),
}

impl Placement {
    /// Whether `other` is the same device of the same process.
    fn same_process_device(&self, other: &Placement) -> bool {
        self.process == other.process && self.device == other.device
    }

    /// Whether `other` runs on the same GPU: the same device of one process, or the same bus id
    /// on one machine (processes sharing it, under MPS or in turns).
    fn same_gpu(&self, other: &Placement) -> bool {
        self.same_process_device(other) || (self.gpu.1 != 0 && self.gpu == other.gpu)
    }
}

/// Every rank's [`Placement`], from the bootstrap's peers and the records they published.
pub fn placements(peers: &[PeerInfo], records: &[PeerRecord<'_>]) -> Vec<Placement> {
    peers
        .iter()
        .zip(records)
        .map(|(info, rec)| Placement {
            process: (info.host_hash, info.pidns_hash, info.pid),
            device: rec.device,
            sms: rec.sms,
            gpu: (info.machine_hash, rec.bus),
        })
        .collect()
}

/// Whether rank `me` shares its device with another rank of its own process: their streams
/// then share the process's hardware queues, and a kernel queued behind a peer's kernel that
/// waits for it never starts.
pub fn process_shares_device(ranks: &[Placement], me: usize) -> bool {
    let r = &ranks[me];
    ranks.iter().filter(|q| q.same_process_device(r)).count() > 1
}

/// Most blocks one launch may use on a communicator whose ranks run at `ranks`.
///
/// Ranks that share a device wait for each other's blocks, which must therefore all be
/// resident at once: each gets an equal share of the device's SMs (one block per SM, the
/// executor's occupancy). That holds for ranks of one process and for processes under MPS;
/// without MPS their kernels take turns on the device, where the cap costs little. Every rank
/// computes this from the same published records, so all choose the same channel counts.
/// `u32::MAX` when no device is shared (or its size is unknown).
pub fn shared_device_max_blocks(ranks: &[Placement]) -> u32 {
    let mut cap = u32::MAX;
    for r in ranks {
        let sharing = ranks.iter().filter(|q| q.same_gpu(r)).count() as u32;
        if sharing > 1 && r.sms > 0 {
            cap = cap.min((r.sms / sharing).max(1));
        }
    }
    cap
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The registry's defaults and ranges for `OXCCL_FIFO_*` are the geometry's.
    #[test]
    fn registry_defaults_are_the_geometry() {
        let d = FifoGeometry::default();
        assert_eq!(vars::OXCCL_FIFO_CHANNELS.default, None);
        assert_eq!(d.channels, 32);
        assert_eq!(vars::OXCCL_FIFO_SLOTS.default, d.nslots);
        assert_eq!(vars::OXCCL_FIFO_SLOT_BYTES.default, d.slot_bytes);
        assert_eq!(vars::OXCCL_FIFO_LL_SLOTS.default, d.ll_nslots);
        assert_eq!(vars::OXCCL_FIFO_LL_SLOT_BYTES.default, d.ll_slot_bytes);
        let read = |v: &str| vars::OXCCL_FIFO_CHANNELS.read(Some(std::ffi::OsStr::new(v)));
        assert_eq!(read(&MAX_CHANNELS.to_string()), Some(Some(MAX_CHANNELS)));
        assert_eq!(read(&(MAX_CHANNELS + 1).to_string()), None);
        let read = |v: &str| vars::OXCCL_FIFO_SLOT_BYTES.read(Some(std::ffi::OsStr::new(v)));
        assert_eq!(read("65536"), Some(65536));
        assert_eq!(read("65537"), None);
    }

    #[test]
    fn fifo_layout_is_disjoint_and_in_bounds() {
        let small = FifoGeometry {
            channels: 3,
            nslots: 2,
            slot_bytes: 4096,
            ll_nslots: 3,
            ll_slot_bytes: 1024,
        };
        let spread = HostLayout::from_keys(&[5, 9, 5, 7, 9, 9]).expect("several hosts");
        let layouts = [
            SlotPeers::one_host(1),
            SlotPeers::one_host(2),
            SlotPeers::one_host(3),
            SlotPeers::one_host(8),
            SlotPeers::new(6, Some(&spread)),
        ];
        for g in [FifoGeometry::default(), small] {
            for peers in &layouts {
                let nranks = peers.nranks();
                for owner in 0..nranks {
                    check_layout(&g, peers, owner);
                }
            }
        }
    }

    /// Every FIFO of `owner`'s allocation in bounds, its counters and slot areas disjoint, and
    /// slots only for the senders of its host.
    fn check_layout(g: &FifoGeometry, peers: &SlotPeers, owner: u32) {
        let nranks = peers.nranks();
        let base = 0x7000_0000_0000u64;
        let bytes = g.fifo_bytes(peers, owner);
        let inbox = g.inbox_offset(peers, owner);
        // The one-shot inbox closes the allocation.
        assert_eq!(inbox + peers.inbox_bytes(), bytes);
        assert_eq!(inbox % 16, 0);
        let per_fifo = g.slot_bytes * u64::from(g.nslots);
        let per_ll = g.ll_slot_bytes * u64::from(g.ll_nslots);
        let senders = u64::from(peers.count(owner));
        let slots_start = inbox - g.channels as u64 * senders * (per_fifo + per_ll);
        let mut lines = std::collections::HashSet::new();
        // (start, length) of every slot area, Simple and LL.
        let mut bufs = Vec::new();
        for c in 0..g.channels {
            for from in 0..nranks {
                let f = g.conn(base, peers, owner, c, from);
                assert_eq!(f.head % 64, 0);
                assert_eq!(f.tail, f.head + 64);
                assert_eq!(f.ll_head, f.head + 128);
                assert_eq!(f.ll_pos, f.ll_head, "a receiver's LL position is its head");
                for line in [f.head, f.tail, f.ll_head] {
                    assert!(lines.insert(line));
                }
                assert!(f.ll_head + 64 <= base + slots_start);
                assert!(f.ll_head + 64 <= base + g.counter_bytes(nranks) as u64);
                assert_eq!(u64::from(f.ll_slot_bytes), g.ll_slot_bytes);
                if peers.slot(owner, from).is_none() {
                    assert_eq!((f.buff, f.ll_buff), (0, 0), "no slots for another host");
                    continue;
                }
                assert_eq!(f.buff % 16, 0);
                assert_eq!(f.ll_buff % 16, 0);
                assert!(f.buff >= base + slots_start);
                assert!(f.ll_buff + per_ll <= base + inbox);
                bufs.push((f.buff, per_fifo));
                bufs.push((f.ll_buff, per_ll));
            }
        }
        assert_eq!(bufs.len() as u64, 2 * g.channels as u64 * senders);
        bufs.sort_unstable();
        for w in bufs.windows(2) {
            assert!(w[1].0 >= w[0].0 + w[0].1, "slot areas overlap");
        }
    }

    #[test]
    fn slots_follow_the_hosts() {
        let layout = HostLayout::from_keys(&[5, 9, 5, 7, 9, 9]).expect("several hosts");
        let p = SlotPeers::new(6, Some(&layout));
        assert_eq!(p.nranks(), 6);
        assert_eq!([0, 1, 2, 3].map(|r| p.count(r)), [2, 3, 2, 1]);
        assert_eq!(p.slot(0, 2), Some(1));
        assert_eq!(p.slot(2, 0), Some(0));
        assert_eq!(p.slot(4, 5), Some(2));
        assert_eq!(p.slot(1, 0), None);
        assert_eq!(p.slot(3, 3), Some(0));
        assert_eq!(
            p.inbox_bytes(),
            0,
            "one-shot kernels never run across hosts"
        );
        let one = SlotPeers::one_host(4);
        assert_eq!(one.inbox_bytes(), one_shot_inbox_bytes(4));
        // 64 ranks on 8 hosts: each allocation holds slots for 8 senders, not 64.
        let g = FifoGeometry::default();
        let hosts: Vec<u64> = (0..64).map(|r| r / 8).collect();
        let layout = HostLayout::from_keys(&hosts).expect("several hosts");
        let spread = SlotPeers::new(64, Some(&layout));
        let all = SlotPeers::one_host(64);
        let slots = |p: &SlotPeers| g.fifo_bytes(p, 0) - g.slots_offset(p) - p.inbox_bytes();
        assert_eq!(slots(&all), 8 * slots(&spread));
        assert!(g.fifo_bytes(&spread, 0) < 600 << 20);
    }

    #[test]
    fn conn_table_pairs_senders_with_receivers() {
        let g = FifoGeometry::default();
        let nranks = 3u32;
        let peers = SlotPeers::one_host(nranks);
        let fifos = [0x1000_0000u64, 0x2000_0000, 0x3000_0000];
        let one = size_of::<DevConn>();
        let half = g.recv_table_offset(nranks) as usize;
        assert_eq!(half, g.channels * nranks as usize * one);
        let state = 0x9000_0000u64;
        let t1 = g.conn_table(1, &peers, fifos[1], &fifos, state, false);
        assert_eq!(t1.len(), 2 * half);
        let t2 = g.conn_table(2, &peers, fifos[2], &fifos, state, false);
        // Rank 1's send connection to 2 on channel 5 is rank 2's receive from 1 on channel 5:
        // same slots and counters; only the position of each side is its own.
        let at = |c: usize, p: usize| (c * nranks as usize + p) * one;
        let recv = g.conn(fifos[2], &peers, 2, 5, 1);
        assert_eq!(&t2[half + at(5, 1)..half + at(5, 1) + one], recv.to_bytes());
        let k = (5 * nranks as usize + 2) as u64;
        let send = DevConn {
            ll_pos: state + k * SEND_STATE_BYTES + 128,
            ll_head_seen: state + k * SEND_STATE_BYTES + 192,
            ..recv
        };
        assert_eq!(&t1[at(5, 2)..at(5, 2) + one], send.to_bytes());
        // Self connections are empty.
        assert_eq!(&t1[at(0, 1)..at(0, 1) + one], DevConn::default().to_bytes());

        // Sender-local Simple counters on request: four lines per send connection, none for
        // receives, all inside the state allocation and distinct.
        let t1s = g.conn_table(1, &peers, fifos[1], &fifos, state, true);
        let mut seen = std::collections::HashSet::new();
        for c in 0..g.channels {
            for p in [0usize, 2] {
                let k = (c * nranks as usize + p) as u64;
                let mine = state + k * SEND_STATE_BYTES;
                let want = DevConn {
                    tail_mirror: mine,
                    head_seen: mine + 64,
                    ll_pos: mine + 128,
                    ll_head_seen: mine + 192,
                    ..g.conn(fifos[p], &peers, p as u32, c, 1)
                };
                assert_eq!(&t1s[at(c, p)..at(c, p) + one], want.to_bytes());
                // The one-shot epochs follow every connection's counters.
                assert!(want.ll_head_seen + 64 <= state + g.epochs_offset(nranks));
                for line in [mine, mine + 64, mine + 128, mine + 192] {
                    assert!(seen.insert(line));
                }
            }
        }
        assert_eq!(&t1s[half..], &t1[half..], "receive connections unchanged");
        assert_eq!(
            g.epochs_offset(nranks) + ONE_SHOT_EPOCH_BYTES,
            g.send_state_bytes(nranks) as u64
        );
    }

    #[test]
    fn record_round_trips() {
        let g = FifoGeometry {
            channels: 7,
            nslots: 3,
            slot_bytes: 8192,
            ll_nslots: 5,
            ll_slot_bytes: 2048,
        };
        let b = publish(42, 3, 132, 0xb05, 0xdead_beef_0000, &g, &[1, 2, 3]);
        let r = parse_record(&b).unwrap();
        assert_eq!(
            r,
            PeerRecord {
                device: 3,
                sms: 132,
                bus: 0xb05,
                fifo: 0xdead_beef_0000,
                geometry: g,
                handle: &[1, 2, 3]
            }
        );
        assert!(
            parse_record(&publish(1, 0, 0, 0, 0, &g, &[]))
                .unwrap()
                .handle
                .is_empty()
        );
        assert!(parse_record(&b[..RECORD_HEADER - 1]).is_none());
    }

    #[test]
    fn peer_records_must_match_the_geometry() {
        let g = FifoGeometry::default();
        let rec = publish(1, 0, 0, 0, 0x1000, &g, &[9]);
        assert_eq!(g.peer_record(1, &rec).unwrap().fifo, 0x1000);
        for other in [
            FifoGeometry {
                slot_bytes: 4096,
                ..g
            },
            FifoGeometry { ll_nslots: 4, ..g },
        ] {
            let e = other.peer_record(1, &rec).unwrap_err().to_string();
            assert!(e.contains("rank 1 cut its FIFOs"), "{e}");
        }
        let e = g.peer_record(2, &rec[..4]).unwrap_err().to_string();
        assert!(e.contains("rank 2 published a short FIFO record"), "{e}");
    }

    #[test]
    fn ranks_sharing_a_device_split_its_sms() {
        let at = |pid, device, sms| Placement {
            process: (7, 9, pid),
            device,
            sms,
            gpu: (7, 0),
        };
        // One rank per device, or one device each in different processes: no cap.
        assert_eq!(
            shared_device_max_blocks(&[at(1, 0, 132), at(1, 1, 132)]),
            u32::MAX
        );
        assert_eq!(
            shared_device_max_blocks(&[at(1, 0, 132), at(2, 0, 132)]),
            u32::MAX
        );
        // Two ranks of one process on GPU 0 and one on GPU 1: every rank takes half of GPU 0.
        let three = [at(1, 0, 132), at(1, 1, 132), at(1, 0, 132)];
        assert_eq!(shared_device_max_blocks(&three), 66);
        // Eight on one small device: at least one block each; an unknown size: no cap.
        assert_eq!(shared_device_max_blocks(&[at(1, 0, 4); 8]), 1);
        assert_eq!(shared_device_max_blocks(&[at(1, 0, 0); 8]), u32::MAX);
        // Another host with the same pid is another process.
        let other = Placement {
            process: (8, 9, 1),
            ..at(1, 0, 132)
        };
        assert_eq!(shared_device_max_blocks(&[at(1, 0, 132), other]), u32::MAX);
        // Four processes on one GPU of one machine (its bus id known): a quarter each, whatever
        // ordinal each process gives it; the same bus id on another machine is another GPU.
        let on = |pid, machine, bus| Placement {
            gpu: (machine, bus),
            ..at(pid, pid as i32, 132)
        };
        let four: Vec<_> = (1..=4).map(|p| on(p, 5, 0xb05)).collect();
        assert_eq!(shared_device_max_blocks(&four), 33);
        // Only ranks of one process share its hardware queues.
        assert!(!process_shares_device(&four, 0));
        assert!(process_shares_device(&three, 0) && !process_shares_device(&three, 1));
        assert_eq!(
            shared_device_max_blocks(&[on(1, 5, 0xb05), on(2, 6, 0xb05)]),
            u32::MAX
        );
    }

    #[test]
    fn geometry_defaults_and_limits() {
        let d = FifoGeometry::default();
        assert_eq!(d.message_bytes(Protocol::Simple), 7 * 256 * 1024);
        assert_eq!(d.message_bytes(Protocol::Ll), 7 * 8 * 1024);
        assert!(d.channels <= MAX_CHANNELS);
    }
}
