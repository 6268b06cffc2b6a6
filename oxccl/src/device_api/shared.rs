//! The steps the safe API and the C layer share: registering a window and creating a device
//! communicator on a communicator's [`DeviceApi`], whatever lock guards it.

use super::gin::GIN_TYPE_PROXY;
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

/// Bytes of `n` rail barriers over GIN: each barrier's epoch per context (sized as NCCL's,
/// even where GIN does not run).
pub fn rail_barrier_bytes(n: usize) -> usize {
    n * NCCL_GIN_MAX_CONTEXTS * size_of::<u32>()
}

/// What a device communicator is created with (NCCL's requirements, less what oxccl refuses).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DevCommRequirements {
    /// LSA barriers of the device communicator itself (`lsaBarrierCount`).
    pub lsa_barriers: u32,
    /// Barriers over the rail team, through GIN (`railGinBarrierCount`): one signal each.
    pub rail_barriers: u32,
    /// The caller's resource buffers as (bytes, alignment), in list order.
    pub resources: Vec<(usize, usize)>,
    /// GIN signals and counters each of `resources` asks for, in order (missing: none).
    pub resource_gin: Vec<(u32, u32)>,
    /// The caller's own GIN signals, ids from 0 (`ginSignalCount`).
    pub gin_signals: u32,
    /// The caller's own GIN counters, ids from 0 (`ginCounterCount`).
    pub gin_counters: u32,
    /// GIN even where nothing above needs it (`ginForceEnable`).
    pub gin_force: bool,
}

/// Why a device communicator starts GIN (NCCL's rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GinNeed {
    /// Its requirements use GIN (the reason, for a refusal's sentence).
    Asked(&'static str),
    /// Its ranks span several hosts, though nothing it asked for needs GIN.
    SpansHosts,
}

impl DevCommRequirements {
    /// Why the device communicator needs GIN, if it does, on a communicator whose ranks span
    /// several hosts or not.
    fn gin_need(&self, hosts_apart: bool) -> Option<GinNeed> {
        if self.gin_force {
            Some(GinNeed::Asked("ginForceEnable is set"))
        } else if self.gin_signals != 0 || self.gin_counters != 0 {
            Some(GinNeed::Asked("GIN signals or counters are required"))
        } else if hosts_apart && self.rail_barriers > 0 {
            Some(GinNeed::Asked("barriers across hosts are required"))
        } else if hosts_apart {
            Some(GinNeed::SpansHosts)
        } else {
            None
        }
    }
}

/// Where one requested resource buffer lies and which GIN ids it starts at (relative to the
/// device communicator's `ginSignalBase` and `ginCounterBase`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResourcePlace {
    /// `ncclDevResourceHandle_t`: its offset in 128-byte units.
    pub handle: u32,
    /// Its first GIN signal (`outGinSignalStart`).
    pub gin_signal0: u32,
    /// Its first GIN counter (`outGinCounterStart`).
    pub gin_counter0: u32,
}

/// A created device communicator (the places of the requested resources come beside it).
#[derive(Debug, Clone, Copy)]
pub struct MadeDevComm {
    /// What kernels take by value.
    pub raw: ncclDevComm_t,
}

/// Runs `f` on a communicator's [`DeviceApi`] under whatever lock guards it.
pub type WithApi<'a> = dyn Fn(&mut dyn FnMut(&mut DeviceApi) -> Result<()>) -> Result<()> + 'a;

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
/// barriers and `req.resources` in NCCL's order and 128-byte units (GIN's signal shadows after
/// them), starts GIN when the device communicator needs it, allocates and zeroes the buffers
/// with `backend`, maps them flat, records them in `api`, and returns once every rank has
/// zeroed its part. Returns the struct kernels take and each of `req.resources`' places.
pub fn create_dev_comm(
    comm: &AnyComm,
    backend: &Arc<AnyBackend>,
    req: &DevCommRequirements,
    with_api: Box<WithApi<'_>>,
) -> Result<(MadeDevComm, Vec<ResourcePlace>)> {
    let lsa = comm.lsa_team()?;
    let hosts_apart = lsa.size as usize != comm.nranks();
    let enabled = super::gin::enabled();
    let gin = match req.gin_need(hosts_apart) {
        // With GIN turned off, do without it where NCCL would start it for nothing in particular.
        Some(GinNeed::SpansHosts) if !enabled => false,
        Some(GinNeed::Asked(why)) if !enabled => {
            return Err(Error::Internal(format!(
                "ncclDevCommCreate: {why}, which needs device-initiated networking (GIN), turned off by NCCL_GIN_ENABLE=0"
            )));
        }
        need => need.is_some(),
    };
    let mut at = 0usize;
    let mut place = |bytes: usize, align: usize| {
        at = at.next_multiple_of(align.max(RESOURCE_UNIT));
        let h = (at / RESOURCE_UNIT) as u32;
        at += bytes;
        h
    };
    let mut dc = empty_dev_comm(comm, lsa);
    // Signal and counter ids: the caller's own first, then the rail barriers', then each
    // resource buffer's, as NCCL numbers them.
    let (mut signals, mut counters) = (req.gin_signals, req.gin_counters);
    dc.railGinBarrier = ncclGinBarrierHandle_t {
        signal0: signals,
        bufHandle: place(
            rail_barrier_bytes(req.rail_barriers as usize),
            align_of::<u32>(),
        ),
    };
    signals = signals
        .checked_add(req.rail_barriers)
        .ok_or_else(|| Error::arg("too many GIN signals"))?;
    dc.lsaBarrier = ncclLsaBarrierHandle_t {
        bufHandle: place(
            lsa_barrier_bytes(lsa.size as usize, req.lsa_barriers as usize),
            align_of::<u32>(),
        ),
        nBarriers: c_int::try_from(req.lsa_barriers)
            .map_err(|_| Error::arg("too many LSA barriers"))?,
    };
    let mut places = Vec::with_capacity(req.resources.len());
    for (i, &(bytes, align)) in req.resources.iter().enumerate() {
        let (s, c) = req.resource_gin.get(i).copied().unwrap_or((0, 0));
        places.push(ResourcePlace {
            handle: place(bytes, align),
            gin_signal0: signals,
            gin_counter0: counters,
        });
        signals = signals
            .checked_add(s)
            .ok_or_else(|| Error::arg("too many GIN signals"))?;
        counters = counters
            .checked_add(c)
            .ok_or_else(|| Error::arg("too many GIN counters"))?;
    }
    let mut gin_parts = None;
    if gin {
        let mut handles = Vec::new();
        with_api(&mut |api| {
            handles = api.start_gin()?.handles();
            Ok(())
        })?;
        // Each context's shadows of every signal, in device memory of this rank alone.
        let shadows = place(handles.len() * signals as usize * 8, RESOURCE_UNIT);
        // A GIN device communicator always has resources: their window keys its ids.
        at = at.max(RESOURCE_UNIT);
        gin_parts = Some((handles, shadows));
    }
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
        let ids = match &gin_parts {
            Some(_) => Some(api.start_gin()?.take_ids(signals, counters)?),
            None => None,
        };
        if let Some((memory, flat)) = memory {
            let (win, inlined) = match api.add_resources(memory, total, flat, ids) {
                Ok(r) => r,
                Err(e) => {
                    if let Some(ids) = ids {
                        api.start_gin()?.give_ids(ids);
                    }
                    return Err(e);
                }
            };
            dc.resourceWindow = win as usize as *mut ncclWindow_vidmem;
            dc.resourceWindow_inlined = inlined;
        }
        if let (Some((handles, shadows)), Some(ids), Some((memory, _))) = (&gin_parts, ids, memory)
        {
            dc.ginContextCount = handles.len() as u8;
            for (i, &h) in handles.iter().enumerate() {
                dc.ginTypes[i] = GIN_TYPE_PROXY;
                dc.ginHandles[i] = h as usize as *mut _;
            }
            dc.ginSignalBase = ids.signal0;
            dc.ginSignalCount = ids.signals as c_int;
            dc.ginCounterBase = ids.counter0;
            dc.ginCounterCount = ids.counters as c_int;
            dc.ginSignalShadows =
                (memory + u64::from(*shadows) * RESOURCE_UNIT as u64) as usize as *mut u64;
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
    Ok((MadeDevComm { raw: dc }, places))
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
