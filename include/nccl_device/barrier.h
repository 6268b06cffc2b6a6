/*
 * nccl_device/barrier.h for oxccl's libnccl.so.2: ncclBarrierSession, NCCL's barrier over a
 * team built from an LSA barrier inside the LSA team (an "inner" team) and a GIN barrier
 * across the rail team (an "outer" one): the LSA form has only the first, the rail form only
 * the second, the world form both (LSA first, then across hosts).
 *
 * Written for oxccl from the published NCCL 2.28.9 device-API facts (names, signatures, struct
 * layouts, the layout of state in the resource buffer); see nccl_device.h.
 */
#ifndef OXCCL_NCCL_DEVICE_BARRIER_H
#define OXCCL_NCCL_DEVICE_BARRIER_H

#include "gin_barrier.h"
#include "lsa_barrier.h"

#if defined(OXCCL_NCCL_DEVICE_CODE)
#include <new>

template <typename Coop>
struct ncclBarrierSession {
  /* An LSA barrier over innerTeam and a GIN barrier over outerTeam. */
  NCCL_DEVICE_INLINE ncclBarrierSession(Coop coop, ncclTeam innerTeam, ncclTeam outerTeam,
                                        ncclGin gin, ncclLsaBarrierHandle innerBarHandle,
                                        ncclGinBarrierHandle outerBarHandle, uint32_t index,
                                        bool multimem = false,
                                        ncclMultimemHandle innerMmHandle = {})
      : coop_(coop), hasLsa_(true), hasGin_(true) {
    new (lsaBytes_) ncclLsaBarrierSession<Coop>(coop, gin.comm, innerTeam, innerBarHandle, index,
                                                multimem, innerMmHandle);
    new (ginBytes_) ncclGinBarrierSession<Coop>(coop, gin, outerTeam, outerBarHandle, index);
  }

  /* Every rank: the LSA team's barrier, then the rail team's. */
  NCCL_DEVICE_INLINE ncclBarrierSession(Coop coop, ncclTeamTagWorld, ncclGin gin,
                                        uint32_t index, bool multimem = false)
      : ncclBarrierSession(coop, ncclTeamLsa(gin.comm), ncclTeamRail(gin.comm), gin,
                           gin.comm.lsaBarrier, gin.comm.railGinBarrier, index, multimem,
                           gin.comm.lsaMultimem) {}

  NCCL_DEVICE_INLINE ncclBarrierSession(Coop coop, ncclTeamTagLsa tag, ncclDevComm const &comm,
                                        uint32_t index, bool multimem = false)
      : coop_(coop), hasLsa_(true), hasGin_(false) {
    new (lsaBytes_) ncclLsaBarrierSession<Coop>(coop, comm, tag, index, multimem);
  }

  NCCL_DEVICE_INLINE ncclBarrierSession(Coop coop, ncclTeamTagRail tag, ncclGin gin,
                                        uint32_t index)
      : coop_(coop), hasLsa_(false), hasGin_(true) {
    new (ginBytes_) ncclGinBarrierSession<Coop>(coop, gin, tag, index);
  }

  /* Collective on coop, as the sessions it holds. */
  NCCL_DEVICE_INLINE ~ncclBarrierSession() {
    if (hasGin_) ginBarrier().~ncclGinBarrierSession<Coop>();
    if (hasLsa_) lsaBarrier().~ncclLsaBarrierSession<Coop>();
  }

  ncclBarrierSession(ncclBarrierSession const &) = delete;

  NCCL_DEVICE_INLINE ncclLsaBarrierSession<Coop> &lsaBarrier() {
    return *reinterpret_cast<ncclLsaBarrierSession<Coop> *>(lsaBytes_);
  }
  NCCL_DEVICE_INLINE ncclGinBarrierSession<Coop> &ginBarrier() {
    return *reinterpret_cast<ncclGinBarrierSession<Coop> *>(ginBytes_);
  }

  /* With both barriers the LSA one takes the release half of `order` and the GIN one the
   * acquire half. */
  NCCL_DEVICE_INLINE void sync(Coop, cuda::memory_order order, ncclGinFenceLevel fence) {
    if (hasLsa_) {
      lsaBarrier().sync(coop_, hasGin_ ? nccl::utility::releaseOrderOf(order) : order);
    }
    if (hasGin_) {
      ginBarrier().sync(coop_, hasLsa_ ? nccl::utility::acquireOrderOf(order) : order, fence);
    }
  }

 private:
  Coop coop_;
  bool hasLsa_, hasGin_;
  alignas(ncclLsaBarrierSession<Coop>) unsigned char lsaBytes_[sizeof(ncclLsaBarrierSession<Coop>)];
  alignas(ncclGinBarrierSession<Coop>) unsigned char ginBytes_[sizeof(ncclGinBarrierSession<Coop>)];
};
#endif /* OXCCL_NCCL_DEVICE_CODE */

#endif /* OXCCL_NCCL_DEVICE_BARRIER_H */
