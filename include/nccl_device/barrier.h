/*
 * nccl_device/barrier.h for oxccl's libnccl.so.2: ncclBarrierSession, NCCL's barrier over a
 * team built from an LSA barrier inside the LSA team and a GIN barrier across the rail team.
 *
 * oxccl has no GIN (device-initiated networking), so only the form that needs none works: the
 * LSA-team constructor, whose barrier is the device communicator's LSA barrier. The world- and
 * rail-team constructors take a GIN context and trap (gin.h); ginBarrier() is left out. A world
 * barrier within one host is this LSA form, since the LSA team is then the world.
 * ncclGinFenceLevel is declared because sync() takes one. (NVIDIA's 2.28.9 header declares this
 * LSA constructor too, but its instantiation does not compile there.)
 *
 * Written for oxccl from the published NCCL 2.28.9 device-API facts (names, signatures, struct
 * layouts, the layout of state in the resource buffer); see nccl_device.h.
 */
#ifndef OXCCL_NCCL_DEVICE_BARRIER_H
#define OXCCL_NCCL_DEVICE_BARRIER_H

#include "gin.h"
#include "lsa_barrier.h"

#if defined(OXCCL_NCCL_DEVICE_CODE)
/* How far GIN traffic is fenced by a barrier; no effect without GIN. */
enum class ncclGinFenceLevel { Relaxed };

template <typename Coop>
struct ncclBarrierSession {
  NCCL_DEVICE_INLINE ncclBarrierSession(Coop coop, ncclTeamTagLsa tag, ncclDevComm const &comm,
                                        uint32_t index, bool multimem = false)
      : lsa_(coop, comm, tag, index, multimem) {}

  /* The world and rail forms join hosts through GIN, which oxccl's device communicators never
     have (gin.h): they trap. */
  NCCL_DEVICE_INLINE ncclBarrierSession(Coop coop, ncclTeamTagWorld, ncclGin gin, uint32_t index)
      : lsa_(coop, gin.comm, ncclTeamTagLsa(), index) {
    nccl::utility::trap();
  }
  NCCL_DEVICE_INLINE ncclBarrierSession(Coop coop, ncclTeamTagRail, ncclGin gin, uint32_t index)
      : lsa_(coop, gin.comm, ncclTeamTagLsa(), index) {
    nccl::utility::trap();
  }

  ncclBarrierSession(ncclBarrierSession const &) = delete;

  NCCL_DEVICE_INLINE ncclLsaBarrierSession<Coop> &lsaBarrier() { return lsa_; }

  NCCL_DEVICE_INLINE void sync(Coop coop, cuda::memory_order order, ncclGinFenceLevel) {
    lsa_.sync(coop, order);
  }

 private:
  ncclLsaBarrierSession<Coop> lsa_;
};
#endif /* OXCCL_NCCL_DEVICE_CODE */

#endif /* OXCCL_NCCL_DEVICE_BARRIER_H */
