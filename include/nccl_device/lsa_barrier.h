/*
 * nccl_device/lsa_barrier.h for oxccl's libnccl.so.2: ncclLsaBarrierSession, a barrier among
 * the members of a team inside the LSA team, run by a cooperative group of each rank (one of
 * the handle's nBarriers, chosen by index, e.g. one per block).
 *
 * Its state is in the handle's resource buffer, zeroed by ncclDevCommCreate and laid out as in
 * NCCL, in 32-bit words (n = nBarriers, R = team.nRanks, i = the barrier's index):
 *   [i]                    epoch of barrier i when used with multimem
 *   [n + i]                epoch of barrier i when used without
 *   [2n + i]               multimem inbox: one multicast add per rank and round
 *   [3n + i*R + r]         unicast inbox: the epoch member r of the team last arrived at
 * A session reads its epoch when created and writes it back when destroyed, so a barrier
 * continues across sessions and kernel launches.
 *
 * Written for oxccl from the published NCCL 2.28.9 device-API facts (names, signatures, struct
 * layouts, the layout of state in the resource buffer); see nccl_device.h.
 */
#ifndef OXCCL_NCCL_DEVICE_LSA_BARRIER_H
#define OXCCL_NCCL_DEVICE_LSA_BARRIER_H

#include "coop.h"
#include "core.h"
#include "ptr.h"
#include "team.h"

#if defined(OXCCL_NCCL_DEVICE_CODE)
template <typename Coop>
struct ncclLsaBarrierSession {
  /* Every member of coop constructs the session with the same arguments. multimem = true
   * arrives with one multicast reduction per rank (sm_90 and later; needs mmHandle for team);
   * oxccl refuses multimem when creating the device communicator, so leave it false. */
  NCCL_DEVICE_INLINE ncclLsaBarrierSession(Coop coop, ncclDevComm const &comm, ncclTeam team,
                                           ncclLsaBarrierHandle handle, uint32_t index,
                                           bool multimem = false, ncclMultimemHandle mmHandle = {})
      : coop_(coop),
        comm_(comm),
        team_(team),
        handle_(handle),
        index_(index),
        multimem_(multimemUsable(multimem)),
        mmHandle_(mmHandle) {
    epoch_ = state()[epochWord()];
  }

  /* The device communicator's own LSA barriers over its LSA team. */
  NCCL_DEVICE_INLINE ncclLsaBarrierSession(Coop coop, ncclDevComm const &comm, ncclTeamTagLsa,
                                           uint32_t index, bool multimem = false)
      : ncclLsaBarrierSession(coop, comm, ncclTeamLsa(comm), comm.lsaBarrier, index, multimem,
                              comm.lsaMultimem) {}

  /* Collective on coop: saves the epoch for the next session on this barrier. */
  NCCL_DEVICE_INLINE ~ncclLsaBarrierSession() {
    if (coop_.thread_rank() == 0) saveEpoch();
    coop_.sync();
  }

  ncclLsaBarrierSession(ncclLsaBarrierSession const &) = delete;

  /* Tells every other member that this rank reached the barrier. The release half of `order`
   * publishes what coop wrote before. */
  NCCL_DEVICE_INLINE void arrive(Coop, cuda::memory_order order) {
    coop_.sync();
    cuda::memory_order release = nccl::utility::releaseOrderOf(order);
    if (multimem_) {
#if __CUDA_ARCH__ >= 900
      if (coop_.thread_rank() == 0) {
        uint32_t *inbox = (uint32_t *)ncclGetResourceBufferMultimemPointer(
                              comm_, handle_.bufHandle, mmHandle_) +
                          2 * handle_.nBarriers + index_;
        if (release == cuda::memory_order_relaxed) {
          asm volatile("multimem.red.relaxed.sys.add.u32 [%0], 1;" ::"l"(inbox) : "memory");
        } else {
          asm volatile("multimem.red.release.sys.add.u32 [%0], 1;" ::"l"(inbox) : "memory");
        }
      }
#endif
      return;
    }
    // Each thread of coop signals some of the other members: the one at `peer` gets our
    // next epoch in its inbox slot for us.
#pragma unroll 1
    for (int i = coop_.thread_rank(); i < team_.nRanks - 1; i += coop_.size()) {
      int peer = i < team_.rank ? i : i + 1;
      uint32_t *slot = unicastInbox(peer, team_.rank);
      nccl::utility::storeSys(slot, epoch_ + 1, release);
    }
  }

  /* Returns when every other member has arrived (the acquire half of `order` makes their
   * published writes visible to coop). */
  NCCL_DEVICE_INLINE void wait(Coop, cuda::memory_order order) {
    cuda::memory_order acquire = nccl::utility::acquireOrderOf(order);
    if (multimem_) {
#if __CUDA_ARCH__ >= 900
      // Our copy of the multicast inbox counts every rank's arrivals (ours too); only thread 0
      // keeps the multimem epoch, as only it arrives.
      if (coop_.thread_rank() == 0) {
        uint32_t *inbox = state() + 2 * handle_.nBarriers + index_;
        uint32_t target = epoch_ + (uint32_t)team_.nRanks;
#pragma unroll 1
        while (!nccl::utility::rollingLessEq(target, nccl::utility::loadSys(inbox, acquire))) {
        }
        epoch_ = target;
      }
#endif
    } else {
#pragma unroll 1
      for (int i = coop_.thread_rank(); i < team_.nRanks - 1; i += coop_.size()) {
        int peer = i < team_.rank ? i : i + 1;
        uint32_t *inbox = unicastInbox(team_.rank, peer);
#pragma unroll 1
        while (!nccl::utility::rollingLessEq(epoch_ + 1, nccl::utility::loadSys(inbox, acquire))) {
        }
      }
      epoch_ += 1;
    }
    coop_.sync();
  }

  NCCL_DEVICE_INLINE void sync(Coop coop, cuda::memory_order order) {
    arrive(coop, order);
    wait(coop, order);
  }

 private:
  Coop coop_;
  ncclDevComm const &comm_;
  ncclTeam team_;
  ncclLsaBarrierHandle handle_;
  uint32_t index_;
  bool multimem_;
  ncclMultimemHandle mmHandle_;
  uint32_t epoch_;

  /* NVIDIA's header turns the multimem path off for CUDA toolkits before 12.6 (their ptxas
   * mishandles it); we do the same so a kernel behaves alike with either header. AMD GPUs have
   * no multicast memory: there the unicast path serves every request. */
  NCCL_DEVICE_INLINE static bool multimemUsable(bool multimem) {
#if defined(OXCCL_NCCL_DEVICE_AMD) || (defined(CUDART_VERSION) && CUDART_VERSION < 12060)
    (void)multimem;
    return false;
#else
    return multimem;
#endif
  }

  NCCL_DEVICE_INLINE uint32_t *state() const {
    return (uint32_t *)ncclGetResourceBufferLocalPointer(comm_, handle_.bufHandle);
  }
  NCCL_DEVICE_INLINE uint32_t epochWord() const {
    return (multimem_ ? 0u : (uint32_t)handle_.nBarriers) + index_;
  }
  /* Member `owner`'s inbox slot written by member `from`. */
  NCCL_DEVICE_INLINE uint32_t *unicastInbox(int owner, int from) const {
    uint32_t *base =
        (uint32_t *)ncclGetResourceBufferPeerPointer(comm_, handle_.bufHandle, team_, owner);
    return base + 3 * (uint32_t)handle_.nBarriers + index_ * (uint32_t)team_.nRanks + from;
  }
  NCCL_DEVICE_INLINE void saveEpoch() {
#if __CUDA_ARCH__ == 1200 && defined(CUDART_VERSION) && CUDART_VERSION < 13000
    // NVIDIA's header stores barrier 0's epoch through a constant index for sm_120 before
    // CUDA 13, around a compiler problem there; the same code shape keeps us clear of it.
    if (index_ == 0) {
      state()[multimem_ ? 0u : (uint32_t)handle_.nBarriers] = epoch_;
      return;
    }
#endif
    state()[epochWord()] = epoch_;
  }
};
#endif /* OXCCL_NCCL_DEVICE_CODE */

#endif /* OXCCL_NCCL_DEVICE_LSA_BARRIER_H */
