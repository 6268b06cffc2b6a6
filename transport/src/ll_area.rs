//! LL areas of FIFOs in host memory (SHM and NET) and where a connection-table entry's LL
//! fields point into them.

use crate::net::ConnSlot;
use oxccl_core::backend::DevicePtr;
use oxccl_kernel_abi::{DevConn, FifoGeometry};
use std::mem::offset_of;

/// The LL part of one host-memory FIFO (SHM, NET): `ll_head` at its start, on a page of its
/// own, then the slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LlArea {
    /// LL slots.
    pub nslots: u32,
    /// Bytes per LL slot.
    pub slot_bytes: u64,
}

impl LlArea {
    /// Offset of the slots from the area's start.
    pub(crate) const SLOTS: u64 = 4096;

    pub(crate) fn of(geometry: &FifoGeometry) -> LlArea {
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

/// Points the LL fields of one connection-table entry at the LL area at device address `area`:
/// the receive side polls its packets there and counts consumed slots in `ll_head`; the send
/// side writes packets there and reads `ll_head`. Both keep their own position (and the sender
/// its last-seen head) where the table had them, `keep` ([`ll_counters`]): device memory, so
/// that a step learns where it is without a read across PCIe. The receiver's is the `ll_head`
/// of its own P2P FIFO for this pair, which no peer writes when the pair meets through host
/// memory; a zero `keep.0` makes `ll_head` the position.
pub(crate) fn point_ll_at(
    table: &mut [u8],
    geometry: &FifoGeometry,
    nranks: u32,
    slot: ConnSlot,
    area: DevicePtr,
    ll: LlArea,
    keep: (u64, u64),
) {
    let e = &mut table[slot.range(geometry, nranks)];
    let mut put = |off: usize, v: &[u8]| e[off..off + v.len()].copy_from_slice(v);
    let head = area;
    put(
        offset_of!(DevConn, ll_buff),
        &(area + LlArea::SLOTS).to_le_bytes(),
    );
    put(offset_of!(DevConn, ll_head), &head.to_le_bytes());
    let (pos_at, seen_at) = match keep {
        (0, _) => (head, 0),
        _ if slot.recv => (keep.0, 0),
        _ => keep,
    };
    put(offset_of!(DevConn, ll_pos), &pos_at.to_le_bytes());
    put(offset_of!(DevConn, ll_head_seen), &seen_at.to_le_bytes());
    put(
        offset_of!(DevConn, ll_slot_bytes),
        &(ll.slot_bytes as u32).to_le_bytes(),
    );
    put(offset_of!(DevConn, ll_nslots), &ll.nslots.to_le_bytes());
}

/// `(ll_pos, ll_head_seen)` of the table entry of `slot`.
pub(crate) fn ll_counters(
    table: &[u8],
    geometry: &FifoGeometry,
    nranks: u32,
    slot: ConnSlot,
) -> (u64, u64) {
    let e = &table[slot.range(geometry, nranks)];
    let at = |o: usize| u64::from_le_bytes(e[o..o + 8].try_into().expect("8"));
    (
        at(offset_of!(DevConn, ll_pos)),
        at(offset_of!(DevConn, ll_head_seen)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxccl_kernel_abi::SlotPeers;

    fn field(table: &[u8], pos: usize, off: usize) -> u64 {
        u64::from_le_bytes(table[pos + off..pos + off + 8].try_into().unwrap())
    }

    /// The LL fields of an SHM pair: the receiver polls packets in its area and counts consumed
    /// slots at the area's start, and keeps its position in its own device memory; the sender
    /// writes into the peer's area and keeps its sender-local position and last-seen head; the
    /// Simple fields and every other entry stay as they were. Without a kept position the
    /// receiver's is its `ll_head`.
    #[test]
    fn ll_fields_point_into_the_area_and_keep_the_senders_counters() {
        let g = FifoGeometry::default();
        let (rank, nranks) = (1u32, 3u32);
        let peers: Vec<DevicePtr> = vec![0x10_0000, 0x20_0000, 0x30_0000];
        let table = g.conn_table(
            rank,
            &SlotPeers::one_host(nranks),
            peers[1],
            &peers,
            0x9000_0000,
            true,
        );
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
        let keep_recv = ll_counters(&table, &g, nranks, recv);
        assert_eq!(
            keep_recv,
            (
                g.conn(peers[1], &SlotPeers::one_host(nranks), 1, 2, 0)
                    .ll_head,
                0
            ),
            "the receiver's is its own P2P FIFO's LL head for the pair"
        );
        let mut patched = table.clone();
        point_ll_at(&mut patched, &g, nranks, recv, 0x7000_0000, ll, keep_recv);
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
        assert_eq!(ll_counters(&patched, &g, nranks, recv), keep_recv);
        let mut bare = table.clone();
        point_ll_at(&mut bare, &g, nranks, recv, 0x7000_0000, ll, (0, 0));
        assert_eq!(field(&bare, r, offset_of!(DevConn, ll_pos)), 0x7000_0000);
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
}
