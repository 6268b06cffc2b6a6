//! Symmetric memory of NCCL's device API: the load/store-accessible (LSA) team, and windows
//! mapped flat, every LSA rank's buffer at a fixed stride of one address range, so that device
//! code finds a peer's copy by arithmetic alone.

use super::Communicator;
use crate::backend::{Backend, DevicePtr, ShareableHandle};
use crate::bootstrap::Bootstrap;
use crate::error::{Error, Result};
use std::sync::Arc;

/// Address space between two LSA ranks' copies of a window is a multiple of this (the device
/// API's `stride4G` counts it).
pub const FLAT_STRIDE_UNIT: u64 = 1 << 32;

/// This rank's load/store-accessible team: consecutive world ranks on one host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LsaTeam {
    /// This rank's index in the team.
    pub rank: u32,
    /// Ranks in the team.
    pub size: u32,
}

/// A window mapped flat on this rank: LSA rank `i`'s buffer starts at `base + i * stride`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlatWindow {
    /// LSA rank 0's copy of the buffer.
    pub base: DevicePtr,
    /// Bytes between two ranks' copies (a multiple of [`FLAT_STRIDE_UNIT`]).
    pub stride: u64,
    /// The team the window spans.
    pub lsa: LsaTeam,
    /// The smallest buffer any rank of the team registered, in bytes.
    pub size: u64,
    /// Start of the mapped range (for [`Communicator::unmap_flat`]).
    range: DevicePtr,
}

/// What each rank tells the others about its buffer.
struct Offer {
    /// Offset of the buffer in its allocation.
    offset: u64,
    /// Size of that allocation.
    alloc_size: u64,
    /// Bytes registered.
    size: u64,
    handle: ShareableHandle,
}

impl Offer {
    fn encode(r: &Result<Offer>) -> Vec<u8> {
        let Ok(o) = r else { return Vec::new() };
        let mut v = Vec::with_capacity(24 + o.handle.0.len());
        for x in [o.offset, o.alloc_size, o.size] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v.extend_from_slice(&o.handle.0);
        v
    }

    /// `None` for a rank that could not offer its buffer.
    fn decode(b: &[u8]) -> Option<Offer> {
        let at = |i: usize| {
            b.get(i * 8..i * 8 + 8)
                .map(|s| u64::from_le_bytes(s.try_into().unwrap()))
        };
        Some(Offer {
            offset: at(0)?,
            alloc_size: at(1)?,
            size: at(2)?,
            handle: ShareableHandle(b.get(24..)?.to_vec()),
        })
    }
}

impl<B: Backend> Communicator<B> {
    /// This rank's LSA team (NCCL's rule: equal runs of consecutive ranks on one host).
    pub fn lsa_team(&self) -> Result<LsaTeam> {
        let c = self.connected()?;
        let size = c
            .hosts
            .as_ref()
            .map_or(self.inner.nranks, |h| h.lsa_size())
            .max(1);
        Ok(LsaTeam {
            rank: self.inner.rank % size,
            size,
        })
    }

    /// Maps the `size` bytes at `ptr` of every rank of this rank's LSA team flat (see
    /// [`FlatWindow`]). Collective: every rank calls it, in the same order as the other
    /// collective calls of the communicator. `ptr` must come from `mem_alloc` (`ncclMemAlloc`)
    /// at the same offset of its allocation on every rank of the team.
    ///
    /// # Safety
    /// `ptr` stays allocated until [`Communicator::unmap_flat`] and no rank's work uses the
    /// window after that.
    pub unsafe fn map_flat(&self, ptr: DevicePtr, size: u64) -> Result<FlatWindow> {
        let c = self.connected()?;
        let lsa = self.lsa_team()?;
        let backend = &self.inner.backend;
        let mine = (|| {
            let info = backend.pointer_info(ptr)?;
            // SAFETY: the caller keeps `ptr` allocated while the window lives.
            let handle = unsafe { backend.export_handle(ptr) }.map_err(|e| {
                Error::usage(format!(
                    "the window at {ptr:#x} cannot be mapped by its peers ({e}); allocate symmetric windows with ncclMemAlloc"
                ))
            })?;
            Ok(Offer {
                offset: ptr - info.base,
                alloc_size: info.size as u64,
                size,
                handle,
            })
        })();
        // Every rank takes part in the exchange even when its own offer failed, so that its
        // peers learn of the failure instead of waiting for it.
        let all = c.bootstrap.all_gather(&Offer::encode(&mine))?;
        let mine = mine?;
        let first = self.inner.rank - lsa.rank;
        let mut team = Vec::with_capacity(lsa.size as usize);
        for r in first..first + lsa.size {
            let o = Offer::decode(&all[r as usize]).ok_or_else(|| {
                Error::usage(format!(
                    "rank {r} could not register its part of a symmetric window (its error says why)"
                ))
            })?;
            if o.offset != mine.offset {
                return Err(Error::usage(format!(
                    "rank {r} registered its symmetric window at offset {} of its allocation and rank {} at offset {}: every rank must register the same offset of an ncclMemAlloc allocation",
                    o.offset, self.inner.rank, mine.offset
                )));
            }
            team.push(o);
        }
        let widest = team.iter().map(|o| o.alloc_size).max().unwrap_or(0);
        let stride = widest.div_ceil(FLAT_STRIDE_UNIT).max(1) * FLAT_STRIDE_UNIT;
        let handles: Vec<ShareableHandle> = team.iter().map(|o| o.handle.clone()).collect();
        let stride_bytes = usize::try_from(stride)
            .map_err(|_| Error::usage("symmetric window stride exceeds the address space"))?;
        // SAFETY: every rank keeps its buffer allocated while the window lives (the caller's
        // contract, on each rank).
        let range = unsafe { backend.map_flat(self.inner.device, &handles, stride_bytes) }?;
        Ok(FlatWindow {
            base: range + mine.offset,
            stride,
            lsa,
            size: team.iter().map(|o| o.size).min().unwrap_or(0),
            range,
        })
    }

    /// Releases this rank's mapping of `w`.
    ///
    /// # Safety
    /// No queued or running work of this rank uses the window any more.
    pub unsafe fn unmap_flat(&self, w: &FlatWindow) -> Result<()> {
        // SAFETY: the caller's contract.
        unsafe { self.inner.backend.unmap_flat(w.range) }
    }

    /// Returns once every rank called it (a bootstrap barrier).
    pub fn host_barrier(&self) -> Result<()> {
        self.connected()?.bootstrap.barrier()
    }

    /// The bootstrap, for connections the device API makes itself (GIN's).
    pub fn bootstrap(&self) -> Result<Arc<Bootstrap>> {
        Ok(self.connected()?.bootstrap.clone())
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::Backend;
    use crate::testing::on_host_ranks;

    /// Ranks registering their windows at different offsets of their allocations all get a
    /// sentence naming both offsets, instead of a mapping that would put a peer's data at the
    /// wrong address; with equal offsets the host backend says it has no flat mappings.
    #[test]
    fn mismatched_offsets_and_a_backend_without_mappings_are_refused() {
        let out = on_host_ranks(
            2,
            |_| {},
            |rank, comm, _| {
                let b = comm.backend();
                let mem = b.mem_alloc(0, 4096).unwrap();
                let skew = if rank == 1 { 128 } else { 0 };
                // SAFETY: the allocation outlives both calls, and nothing is mapped from it.
                let mismatched = unsafe { comm.map_flat(mem + skew, 1024) }.unwrap_err();
                // SAFETY: as above.
                let unmappable = unsafe { comm.map_flat(mem, 1024) }.unwrap_err();
                // SAFETY: nothing uses the allocation any more.
                unsafe { b.mem_free(mem) }.unwrap();
                (mismatched.to_string(), unmappable.to_string())
            },
        );
        for (mismatched, unmappable) in out {
            assert!(
                mismatched.contains("offset 128") && mismatched.contains("offset 0"),
                "{mismatched}"
            );
            assert!(unmappable.contains("no symmetric memory"), "{unmappable}");
        }
    }
}
