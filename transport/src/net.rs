//! The device side of NET connections: FIFOs in mapped pinned host memory, and their entries in
//! the kernels' connection table (both vendors: the pinned memory comes from [`DeviceApi`]).
//!
//! The kernels use a NET FIFO exactly like a peer's P2P FIFO (Simple protocol): the send side
//! also writes each slot's byte count (`DevConn::sizes`), which the proxy (`oxccl_core::net`)
//! reads to send only what a slot holds. No socket network reads GPU memory, so every FIFO lives
//! in host memory the GPU reaches over PCIe, as NCCL stages it without GPUDirect RDMA.

use crate::api::DeviceApi;
use oxccl_core::backend::DevicePtr;
use oxccl_core::error::Result;
use oxccl_core::net::connect::PeerFifos;
use oxccl_core::net::proxy::{FifoLayout, HostFifo};
use oxccl_kernel_abi::{DevConn, FifoGeometry};

/// Channels a communicator with NET peers (and no SHM pair) uses by default
/// (`OXCCL_NET_CHANNELS` changes it): each is a connection with its own sockets and helper
/// threads per peer and direction. On one H100 under MPS, two ranks as two hosts, AllReduce with
/// 2 data sockets per connection: 2026-11-25, busbw at 64 MiB 1 channel 5.6 GB/s, 2 channels
/// 6.7, 4 channels 9.0 (4 sockets per connection: 8.6); 2026-11-26, 4 / 8 channels at 8 MiB
/// 9.0 / 10.7 GB/s, 32 MiB 10.7 / 12.2, 128 MiB 10.9 / 13.3 (the tuner keeps small messages on
/// fewer channels).
const NET_CHANNELS: u32 = 8;
/// The default when some pair meets through SHM: every channel is a FIFO in `/dev/shm` per SHM
/// pair, and 8 or 16 channels moved no more than 4 there (`docs/transports.md`, SHM).
const SHM_CHANNELS: u32 = 4;

/// The channels NET and SHM connections are made for: `OXCCL_NET_CHANNELS` (1 to the FIFO
/// channels), else [`SHM_CHANNELS`] when some pair of the communicator uses SHM, else
/// [`NET_CHANNELS`].
pub fn net_channels(geometry: &FifoGeometry, any_shm: bool) -> u32 {
    let max = geometry.channels as u32;
    let default = if any_shm { SHM_CHANNELS } else { NET_CHANNELS };
    std::env::var("OXCCL_NET_CHANNELS")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
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

/// Pinned host memory holding every NET FIFO of one communicator.
pub(crate) struct NetFifos<A: DeviceApi> {
    api: A,
    host: *mut u8,
    dev: DevicePtr,
    layout: FifoLayout,
    /// NET peers, in the order of the FIFOs.
    peers: Vec<u32>,
    channels: u32,
}

impl<A: DeviceApi> NetFifos<A> {
    /// Allocates and zeroes a send and a receive FIFO per channel for each of `peers`.
    pub(crate) fn alloc(
        api: &A,
        geometry: &FifoGeometry,
        peers: Vec<u32>,
        channels: u32,
    ) -> Result<NetFifos<A>> {
        let layout = fifo_layout(geometry);
        let n = peers.len() * channels as usize * 2;
        let bytes = (layout.bytes() as usize * n).max(4096);
        let (p, dev) = api.host_alloc(bytes)?;
        // SAFETY: `p` holds `bytes` writable bytes; counters and sizes must start at zero.
        unsafe { std::ptr::write_bytes(p, 0, bytes) };
        Ok(NetFifos {
            api: api.clone(),
            host: p,
            dev,
            layout,
            peers,
            channels,
        })
    }

    /// Byte offset of FIFO `(peer index, channel, receive?)`.
    fn offset(&self, i: usize, c: u32, recv: bool) -> u64 {
        let k = (i * self.channels as usize + c as usize) * 2 + usize::from(recv);
        k as u64 * self.layout.bytes()
    }

    fn fifo(&self, i: usize, c: u32, recv: bool) -> HostFifo {
        // SAFETY: the offset lies inside the allocation.
        let base = unsafe { self.host.add(self.offset(i, c, recv) as usize) };
        HostFifo::in_host(base, self.layout)
    }

    /// The FIFOs the proxy drives, per peer.
    pub(crate) fn peer_fifos(&self) -> Vec<PeerFifos> {
        self.peers
            .iter()
            .enumerate()
            .map(|(i, &peer)| PeerFifos {
                peer,
                channels: (0..self.channels)
                    .map(|c| (self.fifo(i, c, false), self.fifo(i, c, true)))
                    .collect(),
            })
            .collect()
    }

    /// Points the connection table's entries of every NET peer at its FIFOs.
    pub(crate) fn patch_table(&self, table: &mut [u8], geometry: &FifoGeometry, nranks: u32) {
        for (i, &peer) in self.peers.iter().enumerate() {
            for c in 0..self.channels {
                for recv in [false, true] {
                    let fifo = self.dev + self.offset(i, c, recv);
                    let slot = ConnSlot {
                        channel: c,
                        peer,
                        recv,
                    };
                    point_conn_at(table, geometry, nranks, slot, fifo, self.layout, !recv);
                }
            }
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

/// Points one entry of the connection table at a FIFO laid out as [`FifoLayout`] at device
/// address `fifo` (in host memory: NET and SHM). `table` holds `channels * nranks` send then as
/// many receive connections (`FifoGeometry::conn_table`). Send sides keep their sender-local
/// counter copies; `sizes` makes the sending kernel write each slot's byte count (for a proxy).
/// LL fields stay zero: connections through host memory run Simple.
pub(crate) fn point_conn_at(
    table: &mut [u8],
    geometry: &FifoGeometry,
    nranks: u32,
    slot: ConnSlot,
    fifo: DevicePtr,
    layout: FifoLayout,
    sizes: bool,
) {
    let one = size_of::<DevConn>();
    let half = geometry.recv_table_offset(nranks) as usize;
    let at = (slot.channel as usize * nranks as usize + slot.peer as usize) * one;
    let pos = at + if slot.recv { half } else { 0 };
    let old = read_conn(&table[pos..pos + one]);
    let conn = DevConn {
        buff: fifo + layout.slots_offset(),
        head: fifo + FifoLayout::HEAD,
        tail: fifo + FifoLayout::TAIL,
        slot_bytes: layout.slot_bytes,
        nslots: layout.nslots,
        tail_mirror: if slot.recv { 0 } else { old.0 },
        head_seen: if slot.recv { 0 } else { old.1 },
        sizes: if sizes { fifo + FifoLayout::SIZES } else { 0 },
        ..DevConn::default()
    };
    table[pos..pos + one].copy_from_slice(&conn.to_bytes());
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
        // SAFETY: ours; the transport dropped the proxy and waited for its kernels first.
        unsafe { self.api.host_free(self.host) };
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
    use std::mem::offset_of;

    fn field(table: &[u8], pos: usize, off: usize) -> u64 {
        u64::from_le_bytes(table[pos + off..pos + off + 8].try_into().unwrap())
    }

    /// A host-memory FIFO replaces one entry: the send side keeps its sender-local counter
    /// copies and gets byte counts when asked; the receive side keeps nothing of P2P's; LL stays
    /// off; every other entry is untouched.
    #[test]
    fn patching_one_entry_keeps_sender_counters_and_nothing_else() {
        let g = FifoGeometry::default();
        let (rank, nranks) = (0u32, 3u32);
        let peers: Vec<DevicePtr> = vec![0x10_0000, 0x20_0000, 0x30_0000];
        let table = g.conn_table(rank, nranks, peers[0], &peers, 0x9000_0000, true);
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
            point_conn_at(&mut patched, &g, nranks, slot, 0x7000, layout, !recv);
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
