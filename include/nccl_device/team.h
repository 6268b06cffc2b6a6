/*
 * nccl_device/team.h for oxccl's libnccl.so.2: teams on the device and the host. A team is an
 * arithmetic progression of world ranks (ncclTeam_t: nRanks members, this rank's index, and the
 * world-rank distance between neighbours), so every conversion here is a multiply and an add.
 *
 * Written for oxccl from the published NCCL 2.28.9 device-API facts (names, signatures, struct
 * layouts, the layout of state in the resource buffer); see nccl_device.h.
 */
#ifndef OXCCL_NCCL_DEVICE_TEAM_H
#define OXCCL_NCCL_DEVICE_TEAM_H

#include "core.h"

#if defined(__cplusplus)
/* Tags naming the device communicator's built-in teams, for constructors that take one. */
struct ncclTeamTagWorld {};
struct ncclTeamTagLsa {};
struct ncclTeamTagRail {};

NCCL_HOST_DEVICE_INLINE ncclTeam ncclTeamWorld(ncclDevComm const &comm) {
  ncclTeam t;
  t.nRanks = comm.nRanks;
  t.rank = comm.rank;
  t.stride = 1;
  return t;
}

/* LSA teams are runs of consecutive world ranks. */
NCCL_HOST_DEVICE_INLINE ncclTeam ncclTeamLsa(ncclDevComm const &comm) {
  ncclTeam t;
  t.nRanks = comm.lsaSize;
  t.rank = comm.lsaRank;
  t.stride = 1;
  return t;
}

/* The ranks with this rank's LSA index in every LSA team (the outer factor of the world by the
 * LSA size), divided without a divide instruction. */
NCCL_HOST_DEVICE_INLINE ncclTeam ncclTeamRail(ncclDevComm const &comm) {
  ncclTeam t;
  t.nRanks = (int)nccl::utility::idivFast32(comm.nRanks, comm.lsaSize, comm.lsaSize_rcp32);
  t.rank = (int)nccl::utility::idivFast32(comm.rank, comm.lsaSize, comm.lsaSize_rcp32);
  t.stride = comm.lsaSize;
  return t;
}

NCCL_HOST_DEVICE_INLINE int ncclTeamRankToWorld(ncclDevComm const &comm, ncclTeam team, int rank) {
  return comm.rank + (rank - team.rank) * team.stride;
}

/* Assumes the member is in this rank's LSA team (world and LSA ranks then differ by a constant). */
NCCL_HOST_DEVICE_INLINE int ncclTeamRankToLsa(ncclDevComm const &comm, ncclTeam team, int rank) {
  return comm.lsaRank + (rank - team.rank) * team.stride;
}
#endif /* __cplusplus */

/* Whether member bRank of team b belongs to team a (both teams contain this rank). */
NCCL_EXTERN_C NCCL_HOST_DEVICE_INLINE bool ncclTeamRankIsMember(ncclTeam_t a, ncclTeam_t b,
                                                                int bRank) {
  int worldDelta = (bRank - b.rank) * b.stride;
  int aRank = a.rank + worldDelta / a.stride;
  return worldDelta % a.stride == 0 && 0 <= aRank && aRank < a.nRanks;
}

/* Member bRank of team b as a member of team a; meaningful only where ncclTeamRankIsMember. */
NCCL_EXTERN_C NCCL_HOST_DEVICE_INLINE int ncclTeamRankToTeam(ncclTeam_t a, ncclTeam_t b,
                                                             int bRank) {
  return a.rank + (bRank - b.rank) * b.stride / a.stride;
}

/* parent split into groups of innerSize consecutive members: this rank's group ... */
NCCL_EXTERN_C NCCL_HOST_DEVICE_INLINE ncclTeam_t ncclTeamInnerFactor(ncclTeam_t parent,
                                                                     int innerSize) {
  ncclTeam_t t;
  t.nRanks = innerSize;
  t.rank = parent.rank % innerSize;
  t.stride = parent.stride;
  return t;
}

/* ... and the members at this rank's position in every group. */
NCCL_EXTERN_C NCCL_HOST_DEVICE_INLINE ncclTeam_t ncclTeamOuterFactor(ncclTeam_t parent,
                                                                     int innerSize) {
  ncclTeam_t t;
  t.nRanks = parent.nRanks / innerSize;
  t.rank = parent.rank / innerSize;
  t.stride = parent.stride * innerSize;
  return t;
}

/* The index-th member (0-based, in parent order) of parent that is not in subset, as a parent
 * rank; subset must be a sub-team of parent (both containing this rank). In parent ranks the
 * subset is evenly spaced, step members apart, from `first` on, so the others are: those below
 * `first`, then step - 1 in each of the nRanks - 1 gaps, then those after the last member. */
NCCL_EXTERN_C NCCL_HOST_DEVICE_INLINE int ncclTeamRankInDifference(ncclTeam_t parent,
                                                                   ncclTeam_t subset, int index) {
  int step = subset.stride / parent.stride;
  int first = parent.rank - subset.rank * step;
  if (step < 0) {
    step = -step;
    first -= (subset.nRanks - 1) * step;
  }
  if (index < first) return index;
  int past = index - first;
  int inGaps = (subset.nRanks - 1) * (step - 1);
  if (past < inGaps) return first + 1 + (past / (step - 1)) * step + past % (step - 1);
  return first + (subset.nRanks - 1) * step + 1 + (past - inGaps);
}

#endif /* OXCCL_NCCL_DEVICE_TEAM_H */
