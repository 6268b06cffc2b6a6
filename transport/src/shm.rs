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
use crate::ll_area::{LlArea, ll_counters, point_ll_at};
use crate::net::{ConnSlot, DevFifo, alias_channels, fifo_layout, point_conn_at};
use oxccl_core::backend::DevicePtr;
use oxccl_core::bootstrap::Bootstrap;
use oxccl_core::error::{Error, Result};
use oxccl_core::shm_segment::ShmSegment;
use oxccl_kernel_abi::FifoGeometry;
use oxccl_net::proxy::FifoLayout;

/// Bytes of one SHM FIFO: the Simple part ([`FifoLayout`]), then its [`LlArea`].
fn shm_fifo_bytes(layout: &FifoLayout, ll: &LlArea) -> u64 {
    layout.bytes() + ll.bytes()
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
        let simple = |fifo: DevicePtr| DevFifo::contiguous(fifo, &self.layout);
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
                let keep_send = ll_counters(table, geometry, nranks, send);
                let keep_recv = ll_counters(table, geometry, nranks, recv);
                let mine = at(own, i, c);
                point_conn_at(
                    table,
                    geometry,
                    nranks,
                    recv,
                    simple(mine),
                    self.layout,
                    false,
                );
                let ll_mine = mine + simple_bytes;
                point_ll_at(table, geometry, nranks, recv, ll_mine, self.ll, keep_recv);
                let fifo = at(theirs.dev, *idx, c);
                point_conn_at(
                    table,
                    geometry,
                    nranks,
                    send,
                    simple(fifo),
                    self.layout,
                    false,
                );
                let ll_theirs = fifo + simple_bytes;
                point_ll_at(table, geometry, nranks, send, ll_theirs, self.ll, keep_send);
            }
            alias_channels(table, geometry, nranks, peer, self.channels);
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
