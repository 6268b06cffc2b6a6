//! NCCL 2.28's device API: symmetric windows mapped flat over the load/store-accessible (LSA)
//! team, and device communicators whose barriers and resource buffers kernels compiled against
//! NVIDIA's `nccl_device.h` use directly.
//!
//! [`Communicator::register_window`] and [`Communicator::create_dev_comm`] are the safe API;
//! the C layer (`ncclCommWindowRegister`, `ncclDevCommCreate`) runs the same steps
//! (`shared::register_window`, `shared::create_dev_comm`) on its own per-communicator
//! `DeviceApi`.

#[cfg(feature = "dispatch")]
pub mod gin;
#[cfg(not(feature = "dispatch"))]
#[allow(dead_code, unreachable_pub)]
mod gin;
pub mod layout;
#[cfg(feature = "dispatch")]
pub mod memory;
#[cfg(not(feature = "dispatch"))]
#[allow(dead_code, unreachable_pub)]
pub(crate) mod memory;
#[cfg(feature = "dispatch")]
pub mod shared;
#[cfg(not(feature = "dispatch"))]
#[allow(dead_code, unreachable_pub)]
mod shared;

use crate::buffer::DeviceBuffer;
use crate::comm::Communicator;
use crate::dispatch::CommOps;
use crate::element::Element;
use crate::error::Result;
use layout::ncclDevComm_t;
use memory::{DeviceApi, RegisteredWindow};
use oxccl_core::backend::DevicePtr;
pub use oxccl_core::comm::symmetric::LsaTeam;
pub use shared::DevCommRequirements;
use shared::MadeDevComm;

/// A buffer registered as a symmetric window ([`Communicator::register_window`]): every LSA
/// rank's buffer of the same registration is reachable from this rank's kernels at
/// [`SymmetricWindow::lsa_ptr`]. Dropping it deregisters it on this rank.
#[derive(Debug)]
pub struct SymmetricWindow<'a> {
    comm: &'a Communicator,
    handle: DevicePtr,
    team: LsaTeam,
    base: Option<(u64, u64)>,
}

impl SymmetricWindow<'_> {
    /// The window's descriptor (`ncclWindow_t`) for kernels built against `nccl_device.h`.
    pub fn handle(&self) -> u64 {
        self.handle
    }

    /// This rank's LSA team.
    pub fn team(&self) -> LsaTeam {
        self.team
    }

    /// Where LSA rank `lsa_rank`'s buffer is mapped for this rank's kernels (`None` on a backend
    /// without flat mappings, or for a rank outside the team).
    pub fn lsa_ptr(&self, lsa_rank: u32) -> Option<u64> {
        let (base, stride) = self.base?;
        (lsa_rank < self.team.size).then(|| base + u64::from(lsa_rank) * stride)
    }
}

impl Drop for SymmetricWindow<'_> {
    fn drop(&mut self) {
        if let Some(api) = self.comm.api_state().as_mut() {
            // SAFETY: the window borrowed the buffer and the communicator; work queued on the
            // communicator's streams that used it is the caller's to have finished (the same
            // rule as for the buffer itself).
            let _ = unsafe { api.remove_window(self.handle) };
        }
    }
}

/// A device communicator ([`Communicator::create_dev_comm`]); [`DevComm::raw`] is what a kernel
/// built against `nccl_device.h` takes by value. Dropping it frees its resources on this rank.
#[derive(Debug)]
pub struct DevComm<'a> {
    comm: &'a Communicator,
    made: MadeDevComm,
    places: Vec<shared::ResourcePlace>,
    handles: Vec<u32>,
}

impl DevComm<'_> {
    /// NCCL's `ncclDevComm`.
    pub fn raw(&self) -> &ncclDevComm_t {
        &self.made.raw
    }

    /// The handle (`ncclDevResourceHandle_t`) of each requested resource buffer, in order.
    pub fn resource_handles(&self) -> &[u32] {
        &self.handles
    }

    /// The first GIN signal and counter id of each requested resource buffer, in order
    /// (relative to the device communicator's, as `outGinSignalStart` and `outGinCounterStart`).
    pub fn resource_gin_starts(&self) -> Vec<(u32, u32)> {
        (self.places.iter())
            .map(|p| (p.gin_signal0, p.gin_counter0))
            .collect()
    }
}

impl Drop for DevComm<'_> {
    fn drop(&mut self) {
        let res = self.made.raw.resourceWindow as u64;
        if res == 0 {
            return;
        }
        if let Some(api) = self.comm.api_state().as_mut() {
            // SAFETY: as for `SymmetricWindow`'s drop.
            let _ = unsafe { api.remove_resources(res) };
        }
    }
}

impl Communicator {
    /// This rank's load/store-accessible team: the consecutive ranks of its host whose memory
    /// its kernels can reach.
    pub fn lsa_team(&self) -> Result<LsaTeam> {
        Ok(self.comm.lsa_team()?)
    }

    /// Registers `buf` as a symmetric window (`ncclCommWindowRegister` with
    /// `NCCL_WIN_COLL_SYMMETRIC`). Collective: every rank registers its buffer of the same
    /// role, in the same order (calls from several threads of one rank take turns); ranks
    /// driven by one thread must get a thread each.
    pub fn register_window<'a, T: Element>(
        &'a self,
        buf: &'a DeviceBuffer<T>,
    ) -> Result<SymmetricWindow<'a>> {
        let bytes = buf.len() * size_of::<T>();
        let team = self.comm.lsa_team()?;
        let _order = self.collective_order();
        // SAFETY: the window borrows `buf`, so it stays allocated until the window is dropped.
        let handle = unsafe {
            shared::register_window(
                &self.comm,
                buf.as_raw(),
                bytes,
                shared::NCCL_WIN_COLL_SYMMETRIC,
                Box::new(|f| self.with_api(f)),
            )
        }?;
        let base = self
            .api_state()
            .as_ref()
            .and_then(|a| a.window(handle))
            .and_then(RegisteredWindow::flat)
            .map(|f| (f.base, f.stride));
        Ok(SymmetricWindow {
            comm: self,
            handle,
            team,
            base,
        })
    }

    /// Creates a device communicator (`ncclDevCommCreate`). Collective, like
    /// [`Communicator::register_window`].
    pub fn create_dev_comm(&self, req: &DevCommRequirements) -> Result<DevComm<'_>> {
        let backend = self.device.runtime.backend.clone();
        let _order = self.collective_order();
        let (made, places) =
            shared::create_dev_comm(&self.comm, &backend, req, Box::new(|f| self.with_api(f)))?;
        Ok(DevComm {
            comm: self,
            made,
            handles: places.iter().map(|p| p.handle).collect(),
            places,
        })
    }

    /// Orders this rank's device-API collectives.
    fn collective_order(&self) -> std::sync::MutexGuard<'_, ()> {
        self.device_api_order
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The communicator's device API state (`None` until first used).
    fn api_state(&self) -> std::sync::MutexGuard<'_, Option<DeviceApi>> {
        self.device_api.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the communicator's device API state, made on first use.
    fn with_api(
        &self,
        f: &mut dyn FnMut(&mut DeviceApi) -> oxccl_core::Result<()>,
    ) -> oxccl_core::Result<()> {
        let mut g = self.api_state();
        if g.is_none() {
            *g = Some(DeviceApi::new(
                self.comm.clone(),
                self.device.runtime.backend.clone(),
            )?);
        }
        f(g.as_mut().expect("made above"))
    }
}
