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
 * On AMD GPUs (hipcc) a "warp" of these groups stays 32 threads, as kernels written for CUDA
 * count them; the hardware's wavefront is 64 lanes on CDNA (two such warps) and 32 on RDNA.
 * Tiles may be as wide as the wavefront, lane masks are 64-bit (nccl::utility::LaneMask), and a
 * warp span syncs only as the whole block (AMD has no named barriers; see sync()).
 *
 * Written for oxccl from the published NCCL 2.28.9 device-API facts (names, signatures, struct
 * layouts, the layout of state in the resource buffer); see nccl_device.h.
 */
#ifndef OXCCL_NCCL_DEVICE_COOP_H
#define OXCCL_NCCL_DEVICE_COOP_H

#include "utility.h"

#if defined(OXCCL_NCCL_DEVICE_CODE)
template <int nThreadsPow2>
struct ncclCoopTile {
  static_assert(nThreadsPow2 >= 1 && nThreadsPow2 <= nccl::utility::kMaxTileLanes &&
                    nccl::utility::isPow2(nThreadsPow2),
                "a tile is a power of two of lanes, at most a warp (CUDA) or wavefront (AMD)");

  NCCL_DEVICE_INLINE int thread_rank() const { return nccl::utility::lane() & (nThreadsPow2 - 1); }
  NCCL_DEVICE_INLINE constexpr int size() const { return nThreadsPow2; }
  NCCL_DEVICE_INLINE constexpr int num_threads() const { return nThreadsPow2; }

  NCCL_DEVICE_INLINE nccl::utility::LaneMask laneMask() const {
    typedef nccl::utility::LaneMask Mask;
    return (Mask(-1) >> (8 * sizeof(Mask) - nThreadsPow2)) << (nccl::utility::lane() & -nThreadsPow2);
  }
  NCCL_DEVICE_INLINE void sync() {
    if (nThreadsPow2 > 1) nccl::utility::syncLanes(laneMask());
  }
};

/* NVIDIA's warp, 32 lanes, on every target: kernels count warps as 32 threads (threadIdx.x /
 * 32, ncclCoopWarpSpan), so on AMD's wave64 it is half a wavefront, not the wavefront. */
typedef ncclCoopTile<1> ncclCoopThread;
typedef ncclCoopTile<32> ncclCoopWarp;

struct ncclCoopLanes {
  nccl::utility::LaneMask lmask;

  NCCL_DEVICE_INLINE constexpr ncclCoopLanes(nccl::utility::LaneMask lmask = nccl::utility::kAllLanes)
      : lmask(lmask) {}

  NCCL_DEVICE_INLINE int thread_rank() const {
    return nccl::utility::popcount(lmask & nccl::utility::lanemask_lt());
  }
  NCCL_DEVICE_INLINE int size() const { return nccl::utility::popcount(lmask); }
  NCCL_DEVICE_INLINE int num_threads() const { return nccl::utility::popcount(lmask); }
  NCCL_DEVICE_INLINE void sync() { nccl::utility::syncLanes(lmask); }
};

/* Two spans with the same id must not be in a collective call at the same time: they would
 * share a hardware barrier (1 + id; barrier 0 is __syncthreads's). Warps are 32 threads here on
 * every target, as kernels written for CUDA count them. */
struct ncclCoopWarpSpan {
  uint32_t warp0 : 8, nWarps : 8, id : 8;

  NCCL_DEVICE_INLINE constexpr ncclCoopWarpSpan(int warp0, int nWarps, int id)
      : warp0(warp0), nWarps(nWarps), id(id) {}

  NCCL_DEVICE_INLINE int thread_rank() const { return (int)threadIdx.x - 32 * (int)warp0; }
  NCCL_DEVICE_INLINE int size() const { return 32 * nWarps; }
  NCCL_DEVICE_INLINE int num_threads() const { return 32 * nWarps; }
  NCCL_DEVICE_INLINE void sync() {
#if defined(OXCCL_NCCL_DEVICE_AMD)
    /* AMD GPUs before gfx12 have one barrier per workgroup and no named ones, and a barrier of
     * our own in LDS would need LDS zeroed at launch, which HIP does not do. So a span is served
     * only when it is the whole block; any other span traps rather than hang or pass early. */
    if (32 * nWarps != blockDim.x) nccl::utility::trap();
    __syncthreads();
#else
    __barrier_sync_count(1 + id, 32 * nWarps);
#endif
  }
};

struct ncclCoopCta {
  NCCL_DEVICE_INLINE int thread_rank() const { return threadIdx.x; }
  NCCL_DEVICE_INLINE int size() const { return blockDim.x; }
  NCCL_DEVICE_INLINE int num_threads() const { return blockDim.x; }
  NCCL_DEVICE_INLINE void sync() { __syncthreads(); }
};

/* The lanes of the calling warp that belong to the group (all of them for groups wider than a
 * warp). On AMD the mask is 64-bit and spans the wavefront. */
template <int nThreads>
NCCL_DEVICE_INLINE nccl::utility::LaneMask ncclCoopGetLaneMask(ncclCoopTile<nThreads> coop) {
  return coop.laneMask();
}
NCCL_DEVICE_INLINE nccl::utility::LaneMask ncclCoopGetLaneMask(ncclCoopLanes coop) {
  return coop.lmask;
}
NCCL_DEVICE_INLINE nccl::utility::LaneMask ncclCoopGetLaneMask(ncclCoopWarpSpan) {
  return nccl::utility::kAllLanes;
}
NCCL_DEVICE_INLINE nccl::utility::LaneMask ncclCoopGetLaneMask(ncclCoopCta) {
  return nccl::utility::kAllLanes;
}

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
NCCL_DEVICE_INLINE ncclCoopLanes ncclCoopCoalesced() {
  return ncclCoopLanes(nccl::utility::activeLanes());
}

/* The part of coop inside the calling warp, for warp-wide work on behalf of a collective call
 * on coop: all of coop's lanes are known to be there, so no __activemask is needed. Groups
 * wider than a warp are made of whole 32-thread warps, on AMD too. */
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
/* Shuffles move 32 bits at a time. */
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
  nccl::utility::LaneMask mask = coop.laneMask();
#pragma unroll
  for (int i = 0; i < v.n; i++) v.w[i] = nccl::utility::shfl(mask, v.w[i], root, nThreads);
  __builtin_memcpy(&value, v.w, sizeof(T));
  return value;
}

template <typename T>
NCCL_DEVICE_INLINE T ncclCoopBcast(ncclCoopLanes coop, T value, int root, bool entrySync = true) {
  (void)entrySync;
  /* The root-th set bit of the mask, as a lane number of the whole warp or wavefront. */
  int src = nccl::utility::nthLane(coop.lmask, root);
  nccl::coop_detail::Words<T> v = {};
  __builtin_memcpy(v.w, &value, sizeof(T));
#pragma unroll
  for (int i = 0; i < v.n; i++) {
    v.w[i] = nccl::utility::shfl(coop.lmask, v.w[i], src, nccl::utility::kMaxTileLanes);
  }
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
#endif /* OXCCL_NCCL_DEVICE_CODE */

#endif /* OXCCL_NCCL_DEVICE_COOP_H */
