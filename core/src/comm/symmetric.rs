//! Symmetric memory of NCCL's device API: the load/store-accessible (LSA) team, and windows
//! mapped flat, every LSA rank's buffer at a fixed stride of one address range, so that device
//! code finds a peer's copy by arithmetic alone.

use super::Communicator;
use crate::backend::{Backend, DevicePtr, ShareableHandle};
use crate::bootstrap::Bootstrap;
use crate::error::{Error, Result};
use crate::lock::lock;
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
    /// Whether every rank of the communicator mapped the window at the same address, so that
    /// an address in it names the same memory in every process: plans may then read and write
    /// peers' buffers in it directly (zero copy) across processes.
    pub shared: bool,
    /// Start of the mapped range (for [`Communicator::unmap_flat`]).
    range: DevicePtr,
}

/// A buffer in a window every rank mapped at one address, and its address there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SharedBuffer {
    /// The registered buffer, as the caller passed it.
    user: DevicePtr,
    /// Its registered bytes.
    size: u64,
    /// This rank's copy of it in the flat range, the address every peer maps it at too.
    alias: DevicePtr,
    /// The flat range (its key for [`Communicator::unmap_flat`]).
    range: DevicePtr,
}

/// A communicator's buffers in windows mapped at one address on every rank
/// ([`FlatWindow::shared`]).
#[derive(Debug, Default)]
pub(crate) struct SharedBuffers {
    /// Whether one was ever registered. Registrations are collective, so from then on every
    /// rank wraps the same operations into zero-copy plans, whatever its own buffers; each rank's
    /// buffers then only set its exposed flag, which the plan's table exchange compares.
    pub(crate) ever: bool,
    list: Vec<SharedBuffer>,
}

impl SharedBuffers {
    /// The aliases of `(address, bytes)` buffers, when each is null, empty or inside one
    /// shared buffer; `None` otherwise.
    pub(crate) fn aliases<const N: usize>(
        &self,
        bufs: [(DevicePtr, u64); N],
    ) -> Option<[DevicePtr; N]> {
        let mut out = [0; N];
        for (o, (p, bytes)) in out.iter_mut().zip(bufs) {
            if p == 0 {
                continue;
            }
            let b = self.list.iter().find(|b| {
                p >= b.user
                    && p.checked_add(bytes)
                        .is_some_and(|end| end <= b.user + b.size)
            })?;
            *o = b.alias + (p - b.user);
        }
        Some(out)
    }
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
        let device = self.inner.device;
        let map = |at| {
            // SAFETY: every rank keeps its buffer allocated while the window lives (the
            // caller's contract, on each rank).
            unsafe { backend.map_flat(device, &handles, stride_bytes, at) }
        };
        let mut range = map(None)?;
        // Only a single process can't share addresses, and only a team of the whole
        // communicator lets plans (which span it) read every peer directly.
        let agreed = if c.one_process || lsa.size != self.inner.nranks || lsa.size < 2 {
            Ok(false)
        } else {
            agree_on_address(
                &mut |v| c.bootstrap.all_gather_u64(v),
                &mut range,
                // SAFETY: nothing has used the range yet.
                &mut |old| unsafe { backend.unmap_flat(old) },
                &mut |at| map(Some(at)),
                &mut || map(None),
            )
        };
        let shared = match agreed {
            Ok(shared) => shared,
            Err(e) => {
                // SAFETY: nothing has used the range; if the failure already unmapped it, this
                // only reports that it is unknown.
                let _ = unsafe { backend.unmap_flat(range) };
                return Err(e);
            }
        };
        let w = FlatWindow {
            base: range + mine.offset,
            stride,
            lsa,
            size: team.iter().map(|o| o.size).min().unwrap_or(0),
            shared,
            range,
        };
        let note = if shared {
            ", the same address on every rank: collectives on it may read and write peers directly"
        } else {
            ""
        };
        tracing::info!(target: "oxccl::reg",
            "rank {} window {ptr:#x} ({size} B) mapped flat at {range:#x}{note}", self.inner.rank);
        if shared {
            let mut s = lock(&c.shared_buffers);
            s.ever = true;
            s.list.push(SharedBuffer {
                user: ptr,
                size,
                alias: w.base + u64::from(lsa.rank) * stride,
                range,
            });
        }
        Ok(w)
    }

    /// Releases this rank's mapping of `w`.
    ///
    /// # Safety
    /// No queued or running work of this rank uses the window any more.
    pub unsafe fn unmap_flat(&self, w: &FlatWindow) -> Result<()> {
        if w.shared {
            lock(&self.connected()?.shared_buffers)
                .list
                .retain(|b| b.range != w.range);
        }
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

/// Moves this rank's fresh flat range to an address every rank can have, so that one address
/// names the same copy in every process; collective, through `all_gather` (every rank's value,
/// in rank order). Ranks already at one address stay. Otherwise each rank tries the highest
/// start any rank got (`unmap` its range, `map_at` there, `map_anywhere` when that is taken).
/// Returns whether every rank ended at the same address; if not, each keeps a valid range.
fn agree_on_address(
    all_gather: &mut dyn FnMut(u64) -> Result<Vec<u64>>,
    range: &mut DevicePtr,
    unmap: &mut dyn FnMut(DevicePtr) -> Result<()>,
    map_at: &mut dyn FnMut(DevicePtr) -> Result<DevicePtr>,
    map_anywhere: &mut dyn FnMut() -> Result<DevicePtr>,
) -> Result<bool> {
    let starts = all_gather(*range)?;
    if starts.iter().all(|&s| s == *range) {
        return Ok(true);
    }
    let target = starts.iter().copied().max().unwrap_or(*range);
    let moved = if *range == target {
        Ok(true)
    } else {
        unmap(*range).and_then(|()| match map_at(target) {
            Ok(at) => {
                *range = at;
                Ok(true)
            }
            Err(_) => {
                *range = map_anywhere()?;
                Ok(false)
            }
        })
    };
    // Every rank reports, even one that failed, so that none waits for it.
    let all = all_gather(u64::from(matches!(moved, Ok(true))))?;
    moved?;
    Ok(all.iter().all(|&ok| ok == 1))
}

#[cfg(test)]
mod tests {
    use crate::backend::Backend;
    use crate::testing::on_host_ranks;

    use super::agree_on_address;
    use crate::error::{Error, Result};
    use std::sync::{Arc, Barrier, Mutex};

    /// Runs `agree_on_address` on one thread per start address; `taken(rank, at)` says whether
    /// that rank's address space at `at` is in use. Returns each rank's answer and final range.
    fn agree(starts: &[u64], taken: fn(usize, u64) -> bool) -> Vec<(bool, u64)> {
        let n = starts.len();
        let board = Arc::new(Mutex::new(vec![0u64; n]));
        let barrier = Arc::new(Barrier::new(n));
        let threads: Vec<_> = (starts.iter().copied().enumerate())
            .map(|(rank, start)| {
                let (board, barrier) = (board.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let mut all_gather = |v: u64| -> Result<Vec<u64>> {
                        board.lock().unwrap()[rank] = v;
                        barrier.wait();
                        let all = board.lock().unwrap().clone();
                        barrier.wait();
                        Ok(all)
                    };
                    let mut range = start;
                    let mut mapped = Some(start);
                    let mapped = &mut mapped;
                    let ok = agree_on_address(
                        &mut all_gather,
                        &mut range,
                        &mut |old| {
                            assert_eq!(mapped.take(), Some(old), "unmaps what it mapped");
                            Ok(())
                        },
                        &mut |at| {
                            if taken(rank, at) {
                                return Err(Error::Internal("taken".into()));
                            }
                            Ok(at)
                        },
                        &mut || Ok(0x9000 + rank as u64),
                    )
                    .unwrap();
                    (ok, range)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    }

    /// Equal starts are kept; unequal ones move to the highest when every rank can, and when
    /// one cannot every rank hears it and keeps a range of its own.
    #[test]
    fn ranks_agree_on_one_address_or_all_learn_they_did_not() {
        assert_eq!(agree(&[0x5000; 3], |_, _| true), vec![(true, 0x5000); 3]);
        assert_eq!(
            agree(&[0x5000, 0x7000, 0x6000], |_, _| false),
            vec![(true, 0x7000); 3]
        );
        assert_eq!(
            agree(&[0x5000, 0x7000, 0x6000], |rank, _| rank == 2),
            vec![(false, 0x7000), (false, 0x7000), (false, 0x9002)]
        );
    }

    /// A buffer is aliased only when it lies wholly inside a shared buffer; null buffers pass
    /// as 0, and one buffer outside makes the whole call `None`.
    #[test]
    fn buffers_alias_only_inside_shared_windows() {
        let mut s = super::SharedBuffers::default();
        s.list.push(super::SharedBuffer {
            user: 0x1000,
            size: 0x100,
            alias: 0x7_0000_1000,
            range: 0x7_0000_0000,
        });
        assert_eq!(
            s.aliases([(0x1010, 0x10), (0, 0)]),
            Some([0x7_0000_1010, 0])
        );
        assert_eq!(
            s.aliases([(0x1000, 0x100), (0x10ff, 1)]),
            Some([0x7_0000_1000, 0x7_0000_10ff])
        );
        assert_eq!(s.aliases([(0x1000, 0x101)]), None);
        assert_eq!(s.aliases([(0x1000, 8), (0xff8, 8)]), None);
        assert_eq!(s.aliases([(u64::MAX, 2)]), None);
    }

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
