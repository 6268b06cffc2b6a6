//! The steps the safe API and the C layer share: registering a window and creating a device
//! communicator on a communicator's [`DeviceApi`], whatever lock guards it.

use super::layout::{
    NCCL_GIN_MAX_CONTEXTS, idiv_rcp32, ncclDevComm_t, ncclGinBarrierHandle_t,
    ncclLsaBarrierHandle_t, ncclMultimemHandle_t, ncclWindow_vidmem,
};
use super::memory::DeviceApi;
use crate::dispatch::{AnyBackend, AnyComm, CommOps, RuntimeBackend};
use oxccl_core::backend::DevicePtr;
use oxccl_core::comm::symmetric::LsaTeam;
use oxccl_core::{Error, Result};
use std::ffi::c_int;
use std::sync::Arc;

/// `NCCL_WIN_COLL_SYMMETRIC`.
pub const NCCL_WIN_COLL_SYMMETRIC: i32 = 1;

/// Resource handles count units of this many bytes (`ncclGetResourceBufferOffset`).
pub const RESOURCE_UNIT: usize = 128;

/// Bytes of `n` LSA barriers over a team of `ranks`: per barrier three epochs and an inbox per
/// rank, in 32-bit words (NCCL's layout, which its inline functions index).
pub fn lsa_barrier_bytes(ranks: usize, n: usize) -> usize {
    (3 * n + n * ranks) * size_of::<u32>()
}

/// Bytes of `n` rail barriers over GIN (sized as NCCL's, even where GIN is refused).
pub fn rail_barrier_bytes(n: usize) -> usize {
    n * NCCL_GIN_MAX_CONTEXTS * size_of::<u32>()
}

/// What a device communicator is created with (NCCL's requirements, less what oxccl refuses).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DevCommRequirements {
    /// LSA barriers of the device communicator itself (`lsaBarrierCount`).
    pub lsa_barriers: u32,
    /// Rail barriers, sized but unusable without GIN (`railGinBarrierCount`).
    pub rail_barriers: u32,
    /// The caller's resource buffers as (bytes, alignment), in list order.
    pub resources: Vec<(usize, usize)>,
}

/// A created device communicator (the handles of the requested resources come beside it).
#[derive(Debug, Clone, Copy)]
pub struct MadeDevComm {
    /// What kernels take by value.
    pub raw: ncclDevComm_t,
}

/// Runs `f` on a communicator's [`DeviceApi`] under whatever lock guards it.
pub type WithApi<'a> = dyn FnOnce(&mut dyn FnMut(&mut DeviceApi) -> Result<()>) -> Result<()> + 'a;

/// Registers the `size` bytes at `ptr` as a window of `comm`: maps them flat over the LSA team
/// where the backend can (collective: every rank calls it) and records the window in `api`'s
/// table. Returns the window's descriptor address (`ncclWindow_t`).
///
/// # Safety
/// `ptr` stays allocated until the window is removed and nothing uses it afterwards.
pub unsafe fn register_window(
    comm: &AnyComm,
    ptr: DevicePtr,
    size: usize,
    flags: i32,
    with_api: Box<WithApi<'_>>,
) -> Result<DevicePtr> {
    let flat = if comm.flat_mapping() {
        // SAFETY: the caller's contract.
        Some(unsafe { comm.map_flat(ptr, size as u64) }?)
    } else {
        None
    };
    let mut at = None;
    let added = with_api(&mut |api| {
        at = Some(api.add_window(ptr as usize, size, flags, flat)?);
        Ok(())
    });
    match (added, at) {
        (Ok(()), Some(at)) => Ok(at),
        (r, _) => {
            if let Some(f) = &flat {
                // SAFETY: the mapping was never handed out.
                let _ = unsafe { comm.unmap_flat(f) };
            }
            Err(r
                .err()
                .unwrap_or_else(|| Error::Internal("window not recorded".into())))
        }
    }
}

/// Creates a device communicator of `comm` (collective): places the rail barriers, the LSA
/// barriers and `req.resources` in NCCL's order and 128-byte units, allocates and zeroes them
/// with `backend`, maps them flat, records them in `api`, and returns once every rank has
/// zeroed its part. Returns the struct kernels take and each of `req.resources`' handles.
pub fn create_dev_comm(
    comm: &AnyComm,
    backend: &Arc<AnyBackend>,
    req: &DevCommRequirements,
    with_api: Box<WithApi<'_>>,
) -> Result<(MadeDevComm, Vec<u32>)> {
    let lsa = comm.lsa_team()?;
    let mut at = 0usize;
    let mut place = |bytes: usize, align: usize| {
        at = at.next_multiple_of(align.max(RESOURCE_UNIT));
        let h = (at / RESOURCE_UNIT) as u32;
        at += bytes;
        h
    };
    let mut dc = empty_dev_comm(comm, lsa);
    dc.railGinBarrier.bufHandle = place(
        rail_barrier_bytes(req.rail_barriers as usize),
        align_of::<u32>(),
    );
    dc.lsaBarrier = ncclLsaBarrierHandle_t {
        bufHandle: place(
            lsa_barrier_bytes(lsa.size as usize, req.lsa_barriers as usize),
            align_of::<u32>(),
        ),
        nBarriers: c_int::try_from(req.lsa_barriers)
            .map_err(|_| Error::arg("too many LSA barriers"))?,
    };
    let handles: Vec<u32> = req.resources.iter().map(|&(b, a)| place(b, a)).collect();
    let total = at.next_multiple_of(RESOURCE_UNIT);
    let device = comm.device();
    let memory = if total > 0 {
        let memory = backend.mem_alloc(device, total)?;
        let mapped = (|| {
            // SAFETY: `memory` holds `total` bytes of `device` that nothing uses yet.
            unsafe { backend.copy_to_device(device, memory, &vec![0u8; total]) }?;
            if comm.flat_mapping() {
                // SAFETY: the memory lives until the device communicator is destroyed.
                Ok(Some(unsafe { comm.map_flat(memory, total as u64) }?))
            } else {
                Ok(None)
            }
        })();
        match mapped {
            Ok(flat) => Some((memory, flat)),
            Err(e) => {
                // SAFETY: nothing was handed out.
                let _ = unsafe { backend.mem_free(memory) };
                return Err(e);
            }
        }
    } else {
        None
    };
    let recorded = with_api(&mut |api| {
        if let Some((memory, flat)) = memory {
            let (win, inlined) = api.add_resources(memory, flat)?;
            dc.resourceWindow = win as usize as *mut ncclWindow_vidmem;
            dc.resourceWindow_inlined = inlined;
        }
        dc.windowTable = api.window_table()? as usize as *mut _;
        Ok(())
    });
    if let Err(e) = recorded {
        if let Some((memory, flat)) = memory
            && dc.resourceWindow.is_null()
        {
            if let Some(f) = &flat {
                // SAFETY: never handed out.
                let _ = unsafe { comm.unmap_flat(f) };
            }
            // SAFETY: as above.
            let _ = unsafe { backend.mem_free(memory) };
        }
        return Err(e);
    }
    // Every rank's barriers are zero before any rank's kernel can reach them.
    comm.host_barrier()?;
    Ok((MadeDevComm { raw: dc }, handles))
}

/// A device communicator of `comm` with no resources yet.
fn empty_dev_comm(comm: &AnyComm, lsa: LsaTeam) -> ncclDevComm_t {
    let n = comm.nranks() as u32;
    ncclDevComm_t {
        rank: comm.rank() as c_int,
        nRanks: n as c_int,
        nRanks_rcp32: idiv_rcp32(n),
        lsaRank: lsa.rank as c_int,
        lsaSize: lsa.size as c_int,
        lsaSize_rcp32: idiv_rcp32(lsa.size),
        windowTable: std::ptr::null_mut(),
        resourceWindow: std::ptr::null_mut(),
        resourceWindow_inlined: ncclWindow_vidmem::default(),
        lsaMultimem: ncclMultimemHandle_t {
            mcBasePtr: std::ptr::null_mut(),
        },
        lsaBarrier: ncclLsaBarrierHandle_t::default(),
        railGinBarrier: ncclGinBarrierHandle_t::default(),
        ginContextCount: 0,
        ginTypes: [0; 4],
        ginHandles: [std::ptr::null_mut(); 4],
        ginSignalBase: 0,
        ginSignalCount: 0,
        ginCounterBase: 0,
        ginCounterCount: 0,
        ginSignalShadows: std::ptr::null_mut(),
    }
}
