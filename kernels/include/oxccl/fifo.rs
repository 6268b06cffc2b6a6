// The device FIFO layout both GPU backends build their connections from, shared like
// `work.rs` (included with `#[path]` by backend-cuda and backend-hip, whose `kernels` module
// re-exports it), so the two transports cannot drift apart.
//
// One rank's FIFO allocation holds, for every (channel, sending peer), the head and tail
// counters (page-aligned block first), then the slots. At connect every rank publishes a record
// (pid, device, FIFO address, export handle) through the bootstrap network.

use super::DevConn;
use oxccl_core::backend::DevicePtr;

/// Channels a transport has FIFOs for; plans with more channels are refused.
pub const MAX_CHANNELS: usize = 16;
/// Bytes per FIFO slot (a multiple of 16 and of every element size).
pub const SLOT_BYTES: u64 = 64 << 10;
/// Slots per FIFO.
pub const NSLOTS: u32 = 8;
/// Largest message a step may send before its peer receives: the sender can fill every slot
/// but one (see `docs/kernels.md`), and plans send a chunk before receiving.
pub const FIFO_MESSAGE_BYTES: u64 = (NSLOTS as u64 - 1) * SLOT_BYTES;
/// Bytes of counters per FIFO: head at 0, tail at 64.
pub const CTR_BYTES: u64 = 128;
/// Bytes of the fixed part of a published record: pid, device, FIFO address.
pub const RECORD_HEADER: usize = 16;

/// Bytes of one rank's FIFO allocation: the counters (page-aligned), then the slots.
pub fn fifo_bytes(nranks: u32) -> u64 {
    let n = MAX_CHANNELS as u64 * u64::from(nranks);
    (n * CTR_BYTES).next_multiple_of(4096) + n * SLOT_BYTES * u64::from(NSLOTS)
}

/// Bytes at the start of a FIFO allocation that hold counters (zeroed at connect).
pub fn fifo_counter_bytes(nranks: u32) -> usize {
    (MAX_CHANNELS as u64 * u64::from(nranks) * CTR_BYTES) as usize
}

/// The receive FIFO of `(channel, from)` inside the allocation at `base` of a rank.
pub fn fifo_conn(base: DevicePtr, nranks: u32, channel: usize, from: u32) -> DevConn {
    let n = MAX_CHANNELS as u64 * u64::from(nranks);
    let k = channel as u64 * u64::from(nranks) + u64::from(from);
    let slots = base + (n * CTR_BYTES).next_multiple_of(4096);
    DevConn {
        buff: slots + k * SLOT_BYTES * u64::from(NSLOTS),
        head: base + k * CTR_BYTES,
        tail: base + k * CTR_BYTES + 64,
        slot_bytes: SLOT_BYTES,
        nslots: NSLOTS,
        pad: 0,
    }
}

/// The connection table: `MAX_CHANNELS * nranks` send connections (to p: p's FIFO for
/// `(c, rank)`), then as many receive connections (from p: ours for `(c, p)`); self is empty.
pub fn conn_table(rank: u32, nranks: u32, own: DevicePtr, peer_fifo: &[DevicePtr]) -> Vec<u8> {
    let mut table = Vec::with_capacity(2 * MAX_CHANNELS * nranks as usize * size_of::<DevConn>());
    for send in [true, false] {
        for c in 0..MAX_CHANNELS {
            for p in 0..nranks {
                let conn = if p == rank {
                    DevConn::default()
                } else if send {
                    fifo_conn(peer_fifo[p as usize], nranks, c, rank)
                } else {
                    fifo_conn(own, nranks, c, p)
                };
                table.extend_from_slice(&conn.to_bytes());
            }
        }
    }
    table
}

/// What a rank publishes at connect: pid, device, FIFO address, then its export handle (empty
/// when it could not export, or for a single rank).
pub fn publish(pid: u32, device: i32, fifo: DevicePtr, handle: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(RECORD_HEADER + handle.len());
    v.extend_from_slice(&pid.to_le_bytes());
    v.extend_from_slice(&device.to_le_bytes());
    v.extend_from_slice(&fifo.to_le_bytes());
    v.extend_from_slice(handle);
    v
}

/// A peer's published record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerRecord<'a> {
    /// The peer's device ordinal.
    pub device: i32,
    /// Its FIFO allocation's address in its own process.
    pub fifo: DevicePtr,
    /// Its export handle (empty when it could not export).
    pub handle: &'a [u8],
}

/// Parses a record from [`publish`]; `None` when it is too short.
pub fn parse_record(b: &[u8]) -> Option<PeerRecord<'_>> {
    let device = i32::from_le_bytes(b.get(4..8)?.try_into().ok()?);
    let fifo = u64::from_le_bytes(b.get(8..16)?.try_into().ok()?);
    Some(PeerRecord {
        device,
        fifo,
        handle: &b[RECORD_HEADER..],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_layout_is_disjoint_and_in_bounds() {
        for nranks in [1u32, 2, 3, 8] {
            let base = 0x7000_0000_0000u64;
            let bytes = fifo_bytes(nranks);
            let slots_start =
                bytes - MAX_CHANNELS as u64 * u64::from(nranks) * SLOT_BYTES * u64::from(NSLOTS);
            let mut lines = std::collections::HashSet::new();
            let mut bufs = Vec::new();
            for c in 0..MAX_CHANNELS {
                for from in 0..nranks {
                    let f = fifo_conn(base, nranks, c, from);
                    assert_eq!(f.head % 64, 0);
                    assert_eq!(f.tail, f.head + 64);
                    assert!(lines.insert(f.head) && lines.insert(f.tail));
                    assert_eq!(f.buff % 16, 0);
                    assert!(f.buff + SLOT_BYTES * u64::from(NSLOTS) <= base + bytes);
                    assert!(f.tail + 64 <= base + slots_start);
                    assert!(f.tail + 64 <= base + fifo_counter_bytes(nranks) as u64);
                    bufs.push(f.buff);
                }
            }
            bufs.sort_unstable();
            for w in bufs.windows(2) {
                assert!(w[1] - w[0] >= SLOT_BYTES * u64::from(NSLOTS));
            }
        }
    }

    #[test]
    fn conn_table_pairs_senders_with_receivers() {
        let nranks = 3u32;
        let fifos = [0x1000_0000u64, 0x2000_0000, 0x3000_0000];
        let one = size_of::<DevConn>();
        let half = MAX_CHANNELS * nranks as usize * one;
        let t1 = conn_table(1, nranks, fifos[1], &fifos);
        assert_eq!(t1.len(), 2 * half);
        let t2 = conn_table(2, nranks, fifos[2], &fifos);
        // Rank 1's send connection to 2 on channel 5 is rank 2's receive from 1 on channel 5.
        let at = |c: usize, p: usize| (c * nranks as usize + p) * one;
        let send = &t1[at(5, 2)..at(5, 2) + one];
        let recv = &t2[half + at(5, 1)..half + at(5, 1) + one];
        assert_eq!(send, recv);
        assert_eq!(send, fifo_conn(fifos[2], nranks, 5, 1).to_bytes());
        // Self connections are empty.
        assert_eq!(&t1[at(0, 1)..at(0, 1) + one], DevConn::default().to_bytes());
    }

    #[test]
    fn record_round_trips() {
        let b = publish(42, 3, 0xdead_beef_0000, &[1, 2, 3]);
        let r = parse_record(&b).unwrap();
        assert_eq!(
            r,
            PeerRecord {
                device: 3,
                fifo: 0xdead_beef_0000,
                handle: &[1, 2, 3]
            }
        );
        assert!(
            parse_record(&publish(1, 0, 0, &[]))
                .unwrap()
                .handle
                .is_empty()
        );
        assert!(parse_record(&b[..15]).is_none());
    }
}
