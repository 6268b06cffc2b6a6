/*
 * nccl_device/gin_barrier.h for oxccl's libnccl.so.2: ncclGinBarrierSession, a barrier over a
 * team whose members reach each other through GIN (the rail team, one rank per host, in
 * NCCL's world barrier).
 *
 * Each barrier has a signal of the device communicator (the handle's signal0 plus its index)
 * and, per GIN context, a 32-bit epoch in this rank's part of the resource buffer. A sync adds
 * 1 to that signal on every other member, then waits until its own has grown by the members
 * that signalled it, counted in the epoch.
 *
 * Written for oxccl from the published NCCL 2.28.9 device-API facts (names, signatures, the
 * layout of state in the resource buffer); see nccl_device.h.
 */
#ifndef OXCCL_NCCL_DEVICE_GIN_BARRIER_H
#define OXCCL_NCCL_DEVICE_GIN_BARRIER_H

#include "gin.h"

#if defined(OXCCL_NCCL_DEVICE_CODE)
/* How far GIN traffic is fenced by a barrier: only relaxed (the barrier orders itself). */
enum class ncclGinFenceLevel { Relaxed };

template <typename Coop>
struct ncclGinBarrierSession {
  NCCL_DEVICE_INLINE ncclGinBarrierSession(Coop coop, ncclGin gin, ncclTeam team,
                                           ncclGinBarrierHandle handle, uint32_t index)
      : coop_(coop), gin_(gin), team_(team), handle_(handle), index_(index) {
    signal_ = handle.signal0 + index;
    epoch_ = epochs()[index * NCCL_GIN_MAX_CONTEXTS + gin.contextId];
  }

  /* The device communicator's own barriers over its rail team. */
  NCCL_DEVICE_INLINE ncclGinBarrierSession(Coop coop, ncclGin gin, ncclTeamTagRail,
                                           uint32_t index)
      : ncclGinBarrierSession(coop, gin, ncclTeamRail(gin.comm), gin.comm.railGinBarrier,
                              index) {}

  /* Collective on coop: saves the epoch for the next session on this barrier. */
  NCCL_DEVICE_INLINE ~ncclGinBarrierSession() {
    if (coop_.thread_rank() == 0) {
      epochs()[index_ * NCCL_GIN_MAX_CONTEXTS + gin_.contextId] = epoch_;
    }
    coop_.sync();
  }

  ncclGinBarrierSession(ncclGinBarrierSession const &) = delete;

  /* The release half of `order` publishes what coop wrote before (a system fence before the
   * signals); the acquire half orders what follows after every member's signal. */
  NCCL_DEVICE_INLINE void sync(Coop, cuda::memory_order order, ncclGinFenceLevel) {
    coop_.sync();
    cuda::thread_scope released = nccl::utility::releaseOrderOf(order) != cuda::memory_order_relaxed
                                      ? cuda::thread_scope_thread
                                      : cuda::thread_scope_system;
    int n = team_.nRanks;
    for (int i = coop_.thread_rank(); i < n - 1; i += coop_.size()) {
      int peer = (team_.rank + 1 + i) % n;
      gin_.signal(team_, peer, ncclGin_SignalInc{signal_}, ncclCoopThread(), ncclGin_None(),
                  released);
    }
    epoch_ += n - 1;
    if (coop_.thread_rank() == 0) {
      gin_.waitSignal(ncclCoopThread(), signal_, epoch_, 32,
                      nccl::utility::acquireOrderOf(order));
    }
    coop_.sync();
  }

 private:
  NCCL_DEVICE_INLINE uint32_t *epochs() const {
    return (uint32_t *)ncclGetResourceBufferLocalPointer(gin_.comm, handle_.bufHandle);
  }

  Coop coop_;
  ncclGin gin_;
  ncclTeam team_;
  ncclGinBarrierHandle handle_;
  uint32_t index_;
  uint32_t signal_;
  uint32_t epoch_;
};
#endif /* OXCCL_NCCL_DEVICE_CODE */

#endif /* OXCCL_NCCL_DEVICE_GIN_BARRIER_H */
