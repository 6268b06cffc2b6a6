/*
 * nccl_device/ll_a2a.h for oxccl's libnccl.so.2: ncclLLA2ASession, low-latency all-to-all
 * exchanges of small values within a team inside the LSA team. A sender stores each 8 bytes of
 * data together with the exchange's epoch in one 16-byte store; the receiver spins on its own
 * slot until both epoch copies match, so no flag or fence is needed.
 *
 * The handle's resource buffer (zeroed by ncclDevCommCreate) holds, per block b (a session is
 * one block's use of it), 1 + 2 * nSlots 16-byte units, as in NCCL:
 *   unit b*(1 + 2*nSlots)            header: x = the block's next epoch minus 2
 *   then two halves of nSlots units  epochs alternate between them (epoch & 1)
 * A slot unit is {x: data bytes 0-3, y: epoch, z: data bytes 4-7, w: epoch}; a value wider than
 * 8 bytes takes one unit per 8 bytes, `maxElts` units apart (ncclLLA2ACalcSlots sizes this).
 * Epochs start at 2 and skip 0 and 1 when they wrap, so zeroed units never match.
 *
 * Written for oxccl from the published NCCL 2.28.9 device-API facts (names, signatures, struct
 * layouts, the layout of state in the resource buffer); see nccl_device.h.
 */
#ifndef OXCCL_NCCL_DEVICE_LL_A2A_H
#define OXCCL_NCCL_DEVICE_LL_A2A_H

#include "coop.h"
#include "core.h"
#include "ptr.h"

#if defined(OXCCL_NCCL_DEVICE_CODE)
namespace nccl {
namespace lla2a_detail {
/* 8-byte pieces of a T. */
template <typename T>
struct Pieces {
  static constexpr int n = (int)((sizeof(T) + 7) / 8);
  uint32_t w[n][2];
};

/* Volatile: the peer's stores must be seen as they land, not from a register or cache. */
NCCL_DEVICE_INLINE void storeUnit(uint4 *unit, uint32_t lo, uint32_t hi, uint32_t epoch) {
#if defined(OXCCL_NCCL_DEVICE_AMD)
  /* Two 8-byte stores, each {data, epoch}: the protocol needs each half to land whole (an
   * aligned 8-byte store is single-copy atomic), not the 16 bytes together, as the receiver
   * checks both epochs. */
  volatile uint64_t *q = (volatile uint64_t *)unit;
  q[0] = (uint64_t)lo | ((uint64_t)epoch << 32);
  q[1] = (uint64_t)hi | ((uint64_t)epoch << 32);
#else
  asm volatile("st.volatile.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(unit), "r"(lo), "r"(epoch),
               "r"(hi), "r"(epoch)
               : "memory");
#endif
}
NCCL_DEVICE_INLINE uint4 loadUnit(uint4 const *unit) {
  uint4 u;
#if defined(OXCCL_NCCL_DEVICE_AMD)
  volatile uint64_t const *q = (volatile uint64_t const *)unit;
  uint64_t a = q[0], b = q[1];
  u.x = (uint32_t)a;
  u.y = (uint32_t)(a >> 32);
  u.z = (uint32_t)b;
  u.w = (uint32_t)(b >> 32);
#else
  asm volatile("ld.volatile.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
               : "l"(unit)
               : "memory");
#endif
  return u;
}
}  // namespace lla2a_detail
}  // namespace nccl

template <typename Coop>
struct ncclLLA2ASession {
  /* Every member of coop constructs it alike. `block` picks the block of slots (of the
   * handle's nBlocks), maxElts is the widest exchange in elements (the distance between the
   * 8-byte pieces of one element). multimem = true makes bcast() one multicast store; oxccl
   * refuses multimem when creating the device communicator, so leave it false. */
  NCCL_DEVICE_INLINE ncclLLA2ASession(Coop coop, ncclDevComm const &comm, ncclTeam team,
                                      ncclLLA2AHandle handle, uint32_t block, int maxElts,
                                      bool multimem = false, ncclMultimemHandle mmHandle = {})
      : coop_(coop),
        comm_(comm),
        team_(team),
        handle_(handle),
        block_(block),
        pitch_(maxElts),
        multimem_(multimemUsable(multimem)),
        mmHandle_(mmHandle) {
    epoch_ = header()->x + 2;
    half_ = halfOffset();
  }

  /* Collective on coop: saves the epoch for the next session on this block. */
  NCCL_DEVICE_INLINE ~ncclLLA2ASession() {
    if (coop_.thread_rank() == 0) header()->x = epoch_ - 2;
    coop_.sync();
  }

  ncclLLA2ASession(ncclLLA2ASession const &) = delete;

  /* Puts data in slot `slot` of team member `peer` for this epoch. Any thread may call it. */
  template <typename T>
  NCCL_DEVICE_INLINE void send(int peer, int slot, T data) {
    storeAll((uint4 *)ncclGetResourceBufferPeerPointer(comm_, handle_.bufHandle, team_, peer) +
                 half_ + slot,
             data);
  }

  /* send() to every member of the team, this rank included. */
  template <typename T>
  NCCL_DEVICE_INLINE void bcast(int slot, T data) {
    if (multimem_) {
      storeAll((uint4 *)ncclGetResourceBufferMultimemPointer(comm_, handle_.bufHandle,
                                                             mmHandle_) +
                   half_ + slot,
               data);
      return;
    }
    // Starting at our own rank spreads the senders' first stores over all receivers.
    int r = team_.rank;
#pragma unroll 4
    for (int k = 0; k < team_.nRanks; k++) {
      send(r, slot, data);
      r = r + 1 == team_.nRanks ? 0 : r + 1;
    }
  }

  /* The value a peer sent to our slot `slot` this epoch, waiting for it. */
  template <typename T>
  NCCL_DEVICE_INLINE T recv(int slot) {
    T got[1];
    this->template recvUnrolled<1, 1>(slot, 1, 0, got);
    return got[0];
  }

  /* Receives slots eltStart + u * eltStride for u < eltCount into vals[u]. The first
   * MinEltCount are received whatever eltCount says; MaxEltCount bounds it, and both being
   * compile-time lets the loads of all of them be in flight at once. */
  template <int MinEltCount, int MaxEltCount, typename T>
  NCCL_DEVICE_INLINE void recvUnrolled(int eltStart, int eltCount, int eltStride,
                                       T (&vals)[MaxEltCount]) {
    using nccl::lla2a_detail::Pieces;
    constexpr int P = Pieces<T>::n;
    uint4 const *first = (uint4 const *)ncclGetResourceBufferLocalPointer(comm_, handle_.bufHandle) +
                         half_ + eltStart;
    uint4 got[MaxEltCount][P];
#pragma unroll 1
    while (true) {
      bool ready = true;
#pragma unroll
      for (int u = 0; u < MaxEltCount; u++) {
        if (u < MinEltCount || u < eltCount) {
#pragma unroll
          for (int v = 0; v < P; v++) {
            got[u][v] = nccl::lla2a_detail::loadUnit(first + u * eltStride + v * pitch_);
            ready &= got[u][v].y == epoch_ && got[u][v].w == epoch_;
          }
        }
      }
      if (__builtin_expect(ready, true)) break;
    }
#pragma unroll
    for (int u = 0; u < MaxEltCount; u++) {
      if (u < MinEltCount || u < eltCount) {
        Pieces<T> p;
#pragma unroll
        for (int v = 0; v < P; v++) {
          p.w[v][0] = got[u][v].x;
          p.w[v][1] = got[u][v].z;
        }
        __builtin_memcpy(&vals[u], p.w, sizeof(T));
      }
    }
  }

  /* recvUnrolled over eltCount slots, Unroll at a time, each value turned into an accumulator
   * by eltToAcc and combined with red. eltCount must be at least 1. */
  template <int Unroll, typename Elt, typename EltToAcc, typename Reduce>
  NCCL_DEVICE_INLINE auto recvReduce(int eltStart, int eltCount, int eltStride, EltToAcc eltToAcc,
                                     Reduce red) -> decltype(eltToAcc(nccl::utility::declval<Elt>())) {
    using Acc = decltype(eltToAcc(nccl::utility::declval<Elt>()));
    Acc acc;
    Elt got[Unroll];
    int i = 0;
    // Whole groups load unconditionally; only the last, partial one checks the count.
#pragma unroll 1
    for (; i + Unroll <= eltCount; i += Unroll) {
      this->template recvUnrolled<Unroll>(eltStart + i * eltStride, Unroll, eltStride, got);
#pragma unroll
      for (int j = 0; j < Unroll; j++) {
        acc = i + j == 0 ? eltToAcc(got[0]) : red(acc, eltToAcc(got[j]));
      }
    }
    if (i < eltCount) {
      this->template recvUnrolled<1>(eltStart + i * eltStride, eltCount - i, eltStride, got);
#pragma unroll
      for (int j = 0; j < Unroll; j++) {
        if (i + j < eltCount) acc = i + j == 0 ? eltToAcc(got[0]) : red(acc, eltToAcc(got[j]));
      }
    }
    return acc;
  }

  /* Ends this exchange and starts the next (in the other half of the slots). Collective on
   * coop. Before it, for every member of the team, this rank must have sent it at least one
   * value and received at least one value it sent: then no peer can still be writing the half
   * the next epoch reuses after this. */
  NCCL_DEVICE_INLINE void endEpoch(Coop) {
    if (__builtin_expect(epoch_ >= UINT32_MAX - 1, false)) {
      // The last two epochs before the counter wraps clear both halves, so a value left from
      // four billion epochs ago cannot pass for a new one.
      coop_.sync();
      uint4 *mine = (uint4 *)ncclGetResourceBufferLocalPointer(comm_, handle_.bufHandle) + half_;
#pragma unroll 4
      for (int i = coop_.thread_rank(); i < (int)handle_.nSlots; i += coop_.size()) {
        mine[i] = make_uint4(0, 0, 0, 0);
      }
    }
    coop_.sync();
    epoch_ = epoch_ == UINT32_MAX ? 2 : epoch_ + 1;
    half_ = halfOffset();
  }

 private:
  Coop coop_;
  ncclDevComm const &comm_;
  ncclTeam team_;
  ncclLLA2AHandle handle_;
  uint32_t block_;
  int pitch_;
  bool multimem_;
  ncclMultimemHandle mmHandle_;
  uint32_t epoch_;
  uint32_t half_; /* unit offset of this epoch's slots */

  /* AMD GPUs have no multicast memory: there bcast() sends to each member instead. */
  NCCL_DEVICE_INLINE static bool multimemUsable(bool multimem) {
#if defined(OXCCL_NCCL_DEVICE_AMD)
    (void)multimem;
    return false;
#else
    return multimem;
#endif
  }

  NCCL_DEVICE_INLINE uint32_t blockOffset() const { return block_ * (1 + 2 * handle_.nSlots); }
  NCCL_DEVICE_INLINE uint4 *header() const {
    return (uint4 *)ncclGetResourceBufferLocalPointer(comm_, handle_.bufHandle) + blockOffset();
  }
  NCCL_DEVICE_INLINE uint32_t halfOffset() const {
    return blockOffset() + 1 + (epoch_ & 1) * handle_.nSlots;
  }

  template <typename T>
  NCCL_DEVICE_INLINE void storeAll(uint4 *first, T data) {
    nccl::lla2a_detail::Pieces<T> p = {};
    __builtin_memcpy(p.w, &data, sizeof(T));
#pragma unroll
    for (int v = 0; v < nccl::lla2a_detail::Pieces<T>::n; v++) {
      nccl::lla2a_detail::storeUnit(first + v * pitch_, p.w[v][0], p.w[v][1], epoch_);
    }
  }
};
#endif /* OXCCL_NCCL_DEVICE_CODE */

#endif /* OXCCL_NCCL_DEVICE_LL_A2A_H */
