//! `ncclCommSplit` and `ncclCommShrink`: new communicators from subsets of ranks.

use super::{Communicator, Connected, SPLIT_NOCOLOR, State, TAG_SHRINK, TAG_SPLIT};
use crate::backend::Backend;
use crate::bootstrap::{BootstrapOptions, UniqueId};
use crate::config::CommConfig;
use crate::error::{Error, Result};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tracing::debug;

impl<B: Backend> Communicator<B> {
    /// `ncclCommSplit`: ranks with the same `color` form a new communicator, ordered by `key`
    /// then old rank. `SPLIT_NOCOLOR` takes part but gets `None`. Collective over all ranks.
    pub fn split(
        &self,
        color: i32,
        key: i32,
        config: Option<CommConfig>,
    ) -> Result<Option<Communicator<B>>> {
        if color < SPLIT_NOCOLOR {
            return Err(Error::arg(format!(
                "invalid split color {color}: must be >= 0 or NCCL_SPLIT_NOCOLOR"
            )));
        }
        let c = self.connected()?;
        let split = self.inner.splits.fetch_add(1, Ordering::Relaxed);
        let mut mine = color.to_le_bytes().to_vec();
        mine.extend_from_slice(&key.to_le_bytes());
        let all = c.bootstrap.all_gather(&mine)?;
        if color == SPLIT_NOCOLOR {
            return Ok(None);
        }
        let mut members: Vec<(i32, u32)> = Vec::new();
        for (r, bytes) in all.iter().enumerate() {
            if bytes.len() != 8 {
                return Err(Error::Internal("malformed split message".into()));
            }
            let col = i32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
            let k = i32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
            if col == color {
                members.push((k, r as u32));
            }
        }
        members.sort();
        let ranks: Vec<u32> = members.iter().map(|&(_, r)| r).collect();
        let config = config.unwrap_or_else(|| self.inner.config.clone());
        self.subset(&c, &ranks, TAG_SPLIT + split, config).map(Some)
    }

    /// `ncclCommShrink`: the ranks not in `exclude` form a new communicator, in old rank order.
    /// Only surviving ranks call it; excluded ranks may be dead.
    pub fn shrink(&self, exclude: &[u32], config: Option<CommConfig>) -> Result<Communicator<B>> {
        if exclude.contains(&self.inner.rank) {
            return Err(Error::arg("this rank is in its own exclude list"));
        }
        if let Some(bad) = exclude.iter().find(|&&r| r >= self.inner.nranks) {
            return Err(Error::arg(format!("excluded rank {bad} is out of range")));
        }
        let c = self.connected_or_failed()?;
        // Excluded ranks do not take part, so the tag must not depend on a counter they share:
        // survivors agree on the exclude list and on how many shrinks they did together.
        let shrink = self.inner.shrinks.fetch_add(1, Ordering::Relaxed);
        let excluded = exclude
            .iter()
            .fold(0u64, |h, &r| h.rotate_left(7) ^ u64::from(r));
        let tag = TAG_SHRINK + ((excluded & 0xff_ffff) << 16) + (shrink & 0xffff);
        let ranks: Vec<u32> = (0..self.inner.nranks)
            .filter(|r| !exclude.contains(r))
            .collect();
        let config = config.unwrap_or_else(|| self.inner.config.clone());
        self.subset(&c, &ranks, tag, config)
    }

    /// Shrink must work on a communicator whose peer died: skip the async-error check.
    fn connected_or_failed(&self) -> Result<Arc<Connected<B>>> {
        let state = self.inner.state.lock().unwrap_or_else(|p| p.into_inner());
        match &*state {
            State::Ready(c) => Ok(c.clone()),
            _ => {
                drop(state);
                self.connected()
            }
        }
    }

    /// Builds a communicator of `ranks` (old rank numbers, in new rank order): the first one
    /// creates a unique id and sends it to the others over the old bootstrap network.
    fn subset(
        &self,
        c: &Connected<B>,
        ranks: &[u32],
        tag: u64,
        config: CommConfig,
    ) -> Result<Communicator<B>> {
        let me = self.inner.rank;
        let new_rank = ranks
            .iter()
            .position(|&r| r == me)
            .ok_or_else(|| Error::Internal("rank missing from its own subset".into()))?;
        let id = if new_rank == 0 {
            let id = UniqueId::generate(&BootstrapOptions::from_env())?;
            for &r in &ranks[1..] {
                c.bootstrap.send(r, tag, &id.0)?;
            }
            id
        } else {
            let bytes = c.bootstrap.recv(ranks[0], tag)?;
            let arr: [u8; 128] = bytes
                .as_slice()
                .try_into()
                .map_err(|_| Error::Internal("malformed unique id from split leader".into()))?;
            UniqueId(arr)
        };
        debug!(target: "oxccl::init", "rank {me} -> rank {new_rank} of {} in a new communicator", ranks.len());
        Communicator::init_rank(
            self.inner.backend.clone(),
            ranks.len(),
            id,
            new_rank,
            self.inner.device,
            config,
        )
    }
}
