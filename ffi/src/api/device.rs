//! Host functions of NCCL's device API.
//!
//! Teams are answered from the communicator's shape. Device communicators are not provided yet:
//! programs compiled against NCCL's device headers read `ncclDevComm` and `ncclWindow_vidmem`
//! byte for byte, and oxccl cannot promise those layouts, so creating one fails cleanly with
//! `ncclInvalidUsage` instead of handing device code memory it would misread.

use crate::abi::{
    ncclComm_t, ncclDevComm_t, ncclDevCommRequirements_t, ncclDevResourceRequirements_t,
    ncclGinBarrierHandle_t, ncclLLA2AHandle_t, ncclLsaBarrierHandle_t, ncclTeam_t,
};
use crate::boundary::nccl_api;
use crate::handles::{self, Need};
use oxccl::dispatch::CommOps;
use oxccl_core::{Error, Result};
use std::ffi::c_int;

/// Why every device-communicator call is refused.
fn unsupported(what: &str) -> Error {
    Error::usage(format!(
        "{what} is not supported: oxccl does not provide device communicators (NCCL device API) yet; use the host API collectives"
    ))
}

unsafe fn dev_comm_create(
    comm: ncclComm_t,
    _reqs: *const ncclDevCommRequirements_t,
    _out_dev_comm: *mut ncclDevComm_t,
) -> Result<()> {
    handles::lookup(comm, Need::Ops)?;
    Err(unsupported("ncclDevCommCreate"))
}

unsafe fn dev_comm_destroy(comm: ncclComm_t, _dev_comm: *const ncclDevComm_t) -> Result<()> {
    handles::lookup(comm, Need::Query)?;
    Err(unsupported("ncclDevCommDestroy"))
}

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

unsafe fn team_world(comm: ncclComm_t) -> Result<ncclTeam_t> {
    world(comm)
}

unsafe fn team_lsa(comm: ncclComm_t) -> Result<ncclTeam_t> {
    // Every rank is on this node: the load/store-accessible team is the world.
    world(comm)
}

unsafe fn team_rail(comm: ncclComm_t) -> Result<ncclTeam_t> {
    // One node: each rank's rail (same local index on every node) holds only itself.
    let w = world(comm)?;
    Ok(ncclTeam_t {
        nRanks: 1,
        rank: 0,
        stride: w.nRanks,
    })
}

/// Rank `rank` of `team`, translated relative to this rank's position in both.
fn team_rank_to(comm: ncclComm_t, team: ncclTeam_t, rank: c_int) -> Result<c_int> {
    let w = world(comm)?;
    if rank < 0 || rank >= team.nRanks {
        return Err(Error::arg(format!(
            "invalid rank {rank}: team has {} ranks",
            team.nRanks
        )));
    }
    let r = w.rank as i64 + (rank as i64 - team.rank as i64) * team.stride as i64;
    if r < 0 || r >= w.nRanks as i64 {
        return Err(Error::arg(format!(
            "team {{nRanks {}, rank {}, stride {}}} does not belong to this communicator",
            team.nRanks, team.rank, team.stride
        )));
    }
    Ok(r as c_int)
}

unsafe fn team_rank_to_world(comm: ncclComm_t, team: ncclTeam_t, rank: c_int) -> Result<c_int> {
    team_rank_to(comm, team, rank)
}

unsafe fn team_rank_to_lsa(comm: ncclComm_t, team: ncclTeam_t, rank: c_int) -> Result<c_int> {
    // The LSA team is the world here, so LSA ranks are world ranks.
    team_rank_to(comm, team, rank)
}

unsafe fn lsa_barrier_create_requirement(
    _team: ncclTeam_t,
    _n_barriers: c_int,
    _out_handle: *mut ncclLsaBarrierHandle_t,
    _out_req: *mut ncclDevResourceRequirements_t,
) -> Result<()> {
    Err(unsupported("ncclLsaBarrierCreateRequirement"))
}

unsafe fn gin_barrier_create_requirement(
    comm: ncclComm_t,
    _team: ncclTeam_t,
    _n_barriers: c_int,
    _out_handle: *mut ncclGinBarrierHandle_t,
    _out_req: *mut ncclDevResourceRequirements_t,
) -> Result<()> {
    handles::lookup(comm, Need::Query)?;
    Err(unsupported("ncclGinBarrierCreateRequirement"))
}

unsafe fn lla2a_calc_slots(max_elts: c_int, max_elt_size: c_int) -> Result<c_int> {
    if max_elts < 0 || max_elt_size < 0 {
        return Err(Error::arg(format!(
            "invalid maxElts {max_elts} or maxEltSize {max_elt_size}"
        )));
    }
    // One 8-byte payload per LL slot; the count only sizes requirements that are refused anyway.
    let per_elt = (max_elt_size as u64).div_ceil(8).max(1) as i64;
    c_int::try_from(max_elts as i64 * per_elt)
        .map_err(|_| Error::arg("maxElts * maxEltSize overflows"))
}

unsafe fn lla2a_create_requirement(
    _n_blocks: c_int,
    _n_slots: c_int,
    _out_handle: *mut ncclLLA2AHandle_t,
    _out_req: *mut ncclDevResourceRequirements_t,
) -> Result<()> {
    Err(unsupported("ncclLLA2ACreateRequirement"))
}

nccl_api! {
    /// `ncclDevCommCreate`: refused with `ncclInvalidUsage` (no device communicators yet).
    fn ncclDevCommCreate, pncclDevCommCreate(
        comm: ncclComm_t, reqs: *const ncclDevCommRequirements_t, out_dev_comm: *mut ncclDevComm_t
    ) => dev_comm_create;
}
nccl_api! {
    /// `ncclDevCommDestroy`: refused with `ncclInvalidUsage`.
    fn ncclDevCommDestroy, pncclDevCommDestroy(
        comm: ncclComm_t, dev_comm: *const ncclDevComm_t
    ) => dev_comm_destroy;
}
nccl_api! {
    /// `ncclTeamWorld`: `{nranks, rank, 1}`.
    fn ncclTeamWorld, pncclTeamWorld(comm: ncclComm_t) -> ncclTeam_t [NO_TEAM] => team_world;
}
nccl_api! {
    /// `ncclTeamLsa`: the world (all ranks share this node).
    fn ncclTeamLsa, pncclTeamLsa(comm: ncclComm_t) -> ncclTeam_t [NO_TEAM] => team_lsa;
}
nccl_api! {
    /// `ncclTeamRail`: `{1, 0, nranks}` on one node.
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
    /// `ncclLsaBarrierCreateRequirement`: refused with `ncclInvalidUsage`.
    fn ncclLsaBarrierCreateRequirement, pncclLsaBarrierCreateRequirement(
        team: ncclTeam_t, n_barriers: c_int, out_handle: *mut ncclLsaBarrierHandle_t,
        out_req: *mut ncclDevResourceRequirements_t
    ) => lsa_barrier_create_requirement;
}
nccl_api! {
    /// `ncclGinBarrierCreateRequirement`: refused with `ncclInvalidUsage`.
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
    /// `ncclLLA2ACreateRequirement`: refused with `ncclInvalidUsage`.
    fn ncclLLA2ACreateRequirement, pncclLLA2ACreateRequirement(
        n_blocks: c_int, n_slots: c_int, out_handle: *mut ncclLLA2AHandle_t,
        out_req: *mut ncclDevResourceRequirements_t
    ) => lla2a_create_requirement;
}
