//! Host functions of NCCL's device API.
//!
//! Device communicators follow NCCL 2.28's layout byte for byte (`abi::ncclDevComm_t`), so
//! kernels compiled against NVIDIA's `nccl_device.h` run on them: teams, windows mapped flat
//! over the load/store-accessible (LSA) team, LSA barriers and resource buffers, and GIN through
//! oxccl's host proxy. Multicast (multimem) is refused with a sentence. NCCL 2.29's
//! `ncclCommQueryProperties` answers too; 2.29's requirement layout is recognised and refused.

use crate::abi::{
    COMM_PROPERTIES_2_29_2_BYTES, NCCL_CONFIG_MAGIC, ncclComm_t, ncclCommProperties_t,
    ncclDevComm_t, ncclDevCommRequirements_t, ncclDevResourceRequirements_t,
    ncclGinBarrierHandle_t, ncclGinType_t, ncclLLA2AHandle_t, ncclLsaBarrierHandle_t, ncclTeam_t,
};
use crate::boundary::nccl_api;
use crate::group;
use crate::handles::{self, Need};
use oxccl::device_api::shared::{self as device_api, DevCommRequirements};
use oxccl::dispatch::{self as runtime, CommOps};
use oxccl_core::comm::symmetric::LsaTeam;
use oxccl_core::{Error, Result};
use std::ffi::c_int;

/// The empty team returned when the communicator is invalid (the error is in ncclGetLastError).
const NO_TEAM: ncclTeam_t = ncclTeam_t {
    nRanks: 0,
    rank: 0,
    stride: 0,
};

fn world(comm: ncclComm_t) -> Result<ncclTeam_t> {
    let live = handles::lookup(comm, Need::Query)?;
    Ok(ncclTeam_t {
        nRanks: live.comm.nranks() as c_int,
        rank: live.comm.rank() as c_int,
        stride: 1,
    })
}

fn lsa(comm: ncclComm_t) -> Result<LsaTeam> {
    handles::lookup(comm, Need::Query)?.comm.lsa_team()
}

unsafe fn team_world(comm: ncclComm_t) -> Result<ncclTeam_t> {
    world(comm)
}

unsafe fn team_lsa(comm: ncclComm_t) -> Result<ncclTeam_t> {
    let l = lsa(comm)?;
    Ok(ncclTeam_t {
        nRanks: l.size as c_int,
        rank: l.rank as c_int,
        stride: 1,
    })
}

unsafe fn team_rail(comm: ncclComm_t) -> Result<ncclTeam_t> {
    // The ranks at this rank's place in every LSA team.
    let (w, l) = (world(comm)?, lsa(comm)?);
    let size = l.size as c_int;
    Ok(ncclTeam_t {
        nRanks: w.nRanks / size,
        rank: w.rank / size,
        stride: size,
    })
}

/// `rank` of `team`, as an index of `target` (a team this rank belongs to: the world or its LSA
/// team), both relative to this rank's own place, as NCCL computes it.
fn team_rank_to(team: ncclTeam_t, rank: c_int, target: ncclTeam_t, what: &str) -> Result<c_int> {
    if rank < 0 || rank >= team.nRanks {
        return Err(Error::arg(format!(
            "invalid rank {rank}: team has {} ranks",
            team.nRanks
        )));
    }
    let r = target.rank as i64 + (rank as i64 - team.rank as i64) * team.stride as i64;
    if r < 0 || r >= target.nRanks as i64 {
        return Err(Error::arg(format!(
            "rank {rank} of team {{nRanks {}, rank {}, stride {}}} is not in this rank's {what} team",
            team.nRanks, team.rank, team.stride
        )));
    }
    Ok(r as c_int)
}

unsafe fn team_rank_to_world(comm: ncclComm_t, team: ncclTeam_t, rank: c_int) -> Result<c_int> {
    team_rank_to(team, rank, world(comm)?, "world")
}

unsafe fn team_rank_to_lsa(comm: ncclComm_t, team: ncclTeam_t, rank: c_int) -> Result<c_int> {
    // SAFETY: no pointers.
    let l = unsafe { team_lsa(comm) }?;
    team_rank_to(team, rank, l, "LSA")
}

/// A zeroed resource requirement of `bytes` aligned to `align`, its handle written to `handle`.
fn requirement(bytes: usize, align: usize, handle: *mut u32) -> ncclDevResourceRequirements_t {
    ncclDevResourceRequirements_t {
        next: std::ptr::null_mut(),
        bufferSize: bytes,
        bufferAlign: align,
        outBufferHandle: handle,
        ginSignalCount: 0,
        ginCounterCount: 0,
        outGinSignalStart: std::ptr::null_mut(),
        outGinCounterStart: std::ptr::null_mut(),
    }
}

fn count(n: c_int, what: &str) -> Result<usize> {
    usize::try_from(n).map_err(|_| Error::arg(format!("invalid {what} {n}")))
}

unsafe fn lsa_barrier_create_requirement(
    team: ncclTeam_t,
    n_barriers: c_int,
    out_handle: *mut ncclLsaBarrierHandle_t,
    out_req: *mut ncclDevResourceRequirements_t,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    let (handle, req) = unsafe {
        (
            super::out(out_handle, "outHandle")?,
            super::out(out_req, "outReq")?,
        )
    };
    let n = count(n_barriers, "nBarriers")?;
    handle.nBarriers = n_barriers;
    *req = requirement(
        device_api::lsa_barrier_bytes(count(team.nRanks, "team size")?, n),
        align_of::<u32>(),
        &mut handle.bufHandle,
    );
    Ok(())
}

unsafe fn gin_barrier_create_requirement(
    comm: ncclComm_t,
    _team: ncclTeam_t,
    n_barriers: c_int,
    out_handle: *mut ncclGinBarrierHandle_t,
    out_req: *mut ncclDevResourceRequirements_t,
) -> Result<()> {
    handles::lookup(comm, Need::Query)?;
    // SAFETY: forwarded from the caller.
    let (handle, req) = unsafe {
        (
            super::out(out_handle, "outHandle")?,
            super::out(out_req, "outReq")?,
        )
    };
    let n = count(n_barriers, "nBarriers")?;
    // Sized as NCCL's.
    *req = requirement(
        device_api::rail_barrier_bytes(n),
        align_of::<u32>(),
        &mut handle.bufHandle,
    );
    req.ginSignalCount = n_barriers;
    req.outGinSignalStart = &mut handle.signal0;
    Ok(())
}

unsafe fn lla2a_calc_slots(max_elts: c_int, max_elt_size: c_int) -> Result<c_int> {
    if max_elts < 0 || max_elt_size < 0 {
        return Err(Error::arg(format!(
            "invalid maxElts {max_elts} or maxEltSize {max_elt_size}"
        )));
    }
    // One 8-byte payload per slot.
    let per_elt = (max_elt_size as u64).div_ceil(8) as i64;
    c_int::try_from(max_elts as i64 * per_elt)
        .map_err(|_| Error::arg("maxElts * maxEltSize overflows"))
}

unsafe fn lla2a_create_requirement(
    n_blocks: c_int,
    n_slots: c_int,
    out_handle: *mut ncclLLA2AHandle_t,
    out_req: *mut ncclDevResourceRequirements_t,
) -> Result<()> {
    // SAFETY: forwarded from the caller.
    let (handle, req) = unsafe {
        (
            super::out(out_handle, "outHandle")?,
            super::out(out_req, "outReq")?,
        )
    };
    let (blocks, slots) = (count(n_blocks, "nBlocks")?, count(n_slots, "nSlots")?);
    handle.nSlots = slots as u32;
    // Per block: a 16-byte header and two epochs of `slots` 16-byte slots.
    *req = requirement(blocks * (1 + 2 * slots) * 16, 16, &mut handle.bufHandle);
    Ok(())
}

unsafe fn dev_comm_create(
    comm: ncclComm_t,
    reqs: *const ncclDevCommRequirements_t,
    out_dev_comm: *mut ncclDevComm_t,
) -> Result<()> {
    let live = handles::lookup(comm, Need::Ops)?;
    if reqs.is_null() {
        return Err(Error::arg("reqs argument is NULL"));
    }
    if out_dev_comm.is_null() {
        return Err(Error::arg("outDevComm argument is NULL"));
    }
    // SAFETY: a requirements struct of any NCCL version holds at least 16 bytes.
    if let Some(version) = unsafe { newer_requirements(reqs) } {
        return Err(Error::usage(format!(
            "ncclDevCommCreate: the requirements are laid out as NCCL {}'s (NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER with size, magic and version first); oxccl implements NCCL 2.28.9's device API: build the program against NCCL 2.28's headers or oxccl's",
            version_name(version)
        )));
    }
    // SAFETY: the caller passes a valid requirements struct of NCCL 2.28's layout.
    let reqs = unsafe { *reqs };
    // SAFETY: the lists' entries are valid until the call (group end) returns.
    let user = unsafe {
        c_list(
            reqs.resourceRequirementsList,
            |r| r.next,
            "resourceRequirementsList",
        )
    }?;
    // SAFETY: as above.
    let teams = unsafe {
        c_list(
            reqs.teamRequirementsList,
            |t| t.next,
            "teamRequirementsList",
        )
    }?;
    if teams.iter().any(|t| t.multimem) {
        return Err(multimem_refused());
    }
    if reqs.lsaMultimem {
        return Err(multimem_refused());
    }
    let gin_count = |n: c_int, what: &str| {
        u32::try_from(n).map_err(|_| Error::arg(format!("{what} {n} is negative")))
    };
    let spec = DevCommRequirements {
        lsa_barriers: count(
            reqs.barrierCount.max(reqs.lsaBarrierCount),
            "lsaBarrierCount",
        )? as u32,
        rail_barriers: count(
            reqs.barrierCount.max(reqs.railGinBarrierCount),
            "railGinBarrierCount",
        )? as u32,
        resources: user.iter().map(|r| (r.bufferSize, r.bufferAlign)).collect(),
        resource_gin: (user.iter())
            .map(|r| {
                Ok((
                    gin_count(r.ginSignalCount, "ginSignalCount")?,
                    gin_count(r.ginCounterCount, "ginCounterCount")?,
                ))
            })
            .collect::<Result<_>>()?,
        gin_signals: gin_count(reqs.ginSignalCount, "ginSignalCount")?,
        gin_counters: gin_count(reqs.ginCounterCount, "ginCounterCount")?,
        gin_force: reqs.ginForceEnable,
    };
    // Where each resource's handle and first GIN ids go (addresses: the closure runs later).
    let outs: Vec<[usize; 3]> = (user.iter())
        .map(|r| {
            [
                r.outBufferHandle as usize,
                r.outGinSignalStart as usize,
                r.outGinCounterStart as usize,
            ]
        })
        .collect();
    let (handle, out_addr) = (live.handle, out_dev_comm as usize);
    group::together(
        handle as *const _ as usize,
        Box::new(move || {
            let comm = handle.lock().live_comm()?;
            let backend = runtime::backend()?.clone();
            let (made, places) = device_api::create_dev_comm(
                &comm,
                &backend,
                &spec,
                Box::new(|f| f(handle.lock().device_api()?)),
            )?;
            for (out, p) in outs.into_iter().zip(places) {
                for (at, v) in out
                    .into_iter()
                    .zip([p.handle, p.gin_signal0, p.gin_counter0])
                {
                    if at != 0 {
                        // SAFETY: the caller's requirement named a writable `uint32_t`.
                        unsafe { *(at as *mut u32) = v };
                    }
                }
            }
            // SAFETY: `outDevComm` stays writable until the group end (NCCL's contract).
            unsafe { *(out_addr as *mut ncclDevComm_t) = made.raw };
            Ok(())
        }),
    )
}

/// The header version of a requirements struct laid out as NCCL 2.29 and later lay it out
/// (`size`, `NCCL_API_MAGIC`, version, then 2.28's fields), or `None` for 2.28's layout, whose
/// first two fields are pointers: a pointer is never a struct's size, and its low half matching
/// the magic as well does not happen by chance.
///
/// # Safety
/// `reqs` points at 16 readable bytes.
unsafe fn newer_requirements(reqs: *const ncclDevCommRequirements_t) -> Option<u32> {
    // SAFETY: the caller's contract; read as plain words, whatever the layout.
    let (size, magic, version) = unsafe {
        let words = reqs.cast::<u64>();
        let halves = reqs.cast::<u32>();
        (
            words.read_unaligned(),
            halves.add(2).read_unaligned(),
            halves.add(3).read_unaligned(),
        )
    };
    ((16..4096).contains(&size) && magic == NCCL_CONFIG_MAGIC).then_some(version)
}

/// `NCCL_VERSION_CODE` as NCCL spells versions (`2.29.7`).
fn version_name(code: u32) -> String {
    format!("{}.{}.{}", code / 10000, code / 100 % 100, code % 100)
}

unsafe fn comm_query_properties(comm: ncclComm_t, props: *mut ncclCommProperties_t) -> Result<()> {
    let live = handles::lookup(comm, Need::Query)?;
    if props.is_null() {
        return Err(Error::arg("props argument is NULL"));
    }
    // SAFETY: every version's struct starts with size, magic and version.
    let (size, magic) = unsafe { ((*props).size, (*props).magic) };
    if magic != NCCL_CONFIG_MAGIC {
        return Err(Error::usage(
            "ncclCommQueryProperties: props must start as NCCL_COMM_PROPERTIES_INITIALIZER makes it (its magic is missing)",
        ));
    }
    if size < COMM_PROPERTIES_2_29_2_BYTES {
        return Err(Error::arg(format!(
            "ncclCommQueryProperties: props size {size} is smaller than any NCCL version's ncclCommProperties_t"
        )));
    }
    let c = &live.comm;
    let lsa = c.lsa_team()?;
    let gin = ncclGinType_t(c_int::from(oxccl::device_api::gin::offered_type()));
    // SAFETY: the caller's struct holds `size` bytes, at least 2.29.2's: each field is written
    // only where that size holds it.
    unsafe {
        (*props).rank = c.rank() as c_int;
        (*props).nRanks = c.nranks() as c_int;
        (*props).cudaDev = c.device();
        (*props).nvmlDev = -1;
        (*props).deviceApiSupport = true;
        (*props).multimemSupport = false;
        (*props).ginType = gin;
        if size >= size_of::<ncclCommProperties_t>() {
            (*props).nLsaTeams = (c.nranks() / lsa.size.max(1) as usize) as c_int;
            (*props).hostRmaSupport = false;
            (*props).railedGinType = gin;
        }
    }
    Ok(())
}

/// The entries of a C list from `head` along `next`; one that does not end within 2^16
/// entries (a cycle) is refused rather than walked forever.
///
/// # Safety
/// Every entry reachable from `head` is valid for reads.
unsafe fn c_list<T: Copy>(head: *mut T, next: impl Fn(&T) -> *mut T, what: &str) -> Result<Vec<T>> {
    let mut out = Vec::new();
    let mut p = head;
    while !p.is_null() {
        // SAFETY: the caller's contract.
        let e = unsafe { *p };
        p = next(&e);
        out.push(e);
        if out.len() > 1 << 16 {
            return Err(Error::arg(format!("{what} does not end (a cycle?)")));
        }
    }
    Ok(out)
}

fn multimem_refused() -> Error {
    Error::usage(
        "ncclDevCommCreate: multimem (NVLink multicast) is not supported by oxccl; request lsaMultimem = false and no multimem teams",
    )
}

unsafe fn dev_comm_destroy(comm: ncclComm_t, dev_comm: *const ncclDevComm_t) -> Result<()> {
    let live = handles::lookup(comm, Need::Query)?;
    if dev_comm.is_null() {
        return Err(Error::arg("devComm argument is NULL"));
    }
    // SAFETY: the caller passes a device communicator from ncclDevCommCreate.
    let res = unsafe { (*dev_comm).resourceWindow } as u64;
    if res == 0 {
        return Ok(());
    }
    let mut st = live.handle.lock();
    let api = st
        .device_api
        .as_mut()
        .ok_or_else(|| Error::arg("devComm was not created on this communicator"))?;
    // SAFETY: the caller destroys a device communicator its kernels no longer use.
    unsafe { api.remove_resources(res) }
}

nccl_api! {
    /// `ncclDevCommCreate` (collective; in a group, at the group end).
    fn ncclDevCommCreate, pncclDevCommCreate(
        comm: ncclComm_t, reqs: *const ncclDevCommRequirements_t, out_dev_comm: *mut ncclDevComm_t
    ) => dev_comm_create;
}
nccl_api! {
    /// `ncclCommQueryProperties` (2.29): rank, device, and what the device API offers.
    fn ncclCommQueryProperties, pncclCommQueryProperties(
        comm: ncclComm_t, props: *mut ncclCommProperties_t
    ) => comm_query_properties;
}
nccl_api! {
    /// `ncclDevCommDestroy`.
    fn ncclDevCommDestroy, pncclDevCommDestroy(
        comm: ncclComm_t, dev_comm: *const ncclDevComm_t
    ) => dev_comm_destroy;
}
nccl_api! {
    /// `ncclTeamWorld`: `{nranks, rank, 1}`.
    fn ncclTeamWorld, pncclTeamWorld(comm: ncclComm_t) -> ncclTeam_t [NO_TEAM] => team_world;
}
nccl_api! {
    /// `ncclTeamLsa`: this rank's load/store-accessible team.
    fn ncclTeamLsa, pncclTeamLsa(comm: ncclComm_t) -> ncclTeam_t [NO_TEAM] => team_lsa;
}
nccl_api! {
    /// `ncclTeamRail`: the ranks at this rank's place in every LSA team.
    fn ncclTeamRail, pncclTeamRail(comm: ncclComm_t) -> ncclTeam_t [NO_TEAM] => team_rail;
}
nccl_api! {
    /// `ncclTeamRankToWorld` (-1 on error).
    fn ncclTeamRankToWorld, pncclTeamRankToWorld(
        comm: ncclComm_t, team: ncclTeam_t, rank: c_int
    ) -> c_int [-1] => team_rank_to_world;
}
nccl_api! {
    /// `ncclTeamRankToLsa` (-1 on error).
    fn ncclTeamRankToLsa, pncclTeamRankToLsa(
        comm: ncclComm_t, team: ncclTeam_t, rank: c_int
    ) -> c_int [-1] => team_rank_to_lsa;
}
nccl_api! {
    /// `ncclLsaBarrierCreateRequirement`.
    fn ncclLsaBarrierCreateRequirement, pncclLsaBarrierCreateRequirement(
        team: ncclTeam_t, n_barriers: c_int, out_handle: *mut ncclLsaBarrierHandle_t,
        out_req: *mut ncclDevResourceRequirements_t
    ) => lsa_barrier_create_requirement;
}
nccl_api! {
    /// `ncclGinBarrierCreateRequirement`.
    fn ncclGinBarrierCreateRequirement, pncclGinBarrierCreateRequirement(
        comm: ncclComm_t, team: ncclTeam_t, n_barriers: c_int,
        out_handle: *mut ncclGinBarrierHandle_t, out_req: *mut ncclDevResourceRequirements_t
    ) => gin_barrier_create_requirement;
}
nccl_api! {
    /// `ncclLLA2ACalcSlots` (-1 on error).
    fn ncclLLA2ACalcSlots, pncclLLA2ACalcSlots(
        max_elts: c_int, max_elt_size: c_int
    ) -> c_int [-1] => lla2a_calc_slots;
}
nccl_api! {
    /// `ncclLLA2ACreateRequirement`.
    fn ncclLLA2ACreateRequirement, pncclLLA2ACreateRequirement(
        n_blocks: c_int, n_slots: c_int, out_handle: *mut ncclLLA2AHandle_t,
        out_req: *mut ncclDevResourceRequirements_t
    ) => lla2a_create_requirement;
}
