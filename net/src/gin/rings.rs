//! The host's side of one GIN context's descriptor rings, shared by both engines (over a
//! [`Net`](crate::Net), or over a GIN plugin): taking each complete descriptor out of a
//! destination's ring in order, then reporting it done locally (its counter, then the ring's
//! consumer index `cis`, which frees the slot for the device).

use super::engine::ContextMem;
use super::gfd::{self, Gfd, Signal};
use super::{DeviceCells, GinMemory};
use oxccl_core::error::{Error, Result};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// The consumer side of a context's rings on one rank.
pub(crate) struct Rings {
    pub(crate) mem: ContextMem,
    rank: usize,
    /// Per destination: the next slot to consume.
    seen: Vec<u32>,
    /// Per destination: descriptors done locally (what `cis` says, once published).
    done: Vec<u32>,
    /// Per destination: `done` moved since `cis` was last written.
    unpublished: Vec<bool>,
    /// Where the words lie when on the device (`mem.device_cells`), and what writes them.
    device: Option<(Arc<dyn GinMemory>, DeviceCells)>,
}

impl Rings {
    /// The rings of rank `rank` among `nranks`, in `mem`; `memory` writes the consumer
    /// indices, counters and signals when `mem` keeps them on the device.
    pub(crate) fn new(
        mem: ContextMem,
        rank: usize,
        nranks: usize,
        memory: Option<Arc<dyn GinMemory>>,
    ) -> Result<Rings> {
        if !mem.queue_size.is_power_of_two() {
            return Err(Error::arg(format!(
                "a GIN queue of {} slots is not a power of two",
                mem.queue_size
            )));
        }
        let device = match (mem.device_cells, memory) {
            (None, _) => None,
            (Some(cells), Some(m)) => Some((m, cells)),
            (Some(_), None) => {
                return Err(Error::Internal(
                    "a GIN context with its words on the device, for an engine that cannot write them".into(),
                ));
            }
        };
        Ok(Rings {
            mem,
            rank,
            seen: vec![0; nranks],
            done: vec![0; nranks],
            unpublished: vec![false; nranks],
            device,
        })
    }

    /// Whether a complete descriptor waits in `peer`'s ring.
    pub(crate) fn posted(&self, peer: usize) -> bool {
        let slot = self.mem.slot(peer, self.seen[peer]);
        gfd::complete(&slot.map(|w| w.load(Ordering::Acquire)))
    }

    /// Where the next descriptor of `peer`'s ring lies among all slots (`peer * queue_size +
    /// index`): a slot of the host's own keyed like it (the inline values) is free until that
    /// descriptor is done.
    pub(crate) fn next_slot(&self, peer: usize) -> usize {
        peer * self.mem.queue_size as usize + (self.seen[peer] % self.mem.queue_size) as usize
    }

    /// The next complete descriptor of `peer`'s ring, taken out of it.
    pub(crate) fn take(&mut self, peer: usize) -> Result<Option<Gfd>> {
        let slot = self.mem.slot(peer, self.seen[peer]);
        let words = slot.map(|w| w.load(Ordering::Acquire));
        if !gfd::complete(&words) {
            return Ok(None);
        }
        let g = gfd::decode(&words).map_err(|e| {
            Error::Internal(format!(
                "rank {}: GIN descriptor {} for rank {peer}: {e}",
                self.rank, self.seen[peer]
            ))
        })?;
        // Cleared before `cis` frees the slot, so the device's next descriptor is all new.
        for w in slot {
            w.store(0, Ordering::Relaxed);
        }
        tracing::trace!(target: "oxccl::net",
            "GIN rank {}: descriptor {} for rank {peer}: {} B, signal {:?}, counter {:?}",
            self.rank, self.seen[peer], g.size, signal_add(&g), g.counter);
        self.seen[peer] = self.seen[peer].wrapping_add(1);
        Ok(Some(g))
    }

    /// Bumps `counter` (when the descriptor has one in range): its source was consumed.
    pub(crate) fn count(&self, counter: Option<u16>) -> Result<()> {
        let Some(c) = counter.map(usize::from).filter(|&c| c < self.mem.ncounters) else {
            return Ok(());
        };
        match &self.device {
            Some((d, cells)) => d.add_word64(cells.counters + 8 * c as u64, 1),
            None => {
                self.mem
                    .word64(self.mem.counters, c)
                    .fetch_add(1, Ordering::Release);
                Ok(())
            }
        }
    }

    /// The oldest descriptor of `peer` not yet done is done: `cis` moves past it.
    pub(crate) fn advance(&mut self, peer: usize) -> Result<()> {
        self.done[peer] = self.done[peer].wrapping_add(1);
        self.write_ci(peer)
    }

    /// A descriptor is done locally: its counter now, `cis` at the next [`Rings::publish`]
    /// (one write per ring for a pass's descriptors).
    pub(crate) fn finish_later(&mut self, peer: usize, counter: Option<u16>) -> Result<()> {
        self.count(counter)?;
        self.done[peer] = self.done[peer].wrapping_add(1);
        self.unpublished[peer] = true;
        Ok(())
    }

    /// Writes `cis` of every ring that [`Rings::finish_later`] moved.
    pub(crate) fn publish(&mut self) -> Result<()> {
        for peer in 0..self.done.len() {
            if std::mem::take(&mut self.unpublished[peer]) {
                self.write_ci(peer)?;
            }
        }
        Ok(())
    }

    fn write_ci(&self, peer: usize) -> Result<()> {
        match &self.device {
            Some((d, cells)) => d.set_word32(cells.cis + 4 * peer as u64, self.done[peer]),
            None => {
                self.mem.ci(peer).store(self.done[peer], Ordering::Release);
                Ok(())
            }
        }
    }

    /// Adds each `value` to signal `id` (checked by [`Rings::check_signal`]) of `adds`, after
    /// every window write before them: on the device, with one read-back for all of them.
    pub(crate) fn add_signals(&self, adds: &[(usize, u64)]) -> Result<()> {
        match &self.device {
            Some((d, cells)) => {
                let words: Vec<(u64, u64)> = adds
                    .iter()
                    .map(|&(id, v)| (cells.signals + 8 * id as u64, v))
                    .collect();
                d.add_words64(&words)
            }
            None => {
                for &(id, value) in adds {
                    self.mem
                        .word64(self.mem.signals, id)
                        .fetch_add(value, Ordering::Release);
                }
                Ok(())
            }
        }
    }

    /// Checks signal `id` against the context's signals.
    pub(crate) fn check_signal(&self, id: u16) -> Result<usize> {
        let id = usize::from(id);
        if id >= self.mem.nsignals {
            return Err(Error::Internal(format!(
                "a GIN signal {id} beyond the {} signals",
                self.mem.nsignals
            )));
        }
        Ok(id)
    }
}

/// The signal a descriptor applies at its destination: id and value added.
pub(crate) fn signal_add(g: &Gfd) -> Option<(u16, u64)> {
    g.signal.map(|s| match s {
        Signal::Inc(id) => (id, 1),
        Signal::Add(id, value) => (id, value),
    })
}
