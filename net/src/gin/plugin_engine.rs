//! The GIN proxy engine of one GIN context on one rank over a GIN plugin, as NCCL's proxy
//! drives one: each descriptor the device posts becomes one `iput` (or `iputSignal`) on the
//! plugin, to the destination rank (this rank too: the plugin carries puts to itself), and is
//! done locally once the plugin's `test` says so: its counter then, and the ring's `cis` when
//! every older descriptor of that ring is done too (requests may finish out of order).
//!
//! The plugin reads and writes memory it registered: the windows (by the communicator, see
//! [`GinColl::add_window`]), this context's signals (with strong ordering, so a signal lands
//! after its put's data) and an array of inline values, one per ring slot, that inline puts
//! are sent from.

use super::engine::ContextMem;
use super::gfd::{Gfd, Signal};
use super::rings::{Rings, signal_add};
use crate::PTR_HOST;
use crate::plugin::gin::{GinColl, GinRequest, LocalMr, Region, SignalPut};
use crate::plugin::gin_abi::{MR_FLAG_FORCE_SO, SIGNAL_OP_ADD, SIGNAL_OP_INC};
use oxccl_core::error::{Error, Result};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A descriptor the plugin was given.
struct Pending {
    /// `None` once done.
    req: Option<GinRequest>,
    counter: Option<u16>,
}

/// One GIN context's engine on one rank, over a GIN plugin.
pub struct PluginGinEngine {
    coll: Arc<GinColl>,
    rank: usize,
    rings: Rings,
    /// One value per ring slot; the plugin reads them through `inlines_mr`.
    inlines: Box<[AtomicU64]>,
    inlines_mr: Option<LocalMr>,
    signals_mr: Option<LocalMr>,
    /// Per destination: descriptors given to the plugin, oldest first.
    pending: Vec<VecDeque<Pending>>,
}

impl PluginGinEngine {
    /// The engine of rank `rank` among `nranks` on `coll` (this context's collective comm),
    /// with its context's memory `mem`. Registers the signals, then the inline values, as
    /// every rank does in the same order.
    pub fn new(
        coll: Arc<GinColl>,
        rank: usize,
        nranks: usize,
        mem: ContextMem,
    ) -> Result<PluginGinEngine> {
        // The plugin writes the signals itself, in host memory it registered: no memory of
        // ours writes device words here, so `Rings::new` refuses a context that keeps them.
        let rings = Rings::new(mem, rank, nranks, None)?;
        let slots = nranks * mem.queue_size as usize;
        let mut engine = PluginGinEngine {
            coll,
            rank,
            rings,
            inlines: (0..slots).map(|_| AtomicU64::new(0)).collect(),
            inlines_mr: None,
            signals_mr: None,
            pending: (0..nranks).map(|_| VecDeque::new()).collect(),
        };
        // SAFETY: the context's signals outlive its engine (the owner of `mem` drops it after
        // the runner), and the registration goes with the engine.
        engine.signals_mr = Some(unsafe {
            engine.coll.register(
                mem.signals.cast(),
                mem.nsignals * 8,
                PTR_HOST,
                MR_FLAG_FORCE_SO,
            )
        }?);
        let inlines = engine.inlines.as_ptr().cast_mut().cast::<u8>();
        // SAFETY: the boxed array lives as long as the engine, which deregisters it first.
        engine.inlines_mr = Some(unsafe { engine.coll.register(inlines, slots * 8, PTR_HOST, 0) }?);
        Ok(engine)
    }

    /// Moves everything that can move: finished requests, new descriptors. True when anything
    /// did.
    pub fn progress(&mut self) -> Result<bool> {
        let mut moved = false;
        for peer in 0..self.pending.len() {
            moved |= self.complete(peer)?;
            loop {
                let slot = self.rings.next_slot(peer);
                let Some(g) = self.rings.take(peer)? else {
                    break;
                };
                self.issue(peer, slot, &g).map_err(|e| {
                    Error::Internal(format!("rank {}: a GIN put to rank {peer}: {e}", self.rank))
                })?;
                moved = true;
            }
        }
        self.coll.progress()?;
        Ok(moved)
    }

    /// Whether a descriptor waits in a ring or in the plugin.
    pub fn sending(&self) -> bool {
        (0..self.pending.len()).any(|p| self.rings.posted(p) || !self.pending[p].is_empty())
    }

    /// Tests `peer`'s requests; counts the ones done and moves `cis` past the oldest done ones.
    fn complete(&mut self, peer: usize) -> Result<bool> {
        let mut moved = false;
        for p in self.pending[peer].iter_mut() {
            if let Some(req) = &p.req
                && self.coll.test(req)?
            {
                p.req = None;
                self.rings.count(p.counter)?;
                moved = true;
            }
        }
        while self.pending[peer].front().is_some_and(|p| p.req.is_none()) {
            self.pending[peer].pop_front();
            self.rings.advance(peer)?;
        }
        Ok(moved)
    }

    /// Hands descriptor `g` (taken from ring slot `slot`) to the plugin.
    fn issue(&mut self, peer: usize, slot: usize, g: &Gfd) -> Result<()> {
        let signals = self.signals_mr.as_ref().expect("registered in new");
        let signal = match signal_add(g) {
            Some((id, value)) => Some(SignalPut {
                signals,
                offset: self.rings.check_signal(id)? as u64 * 8,
                value,
                op: match g.signal {
                    Some(Signal::Inc(_)) => SIGNAL_OP_INC,
                    _ => SIGNAL_OP_ADD,
                },
            }),
            None => None,
        };
        let src = match (g.inline_value, g.src) {
            (Some(v), _) => {
                // Free until this descriptor is done: the slot's next descriptor waits for it.
                self.inlines[slot].store(v.to_le(), Ordering::Release);
                let mr = self.inlines_mr.as_ref().expect("registered in new");
                (Region::Local(mr), slot as u64 * 8)
            }
            (None, Some((handle, offset))) => (Region::Window(handle), offset),
            (None, None) => (Region::Window(0), 0),
        };
        let dst = (Region::Window(g.dst_handle), g.dst_offset);
        let req = self
            .coll
            .put(src, g.size as usize, dst, peer as u32, signal)?;
        self.pending[peer].push_back(Pending {
            req: Some(req),
            counter: g.counter,
        });
        Ok(())
    }
}

impl Drop for PluginGinEngine {
    fn drop(&mut self) {
        for mr in [self.signals_mr.take(), self.inlines_mr.take()]
            .into_iter()
            .flatten()
        {
            if let Err(e) = self.coll.deregister(mr) {
                tracing::warn!(target: "oxccl::net", "rank {}: {e}", self.rank);
            }
        }
    }
}
