/*
 * nccl_device/coop.h for oxccl's libnccl.so.2: the cooperative groups the device API's
 * collective calls take (which threads call together). Each offers the part of CUDA's
 * cooperative-groups interface the API needs: thread_rank(), size(), num_threads() (= size())
 * and sync().
 *
 *   ncclCoopTile<N>   N consecutive lanes of a warp, N a power of two, aligned to N
 *   ncclCoopThread    one thread (ncclCoopTile<1>)
 *   ncclCoopWarp      a whole warp (ncclCoopTile<32>)
 *   ncclCoopLanes     any set of lanes of one warp (a lane mask)
 *   ncclCoopWarpSpan  consecutive warps of a block, with an id of their own (0..14) naming
 *                     the hardware barrier they sync on
 *   ncclCoopCta       the whole (one-dimensional) thread block
 *
 * Written for oxccl from the published NCCL 2.28.9 device-API facts (names, signatures, struct
 * layouts, the layout of state in the resource buffer); see nccl_device.h.
 */
#ifndef OXCCL_NCCL_DEVICE_COOP_H
#define OXCCL_NCCL_DEVICE_COOP_H

#include "utility.h"

#if defined(__CUDACC__)
template <int nThreadsPow2>
struct ncclCoopTile {
  static_assert(nThreadsPow2 >= 1 && nThreadsPow2 <= 32 && nccl::utility::isPow2(nThreadsPow2),
                "a tile is 1, 2, 4, 8, 16 or 32 lanes");

  NCCL_DEVICE_INLINE int thread_rank() const { return nccl::utility::lane() & (nThreadsPow2 - 1); }
  NCCL_DEVICE_INLINE constexpr int size() const { return nThreadsPow2; }
  NCCL_DEVICE_INLINE constexpr int num_threads() const { return nThreadsPow2; }

  NCCL_DEVICE_INLINE uint32_t laneMask() const {
    return (0xffffffffu >> (32 - nThreadsPow2)) << (nccl::utility::lane() & -nThreadsPow2);
  }
  NCCL_DEVICE_INLINE void sync() {
    if (nThreadsPow2 > 1) __syncwarp(laneMask());
  }
};

typedef ncclCoopTile<1> ncclCoopThread;
typedef ncclCoopTile<32> ncclCoopWarp;

struct ncclCoopLanes {
  uint32_t lmask;

  NCCL_DEVICE_INLINE constexpr ncclCoopLanes(uint32_t lmask = 0xffffffffu) : lmask(lmask) {}

  NCCL_DEVICE_INLINE int thread_rank() const {
    return __popc(lmask & nccl::utility::lanemask_lt());
  }
  NCCL_DEVICE_INLINE int size() const { return __popc(lmask); }
  NCCL_DEVICE_INLINE int num_threads() const { return __popc(lmask); }
  NCCL_DEVICE_INLINE void sync() { __syncwarp(lmask); }
};

/* Two spans with the same id must not be in a collective call at the same time: they would
 * share a hardware barrier (1 + id; barrier 0 is __syncthreads's). */
struct ncclCoopWarpSpan {
  uint32_t warp0 : 8, nWarps : 8, id : 8;

  NCCL_DEVICE_INLINE constexpr ncclCoopWarpSpan(int warp0, int nWarps, int id)
      : warp0(warp0), nWarps(nWarps), id(id) {}

  NCCL_DEVICE_INLINE int thread_rank() const { return (int)threadIdx.x - 32 * (int)warp0; }
  NCCL_DEVICE_INLINE int size() const { return 32 * nWarps; }
  NCCL_DEVICE_INLINE int num_threads() const { return 32 * nWarps; }
  NCCL_DEVICE_INLINE void sync() { __barrier_sync_count(1 + id, 32 * nWarps); }
};

struct ncclCoopCta {
  NCCL_DEVICE_INLINE int thread_rank() const { return threadIdx.x; }
  NCCL_DEVICE_INLINE int size() const { return blockDim.x; }
  NCCL_DEVICE_INLINE int num_threads() const { return blockDim.x; }
  NCCL_DEVICE_INLINE void sync() { __syncthreads(); }
};

/* The lanes of the calling warp that belong to the group (all of them for groups wider than a
 * warp). */
template <int nThreads>
NCCL_DEVICE_INLINE uint32_t ncclCoopGetLaneMask(ncclCoopTile<nThreads> coop) {
  return coop.laneMask();
}
NCCL_DEVICE_INLINE uint32_t ncclCoopGetLaneMask(ncclCoopLanes coop) { return coop.lmask; }
NCCL_DEVICE_INLINE uint32_t ncclCoopGetLaneMask(ncclCoopWarpSpan) { return 0xffffffffu; }
NCCL_DEVICE_INLINE uint32_t ncclCoopGetLaneMask(ncclCoopCta) { return 0xffffffffu; }

/* Known at compile time to be a single thread. */
template <int nThreads>
NCCL_DEVICE_INLINE constexpr bool ncclCoopIsThread(ncclCoopTile<nThreads>) {
  return nThreads == 1;
}
NCCL_DEVICE_INLINE constexpr bool ncclCoopIsThread(ncclCoopLanes) { return false; }
NCCL_DEVICE_INLINE constexpr bool ncclCoopIsThread(ncclCoopWarpSpan) { return false; }
NCCL_DEVICE_INLINE constexpr bool ncclCoopIsThread(ncclCoopCta) { return false; }

/* Known at compile time to fit in one warp (so warp intrinsics can span it). */
template <int nThreads>
NCCL_DEVICE_INLINE constexpr bool ncclCoopWithinWarp(ncclCoopTile<nThreads>) {
  return true;
}
NCCL_DEVICE_INLINE constexpr bool ncclCoopWithinWarp(ncclCoopLanes) { return true; }
NCCL_DEVICE_INLINE constexpr bool ncclCoopWithinWarp(ncclCoopWarpSpan) { return false; }
NCCL_DEVICE_INLINE constexpr bool ncclCoopWithinWarp(ncclCoopCta) { return false; }

/* The lanes of this warp that are running now, so usable together from any code path. */
NCCL_DEVICE_INLINE ncclCoopLanes ncclCoopCoalesced() { return ncclCoopLanes(__activemask()); }

/* The part of coop inside the calling warp, for warp-wide work on behalf of a collective call
 * on coop: all of coop's lanes are known to be there, so no __activemask is needed. */
template <typename Coop>
NCCL_DEVICE_INLINE ncclCoopTile<32> ncclCoopCoalesced(Coop) {
  return ncclCoopTile<32>();
}
NCCL_DEVICE_INLINE ncclCoopLanes ncclCoopCoalesced(ncclCoopLanes coop) { return coop; }
template <int nThreads>
NCCL_DEVICE_INLINE ncclCoopTile<nThreads> ncclCoopCoalesced(ncclCoopTile<nThreads> coop) {
  return coop;
}

namespace nccl {
namespace coop_detail {
/* __shfl_sync moves 32 bits at a time. */
template <typename T>
struct Words {
  static constexpr int n = (sizeof(T) + 3) / 4;
  uint32_t w[n];
};

/* One 16-byte slot per warp-span id for broadcasts through shared memory. */
NCCL_DEVICE_INLINE ulonglong2 *warpSpanSlots() {
  __shared__ ulonglong2 slots[15];
  return slots;
}
NCCL_DEVICE_INLINE ulonglong2 *ctaSlot() {
  __shared__ ulonglong2 slot;
  return &slot;
}

/* Between two syncs of the group: the root writes the slot, then everyone reads it. */
template <typename Coop, typename T>
NCCL_DEVICE_INLINE T bcastThroughShared(Coop coop, ulonglong2 *slot, T value, int root,
                                        bool entrySync) {
  static_assert(sizeof(T) <= sizeof(ulonglong2), "ncclCoopBcast moves at most 16 bytes here");
  if (entrySync) coop.sync();
  if (coop.thread_rank() == root) __builtin_memcpy(slot, &value, sizeof(T));
  coop.sync();
  __builtin_memcpy(&value, slot, sizeof(T));
  return value;
}
}  // namespace coop_detail
}  // namespace nccl

/* value as held by member `root` of coop, returned to every member. entrySync = false promises
 * that no member can still be reading the previous broadcast of this group (only matters where
 * the value goes through shared memory: warp spans and blocks). */
template <int nThreads, typename T>
NCCL_DEVICE_INLINE T ncclCoopBcast(ncclCoopTile<nThreads> coop, T value, int root,
                                   bool entrySync = true) {
  (void)entrySync;
  nccl::coop_detail::Words<T> v = {};
  __builtin_memcpy(v.w, &value, sizeof(T));
  uint32_t mask = coop.laneMask();
#pragma unroll
  for (int i = 0; i < v.n; i++) v.w[i] = __shfl_sync(mask, v.w[i], root, nThreads);
  __builtin_memcpy(&value, v.w, sizeof(T));
  return value;
}

template <typename T>
NCCL_DEVICE_INLINE T ncclCoopBcast(ncclCoopLanes coop, T value, int root, bool entrySync = true) {
  (void)entrySync;
  /* The root-th set bit of the mask, as a lane number (__ffs is the quick way to the first). */
  int src = root == 0 ? __ffs(coop.lmask) - 1 : (int)__fns(coop.lmask, 0, root + 1);
  nccl::coop_detail::Words<T> v = {};
  __builtin_memcpy(v.w, &value, sizeof(T));
#pragma unroll
  for (int i = 0; i < v.n; i++) v.w[i] = __shfl_sync(coop.lmask, v.w[i], src);
  __builtin_memcpy(&value, v.w, sizeof(T));
  return value;
}

template <typename T>
NCCL_DEVICE_INLINE T ncclCoopBcast(ncclCoopWarpSpan coop, T value, int root,
                                   bool entrySync = true) {
  return nccl::coop_detail::bcastThroughShared(
      coop, nccl::coop_detail::warpSpanSlots() + coop.id, value, root, entrySync);
}

template <typename T>
NCCL_DEVICE_INLINE T ncclCoopBcast(ncclCoopCta coop, T value, int root, bool entrySync = true) {
  return nccl::coop_detail::bcastThroughShared(coop, nccl::coop_detail::ctaSlot(), value, root,
                                               entrySync);
}
#endif /* __CUDACC__ */

#endif /* OXCCL_NCCL_DEVICE_COOP_H */
