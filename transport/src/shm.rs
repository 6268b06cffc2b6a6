//! The SHM transport: FIFOs in host shared memory, for ranks of one host that cannot use P2P
//! (`NCCL_P2P_DISABLE=1`, or GPUs of one process without peer access).
//!
//! Every receiving rank creates one `/dev/shm` segment holding a FIFO per SHM peer and channel
//! ([`FifoLayout`], the NET layout), and registers it with the runtime so its GPU reaches it; each
//! sender maps and registers the same segment. The sending kernel then fills the receiver's
//! slots and moves its `tail` across PCIe, exactly as it does over P2P, and the receiving kernel
//! reads them and moves `head`: no proxy thread takes part, so graph capture works as for P2P.
//! Each FIFO also has an LL area (a consumed-slots counter on its own page, then the LL slots),
//! so SHM runs LL too: a packet written across PCIe carries its own flag, which saves the
//! Simple protocol's fence and counter on the way there and the counter poll before the data on
//! the way back. The communicator keeps NET's channel limits.

use crate::api::DeviceApi;
use crate::net::{ConnSlot, fifo_layout, point_conn_at};
use oxccl_core::backend::DevicePtr;
use oxccl_core::bootstrap::Bootstrap;
use oxccl_core::error::{Error, Result};
use oxccl_core::net::proxy::FifoLayout;
use oxccl_core::shm::ShmSegment;
use oxccl_kernel_abi::{DevConn, FifoGeometry};
use std::mem::offset_of;

/// The LL part of one SHM FIFO: `ll_head` at its start, on a page of its own, then the slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LlArea {
    /// LL slots.
    pub nslots: u32,
    /// Bytes per LL slot.
    pub slot_bytes: u64,
}

impl LlArea {
    /// Offset of the slots from the area's start.
    const SLOTS: u64 = 4096;

    fn of(geometry: &FifoGeometry) -> LlArea {
        LlArea {
            nslots: geometry.ll_nslots,
            slot_bytes: geometry.ll_slot_bytes,
        }
    }

    /// Bytes of one area.
    pub(crate) fn bytes(&self) -> u64 {
        Self::SLOTS + u64::from(self.nslots) * self.slot_bytes
    }
}

/// Bytes of one SHM FIFO: the Simple part ([`FifoLayout`]), then its [`LlArea`].
fn shm_fifo_bytes(layout: &FifoLayout, ll: &LlArea) -> u64 {
    layout.bytes() + ll.bytes()
}

/// Points the LL fields of one connection-table entry at the LL area at device address `area`:
/// the receive side polls its packets there and counts consumed slots in `ll_head` (which is
/// also its position); the send side writes packets there, reads `ll_head`, and keeps its own
/// position and last-seen head where the table had them (sender-local memory).
pub(crate) fn point_ll_at(
    table: &mut [u8],
    geometry: &FifoGeometry,
    nranks: u32,
    slot: ConnSlot,
    area: DevicePtr,
    ll: LlArea,
    keep: (u64, u64),
) {
    let one = size_of::<DevConn>();
    let half = geometry.recv_table_offset(nranks) as usize;
    let pos = (slot.channel as usize * nranks as usize + slot.peer as usize) * one
        + if slot.recv { half } else { 0 };
    let e = &mut table[pos..pos + one];
    let mut put = |off: usize, v: &[u8]| e[off..off + v.len()].copy_from_slice(v);
    let head = area;
    put(
        offset_of!(DevConn, ll_buff),
        &(area + LlArea::SLOTS).to_le_bytes(),
    );
    put(offset_of!(DevConn, ll_head), &head.to_le_bytes());
    let (pos_at, seen_at) = if slot.recv { (head, 0) } else { keep };
    put(offset_of!(DevConn, ll_pos), &pos_at.to_le_bytes());
    put(offset_of!(DevConn, ll_head_seen), &seen_at.to_le_bytes());
    put(
        offset_of!(DevConn, ll_slot_bytes),
        &(ll.slot_bytes as u32).to_le_bytes(),
    );
    put(offset_of!(DevConn, ll_nslots), &ll.nslots.to_le_bytes());
}

/// `(ll_pos, ll_head_seen)` of the table entry of `slot`.
fn ll_counters(table: &[u8], geometry: &FifoGeometry, nranks: u32, slot: ConnSlot) -> (u64, u64) {
    let one = size_of::<DevConn>();
    let half = geometry.recv_table_offset(nranks) as usize;
    let pos = (slot.channel as usize * nranks as usize + slot.peer as usize) * one
        + if slot.recv { half } else { 0 };
    let at = |o: usize| u64::from_le_bytes(table[pos + o..pos + o + 8].try_into().expect("8"));
    (
        at(offset_of!(DevConn, ll_pos)),
        at(offset_of!(DevConn, ll_head_seen)),
    )
}

/// A shared segment registered with the runtime (mapped into this process's GPU address space).
struct Registered<A: DeviceApi> {
    api: A,
    seg: ShmSegment,
    dev: DevicePtr,
}

impl<A: DeviceApi> Registered<A> {
    fn new(api: &A, seg: ShmSegment) -> Result<Registered<A>> {
        // SAFETY: `seg` maps `len()` bytes for as long as it lives; it is unregistered in Drop
        // before the segment unmaps.
        let dev = unsafe { api.host_register(seg.base(), seg.len()) }?;
        Ok(Registered {
            api: api.clone(),
            seg,
            dev,
        })
    }
}

impl<A: DeviceApi> Drop for Registered<A> {
    fn drop(&mut self) {
        // SAFETY: registered in `new`; the transport has waited for its kernels.
        unsafe { self.api.host_unregister(self.seg.base()) };
    }
}

/// The SHM FIFOs of one communicator: its own receive segment and its peers' segments.
pub(crate) struct ShmFifos<A: DeviceApi> {
    /// This rank's segment: the receive FIFO of each of `peers` per channel (`None`: no peers).
    own: Option<Registered<A>>,
    /// Each SHM peer's segment, mapped here, with the index of this rank's FIFOs in it.
    mapped: Vec<(Registered<A>, usize)>,
    /// SHM peers, in the order of this rank's FIFOs.
    peers: Vec<u32>,
    layout: FifoLayout,
    ll: LlArea,
    channels: u32,
}

impl<A: DeviceApi> ShmFifos<A> {
    /// Creates this rank's segment for `peers`, publishes it, and maps every segment in which
    /// this rank is a sender. Collective: every rank of the communicator calls it, with or
    /// without SHM peers.
    pub(crate) fn connect(
        api: &A,
        bs: &Bootstrap,
        geometry: &FifoGeometry,
        peers: Vec<u32>,
        channels: u32,
    ) -> Result<ShmFifos<A>> {
        let layout = fifo_layout(geometry);
        let ll = LlArea::of(geometry);
        let per_peer = shm_fifo_bytes(&layout, &ll) as usize * channels as usize;
        let own = if peers.is_empty() {
            None
        } else {
            let purpose = format!(
                "rank {}'s SHM FIFOs ({} peers x {channels} channels x {} KiB)",
                bs.rank(),
                peers.len(),
                shm_fifo_bytes(&layout, &ll) >> 10
            );
            let seg = ShmSegment::create(per_peer * peers.len(), &purpose)?;
            Some(Registered::new(api, seg)?)
        };
        let all = bs.all_gather(&publish(own.as_ref().map(|r| r.seg.name()), &peers))?;
        let me = bs.rank();
        let mut mapped = Vec::with_capacity(peers.len());
        for &p in &peers {
            let (name, theirs) = parse(&all[p as usize])?;
            let (Some(name), Some(idx)) = (name, theirs.iter().position(|&r| r == me)) else {
                return Err(Error::Internal(format!(
                    "rank {p} did not choose SHM towards rank {me} as rank {me} did"
                )));
            };
            let seg = ShmSegment::open(&name, per_peer * theirs.len())?;
            mapped.push((Registered::new(api, seg)?, idx));
        }
        // Every sender has the segment mapped: its name can go, so nothing outlives a crash.
        bs.barrier()?;
        let mut fifos = ShmFifos {
            own,
            mapped,
            peers,
            layout,
            ll,
            channels,
        };
        if let Some(r) = fifos.own.as_mut() {
            r.seg.unlink();
        }
        Ok(fifos)
    }

    /// Points the connection table's entries of every SHM peer at the shared FIFOs (Simple and
    /// LL): the receive side at this rank's segment, the send side at the peer's.
    pub(crate) fn patch_table(&self, table: &mut [u8], geometry: &FifoGeometry, nranks: u32) {
        let fifo_bytes = shm_fifo_bytes(&self.layout, &self.ll);
        let simple_bytes = self.layout.bytes();
        let at = |base: DevicePtr, idx: usize, c: u32| {
            base + (idx as u64 * u64::from(self.channels) + u64::from(c)) * fifo_bytes
        };
        for (i, (&peer, (theirs, idx))) in self.peers.iter().zip(&self.mapped).enumerate() {
            let own = self
                .own
                .as_ref()
                .expect("a segment when there are peers")
                .dev;
            for c in 0..self.channels {
                let recv = ConnSlot {
                    channel: c,
                    peer,
                    recv: true,
                };
                let send = ConnSlot {
                    recv: false,
                    ..recv
                };
                let keep = ll_counters(table, geometry, nranks, send);
                let mine = at(own, i, c);
                point_conn_at(table, geometry, nranks, recv, mine, self.layout, false);
                let ll_mine = mine + simple_bytes;
                point_ll_at(table, geometry, nranks, recv, ll_mine, self.ll, (0, 0));
                let fifo = at(theirs.dev, *idx, c);
                point_conn_at(table, geometry, nranks, send, fifo, self.layout, false);
                let ll_theirs = fifo + simple_bytes;
                point_ll_at(table, geometry, nranks, send, ll_theirs, self.ll, keep);
            }
        }
    }

    /// The SHM peers.
    pub(crate) fn peers(&self) -> &[u32] {
        &self.peers
    }
}

/// What a rank publishes: its segment's name (empty: none) and its SHM peers.
fn publish(name: Option<&str>, peers: &[u32]) -> Vec<u8> {
    let name = name.unwrap_or("").as_bytes();
    let mut out = Vec::with_capacity(4 + name.len() + 4 * peers.len());
    out.extend_from_slice(&(name.len() as u32).to_le_bytes());
    out.extend_from_slice(name);
    for p in peers {
        out.extend_from_slice(&p.to_le_bytes());
    }
    out
}

/// The inverse of [`publish`], refusing malformed records.
fn parse(rec: &[u8]) -> Result<(Option<String>, Vec<u32>)> {
    let bad = || Error::Internal("malformed SHM record from a peer".into());
    let len = u32::from_le_bytes(rec.get(..4).ok_or_else(bad)?.try_into().expect("4")) as usize;
    let name = rec.get(4..4 + len).ok_or_else(bad)?;
    let name = String::from_utf8(name.to_vec()).map_err(|_| bad())?;
    let rest = &rec[4 + len..];
    if !rest.len().is_multiple_of(4) {
        return Err(bad());
    }
    let peers = rest
        .chunks_exact(4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4")))
        .collect();
    Ok(((!name.is_empty()).then_some(name), peers))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(table: &[u8], pos: usize, off: usize) -> u64 {
        u64::from_le_bytes(table[pos + off..pos + off + 8].try_into().unwrap())
    }

    /// The LL fields of an SHM pair: the receiver polls packets in its area and counts consumed
    /// slots at the area's start, which is also its position; the sender writes into the peer's
    /// area and keeps its sender-local position and last-seen head; the Simple fields and every
    /// other entry stay as they were.
    #[test]
    fn ll_fields_point_into_the_area_and_keep_the_senders_counters() {
        let g = FifoGeometry::default();
        let (rank, nranks) = (1u32, 3u32);
        let peers: Vec<DevicePtr> = vec![0x10_0000, 0x20_0000, 0x30_0000];
        let table = g.conn_table(rank, nranks, peers[1], &peers, 0x9000_0000, true);
        let ll = LlArea::of(&g);
        let (recv, send) = (
            ConnSlot {
                channel: 2,
                peer: 0,
                recv: true,
            },
            ConnSlot {
                channel: 2,
                peer: 0,
                recv: false,
            },
        );
        let keep = ll_counters(&table, &g, nranks, send);
        assert_ne!(keep.0, 0, "the sender's LL position is sender-local memory");
        let mut patched = table.clone();
        point_ll_at(&mut patched, &g, nranks, recv, 0x7000_0000, ll, (0, 0));
        point_ll_at(&mut patched, &g, nranks, send, 0x8000_0000, ll, keep);
        let one = size_of::<DevConn>();
        let half = g.recv_table_offset(nranks) as usize;
        let (r, s) = ((2 * 3) * one + half, (2 * 3) * one);
        assert_eq!(
            field(&patched, r, offset_of!(DevConn, ll_buff)),
            0x7000_1000
        );
        assert_eq!(
            field(&patched, r, offset_of!(DevConn, ll_head)),
            0x7000_0000
        );
        assert_eq!(field(&patched, r, offset_of!(DevConn, ll_pos)), 0x7000_0000);
        assert_eq!(
            field(&patched, s, offset_of!(DevConn, ll_buff)),
            0x8000_1000
        );
        assert_eq!(
            field(&patched, s, offset_of!(DevConn, ll_head)),
            0x8000_0000
        );
        assert_eq!(ll_counters(&patched, &g, nranks, send), keep);
        for pos in [r, s] {
            let slots = &patched[pos + offset_of!(DevConn, ll_slot_bytes)..];
            assert_eq!(
                u32::from_le_bytes(slots[..4].try_into().unwrap()),
                g.ll_slot_bytes as u32
            );
            assert_eq!(field(&patched, pos, offset_of!(DevConn, buff)), {
                field(&table, pos, offset_of!(DevConn, buff))
            });
        }
        for (i, (a, b)) in table.chunks(one).zip(patched.chunks(one)).enumerate() {
            if i * one != r && i * one != s {
                assert_eq!(a, b, "entry {i} changed");
            }
        }
        assert!(ll.bytes() >= LlArea::SLOTS + u64::from(g.ll_nslots) * g.ll_slot_bytes);
    }

    #[test]
    fn records_round_trip_and_malformed_ones_are_refused() {
        let r = publish(Some("/oxccl-shm-1-ab"), &[3, 0, 7]);
        assert_eq!(
            parse(&r).unwrap(),
            (Some("/oxccl-shm-1-ab".into()), vec![3, 0, 7])
        );
        assert_eq!(parse(&publish(None, &[])).unwrap(), (None, vec![]));
        assert!(parse(&r[..r.len() - 1]).is_err());
        assert!(parse(&[9, 0, 0, 0, b'x']).is_err());
        assert!(parse(&[]).is_err());
    }
}
